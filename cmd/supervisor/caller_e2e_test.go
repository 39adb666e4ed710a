package main

import (
	"bufio"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/meshweaver/supervisor/client"
	"github.com/meshweaver/supervisor/demomodel"
	"github.com/meshweaver/supervisor/messages"
)

// callerRig is the daemon binary with the HTTP gateway on, the real codex
// CLI and the mock model.
type callerRig struct {
	exe     string // the daemon binary (also the CLI)
	model   *demomodel.Server
	addr    string // the remote listener
	gateway string // the gateway's base URL
	metrics string // the ops listener
}

func startCallerRig(t *testing.T, extra ...string) *callerRig {
	t.Helper()
	b := newBinaryServe(t)
	bin, root, exe, model, addr := b.bin, b.root, b.exe, b.model, b.addr
	args := b.args
	args = append(args, "--gateway-listen", "127.0.0.1:0")
	args = append(args, extra...)
	t.Cleanup(func() { waitNoCodex(t, bin, root) })
	srv := opsStartServe(t, exe, args...)
	t.Cleanup(http.DefaultClient.CloseIdleConnections)
	gw := srv.waitMsg("gateway serving")
	ops := srv.waitMsg("metrics serving")
	return &callerRig{exe: exe, model: model, addr: addr, gateway: "http://" + gw["listen"].(string), metrics: ops["listen"].(string)}
}

// sse is one Server-Sent Event.
type sse struct {
	id    uint64
	event string
	data  string
}

// readEvents parses SSE from r, handing each event to each (false stops).
func readEvents(r io.Reader, each func(sse) bool) {
	var cur sse
	sc := bufio.NewScanner(r)
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		line := sc.Text()
		switch {
		case line == "":
			if cur.event != "" && !each(cur) {
				return
			}
			cur = sse{}
		case strings.HasPrefix(line, "id: "):
			cur.id, _ = strconv.ParseUint(line[4:], 10, 64)
		case strings.HasPrefix(line, "event: "):
			cur.event = line[7:]
		case strings.HasPrefix(line, "data: "):
			cur.data = line[6:]
		}
	}
}

// httpRound is what a stream carried: text deltas by seq, the verdict.
type httpRound struct {
	seqs    []uint64
	text    string
	verdict map[string]any
}

func (h *httpRound) add(e sse) bool {
	var m map[string]any
	_ = json.Unmarshal([]byte(e.data), &m)
	switch e.event {
	case "round_event":
		h.seqs = append(h.seqs, e.id)
		if m["kind"] == "text" {
			h.text += m["text"].(string)
		}
	case "round_finished":
		h.verdict = m
		return false
	}
	return true
}

