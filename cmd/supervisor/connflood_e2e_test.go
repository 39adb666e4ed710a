package main

import (
	"context"
	"io"
	"net"
	"net/http"
	"strconv"
	"strings"
	"testing"

	"github.com/meshweaver/supervisor/demomodel"
)

// floodConns is how many silent connections the flood opens: the test
// process's own descriptors bound it (20,000 here, as the daemon's), so
// it stays below the host's limit.
const floodConns = 15000

// TestGatewayConnectionFlood: one caller holds 15,000 connections to the
// gateway that send nothing (the flood was 20,000, which used up
// the daemon's 20,000 descriptors). The daemon holds at most a quarter of
// its limit for the gateway, shedding the oldest silent ones: /healthz
// answers, and another caller's round through the gateway completes, with
// no model request beyond its own.
func TestGatewayConnectionFlood(t *testing.T) {
	rig := startCallerRig(t)
	addr := strings.TrimPrefix(rig.gateway, "http://")
	var flood []net.Conn
	defer func() {
		for _, c := range flood {
			c.Close()
		}
	}()
	for len(flood) < floodConns {
		c, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatalf("after %d silent connections: %v", len(flood), err)
		}
		flood = append(flood, c)
	}
	ctx, cancel := context.WithTimeout(t.Context(), opsRoundWait)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+rig.metrics+"/healthz", nil)
	resp, err := http.DefaultClient.Do(req)
	if err != nil || resp.StatusCode != 200 {
		t.Fatalf("/healthz under the flood: %v %v", resp, err)
	}
	resp.Body.Close()
	before := len(rig.model.Requests())
	rig.model.Enqueue(demomodel.Text("still ", "served"))
	var r httpRound
	resp = gwPost(t, ctx, rig.gateway+"/v1/rounds", `{"user":"bystander","thread":"flood/1","text":"hi"}`)
	readEvents(resp.Body, r.add)
	resp.Body.Close()
	if r.text != "still served" || r.verdict["status"] != "completed" {
		t.Fatalf("the bystander's round under the flood: %q %v", r.text, r.verdict)
	}
	if n := len(rig.model.Requests()); n != before+1 {
		t.Errorf("%d model requests for one round", n-before)
	}
	req, _ = http.NewRequestWithContext(ctx, http.MethodGet, "http://"+rig.metrics+"/metrics", nil)
	resp, err = http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	var held, evicted float64
	for _, line := range strings.Split(string(body), "\n") {
		if v, ok := strings.CutPrefix(line, "supervisor_gateway_conns "); ok {
			held = parseFloat(t, v)
		}
		if v, ok := strings.CutPrefix(line, `supervisor_gateway_conns_shed_total{outcome="evicted"} `); ok {
			evicted = parseFloat(t, v)
		}
	}
	if held > 5000 || evicted < floodConns-5000 {
		t.Errorf("the daemon holds %v gateway connections and shed %v: want at most 5000 held (a quarter of 20,000) and the rest shed", held, evicted)
	}
	t.Logf("held %v, evicted %v of %d silent connections", held, evicted, floodConns)
}

func parseFloat(t *testing.T, s string) float64 {
	t.Helper()
	f, err := strconv.ParseFloat(strings.TrimSpace(s), 64)
	if err != nil {
		t.Fatalf("metric value %q: %v", s, err)
	}
	return f
}
