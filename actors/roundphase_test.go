package actors

import (
	"context"
	"encoding/json"
	"log/slog"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/meshweaver/supervisor/codexproto"
	"github.com/meshweaver/supervisor/codexrpc"
	"github.com/meshweaver/supervisor/messages"
	"github.com/meshweaver/supervisor/store"
	"github.com/meshweaver/supervisor/testkit/fakeappserver"
	"github.com/meshweaver/supervisor/third_party/hollywood/actor"
)

// allPhases is every roundPhase, in order.
func allPhases() []roundPhase {
	var out []roundPhase
	for p := phaseNew; p <= phaseConcluded; p++ {
		out = append(out, p)
	}
	return out
}

// errorCount is a slog handler that counts the records at Error.
type errorCount struct {
	mu sync.Mutex
	n  int
}

func (h *errorCount) Enabled(context.Context, slog.Level) bool { return true }
func (h *errorCount) Handle(_ context.Context, r slog.Record) error {
	if r.Level >= slog.LevelError {
		h.mu.Lock()
		h.n++
		h.mu.Unlock()
	}
	return nil
}
func (h *errorCount) WithAttrs([]slog.Attr) slog.Handler { return h }
func (h *errorCount) WithGroup(string) slog.Handler      { return h }

// TestRoundPhaseTransitions: every (from, to) pair of phases, each one
// the table allows accepted by enter (and heard by the hook), each other
// one refused: logged at Error, the phase left as it was.
func TestRoundPhaseTransitions(t *testing.T) {
	allowed := map[roundPhase][]roundPhase{
		phaseNew:          {phaseLookup},
		phaseLookup:       {phaseResume, phaseFresh, phaseSaving},
		phaseResume:       {phaseTurnStart, phaseFallBack, phaseSaving},
		phaseFallBack:     {phaseFresh, phaseSaving},
		phaseFresh:        {phaseTurnStart, phaseSaving},
		phaseTurnStart:    {phaseRunning, phaseSaving},
		phaseRunning:      {phaseInterrupting, phaseSaving},
		phaseInterrupting: {phaseSaving},
		phaseSaving:       {phaseConcluded},
		phaseConcluded:    nil,
	}
	names := map[string]roundPhase{}
	for _, p := range allPhases() {
		name := p.String()
		if strings.HasPrefix(name, "phase(") {
			t.Errorf("phase %d has no name", p)
		}
		if q, dup := names[name]; dup {
			t.Errorf("phases %d and %d are both %q", q, p, name)
		}
		names[name] = p
	}
	if got := (phaseConcluded + 1).String(); got != "phase(10)" {
		t.Errorf("a phase past the last is %q", got)
	}
	n := 0
	for _, from := range allPhases() {
		for _, to := range allPhases() {
			want := slices.Contains(allowed[from], to)
			if want {
				n++
			}
			errs := &errorCount{}
			var heard []roundPhase
			cfg := &tree{hooks: hooks{roundPhases: func(id string, p roundPhase) {
				if id != "r-table" {
					t.Errorf("hook heard round %q", id)
				}
				heard = append(heard, p)
			}}}
			r := &roundActor{roundWiring: roundWiring{cfg: cfg, log: slog.New(errs)},
				req: roundRequest{StartRound: messages.StartRound{RoundID: "r-table"}}, phase: from}
			ok := r.enter(to)
			switch {
			case ok != want:
				t.Errorf("%s → %s: enter said %v, want %v", from, to, ok, want)
			case want && (r.phase != to || !slices.Equal(heard, []roundPhase{to}) || errs.n != 0):
				t.Errorf("%s → %s accepted: phase %s, hook heard %v, %d errors logged; want %s, [%s], none",
					from, to, r.phase, heard, errs.n, to, to)
			case !want && (r.phase != from || len(heard) != 0 || errs.n != 1):
				t.Errorf("%s → %s refused: phase %s, hook heard %v, %d errors logged; want %s, nothing, one",
					from, to, r.phase, heard, errs.n, from)
			}
		}
	}
	if n != 17 {
		t.Errorf("the test's table has %d changes, want 17", n)
	}
	// The table in the code is the test's, no more, no less.
	for _, from := range allPhases() {
		if got := from.next(); !slices.Equal(got, allowed[from]) {
			t.Errorf("%s.next() = %v, want %v", from, got, allowed[from])
		}
	}
	for _, p := range allPhases() {
		if got, want := p.decided(), p == phaseSaving || p == phaseConcluded; got != want {
			t.Errorf("%s.decided() = %v, want %v", p, got, want)
		}
	}
}

