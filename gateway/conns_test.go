package gateway

import (
	"context"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"
)

// dialSilent opens n connections to base that send nothing.
func dialSilent(t *testing.T, base string, n int) []net.Conn {
	t.Helper()
	addr := strings.TrimPrefix(base, "http://")
	var conns []net.Conn
	for range n {
		c, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatalf("dial %d: %v", len(conns), err)
		}
		conns = append(conns, c)
	}
	t.Cleanup(func() {
		for _, c := range conns {
			c.Close()
		}
	})
	return conns
}

// waitFor polls cond, the one state the gateway offers for it (its
// connection count), until a deadline.
func waitUntil(t *testing.T, what string, cond func() bool) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for !cond() {
		select {
		case <-ctx.Done():
			t.Fatalf("%s: not within 10s", what)
		case <-time.After(5 * time.Millisecond):
		}
	}
}

// One caller holding many connections that send nothing cannot hold the
// gateway: past MaxConns each new connection closes the oldest silent
// one, so another caller is served, and the gateway holds no more than
// its bound.
func TestSilentConnectionsShed(t *testing.T) {
	base, gw := serveGW(t, nil, func(c *Config) { c.MaxConns = 8; c.ReadHeaderTimeout = time.Minute })
	silent := dialSilent(t, base, 50)
	waitUntil(t, "the silent connections accepted", func() bool { ev, _ := gw.Shed(); return ev >= 42 })
	resp, err := http.Post(base+"/v1/models", "application/json", strings.NewReader(`{"user":"a"}`))
	if err != nil {
		t.Fatalf("another caller: %v", err)
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	if n := gw.Conns(); n > 8 {
		t.Errorf("%d connections held, bound 8", n)
	}
	// The oldest were closed: a read on the first returns at once.
	_ = silent[0].SetReadDeadline(time.Now().Add(5 * time.Second))
	if _, err := silent[0].Read(make([]byte, 1)); err == nil {
		t.Error("the oldest silent connection was not closed")
	}
}

// A busy connection (an event stream) is never closed to make room; with
// every held one busy, a new connection is refused.
func TestBusyConnectionsKept(t *testing.T) {
	base, gw := serveGW(t, nil, func(c *Config) { c.MaxConns = 2; c.MaxStreams = 4; c.FirstReplyWait = 10 * time.Millisecond })
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var bodies []io.Closer
	for range 2 {
		req, _ := http.NewRequestWithContext(ctx, http.MethodPost, base+"/v1/rounds", strings.NewReader(`{"user":"a","thread":"t","text":"hold"}`))
		resp, err := (&http.Client{Transport: &http.Transport{}}).Do(req)
		if err != nil {
			t.Fatal(err)
		}
		bodies = append(bodies, resp.Body)
	}
	defer func() {
		for _, b := range bodies {
			b.Close()
		}
	}()
	c, err := net.Dial("tcp", strings.TrimPrefix(base, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	_ = c.SetReadDeadline(time.Now().Add(5 * time.Second))
	if _, err := c.Read(make([]byte, 1)); err == nil {
		t.Fatal("a connection past the bound was served while every held one was busy")
	}
	if _, refused := gw.Shed(); refused == 0 {
		t.Error("the refusal was not counted")
	}
	if gw.Conns() != 2 {
		t.Errorf("%d held, want the 2 streams", gw.Conns())
	}
}
