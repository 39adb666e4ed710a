package main

import (
	"strings"
	"testing"

	"github.com/meshweaver/supervisor/isolate"
)

// TestReachNamesListeners: what the start log and serve --check say of
// the listeners a user's agent can reach, per deployment.
func TestReachNamesListeners(t *testing.T) {
	plain := func() *serveOptions {
		o := &serveOptions{listen: "127.0.0.1:4100", metricsListen: "127.0.0.1:4101"}
		o.callers.gatewayListen = "127.0.0.1:4102"
		return o
	}
	off := &listenerGuard{off: "every app-server runs as the daemon's uid"}
	on := &listenerGuard{uids: isolate.Range{Lo: 200000, Hi: 299999}}
	for _, c := range []struct {
		name       string
		o          func() *serveOptions
		g          *listenerGuard
		kept, open []string // substrings of the one line each, nil: no line
	}{
		{"plaintext, no uid switch", plain, off, nil,
			[]string{"remote 127.0.0.1:4100, gateway 127.0.0.1:4102, metrics 127.0.0.1:4101", "daemon's uid"}},
		{"plaintext, uid switch", plain, on,
			[]string{"(200000-299999) are refused", "remote 127.0.0.1:4100, gateway 127.0.0.1:4102, metrics 127.0.0.1:4101"}, nil},
		{"TLS, no uid switch: the metrics listener only", func() *serveOptions {
			o := plain()
			o.tls = tlsOptions{cert: "c", key: "k", ca: "a"}
			return o
		}, off, nil, []string{"reach these listeners without authentication: metrics 127.0.0.1:4101 ("}},
		{"TLS, no metrics, no uid switch: nothing", func() *serveOptions {
			o := plain()
			o.tls, o.metricsListen = tlsOptions{cert: "c", key: "k", ca: "a"}, ""
			return o
		}, off, nil, nil},
		{"plaintext embedded etcd, uid switch", func() *serveOptions {
			o := plain()
			o.cluster = clusterOptions{name: "c", etcdName: "m1", etcdClient: "http://127.0.0.1:2379", etcdPeer: "http://127.0.0.1:2380"}
			return o
		}, on, []string{"are refused"}, []string{"plaintext embedded etcd", "http://127.0.0.1:2379", "http://127.0.0.1:2380"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			kept, open := c.o().reach(c.g)
			check := func(what string, got, want []string) {
				t.Helper()
				if want == nil {
					if len(got) != 0 {
						t.Errorf("%s: %q, want none", what, got)
					}
					return
				}
				if len(got) != 1 {
					t.Fatalf("%s: %q, want one line", what, got)
				}
				for _, w := range want {
					if !strings.Contains(got[0], w) {
						t.Errorf("%s: %q lacks %q", what, got[0], w)
					}
				}
			}
			check("kept", kept, c.kept)
			check("open", open, c.open)
		})
	}
}