// roundPhaseLog records the phases each round of a tree enters, through
// Config.roundPhases.
type roundPhaseLog struct {
	mu     sync.Mutex
	rounds map[string][]roundPhase
}

func (pl *roundPhaseLog) hook(c *tree) {
	c.roundPhases = func(id string, p roundPhase) {
		pl.mu.Lock()
		defer pl.mu.Unlock()
		if pl.rounds == nil {
			pl.rounds = map[string][]roundPhase{}
		}
		pl.rounds[id] = append(pl.rounds[id], p)
	}
}

// check compares the phases round id went through (all of them: the
// round concluded before its verdict came) with want.
func (pl *roundPhaseLog) check(t *testing.T, what, id string, want ...roundPhase) {
	t.Helper()
	pl.mu.Lock()
	got := slices.Clone(pl.rounds[id])
	pl.mu.Unlock()
	if !slices.Equal(got, want) {
		t.Errorf("%s (round %s) went through %v, want %v", what, id, got, want)
	}
}

// Rounds on the fake app-server, and the phases each went through: a
// fresh thread, then a warm one (no resume), then one resumed (other
// developer instructions reload the thread), then a refused resume that
// falls back to a fresh thread seeded with the journal.
func TestRoundPhasesFreshWarmResumedFallBack(t *testing.T) {
	record := filepath.Join(t.TempDir(), "received.jsonl")
	var pl roundPhaseLog
	h := supHarness(t, withFake(t, fakeappserver.Config{RecordPath: record}), pl.hook)
	c := h.caller()
	const key = "mesh/phases"
	run := func(id, instructions string) roundResult {
		t.Helper()
		r := h.round(c, messages.StartRound{User: "pia", Thread: key, Text: "say " + id, RoundID: id,
			DeveloperInstructions: instructions})
		mustStatus(t, r, messages.StatusCompleted)
		return r
	}
	opened := func(fresh bool) []roundPhase {
		open := phaseResume
		if fresh {
			open = phaseFresh
		}
		return []roundPhase{phaseLookup, open, phaseTurnStart, phaseRunning, phaseSaving, phaseConcluded}
	}

	r1 := run("ph-fresh", "be brief")
	pl.check(t, "a fresh thread", "ph-fresh", opened(true)...)

	r2 := run("ph-warm", "be brief")
	pl.check(t, "a warm thread", "ph-warm", opened(false)...)
	if n := countMethod(recordedRequests(t, record), "thread/resume"); n != 0 || !r2.verdict.Resumed ||
		r2.verdict.CodexThreadID != r1.verdict.CodexThreadID {
		t.Errorf("warm round: %d thread/resume calls, verdict %+v; want none, the first round's thread", n, r2.verdict)
	}

	r3 := run("ph-resumed", "be verbose")
	pl.check(t, "a resumed thread", "ph-resumed", opened(false)...)
	if n := countMethod(recordedRequests(t, record), "thread/resume"); n != 1 || !r3.verdict.Resumed ||
		r3.verdict.CodexThreadID != r1.verdict.CodexThreadID {
		t.Errorf("resumed round: %d thread/resume calls, verdict %+v; want one, the first round's thread", n, r3.verdict)
	}

	// A record of a thread the CLI does not know (its rollout lost).
	reg := store.NewRegistry(filepath.Dir(userHome(t, h, "pia")))
	if err := reg.Record(key, "0199a0a0-0000-7000-8000-000000000000"); err != nil {
		t.Fatal(err)
	}
	r4 := run("ph-fellback", "be verbose")
	pl.check(t, "a refused resume", "ph-fellback", phaseLookup, phaseResume, phaseFallBack, phaseFresh,
		phaseTurnStart, phaseRunning, phaseSaving, phaseConcluded)
	if !r4.verdict.FellBack || r4.verdict.Resumed || r4.verdict.CodexThreadID == r1.verdict.CodexThreadID {
		t.Errorf("fallback round: verdict %+v, want a fresh thread that fell back", r4.verdict)
	}
	if got := lastTurnText(t, record); !strings.Contains(got, "say ph-fresh") {
		t.Errorf("the fallback thread was not seeded with the journal: %q", got)
	}
}

