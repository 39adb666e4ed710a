package main

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"time"

	"github.com/meshweaver/supervisor/actors"
	"github.com/meshweaver/supervisor/third_party/hollywood/actor"
	"github.com/meshweaver/supervisor/third_party/hollywood/remote"
)

// daemon is the running actor tree behind its remote listener.
type daemon struct {
	engine *actor.Engine
	rem    *remote.Remote
	root   *actor.PID
	log    *slog.Logger
}

// startDaemon listens on listen and spawns the actor tree. tlsConf nil
// means plaintext.
func startDaemon(listen string, tlsConf *tls.Config, cfg actors.Config) (*daemon, error) {
	e, rem, err := newRemoteEngine(listen, tlsConf)
	if err != nil {
		return nil, err
	}
	root, err := actors.SpawnRoot(e, cfg)
	if err != nil {
		rem.Stop().Wait()
		return nil, err
	}
	return &daemon{engine: e, rem: rem, root: root, log: cfg.Logger}, nil
}

// newRemoteEngine is an engine behind a remote listening on listen (mutual
// TLS when tlsConf is set), for the daemon and its callers alike.
func newRemoteEngine(listen string, tlsConf *tls.Config) (*actor.Engine, *remote.Remote, error) {
	rc := remote.NewConfig()
	if tlsConf != nil {
		rc = rc.WithTLS(tlsConf)
	}
	rem := remote.New(listen, rc)
	e, err := actor.NewEngine(actor.NewEngineConfig().WithRemote(rem))
	if err != nil {
		return nil, nil, fmt.Errorf("starting the remote on %s: %w", listen, err)
	}
	return e, rem, nil
}

// stop drains, then stops: for two thirds of timeout no new round is
// admitted while the ones in flight finish; then the tree is poisoned, which
// interrupts what still runs (every round still gets its verdict) and stops
// every app-server. The listener closes last: the last verdicts still need
// the remote.
func (d *daemon) stop(timeout time.Duration) error {
	start := time.Now()
	drainCtx, cancel := context.WithTimeout(context.Background(), timeout*2/3)
	if err := actors.Drain(drainCtx, d.engine, d.root); err != nil {
		d.log.Warn("rounds still running at the drain deadline; interrupting them", "after", time.Since(start).Round(time.Millisecond))
	}
	cancel()
	ctx, cancel := context.WithTimeout(context.Background(), timeout-time.Since(start))
	defer cancel()
	<-d.engine.PoisonCtx(ctx, d.root).Done()
	err := ctx.Err()
	d.rem.Stop().Wait()
	if errors.Is(err, context.DeadlineExceeded) {
		return fmt.Errorf("the actor tree did not stop within %v", timeout)
	}
	return nil
}

// rootPID is the daemon's entry point at addr.
func rootPID(addr string) *actor.PID {
	return actor.NewPID(addr, actors.RootKind+"/"+actors.RootID)
}

// isLoopback reports whether a listen address binds loopback only.
func isLoopback(hostport string) bool {
	host, _, err := net.SplitHostPort(hostport)
	if err != nil {
		return false
	}
	if host == "localhost" {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

// freeLoopbackAddr picks a free loopback port. hollywood puts the listen
// address into every PID, so ":0" cannot be used directly.
func freeLoopbackAddr() (string, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", err
	}
	addr := ln.Addr().String()
	return addr, ln.Close()
}
