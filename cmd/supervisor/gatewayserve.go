package main

import (
	"context"
	"crypto/tls"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"net/http"
	"time"

	"github.com/oklog/run"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/meshweaver/supervisor/edge"
	"github.com/meshweaver/supervisor/gateway"
)

// callerOptions are serve's settings for callers: the HTTP gateway, and
// how long rounds wait for a caller that went away and stay attachable.
type callerOptions struct {
	gatewayListen     string
	gatewayMaxStreams int
	callerGrace       time.Duration
	roundRetention    time.Duration
}

func (o *callerOptions) register(fs *flag.FlagSet) {
	fs.StringVar(&o.gatewayListen, "gateway-listen", "", "`HOST:PORT` of the HTTP gateway for callers outside Go (rounds as Server-Sent Events; docs/REMOTE.md); empty: off. Under mutual TLS it takes the same client certificates and --authz as the remote")
	fs.IntVar(&o.gatewayMaxStreams, "gateway-max-streams", 16, "event streams (rounds, attaches, logins) the gateway keeps open per identity (per IP in plaintext)")
	fs.DurationVar(&o.callerGrace, "caller-grace", 30*time.Second, "how long a round whose caller went away goes on, so that the caller may attach again, before it is interrupted")
	fs.DurationVar(&o.roundRetention, "round-retention", 10*time.Minute, "how long a finished round's events and verdict stay attachable")
}

func (o *callerOptions) validate(tlsOn, allowPlaintext bool) []error {
	var errs []error
	if o.gatewayListen != "" && !isLoopback(o.gatewayListen) && !tlsOn && !allowPlaintext {
		errs = append(errs, fmt.Errorf("--gateway-listen %s is not loopback: plaintext there needs --allow-plaintext", o.gatewayListen))
	}
	if o.callerGrace <= 0 || o.roundRetention <= 0 || o.gatewayMaxStreams <= 0 {
		errs = append(errs, errors.New("--caller-grace, --round-retention and --gateway-max-streams must be positive"))
	}
	return errs
}

// addGateway listens on --gateway-listen and serves the gateway in g. It
// is added after the daemon: its streams stay open while the daemon
// drains, so that they carry the last verdicts, and close after.
func (o *callerOptions) addGateway(g *run.Group, d *daemon, gate *edge.Gate, tlsConf *tls.Config, guard *listenerGuard, reg prometheus.Registerer, log *slog.Logger) error {
	if o.gatewayListen == "" {
		return nil
	}
	ln, err := guard.listen("gateway", o.gatewayListen)
	if err != nil {
		return fmt.Errorf("gateway: %w", err)
	}
	gw := gateway.New(gateway.Config{Engine: d.engine, Root: d.root, Gate: gate, TLS: tlsConf,
		MaxStreams: o.gatewayMaxStreams, Logger: log})
	reg.MustRegister(prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name: "supervisor_gateway_streams", Help: "Event streams the HTTP gateway has open (rounds, attaches, logins).",
	}, func() float64 { return float64(gw.Streams()) }))
	reg.MustRegister(prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name: "supervisor_gateway_conns", Help: "Connections the HTTP gateway holds (at most gateway.Config.MaxConns: a quarter of RLIMIT_NOFILE).",
	}, func() float64 { return float64(gw.Conns()) }))
	for _, outcome := range []string{"evicted", "refused"} {
		reg.MustRegister(prometheus.NewCounterFunc(prometheus.CounterOpts{
			Name: "supervisor_gateway_conns_shed_total", Help: "Gateway connections closed at the bound: evicted (the oldest silent one, for a new one) or refused (every held one busy).",
			ConstLabels: prometheus.Labels{"outcome": outcome},
		}, func() float64 {
			ev, ref := gw.Shed()
			if outcome == "evicted" {
				return float64(ev)
			}
			return float64(ref)
		}))
	}
	log.Info("gateway serving", "listen", ln.Addr().String(), "tls", tlsConf != nil)
	g.Add(func() error {
		if err := gw.Serve(ln); !errors.Is(err, http.ErrServerClosed) {
			return fmt.Errorf("gateway: %w", err)
		}
		return nil
	}, func(error) {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = gw.Shutdown(ctx)
	})
	return nil
}