// An interrupted round: its turn running, the caller's interrupt, the
// turn's end.
func TestRoundPhasesInterrupted(t *testing.T) {
	var pl roundPhaseLog
	h := supHarness(t, heldFake(t, fakeappserver.Config{}), pl.hook)
	c := h.caller()
	h.heldRound(c, messages.StartRound{User: "ivo", Thread: "mesh/int", Text: "hold", RoundID: "ph-int"})
	pl.check(t, "an interrupted round", "ph-int", phaseLookup, phaseFresh, phaseTurnStart, phaseRunning,
		phaseInterrupting, phaseSaving, phaseConcluded)
}

// Rounds whose app-server dies: while the turn runs (SIGKILL), and at
// turn/start (the turn never has an id).
func TestRoundPhasesAppServerDies(t *testing.T) {
	t.Run("running", func(t *testing.T) {
		var pl roundPhaseLog
		h := supHarness(t, heldFake(t, fakeappserver.Config{}), pl.hook)
		c := h.caller()
		h.roundAsync(c, messages.StartRound{User: "kit", Thread: "mesh/die", Text: "hold", RoundID: "ph-die"})
		c.waitFirstEvent(t, "ph-die", waitFor)
		if err := syscall.Kill(liveAppServerPID(t, h, "kit"), syscall.SIGKILL); err != nil {
			t.Fatal(err)
		}
		r := c.collect(t, "ph-die", waitFor)
		mustStatus(t, r, messages.StatusFailed)
		pl.check(t, "a round whose app-server died", "ph-die", phaseLookup, phaseFresh, phaseTurnStart,
			phaseRunning, phaseSaving, phaseConcluded)
	})
	t.Run("turn start", func(t *testing.T) {
		var pl roundPhaseLog
		h := supHarness(t, withFake(t, fakeappserver.Config{ExitOnMethod: "turn/start", ExitCode: 3}), pl.hook)
		c := h.caller()
		r := h.round(c, messages.StartRound{User: "kit", Thread: "mesh/die", Text: "hi", RoundID: "ph-die-start"})
		mustStatus(t, r, messages.StatusFailed)
		pl.check(t, "a round whose app-server died at turn/start", "ph-die-start", phaseLookup, phaseFresh,
			phaseTurnStart, phaseSaving, phaseConcluded)
	})
}

// stubPhaseRound runs one round among stand-ins: one actor (hub) is its
// parent, its caller and its app-server actor, which opens a fresh thread
// (after onOpen) and hands turn/start to onTurnStart. It returns the
// verdict and the phases the round went through.
func stubPhaseRound(t *testing.T, onOpen func(c *actor.Context, m openThread),
	onTurnStart func(c *actor.Context, m appCall)) (messages.RoundFinished, []roundPhase) {
	t.Helper()
	cfg, e := stubEngine(t)
	var pl roundPhaseLog
	pl.hook(cfg)
	registry := stubRegistry(e, nil)
	verdicts := make(chan messages.RoundFinished, 1)
	hub := e.SpawnFunc(func(c *actor.Context) {
		switch m := c.Message().(type) {
		case actor.Started:
			req := roundRequest{StartRound: messages.StartRound{User: "alice", Thread: "mesh/stub", Text: "hi", RoundID: "stub-1"},
				replyTo: c.PID()}
			c.SpawnChild(newRoundActor(cfg, req, c.PID(), registry), "round", spawnOpts("r1", cfg.Logger, roundPanicked)...)
		case openThread:
			if onOpen != nil {
				onOpen(c, m)
			}
			c.Send(m.round, threadOpenResult{threadID: stubThread})
		case appCall:
			switch m.method {
			case codexproto.MethodTurnStart:
				onTurnStart(c, m)
			case codexproto.MethodTurnInterrupt:
				c.Send(m.to, appAnswer{tag: m.tag, result: json.RawMessage(`{}`)})
				c.Send(m.to, stubTurnNote(codexproto.NoteTurnCompleted, "interrupted"))
			}
		case messages.RoundFinished:
			verdicts <- m
		}
	}, "hub")
	t.Cleanup(func() {
		<-e.Poison(hub).Done()
		<-e.Poison(registry).Done()
	})
	select {
	case v := <-verdicts:
		pl.mu.Lock()
		defer pl.mu.Unlock()
		return v, pl.rounds["stub-1"]
	case <-time.After(waitFor):
		t.Fatal("no verdict")
		return messages.RoundFinished{}, nil
	}
}