func gwPost(t *testing.T, ctx context.Context, url, body string, header ...string) *http.Response {
	t.Helper()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i+1 < len(header); i += 2 {
		req.Header.Set(header[i], header[i+1])
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	return resp
}

// TestGatewayEndToEnd: the HTTP gateway of the daemon binary, with a real
// net/http client (and curl): a round streamed as SSE; the same
// StartRound again (same client_message_id) runs once and streams the
// same answer; a stream cut mid-round and attached again with
// Last-Event-ID gets every event exactly once and the verdict; a JSON
// call.
func TestGatewayEndToEnd(t *testing.T) {
	rig := startCallerRig(t)
	ctx, cancel := context.WithTimeout(t.Context(), opsRoundWait)
	defer cancel()

	rig.model.Enqueue(demomodel.Text("Hello ", "over ", "HTTP"))
	body := `{"user":"webby","thread":"web/1","text":"hi","client_message_id":"m-1"}`
	var first httpRound
	resp := gwPost(t, ctx, rig.gateway+"/v1/rounds", body)
	readEvents(resp.Body, first.add)
	resp.Body.Close()
	if first.text != "Hello over HTTP" || first.verdict["status"] != "completed" {
		t.Fatalf("round over HTTP: %q, %v", first.text, first.verdict)
	}
	var again httpRound
	resp = gwPost(t, ctx, rig.gateway+"/v1/rounds", body)
	readEvents(resp.Body, again.add)
	resp.Body.Close()
	if again.text != first.text || again.verdict["codex_thread_id"] != first.verdict["codex_thread_id"] {
		t.Errorf("the repeated StartRound: %q, %v; want the first round's", again.text, again.verdict)
	}
	if n := len(rig.model.Requests()); n != 1 {
		t.Errorf("the model saw %d requests, want 1: the repeat ran again", n)
	}

	// A slow answer; the stream is cut after the first text event.
	words := []string{"one ", "two ", "three ", "four ", "five ", "six"}
	rig.model.Enqueue(demomodel.Text(words...).WithDelay(150 * time.Millisecond))
	cutCtx, cut := context.WithCancel(ctx)
	resp = gwPost(t, cutCtx, rig.gateway+"/v1/rounds", `{"user":"webby","thread":"web/2","text":"count","round_id":"web-cut"}`)
	var before httpRound
	readEvents(resp.Body, func(e sse) bool {
		before.add(e)
		return !strings.Contains(e.data, `"kind":"text"`)
	})
	cut()
	resp.Body.Close()
	last := before.seqs[len(before.seqs)-1]
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, rig.gateway+"/v1/rounds/web-cut/events?user=webby", nil)
	req.Header.Set("Last-Event-ID", strconv.FormatUint(last, 10))
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	var after httpRound
	readEvents(resp.Body, after.add)
	resp.Body.Close()
	if got := before.text + after.text; got != strings.Join(words, "") || after.verdict["status"] != "completed" {
		t.Errorf("cut and attached: %q + %q, verdict %v; want every word once and completed", before.text, after.text, after.verdict)
	}
	seqs := append(before.seqs, after.seqs...)
	for i, s := range seqs {
		if s != uint64(i+1) {
			t.Fatalf("seqs across the cut %v: want 1..%d, each once", seqs, len(seqs))
		}
	}

	_, metrics := opsHTTP(t, "http://"+rig.metrics+"/metrics")
	if !strings.Contains(metrics, "\nsupervisor_gateway_streams 0\n") {
		t.Errorf("/metrics lacks supervisor_gateway_streams 0 with no stream open")
	}
	resp = gwPost(t, ctx, rig.gateway+"/v1/models", `{"user":"webby"}`)
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 || !strings.Contains(string(b), `"models":[`) {
		t.Errorf("models over HTTP: %d %s", resp.StatusCode, b)
	}
	resp = gwPost(t, ctx, rig.gateway+"/v1/rounds", `{"user":"webby","thread":"web/3","text":"hi","bogus":true}`)
	b, _ = io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 400 || !strings.Contains(string(b), "bogus") {
		t.Errorf("an unknown field: %d %s, want 400 naming it", resp.StatusCode, b)
	}

	if curl, err := exec.LookPath("curl"); err == nil {
		rig.model.Enqueue(demomodel.Text("Hi ", "curl"))
		out, err := exec.CommandContext(ctx, curl, "-sS", "-N", "--fail-with-body", rig.gateway+"/v1/rounds",
			"-H", "Content-Type: application/json",
			"-d", `{"user":"webby","thread":"web/curl","text":"hello"}`).CombinedOutput()
		if err != nil || !strings.Contains(string(out), "event: round_finished") || !strings.Contains(string(out), `"status":"completed"`) ||
			!strings.Contains(string(out), "id: 1\n") {
			t.Errorf("curl: %v\n%s", err, out)
		}
	}
}

