package main

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"sync/atomic"
	"time"

	"github.com/meshweaver/supervisor/actors"
	"github.com/meshweaver/supervisor/edge"
	"github.com/meshweaver/supervisor/mcpfront"
	"github.com/meshweaver/supervisor/messages"
	"github.com/meshweaver/supervisor/third_party/hollywood/actor"
	"github.com/meshweaver/supervisor/third_party/hollywood/remote"
)

// daemon is the running actor tree behind its remote listener.
type daemon struct {
	engine *actor.Engine
	rem    *remote.Remote
	root   *actor.PID
	log    *slog.Logger
	front  *mcpfront.Front // the threads' MCP front; closed after the tree stops
}

// edgeOptions are the settings of the daemon's remote edge.
type edgeOptions struct {
	// policy authorizes peer identities; nil lets every peer do
	// everything (plaintext, or --authz-allow-any).
	policy *edge.Policy
	// peerRate and peerBurst limit each peer's messages (zero: the gate's
	// defaults).
	peerRate  float64
	peerBurst int
	// replyRate and replyBurst limit the refusals answered to each peer
	// (zero: the gate's defaults).
	replyRate  float64
	replyBurst int
	// limits are the transport's (zero fields: its defaults).
	limits remote.Limits
	// listener wraps the remote's TCP listener (nil: none), as the
	// listener guard does.
	listener func(net.Listener) net.Listener
	// userUIDs are the uids the users' agents run as, which the MCP front
	// lets use only their own user's URLs (nil: no check; the guard's
	// range).
	userUIDs func(uint32) bool
	// allowDestinations are the MCP upstreams (HOST:PORT) the front may
	// reach on this host, loopback or link-local (--allow-destination).
	allowDestinations []string
	// frontConns is where the MCP front keeps its upstream connections,
	// which the listeners close (the listener guard's; nil: its own).
	frontConns *mcpfront.Conns
	// dialVerify verifies each TLS dial by the address dialled
	// (remote.Config.WithDialVerify; nil: the TLS config's own check).
	dialVerify func(addr string) func(tls.ConnectionState) error
}

// startDaemon listens on listen and spawns the actor tree, behind the edge
// gate with its defaults. tlsConf nil means plaintext.
func startDaemon(listen string, tlsConf *tls.Config, cfg actors.Config, deps actors.Deps) (*daemon, error) {
	d, _, err := startDaemonEdge(listen, tlsConf, cfg, deps, edgeOptions{})
	return d, err
}

// startDaemonEdge is startDaemon with the edge's settings; it also returns
// the gate.
func startDaemonEdge(listen string, tlsConf *tls.Config, cfg actors.Config, deps actors.Deps, eo edgeOptions) (*daemon, *edge.Gate, error) {
	if deps.Metrics == nil {
		deps.Metrics = actors.NewMetrics(nil)
	}
	if deps.Logger == nil {
		deps.Logger = slog.Default()
	}
	// The gate answers refusals through the engine, which exists only once
	// the remote is up: until then (no message can have passed the
	// listener yet) there is nobody to answer.
	var engine atomic.Pointer[actor.Engine]
	log := deps.Logger
	gate := edge.New(edge.Config{
		Self: listen, Root: rootPID(listen), Policy: eo.policy, Relays: relays(deps),
		PeerRate: eo.peerRate, PeerBurst: eo.peerBurst, ReplyRate: eo.replyRate, ReplyBurst: eo.replyBurst,
		Rejected: deps.Metrics.RemoteRejected, Logger: log,
		Rounds: deps.Metrics.Rounds,
		Reply: func(to *actor.PID, msg any) {
			e := engine.Load()
			if e == nil {
				return
			}
			env, err := messages.Encode(msg)
			if err != nil {
				log.Error("cannot encode a refusal; dropped", "type", fmt.Sprintf("%T", msg), "err", err)
				return
			}
			e.Send(to, env)
		},
	})
	e, rem, err := newRemoteEngine(listen, tlsConf, func(rc remote.Config) remote.Config {
		rc = rc.WithGate(gate.Remote()).WithOnRefuse(gate.OnRefuse).WithLimits(eo.limits)
		if eo.listener != nil {
			rc = rc.WithListener(eo.listener)
		}
		if eo.dialVerify != nil {
			rc = rc.WithDialVerify(eo.dialVerify)
		}
		return rc
	})
	if err != nil {
		return nil, nil, err
	}
	engine.Store(e)
	deps.Hold = rem.Hold
	// The MCP front before the tree, whose threads are pointed at it; it
	// is closed after the tree (stop), when no thread uses it any more.
	front := deps.MCPFront
	if front == nil {
		if front, err = mcpfront.New(mcpfront.Options{Logger: deps.Logger, UserUID: eo.userUIDs, Allow: eo.allowDestinations, Conns: eo.frontConns}); err != nil {
			rem.Stop().Wait()
			return nil, nil, err
		}
		deps.MCPFront = front
	}
	root, err := actors.SpawnRoot(e, cfg, deps)
	if err != nil {
		rem.Stop().Wait()
		_ = front.Close()
		return nil, nil, err
	}
	return &daemon{engine: e, rem: rem, root: root, log: deps.Logger, front: front}, gate, nil
}

// newRemoteEngine is an engine behind a remote listening on listen (mutual
// TLS when tlsConf is set), for the daemon and its callers alike; each of
// with adjusts the remote's config.
func newRemoteEngine(listen string, tlsConf *tls.Config, with ...func(remote.Config) remote.Config) (*actor.Engine, *remote.Remote, error) {
	rc := remote.NewConfig()
	if tlsConf != nil {
		rc = rc.WithTLS(tlsConf)
	}
	for _, w := range with {
		rc = w(rc)
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
	if d.front != nil {
		_ = d.front.Close() // after the tree: its app-servers, the front's clients, are gone
	}
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

// relays is the edge's relay prefix: a cluster member's relays take the
// owners' answers (actors/relay.go); a single node has none.
func relays(deps actors.Deps) string {
	if deps.Placement == nil {
		return ""
	}
	return actors.RelayPrefix
}
