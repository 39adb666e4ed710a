package actors

import (
	"context"
	"errors"
	"github.com/meshweaver/supervisor/mcpfront"
	"io"
	"log/slog"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/meshweaver/supervisor/codexrpc"
	"github.com/meshweaver/supervisor/store"
	"github.com/meshweaver/supervisor/third_party/hollywood/actor"
)

// stuckProc stands in for an app-server that reads what it is sent and
// answers nothing (a SIGSTOPped CLI, as far as its pipes show): a Conn
// over pipes to a peer that discards every line.
type stuckProc struct {
	conn      *codexrpc.Conn
	toPeer    *io.PipeReader
	fromPeer  *io.PipeWriter
	peerDone  chan struct{}
	exited    chan struct{}
	once      sync.Once
	killedAt  time.Time
	killCalls int
}

func newStuckProc() *stuckProc {
	toPeerR, toPeerW := io.Pipe()
	fromPeerR, fromPeerW := io.Pipe()
	p := &stuckProc{toPeer: toPeerR, fromPeer: fromPeerW, peerDone: make(chan struct{}), exited: make(chan struct{})}
	p.conn = codexrpc.NewConn(fromPeerR, toPeerW, codexrpc.Options{Logger: slog.New(slog.DiscardHandler)})
	go func() {
		defer close(p.peerDone)
		_, _ = io.Copy(io.Discard, toPeerR)
	}()
	return p
}

func (p *stuckProc) Conn() *codexrpc.Conn            { return p.conn }
func (p *stuckProc) PID() int                        { return 4242 }
func (p *stuckProc) Exited() <-chan struct{}         { return p.exited }
func (p *stuckProc) ExitStatus() codexrpc.ExitStatus { return codexrpc.ExitStatus{} }
func (p *stuckProc) Stop(ctx context.Context) error  { return p.Kill(ctx) }
func (p *stuckProc) Kill(context.Context) error {
	p.once.Do(func() {
		p.killedAt, p.killCalls = time.Now(), p.killCalls+1
		_ = p.fromPeer.Close() // the Conn's reader ends
		_ = p.toPeer.Close()   // and so do its writer and the peer
		close(p.exited)
	})
	<-p.peerDone
	return p.conn.Wait(context.Background())
}

// The app-server actor's clock, in a bubble: a thread/start the process
// never answers ends at exactly CallTimeout with DeadlineExceeded for the
// round; the health call it asks for goes unanswered too, so at
// CallTimeout + min(CallTimeout, 10 s) the process is killed, counted as
// hung and as a death, and given up (the user actor and the cap actor
// hear that it is gone; the next command starts a fresh one, which
// TestHungDuringOpenThread shows with real processes).
func TestHungOpenThreadSynctest(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const callTimeout = 4 * time.Second
		m := NewMetrics(nil)
		cfg := *mustTree(t, Config{Homes: t.TempDir(), Workspace: t.TempDir(), CallTimeout: callTimeout},
			Deps{Logger: slog.New(slog.DiscardHandler), Metrics: m})
		e, err := actor.NewEngine(actor.NewEngineConfig())
		if err != nil {
			t.Fatal(err)
		}
		gone := make(chan struct{}, 4)
		capStub := e.SpawnFunc(func(c *actor.Context) {
			if _, ok := c.Message().(liveGone); ok {
				gone <- struct{}{}
			}
		}, "cap")
		registry := e.SpawnFunc(func(*actor.Context) {}, "registry")
		results := make(chan threadOpenResult, 1)
		round := e.SpawnFunc(func(c *actor.Context) {
			if r, ok := c.Message().(threadOpenResult); ok {
				results <- r
			}
		}, "round")
		live := make(chan bool, 4)
		spawned := make(chan *actor.PID, 1)
		home := t.TempDir()
		user := e.SpawnFunc(func(c *actor.Context) {
			switch m := c.Message().(type) {
			case actor.Started:
				// The actor is in phaseStarting, as after a start's launch,
				// so that it takes the process handed over below.
				produce := newAppServerActor(&cfg, "sy", home, store.NewCredentials(t.TempDir()), registry, capStub)
				starting := func() actor.Receiver {
					r := produce()
					r.(*appServerActor).phase = phaseStarting
					return r
				}
				spawned <- c.SpawnChild(starting, "codex", spawnOpts("main", cfg.Logger, nil)...)
			case appServerLive:
				live <- m.live
			}
		}, "user")
		app := <-spawned
		proc := newStuckProc()
		e.Send(app, codexStarted{gen: 0, proc: proc}) // a process, as a start would hand it over
		if !<-live {
			t.Fatal("the user actor heard of no live app-server")
		}
		start := time.Now()
		e.Send(app, openThread{round: round, settings: roundSettings(&cfg, mcpfront.Key{}, "", "", "")})
		r := <-results
		if took := time.Since(start); took != callTimeout || !errors.Is(r.err, context.DeadlineExceeded) {
			t.Errorf("the open ended after %v with %v, want CallTimeout (%v) and DeadlineExceeded", took, r.err, callTimeout)
		}
		<-proc.exited
		if want := callTimeout + min(callTimeout, 10*time.Second); proc.killedAt.Sub(start) != want {
			t.Errorf("the hung process was killed %v after the call, want %v", proc.killedAt.Sub(start), want)
		}
		<-gone
		if l := <-live; l {
			t.Errorf("the user actor was not told the app-server is gone")
		}
		if h, d := counterValue(t, m.Hung), counterValue(t, m.Deaths); h != 1 || d != 1 {
			t.Errorf("hung %v, deaths %v; want 1 and 1", h, d)
		}
		for _, pid := range []*actor.PID{user, round, registry, capStub} {
			<-e.Poison(pid).Done()
		}
		if proc.killCalls != 1 {
			t.Errorf("killed %d times", proc.killCalls)
		}
	})
}
