package actors

import (
	"log/slog"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/meshweaver/supervisor/third_party/hollywood/actor"

	"github.com/meshweaver/supervisor/messages"
	"github.com/meshweaver/supervisor/testkit/fakeappserver"
)

// Panics.

// eventProbe records the engine's actor lifecycle events.
type eventProbe struct {
	mu        sync.Mutex
	restarted []actor.ActorRestartedEvent
	maxed     []actor.ActorMaxRestartsExceededEvent
}

func (p *eventProbe) spawn(t *testing.T, e *actor.Engine) {
	pid := e.SpawnFunc(func(c *actor.Context) {
		p.mu.Lock()
		defer p.mu.Unlock()
		switch m := c.Message().(type) {
		case actor.ActorRestartedEvent:
			p.restarted = append(p.restarted, m)
		case actor.ActorMaxRestartsExceededEvent:
			p.maxed = append(p.maxed, m)
		}
	}, "probe")
	e.Subscribe(pid)
	t.Cleanup(func() {
		e.Unsubscribe(pid)
		<-e.Poison(pid).Done()
	})
}

func (p *eventProbe) check(t *testing.T) {
	t.Helper()
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, ev := range p.restarted {
		t.Errorf("hollywood restarted %s after a panic: %v", ev.PID, ev.Reason)
	}
	for _, ev := range p.maxed {
		t.Errorf("hollywood gave up on %s after its restarts", ev.PID)
	}
}

// TestSupervisionGuardNeverRestarts: an actor spawned with spawnOpts keeps
// running, with its state, through more panics than hollywood's default
// restart limit, and hollywood's restart path is never taken.
func TestSupervisionGuardNeverRestarts(t *testing.T) {
	e, err := actor.NewEngine(actor.NewEngineConfig())
	if err != nil {
		t.Fatal(err)
	}
	probe := &eventProbe{}
	probe.spawn(t, e)
	var started, panics atomic.Int32
	pong := make(chan int, 1)
	count := 0
	pid := e.Spawn(func() actor.Receiver {
		return actorFunc(func(c *actor.Context) {
			switch m := c.Message().(type) {
			case actor.Started:
				started.Add(1)
			case string:
				if m == "boom" {
					count++
					var nilMap map[string]*int
					_ = *nilMap["x"] // a nil pointer dereference
				}
				pong <- count
			}
		})
	}, "tiny", spawnOpts("one", slog.New(slog.DiscardHandler), func(*actor.Context, any) { panics.Add(1) })...)
	for range 10 {
		e.Send(pid, "boom")
	}
	e.Send(pid, "ping")
	select {
	case n := <-pong:
		if n != 10 {
			t.Errorf("state after 10 panics: %d, want 10 (the receiver was replaced)", n)
		}
	case <-time.After(waitFor):
		t.Fatal("the actor stopped answering after panics")
	}
	if started.Load() != 1 || panics.Load() != 10 {
		t.Errorf("started %d times, %d panics seen by onPanic; want 1 and 10", started.Load(), panics.Load())
	}
	<-e.Poison(pid).Done()
	probe.check(t)
}

type actorFunc func(*actor.Context)

func (f actorFunc) Receive(c *actor.Context) { f(c) }

// TestSupervisionPanicContained: panics in one user's codex and login
// actors are contained: hollywood restarts nothing, that user's next round
// still works, another user is untouched, the daemon goes on.
func TestSupervisionPanicContained(t *testing.T) {
	h := supHarness(t, heldFake(t, fakeappserver.Config{}))
	h.panics.Store(true)
	events := tapEvents(t, h.engine)
	probe := &eventProbe{}
	probe.spawn(t, h.engine)
	c := h.caller()
	r := h.heldRound(c, messages.StartRound{User: "alice", Thread: "mesh/p", Text: "one"})
	alicePID := liveAppServerPID(t, h, "alice")

	from := events.mark()
	codex := h.childPID("user/alice/codex/main")
	login := h.childPID("user/alice/login/main")
	for range 5 {
		// A server request without a request: the codex actor dereferences nil.
		h.engine.Send(codex, codexServerRequest{reply: make(chan serverAnswer, 1)})
		// An account notification without a notification: the login actor does.
		h.engine.Send(login, accountNote{})
	}
	waitEventN[PanicContained](t, events, from, 10, waitFor, "of ten contained panics")

	h.heldRound(c, messages.StartRound{User: "bob", Thread: "mesh/p", Text: "two"})
	r2 := h.heldRound(c, messages.StartRound{User: "alice", Thread: "mesh/p", Text: "three"})
	if !r2.verdict.Resumed || r2.verdict.CodexThreadID != r.verdict.CodexThreadID {
		t.Errorf("alice's round after the panics did not resume: %+v", r2.verdict)
	}
	if got := liveAppServerPID(t, h, "alice"); got != alicePID {
		t.Errorf("alice's app-server changed from %d to %d: the panics cost her the process", alicePID, got)
	}
	probe.check(t)
}

// TestSupervisionRoundPanicGivesVerdictAndInterruptsTurn: a panic in a
// round actor gives the caller a failed verdict naming an internal error,
// and the turn that round was running is interrupted, so that the thread
// is not left with a turn nobody follows.
func TestSupervisionRoundPanicGivesVerdictAndInterruptsTurn(t *testing.T) {
	record := filepath.Join(t.TempDir(), "record.jsonl")
	h := supHarness(t, withFake(t, fakeappserver.Config{HoldTurns: true, RecordPath: record}))
	h.panics.Store(true)
	probe := &eventProbe{}
	probe.spawn(t, h.engine)
	c := h.caller()
	h.roundAsync(c, messages.StartRound{User: "alice", Thread: "mesh/rp", Text: "hold", RoundID: "rp-1"})
	c.waitFirstEvent(t, "rp-1", waitFor)
	// A routed notification without a notification: the mapper dereferences nil.
	h.engine.Send(h.childPID("user/alice/log/r1/round/r1"), roundNote{})
	r := c.collect(t, "rp-1", waitFor)
	mustStatus(t, r, messages.StatusFailed)
	if !strings.Contains(r.verdict.Error, "internal error") {
		t.Errorf("verdict error %q does not name an internal error", r.verdict.Error)
	}
	probe.check(t)
	// The held turn must not outlive its round. The interrupt reaches the
	// fake's record file a moment after the verdict (seconds, on a loaded
	// machine); a turn nobody interrupts is held for ever.
	poll(t, waitFor, "a turn/interrupt in the fake's record: the round that panicked must not leave its "+
		"turn running in the app-server (roundPanicked interrupts it before it finishes the round)",
		func() bool { return countMethod(recordedRequests(t, record), "turn/interrupt") > 0 })
}
