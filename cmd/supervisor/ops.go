package main

import (
	"context"
	"crypto/tls"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/meshweaver/supervisor/client"
)

// tlsOptions are the remote link's mutual-TLS files. The same
// configuration serves the listener and the daemon's own dials to its
// callers (hollywood uses one for both), so it holds the node's certificate
// for both roles and the CA that signs every peer.
type tlsOptions struct {
	cert, key, ca string
	serverID      string // a caller's: the daemon's expected identity (--server-id)
}

// registerCaller is register for the callers, with --server-id.
func (t *tlsOptions) registerCaller(fs *flag.FlagSet) {
	t.register(fs)
	fs.StringVar(&t.serverID, "server-id", "", "the daemon's expected certificate `IDENTITY` (uri:spiffe://mesh/supervisor, cn:daemon-1; untyped: a URI when it holds ://, else a CN): the daemon is verified by it instead of by the host name of --addr, which a SPIFFE certificate does not name (default $SUPERVISOR_SERVER_ID)")
}

func (t *tlsOptions) register(fs *flag.FlagSet) {
	fs.StringVar(&t.cert, "tls-cert", "", "PEM certificate `FILE` of this node (mutual TLS on the remote link)")
	fs.StringVar(&t.key, "tls-key", "", "PEM private key `FILE` of -tls-cert")
	fs.StringVar(&t.ca, "tls-ca", "", "PEM `FILE` of the CA that signs every peer's certificate")
}

func (t *tlsOptions) enabled() bool { return t.cert != "" || t.key != "" || t.ca != "" }

// config loads the files; nil, nil when TLS is off.
func (t *tlsOptions) config() (*tls.Config, error) {
	if !t.enabled() {
		return nil, nil
	}
	if t.cert == "" || t.key == "" || t.ca == "" {
		return nil, errors.New("mutual TLS needs all of --tls-cert, --tls-key and --tls-ca")
	}
	return client.LoadTLSFiles(t.cert, t.key, t.ca)
}

// opsServer serves /metrics, /healthz and /readyz.
type opsServer struct {
	srv   *http.Server
	ln    net.Listener
	ready atomic.Bool
	done  chan struct{}
	// warning, when set (before ready), follows "ready" in /readyz: what
	// the operator must know, such as users not being separated.
	warning string
	// blocked, when set (before ready), is asked at each /readyz: while it
	// names why every round would fail (a path out of the users' reach),
	// /readyz is 503 with that reason.
	blocked func() string
}

// newRegistry is the daemon's Prometheus registry: its own collectors plus
// the Go runtime's and the process's.
func newRegistry() *prometheus.Registry {
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	return reg
}

func startOps(addr string, reg *prometheus.Registry, log *slog.Logger) (*opsServer, error) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("metrics listener: %w", err)
	}
	return startOpsOn(ln, reg, log), nil
}

// startOpsOn serves /metrics, /healthz and /readyz on ln (serve's: behind
// the listener guard).
func startOpsOn(ln net.Listener, reg *prometheus.Registry, log *slog.Logger) *opsServer {
	o := &opsServer{ln: ln, done: make(chan struct{})}
	mux := http.NewServeMux()
	mux.Handle("GET /metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) {
		fmt.Fprintln(w, "ok")
	})
	mux.HandleFunc("GET /readyz", func(w http.ResponseWriter, _ *http.Request) {
		if !o.ready.Load() {
			http.Error(w, "not ready", http.StatusServiceUnavailable)
			return
		}
		if o.blocked != nil {
			if why := o.blocked(); why != "" {
				http.Error(w, "not ready: "+why, http.StatusServiceUnavailable)
				return
			}
		}
		fmt.Fprintln(w, "ready")
		if o.warning != "" {
			fmt.Fprintln(w, "warning:", o.warning)
		}
	})
	o.srv = &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second}
	go func() {
		defer close(o.done)
		if err := o.srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			log.Error("metrics server", "err", err)
		}
	}()
	return o
}

func (o *opsServer) Addr() string { return o.ln.Addr().String() }

func (o *opsServer) stop() {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_ = o.srv.Shutdown(ctx)
	<-o.done
}
