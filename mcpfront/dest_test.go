package mcpfront

import (
	"context"
	"errors"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"net/url"
	"strings"
	"sync/atomic"
	"testing"
)

// guardedFront is a front with the daemon's rule of destinations, this
// host's addresses given by hostAddrs.
func guardedFront(t *testing.T, allow []string, hostAddrs []netip.Addr) *Front {
	t.Helper()
	f, err := New(Options{Logger: slog.New(slog.DiscardHandler), Allow: allow,
		HostAddrs: func() ([]netip.Addr, error) { return hostAddrs, nil }})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = f.Close() })
	return f
}

// counting is an upstream on loopback that counts what reaches it.
func counting(t *testing.T) (*httptest.Server, *atomic.Int64) {
	t.Helper()
	var n atomic.Int64
	s := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		n.Add(1)
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write([]byte(`{"jsonrpc":"2.0","id":1,"result":{}}`))
	}))
	t.Cleanup(s.Close)
	return s, &n
}

// An MCP URL on loopback, or naming this host, or a name that resolves
// to loopback (localhost) is refused with 403 and nothing reaches it: the
// front is not the agent's deputy toward the daemon's own listeners. The
// same upstream allowed by name is reached.
func TestFrontRefusesThisHost(t *testing.T) {
	up, hits := counting(t)
	u, _ := url.Parse(up.URL)
	_, port, _ := net.SplitHostPort(u.Host)
	f := guardedFront(t, nil, []netip.Addr{netip.MustParseAddr("192.0.2.7")})
	key := Key{User: "alice", Thread: "t"}
	front := f.Bind(key)
	for _, target := range []string{
		up.URL,                              // 127.0.0.1:port
		"http://localhost:" + port + "/mcp", // resolves to loopback
		"http://[::1]:" + port + "/mcp",
		"http://192.0.2.7:" + port + "/mcp", // an address of this host
		"http://169.254.169.254/latest/meta-data",
		"http://0.0.0.0:" + port + "/mcp",
	} {
		if err := f.Set(key, target, "tok"); err != nil {
			t.Fatal(err)
		}
		resp, body := do(t, http.MethodPost, front, "", `{"jsonrpc":"2.0","id":1,"method":"tools/list"}`)
		if resp.StatusCode != http.StatusForbidden || !strings.Contains(body, "--allow-destination") {
			t.Errorf("%s: %d %q, want 403 naming --allow-destination", target, resp.StatusCode, body)
		}
	}
	if n := hits.Load(); n != 0 {
		t.Fatalf("%d requests reached a refused upstream", n)
	}
	f.SetAllowed([]string{u.Host}) // a reload that allows it by name
	if err := f.Set(key, up.URL, "tok"); err != nil {
		t.Fatal(err)
	}
	if resp, body := do(t, http.MethodPost, front, "", `{}`); resp.StatusCode != http.StatusOK || hits.Load() != 1 {
		t.Errorf("allowed by name: %d %q, %d hits", resp.StatusCode, body, hits.Load())
	}
	// Only that name: localhost at the same port is another name.
	if err := f.Set(key, "http://localhost:"+port+"/mcp", "tok"); err != nil {
		t.Fatal(err)
	}
	if resp, _ := do(t, http.MethodPost, front, "", `{}`); resp.StatusCode != http.StatusForbidden || hits.Load() != 1 {
		t.Errorf("another name of an allowed destination: %d, %d hits", resp.StatusCode, hits.Load())
	}
}

// The rule is on the address connected to: a name is checked for every
// address it resolves to at connect time (no DNS rebinding).
func TestDestGuardChecksWhatItDials(t *testing.T) {
	g := newDestGuard([]string{"Allowed.example:443"}, func() ([]netip.Addr, error) {
		return []netip.Addr{netip.MustParseAddr("10.1.2.3"), netip.MustParseAddr("fd00::1")}, nil
	})
	for addr, refused := range map[string]bool{
		"127.0.0.1": true, "127.9.9.9": true, "::1": true, "::ffff:127.0.0.1": true, "169.254.1.1": true,
		"fe80::1": true, "0.0.0.0": true, "::": true, "224.0.0.1": true, "10.1.2.3": true, "fd00::1": true,
		"10.1.2.4": false, "93.184.216.34": false, "2001:db8::1": false,
	} {
		err := g.check(netip.MustParseAddr(addr))
		if refused != errors.Is(err, ErrDestination) {
			t.Errorf("%s: %v, refused want %v", addr, err, refused)
		}
	}
	if !g.allowed("allowed.example:443") || g.allowed("allowed.example:80") {
		t.Error("allowed by name: case or port wrong")
	}
	// The dialer refuses at connect time, before any byte is sent.
	dial := g.dialer(0, func(c net.Conn) net.Conn { return c })
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	if c, err := dial(context.Background(), "tcp", ln.Addr().String()); !errors.Is(err, ErrDestination) {
		if c != nil {
			c.Close()
		}
		t.Fatalf("dialling loopback: %v, want ErrDestination", err)
	}
}

// The front's own upstream connections are known, for the daemon's
// listeners to refuse.
func TestFrontKnowsItsConnections(t *testing.T) {
	var local atomic.Value
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		local.Store(r.RemoteAddr)
		_, _ = w.Write([]byte(`{}`))
	}))
	defer up.Close()
	f, _ := newFront(t, Options{})
	key := Key{User: "a", Thread: "t"}
	front := f.Bind(key)
	if err := f.Set(key, up.URL, ""); err != nil {
		t.Fatal(err)
	}
	if resp, _ := do(t, http.MethodPost, front, "", `{}`); resp.StatusCode != 200 {
		t.Fatalf("status %d", resp.StatusCode)
	}
	ap := netip.MustParseAddrPort(local.Load().(string))
	if !f.Outgoing(ap) {
		t.Errorf("the front's connection from %s is not known", ap)
	}
	if f.Outgoing(netip.MustParseAddrPort("127.0.0.1:1")) {
		t.Error("an address the front never used is known")
	}
}

// A listener guarded by the front's set closes the connections the front
// makes to it, unread: a destination that leads back to the daemon (an
// allowed name, a NAT turning a public address back to this host) gets
// nothing through; other clients are served.
func TestListenerDropsTheFrontsConnections(t *testing.T) {
	conns := &Conns{}
	var dropped atomic.Int64
	conns.OnDrop = func(name string) {
		if name == "gateway" {
			dropped.Add(1)
		}
	}
	var hits atomic.Int64
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { hits.Add(1) })}
	go func() { _ = srv.Serve(conns.Guard("gateway", ln)) }()
	defer srv.Close()
	f, err := New(Options{Logger: slog.New(slog.DiscardHandler), Allow: []string{ln.Addr().String()}, Conns: conns})
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	key := Key{User: "alice", Thread: "t"}
	if err := f.Set(key, "http://"+ln.Addr().String()+"/v1/rounds", ""); err != nil {
		t.Fatal(err)
	}
	resp, _ := do(t, http.MethodPost, f.Bind(key), "", `{"user":"bob","thread":"t","text":"id"}`)
	if resp.StatusCode != http.StatusBadGateway || hits.Load() != 0 || dropped.Load() == 0 {
		t.Errorf("the front's request to a guarded listener: %d, %d hits, %d dropped; want 502, none, dropped", resp.StatusCode, hits.Load(), dropped.Load())
	}
	// Anyone else is served.
	if r, err := http.Get("http://" + ln.Addr().String() + "/healthz"); err != nil || hits.Load() != 1 {
		t.Errorf("another client: %v, %d hits", err, hits.Load())
	} else {
		r.Body.Close()
	}
}
