package actors

import (
	"context"
	"log/slog"
	"os"
	"runtime/pprof"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/meshweaver/supervisor/demomodel"
	"github.com/meshweaver/supervisor/messages"
	"github.com/meshweaver/supervisor/testkit/codexhome"
	"github.com/meshweaver/supervisor/third_party/hollywood/actor"
)

// harness is a daemon's actor tree on a local engine, with the real CLI
// pointed at a mock model.
type harness struct {
	t      testing.TB
	engine *actor.Engine
	root   *actor.PID
	model  *demomodel.Server
	cfg    *tree // as spawned: defaults filled in
	// panics says the test makes actors panic on purpose: contained
	// panics are then not failures (panic_test.go).
	panics atomic.Bool
}

func newHarness(t testing.TB, mutate func(*tree)) *harness {
	t.Helper()
	bin, err := codexhome.CodexBin()
	if err != nil {
		t.Fatalf("the real codex CLI is required: %v", err)
	}
	model, err := demomodel.Start(demomodel.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { model.Close() })
	e, err := actor.NewEngine(actor.NewEngineConfig())
	if err != nil {
		t.Fatal(err)
	}
	cfg := tree{Config: Config{
		Homes:     t.TempDir(),
		Workspace: t.TempDir(),
		CodexBin:  bin,
		Overrides: codexhome.Overrides(model.URL()),
		StopGrace: time.Second,
	}, Deps: Deps{Logger: testLogger(t)}}
	// Every test of the tree checks that its app-server actors change
	// phase only as the table allows (appphase.go).
	cfg.onPhase = func(c phaseChange) {
		if c.refused {
			t.Errorf("app-server of %s: phase change %s → %s refused", c.user, c.from, c.to)
		}
	}
	if mutate != nil {
		mutate(&cfg)
	}
	tr, root, err := spawnTree(e, cfg)
	if err != nil {
		t.Fatal(err)
	}
	h := &harness{t: t, engine: e, root: root, model: model, cfg: tr}
	// No actor of a test on the real CLI may panic: the guard contains a
	// panic, so only its event shows it.
	watch := e.SpawnFunc(func(c *actor.Context) {
		if p, ok := c.Message().(PanicContained); ok && !h.panics.Load() {
			t.Errorf("an actor panicked (contained): %s", p.PID)
		}
	}, "panic-watch")
	e.Subscribe(watch)
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		<-e.PoisonCtx(ctx, root).Done()
		if ctx.Err() != nil {
			var dump strings.Builder
			_ = pprof.Lookup("goroutine").WriteTo(&dump, 1)
			t.Errorf("stopping the tree timed out; goroutines:\n%s", dump.String())
		}
		e.Unsubscribe(watch)
		<-e.Poison(watch).Done()
		// No round test sees a turn that no round asked for (goals are
		// off); the goal tests turn them on and count them themselves.
		if !tr.Goals {
			for _, action := range []string{"interrupted", "allowed"} {
				if n := testutil.ToFloat64(tr.Metrics.UnaskedTurns.WithLabelValues(action)); n != 0 {
					t.Errorf("%v turns no round asked for (%s)", n, action)
				}
			}
		}
	})
	return h
}

// mustTree is a tree of cfg and deps with their defaults, as SpawnRoot
// makes it.
func mustTree(t testing.TB, cfg Config, deps Deps) *tree {
	t.Helper()
	tr, err := newTree(cfg, deps)
	if err != nil {
		t.Fatal(err)
	}
	return tr
}

// spawnTree spawns a tree of cfg's settings, deps and hooks on e, as
// SpawnRoot does.
func spawnTree(e *actor.Engine, cfg tree) (*tree, *actor.PID, error) {
	t, err := newTree(cfg.Config, cfg.Deps)
	if err != nil {
		return nil, nil, err
	}
	t.hooks = cfg.hooks
	return t, t.spawn(e), nil
}

func testLogger(t testing.TB) *slog.Logger {
	if os.Getenv("TEST_LOG") != "" {
		return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelDebug}))
	}
	return slog.New(slog.DiscardHandler)
}

// caller is a stand-in for a mesh actor: it collects what a round sends.
// sendEncoded sends m from from to to on e, encoded as it crosses the
// wire between members.
func sendEncoded(t *testing.T, e *actor.Engine, to, from *actor.PID, m any) {
	t.Helper()
	env, err := messages.Encode(m)
	if err != nil {
		t.Fatal(err)
	}
	e.SendWithSender(to, env, from)
}

type caller struct {
	pid *actor.PID
	ch  chan any
}

func (h *harness) caller() *caller {
	c := &caller{ch: make(chan any, 4096)}
	c.pid = h.engine.SpawnFunc(func(ctx *actor.Context) {
		switch m := ctx.Message().(type) {
		case actor.Initialized, actor.Started, actor.Stopped:
		default:
			if u, err := messages.Unwrap(m); err == nil {
				c.ch <- u
			} else {
				c.ch <- err
			}
		}
	}, "caller")
	h.t.Cleanup(func() { <-h.engine.Poison(c.pid).Done() })
	return c
}

// roundResult is everything one round sent.
type roundResult struct {
	events  []messages.RoundEvent
	verdict messages.RoundFinished
}

func (r roundResult) text() string {
	var s string
	for _, e := range r.events {
		if e.Kind == messages.KindText {
			s += e.Text
		}
	}
	return s
}

func (r roundResult) kinds(k messages.EventKind) []messages.RoundEvent {
	var out []messages.RoundEvent
	for _, e := range r.events {
		if e.Kind == k {
			out = append(out, e)
		}
	}
	return out
}

// round sends a StartRound and collects its events until the verdict.
func (h *harness) round(c *caller, m messages.StartRound) roundResult {
	h.t.Helper()
	if m.RoundID == "" {
		m.RoundID = "rt-" + time.Now().Format("150405.000000000")
	}
	h.engine.SendWithSender(h.root, m, c.pid)
	return c.collect(h.t, m.RoundID, 90*time.Second)
}

func (c *caller) collect(t testing.TB, roundID string, d time.Duration) roundResult {
	t.Helper()
	var res roundResult
	deadline := time.NewTimer(d)
	defer deadline.Stop()
	for {
		select {
		case m := <-c.ch:
			switch m := m.(type) {
			case messages.RoundEvent:
				if m.RoundID != roundID {
					continue
				}
				if want := uint64(len(res.events) + 1); m.Seq != want {
					t.Errorf("event seq %d, want %d", m.Seq, want)
				}
				res.events = append(res.events, m)
			case messages.RoundFinished:
				if m.RoundID != roundID {
					continue
				}
				res.verdict = m
				return res
			}
		case <-deadline.C:
			t.Fatalf("round %s: no verdict within %v (events so far: %d)", roundID, d, len(res.events))
		}
	}
}