// TestCallerCutAttachesWithAfterSeq: a Go caller whose engine goes away
// mid-round (Close: its listener and connections end) does not take its
// round with it; a new caller attaching with the last seq the first saw
// gets every later event exactly once and the verdict.
func TestCallerCutAttachesWithAfterSeq(t *testing.T) {
	rig := startCallerRig(t)
	ctx, cancel := context.WithTimeout(t.Context(), opsRoundWait)
	defer cancel()
	words := []string{"alpha ", "beta ", "gamma ", "delta ", "epsilon"}
	rig.model.Enqueue(demomodel.Text(words...).WithDelay(200 * time.Millisecond))

	c1, err := client.Dial(ctx, rig.addr)
	if err != nil {
		t.Fatal(err)
	}
	r, err := c1.Round(ctx, messages.StartRound{User: "goer", Thread: "cut/1", Text: "count"})
	if err != nil {
		t.Fatal(err)
	}
	var seen []uint64
	var text string
	for e := range r.Events() {
		seen = append(seen, e.Seq)
		if e.Kind == messages.KindText {
			text += e.Text
			break
		}
	}
	c1.Close() // the caller's engine is gone

	c2, err := client.Dial(ctx, rig.addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c2.Close()
	a, err := c2.Attach(ctx, "goer", r.ID(), seen[len(seen)-1])
	if err != nil {
		t.Fatal(err)
	}
	v, seen := finishAttached(t, a, seen, text, words, "the cut")
	// After the end: the whole log and the verdict, at once.
	start := time.Now()
	again, err := c2.Attach(ctx, "goer", r.ID(), 0)
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for range again.Events() {
		n++
	}
	if v2, err := again.Wait(); err != nil || v2 != v || n != len(seen) {
		t.Errorf("attach after the end: %d events, %+v, %v; want %d and the verdict", n, v2, err, len(seen))
	}
	t.Logf("attach after the end: %d events and the verdict in %v", n, time.Since(start))
}

// finishAttached reads an attached round to its end after the events a
// caller saw before it lost its connection (seen, with their text), and
// checks that the round completed and that across the loss (what) every
// event came exactly once (seqs 1..n) and every word once. It returns the
// verdict and every seq.
func finishAttached(t *testing.T, a *client.Round, seen []uint64, text string, words []string, what string) (messages.RoundFinished, []uint64) {
	t.Helper()
	for e := range a.Events() {
		seen = append(seen, e.Seq)
		if e.Kind == messages.KindText {
			text += e.Text
		}
	}
	v, err := a.Wait()
	if err != nil || v.Status != messages.StatusCompleted {
		t.Fatalf("attached after %s: %+v, %v; want completed", what, v, err)
	}
	if text != strings.Join(words, "") {
		t.Errorf("text across %s %q, want every word once", what, text)
	}
	for i, s := range seen {
		if s != uint64(i+1) {
			t.Fatalf("seqs across %s %v: want 1..%d, each once", what, seen, len(seen))
		}
	}
	return v, seen
}

// TestGatewayMutualTLS: under mutual TLS the gateway takes the remote's
// client certificates and --authz: a caller's identity is its
// certificate's (CN here); it gets what its grants allow, 403 for another
// user, and a client without a certificate does not get through the
// handshake.
func TestGatewayMutualTLS(t *testing.T) {
	dir := t.TempDir()
	ca := tlsNewCA(t, dir, "ca", "meshweaver test CA")
	daemonCert, daemonKey := ca.issue(t, dir, "daemon")
	aliceCert, aliceKey := ca.issue(t, dir, "alice-client")
	authz := filepath.Join(dir, "authz.json")
	if err := os.WriteFile(authz, []byte(`{"version":1,"grants":[{"identities":["alice-client"],"users":["alice"],"kinds":["account"]}]}`), 0o600); err != nil {
		t.Fatal(err)
	}
	rig := startCallerRig(t, "--tls-cert", daemonCert, "--tls-key", daemonKey, "--tls-ca", ca.pem, "--authz", authz)
	base := strings.Replace(rig.gateway, "http://", "https://", 1)
	conf := tlsConfig(t, aliceCert, aliceKey, ca.pem)
	alice := &http.Client{Transport: &http.Transport{TLSClientConfig: conf}}
	defer alice.CloseIdleConnections()
	call := func(c *http.Client, body string) (int, string) {
		req, _ := http.NewRequestWithContext(t.Context(), http.MethodPost, base+"/v1/account", strings.NewReader(body))
		resp, err := c.Do(req)
		if err != nil {
			return 0, err.Error()
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	if code, body := call(alice, `{"user":"alice"}`); code != 200 || !strings.Contains(body, `"user":"alice"`) {
		t.Errorf("alice's account: %d %s", code, body)
	}
	if code, body := call(alice, `{"user":"bob"}`); code != 403 || !strings.Contains(body, `identity \"cn:alice-client\" may not send account for user \"bob\"`) {
		t.Errorf("bob's account with alice's certificate: %d %s; want 403", code, body)
	}
	noCert := conf.Clone()
	noCert.Certificates, noCert.GetClientCertificate = nil, nil
	if code, body := call(&http.Client{Transport: &http.Transport{TLSClientConfig: noCert}}, `{"user":"alice"}`); code != 0 {
		t.Errorf("a client without a certificate: %d %s; want no answer", code, body)
	}
}

// The gateway's flags: a non-loopback plaintext gateway needs
// --allow-plaintext (or TLS); durations and the stream cap are positive.
func TestCallerOptionsValidate(t *testing.T) {
	ok := callerOptions{gatewayMaxStreams: 1, callerGrace: time.Second, roundRetention: time.Second}
	for _, tt := range []struct {
		name       string
		edit       func(*callerOptions)
		tls, plain bool
		want       string
	}{
		{"off", func(*callerOptions) {}, false, false, ""},
		{"loopback", func(o *callerOptions) { o.gatewayListen = "127.0.0.1:0" }, false, false, ""},
		{"exposed plaintext", func(o *callerOptions) { o.gatewayListen = "10.0.0.1:4102" }, false, false, "needs --allow-plaintext"},
		{"exposed allowed", func(o *callerOptions) { o.gatewayListen = "10.0.0.1:4102" }, false, true, ""},
		{"exposed TLS", func(o *callerOptions) { o.gatewayListen = "10.0.0.1:4102" }, true, false, ""},
		{"no grace", func(o *callerOptions) { o.callerGrace = 0 }, false, false, "must be positive"},
	} {
		o := ok
		tt.edit(&o)
		errs := o.validate(tt.tls, tt.plain)
		if tt.want == "" && len(errs) != 0 || tt.want != "" && (len(errs) != 1 || !strings.Contains(errs[0].Error(), tt.want)) {
			t.Errorf("%s: %v, want %q", tt.name, errs, tt.want)
		}
	}
}
