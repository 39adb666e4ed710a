package actors

import (
	"fmt"
	"log/slog"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/meshweaver/supervisor/messages"
	"github.com/meshweaver/supervisor/testkit/fakeappserver"
)

// TestAppPhaseTransitions tries every change of phase, from every phase to
// every phase: the changes listed here are made, every other is refused
// (not made, and the hook hears it refused). The list is the lifecycle of
// docs/ARCHITECTURE.md; phaseMoves must match it exactly.
func TestAppPhaseTransitions(t *testing.T) {
	allowed := map[[2]appPhase]bool{
		{phaseIdle, phaseBackoff}:      true,
		{phaseIdle, phaseStarting}:     true,
		{phaseBackoff, phaseStarting}:  true,
		{phaseStarting, phaseKeyCheck}: true,
		{phaseStarting, phaseReady}:    true,
		{phaseStarting, phaseIdle}:     true,
		{phaseStarting, phaseCooling}:  true,
		{phaseKeyCheck, phaseReady}:    true,
		{phaseKeyCheck, phaseIdle}:     true,
		{phaseKeyCheck, phaseCooling}:  true,
		{phaseReady, phaseKeyCheck}:    true,
		{phaseReady, phaseIdle}:        true,
		{phaseReady, phaseCooling}:     true,
		{phaseCooling, phaseIdle}:      true,
		{phaseIdle, phaseStopped}:      true,
		{phaseBackoff, phaseStopped}:   true,
		{phaseStarting, phaseStopped}:  true,
		{phaseKeyCheck, phaseStopped}:  true,
		{phaseReady, phaseStopped}:     true,
		{phaseCooling, phaseStopped}:   true,
	}
	if len(phaseMoves) != len(allowed) {
		t.Errorf("phaseMoves has %d changes, want %d", len(phaseMoves), len(allowed))
	}
	for from := range numPhases {
		for to := range numPhases {
			want := allowed[[2]appPhase{from, to}]
			t.Run(fmt.Sprintf("%s→%s", from, to), func(t *testing.T) {
				var heard []phaseChange
				cfg := &tree{hooks: hooks{onPhase: func(c phaseChange) { heard = append(heard, c) }}}
				a := &appServerActor{appWiring: appWiring{cfg: cfg, user: "u", log: slog.New(slog.DiscardHandler)}, phase: from}
				if got := a.enter(to); got != want {
					t.Errorf("enter = %v, want %v", got, want)
				}
				wantPhase := from
				if want {
					wantPhase = to
				}
				if a.phase != wantPhase {
					t.Errorf("phase after = %s, want %s", a.phase, wantPhase)
				}
				if w := []phaseChange{{user: "u", from: from, to: to, refused: !want}}; !slices.Equal(heard, w) {
					t.Errorf("hook heard %+v, want %+v", heard, w)
				}
			})
		}
	}
	names := map[string]bool{}
	for p := range numPhases {
		if s := p.String(); strings.HasPrefix(s, "phase(") || names[s] {
			t.Errorf("phase %d is named %q", p, s)
		}
		names[p.String()] = true
	}
}

// appPhaseLog records the phase changes of a tree's app-server actors (the
// Config.onPhase hook), for tests to wait on and check.
type appPhaseLog struct {
	mu      sync.Mutex
	changes []phaseChange
	changed chan struct{} // closed and replaced on every change
}

// withPhases records the phase changes into the returned log, after the
// hook newHarness set (which fails the test on a refused change).
func withPhases() (func(*tree), *appPhaseLog) {
	l := &appPhaseLog{changed: make(chan struct{})}
	return func(c *tree) {
		prev := c.onPhase
		c.onPhase = func(pc phaseChange) {
			if prev != nil {
				prev(pc)
			}
			l.mu.Lock()
			defer l.mu.Unlock()
			l.changes = append(l.changes, pc)
			close(l.changed)
			l.changed = make(chan struct{})
		}
	}, l
}

// of is the phases user's app-server actor went through, from its first
// (idle) on; refused changes are left out.
func (l *appPhaseLog) of(user string) []appPhase {
	l.mu.Lock()
	defer l.mu.Unlock()
	out := []appPhase{phaseIdle}
	for _, c := range l.changes {
		if c.user == user && !c.refused {
			out = append(out, c.to)
		}
	}
	return out
}

// wait waits until the phases of user's app-server actor satisfy done.
func (l *appPhaseLog) wait(t testing.TB, user, what string, done func([]appPhase) bool) []appPhase {
	t.Helper()
	deadline := time.NewTimer(waitFor)
	defer deadline.Stop()
	for {
		l.mu.Lock()
		ch := l.changed
		l.mu.Unlock()
		if ps := l.of(user); done(ps) {
			return ps
		}
		select {
		case <-ch:
		case <-deadline.C:
			t.Fatalf("%s's app-server: %s not within %v; phases %v", user, what, waitFor, l.of(user))
		}
	}
}