const stubThread, stubTurn = "0199a0a0-0000-7000-8000-0000000000e0", "0199a0a0-0000-7000-8000-0000000000e1"

// stubTurnNote is a turn notification of the stub's turn.
func stubTurnNote(method, status string) roundNote {
	params, _ := json.Marshal(map[string]any{"threadId": stubThread,
		"turn": map[string]any{"id": stubTurn, "status": status, "items": []any{}}})
	return roundNote{note: &codexrpc.Notification{Method: method, Params: params}}
}

// stubTurnAnswer answers the stub's turn/start.
func stubTurnAnswer(m appCall) appAnswer {
	return appAnswer{tag: m.tag, result: json.RawMessage(`{"turn":{"id":"` + stubTurn + `","status":"inProgress","items":[]}}`)}
}

// An interrupt asked while the thread opens is owed, not a phase: the
// round goes on opening and starting the turn, and interrupts it as soon
// as the turn has an id.
func TestRoundPhasesInterruptOwed(t *testing.T) {
	v, got := stubPhaseRound(t, func(c *actor.Context, m openThread) {
		c.Engine().SendWithSender(m.round, messages.InterruptRound{RoundID: "stub-1"}, c.PID())
	}, func(c *actor.Context, m appCall) {
		c.Send(m.to, stubTurnAnswer(m))
	})
	if v.Status != messages.StatusInterrupted {
		t.Errorf("verdict %+v, want interrupted", v)
	}
	if want := []roundPhase{phaseLookup, phaseFresh, phaseTurnStart, phaseRunning, phaseInterrupting, phaseSaving,
		phaseConcluded}; !slices.Equal(got, want) {
		t.Errorf("the round went through %v, want %v", got, want)
	}
}

// The turn learns its id from turn/started before turn/start's answer
// (running comes from the notification); a turn that ends before it has
// any id goes from turnstart to saving, and its verdict waits for
// turn/start's answer.
func TestRoundPhasesTurnIDOrder(t *testing.T) {
	t.Run("turn/started first", func(t *testing.T) {
		v, got := stubPhaseRound(t, nil, func(c *actor.Context, m appCall) {
			c.Send(m.to, stubTurnNote(codexproto.NoteTurnStarted, "inProgress"))
			c.Send(m.to, stubTurnNote(codexproto.NoteTurnCompleted, "completed"))
			c.Send(m.to, stubTurnAnswer(m))
		})
		if v.Status != messages.StatusCompleted || v.CodexThreadID != stubThread {
			t.Errorf("verdict %+v, want completed on %s", v, stubThread)
		}
		if want := []roundPhase{phaseLookup, phaseFresh, phaseTurnStart, phaseRunning, phaseSaving,
			phaseConcluded}; !slices.Equal(got, want) {
			t.Errorf("the round went through %v, want %v", got, want)
		}
	})
	t.Run("end before any id", func(t *testing.T) {
		v, got := stubPhaseRound(t, nil, func(c *actor.Context, m appCall) {
			c.Send(m.to, stubTurnNote(codexproto.NoteTurnCompleted, "completed"))
			c.Send(m.to, stubTurnAnswer(m))
		})
		if v.Status != messages.StatusCompleted || v.NotSaved != "" {
			t.Errorf("verdict %+v, want completed, everything saved", v)
		}
		if want := []roundPhase{phaseLookup, phaseFresh, phaseTurnStart, phaseSaving,
			phaseConcluded}; !slices.Equal(got, want) {
			t.Errorf("the round went through %v, want %v", got, want)
		}
	})
}