// reaches is a wait condition: the lifecycle has n phases at least and
// the last is p.
func reaches(n int, p appPhase) func([]appPhase) bool {
	return func(ps []appPhase) bool { return len(lifecycle(ps)) >= n && ps[len(ps)-1] == p }
}

// lifecycle is ps without the key checks of commands on a running process
// (ready → key-check → ready, once per command): what is left is the
// process's starts and ends.
func lifecycle(ps []appPhase) []appPhase {
	var out []appPhase
	for i, p := range ps {
		if p == phaseKeyCheck && i > 0 && ps[i-1] == phaseReady {
			continue
		}
		if p == phaseReady && len(out) > 0 && out[len(out)-1] == phaseReady {
			continue
		}
		out = append(out, p)
	}
	return out
}

func checkPhases(t testing.TB, got []appPhase, want ...appPhase) {
	t.Helper()
	t.Logf("phases %v", got)
	if !slices.Equal(lifecycle(got), want) {
		t.Errorf("phases %v (lifecycle %v), want %v", got, lifecycle(got), want)
	}
}

// A first round starts the app-server: idle, starting, the key check,
// ready; each command on it checks the key again.
func TestAppPhasesFirstStart(t *testing.T) {
	rec, phases := withPhases()
	h := supHarness(t, withFake(t, fakeappserver.Config{}), rec)
	c := h.caller()
	mustStatus(t, h.round(c, messages.StartRound{User: "alice", Thread: "mesh/p", Text: "hi"}), messages.StatusCompleted)
	got := phases.of("alice")
	checkPhases(t, got, phaseIdle, phaseStarting, phaseKeyCheck, phaseReady)
	if got[len(got)-1] != phaseReady {
		t.Errorf("phases %v: not ready after the round", got)
	}
}

// A death at turn/start leaves the actor idle; the next round restarts
// the app-server after a backoff.
func TestAppPhasesCrashThenBackoff(t *testing.T) {
	rec, phases := withPhases()
	h := supHarness(t, withFake(t, fakeappserver.Config{ExitOnMethod: "turn/start", ExitCode: 3}), rec,
		func(c *tree) { c.RestartBackoff = 50 * time.Millisecond })
	c := h.caller()
	mustStatus(t, h.round(c, messages.StartRound{User: "bob", Thread: "mesh/p", Text: "one", RoundID: "pc-1"}), messages.StatusFailed)
	phases.wait(t, "bob", "idle after the death", reaches(5, phaseIdle))
	mustStatus(t, h.round(c, messages.StartRound{User: "bob", Thread: "mesh/p", Text: "two", RoundID: "pc-2"}), messages.StatusFailed)
	got := phases.wait(t, "bob", "idle after the second death", reaches(10, phaseIdle))
	checkPhases(t, got,
		phaseIdle, phaseStarting, phaseKeyCheck, phaseReady, phaseIdle, // died at turn/start
		phaseBackoff, phaseStarting, phaseKeyCheck, phaseReady, phaseIdle) // restarted after a backoff, died again
}

// A start that fails at every try reaches the restart limit: the user
// cools down, and a round in the cool-down is refused without a start.
func TestAppPhasesRestartLimitCooling(t *testing.T) {
	rec, phases := withPhases()
	h := supHarness(t, rec, func(c *tree) {
		c.CodexBin = filepath.Join(t.TempDir(), "no-such-codex")
		c.RestartLimit = 2
		c.RestartWindow = time.Minute
		c.RestartBackoff = 20 * time.Millisecond
		c.Cooldown = time.Minute
	})
	c := h.caller()
	for i := range 3 {
		r := h.round(c, messages.StartRound{User: "carol", Thread: "mesh/p", Text: "hi", RoundID: fmt.Sprintf("pl-%d", i)})
		mustStatus(t, r, messages.StatusUnavailable)
		if cooling := strings.Contains(r.verdict.Error, "cooling down"); cooling != (i == 2) {
			t.Errorf("round %d: %q", i, r.verdict.Error)
		}
	}
	checkPhases(t, phases.of("carol"),
		phaseIdle, phaseStarting, phaseIdle, // the first start failed
		phaseBackoff, phaseStarting, phaseCooling) // the second, at the limit; the third round started nothing
}

// An app-server idle for IdleTimeout is stopped: ready, then idle.
func TestAppPhasesIdleStop(t *testing.T) {
	rec, phases := withPhases()
	h := supHarness(t, withFake(t, fakeappserver.Config{}), rec, func(c *tree) { c.IdleTimeout = 200 * time.Millisecond })
	c := h.caller()
	mustStatus(t, h.round(c, messages.StartRound{User: "dan", Thread: "mesh/p", Text: "hi"}), messages.StatusCompleted)
	got := phases.wait(t, "dan", "the idle stop", reaches(5, phaseIdle))
	checkPhases(t, got, phaseIdle, phaseStarting, phaseKeyCheck, phaseReady, phaseIdle)
}
