package actors

import (
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/meshweaver/supervisor/messages"
	"github.com/meshweaver/supervisor/testkit/fakeappserver"
)

// One row per rule of the restart policy, at explicit times: deaths count
// within the window, the backoff doubles per counted death between base and
// most with its jitter added to half of it, limit deaths start a cool-down
// that holds until its end, and the count then starts over.
func TestRestartPolicyTable(t *testing.T) {
	t0 := time.Date(2026, 12, 3, 7, 0, 0, 0, time.UTC)
	at := func(s float64) time.Time { return t0.Add(time.Duration(s * float64(time.Second))) }
	none := func(time.Duration) time.Duration { return 0 }
	full := func(k time.Duration) time.Duration { return k }
	for _, tt := range []struct {
		name        string
		deaths      []float64 // seconds after t0, in order
		now         float64
		jitter      func(time.Duration) time.Duration
		wantBackoff time.Duration
		wantCooling bool
		wantUntil   float64 // seconds after t0, when cooling
		coolsAt     int     // the death (1-based) that starts a cool-down; 0: none
	}{
		{name: "clean history", now: 0, jitter: full, wantBackoff: 0},
		{name: "one death, no jitter", deaths: []float64{0}, now: 1, jitter: none, wantBackoff: 50 * time.Millisecond},
		{name: "one death, full jitter", deaths: []float64{0}, now: 1, jitter: full, wantBackoff: 100 * time.Millisecond},
		{name: "two deaths double", deaths: []float64{0, 1}, now: 2, jitter: full, wantBackoff: 200 * time.Millisecond},
		{name: "four deaths reach the cap", deaths: []float64{0, 1, 2, 3}, now: 4, jitter: full, wantBackoff: 800 * time.Millisecond},
		{name: "capped", deaths: []float64{0, 1, 2, 3}, now: 4, jitter: none, wantBackoff: 400 * time.Millisecond},
		{name: "a death leaves the window", deaths: []float64{0, 30}, now: 60, jitter: full, wantBackoff: 100 * time.Millisecond},
		{name: "all deaths left the window", deaths: []float64{0, 1}, now: 62, jitter: full, wantBackoff: 0},
		{name: "old deaths are not counted toward the limit", deaths: []float64{0, 1, 2, 3, 70}, now: 71, jitter: none, wantBackoff: 50 * time.Millisecond},
		{name: "limit within the window cools down", deaths: []float64{0, 1, 2, 3, 4}, now: 5, jitter: full, wantCooling: true, wantUntil: 34, coolsAt: 5},
		{name: "cool-down holds to its end", deaths: []float64{0, 1, 2, 3, 4}, now: 33.9, jitter: full, wantCooling: true, wantUntil: 34, coolsAt: 5},
		{name: "after the cool-down the count starts over", deaths: []float64{0, 1, 2, 3, 4}, now: 34, jitter: full, wantBackoff: 0, coolsAt: 5},
		{name: "a death after the cool-down counts alone", deaths: []float64{0, 1, 2, 3, 4, 35}, now: 36, jitter: full, wantBackoff: 100 * time.Millisecond, coolsAt: 5},
	} {
		t.Run(tt.name, func(t *testing.T) {
			p := restartPolicy{limit: 5, window: time.Minute, cooldown: 30 * time.Second,
				base: 100 * time.Millisecond, most: 800 * time.Millisecond}
			for i, d := range tt.deaths {
				started := p.crashed(at(d))
				if wantStart := i+1 == tt.coolsAt; started != wantStart {
					t.Errorf("death %d at %vs: cool-down started %v, want %v", i+1, d, started, wantStart)
				}
			}
			until, cooling := p.cooling(at(tt.now))
			if cooling != tt.wantCooling || (cooling && !until.Equal(at(tt.wantUntil))) {
				t.Errorf("cooling at %vs = %v until %v, want %v until %v", tt.now, cooling, until, tt.wantCooling, at(tt.wantUntil))
			}
			if cooling {
				return
			}
			if got := p.backoff(at(tt.now), tt.jitter); got != tt.wantBackoff {
				t.Errorf("backoff at %vs = %v, want %v", tt.now, got, tt.wantBackoff)
			}
		})
	}
}

// Restart policy.

// TestRestartBackoffJitteredExponential checks the backoff itself: none
// after a clean history, then a uniformly jittered [d/2, d] with d doubling
// per recent crash, capped, and crashes older than the window not counted.
func TestRestartBackoffJitteredExponential(t *testing.T) {
	cfg := &tree{Config: Config{RestartBackoff: 100 * time.Millisecond, RestartBackoffMax: time.Second,
		RestartWindow: time.Minute, RestartLimit: 100, Cooldown: time.Minute}, Deps: Deps{Logger: slog.New(slog.DiscardHandler)}}
	a := &appServerActor{appWiring: appWiring{cfg: cfg, log: cfg.Logger}, restarts: appRestarts{restartPolicy: newRestartPolicy(cfg)}}
	if d := a.backoff(); d != 0 {
		t.Fatalf("backoff with no crash = %v, want 0", d)
	}
	now := time.Now()
	for n, want := range map[int]time.Duration{1: 100 * time.Millisecond, 2: 200 * time.Millisecond,
		3: 400 * time.Millisecond, 4: 800 * time.Millisecond, 5: time.Second, 12: time.Second} {
		a.restarts.crashes = nil
		for range n {
			a.restarts.crashes = append(a.restarts.crashes, now)
		}
		seen := map[time.Duration]bool{}
		for range 200 {
			d := a.backoff()
			if d < want/2 || d > want {
				t.Fatalf("%d crashes: backoff %v outside [%v, %v]", n, d, want/2, want)
			}
			seen[d] = true
		}
		if len(seen) < 10 {
			t.Errorf("%d crashes: only %d distinct backoffs in 200: not jittered", n, len(seen))
		}
	}
	// Old crashes are forgotten, by backoff and by the counter.
	a.restarts.crashes = []time.Time{now.Add(-2 * time.Minute), now.Add(-90 * time.Second)}
	if d := a.backoff(); d != 0 {
		t.Errorf("backoff after crashes outside the window = %v, want 0", d)
	}
	a.restarts.limit = 3
	a.crashed()
	if len(a.restarts.crashes) != 1 || !a.restarts.coolUntil.IsZero() {
		t.Errorf("after forgetting two old crashes and counting one: crashes=%d coolUntil=%v", len(a.restarts.crashes), a.restarts.coolUntil)
	}
	a.crashed()
	a.crashed()
	if a.restarts.coolUntil.Before(time.Now().Add(59 * time.Second)) {
		t.Errorf("three crashes within the window did not start a cool-down: %v", a.restarts.coolUntil)
	}
}

// healableFake runs, through a launcher script, the fake with config bad
// until heal is called and with good afterwards.
func healableFake(t *testing.T, bad, good fakeappserver.Config) (mutate func(*tree), heal func()) {
	t.Helper()
	lb, err := fakeappserver.Relaunch(bad, "")
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	flag := filepath.Join(dir, "healed")
	script := filepath.Join(dir, "codex")
	body := "#!/bin/sh\nif [ -e '" + flag + "' ]; then FAKE_APPSERVER_CONFIG=\"$FAKE_GOOD_CONFIG\"; export FAKE_APPSERVER_CONFIG; fi\nexec '" + lb.Path + "' \"$@\"\n"
	if err := os.WriteFile(script, []byte(body), 0o755); err != nil {
		t.Fatal(err)
	}
	goodEnv := strings.TrimPrefix(fakeappserver.Env(good), fakeappserver.EnvVar+"=")
	return func(c *tree) {
			c.CodexBin, c.CodexArgs = script, lb.Args
			c.CodexEnv = append(c.CodexEnv, append(lb.Env, "FAKE_GOOD_CONFIG="+goodEnv)...)
		}, func() {
			if err := os.WriteFile(flag, nil, 0o600); err != nil {
				t.Fatal(err)
			}
		}
}

// TestRestartPolicyBackoffThenCooldown: an app-server that dies at every
// start is restarted after growing backoffs, RestartLimit times; then the
// user is unavailable for Cooldown, with a verdict naming the cool-down and
// no start tried; after the cool-down a healthy app-server serves again.
func TestRestartPolicyBackoffThenCooldown(t *testing.T) {
	record := filepath.Join(t.TempDir(), "record.jsonl")
	mutate, heal := healableFake(t,
		fakeappserver.Config{ExitOnMethod: "initialize", ExitCode: 3, RecordPath: record},
		fakeappserver.Config{RecordPath: record})
	// The three refused rounds below must all come within the cool-down,
	// which on a loaded machine a short one did not promise.
	const cooldown = 4 * time.Second
	h := supHarness(t, mutate, func(c *tree) {
		c.RestartLimit = 3
		c.RestartWindow = time.Minute
		c.RestartBackoff = 200 * time.Millisecond
		c.RestartBackoffMax = 10 * time.Second
		c.Cooldown = cooldown
	})
	c := h.caller()
	round := func(i int) (roundResult, time.Duration) {
		start := time.Now()
		r := h.round(c, messages.StartRound{User: "alice", Thread: "mesh/r", Text: "hi", RoundID: fmt.Sprintf("rp-%d", i)})
		return r, time.Since(start)
	}
	var thirdCrash time.Time
	minWait := []time.Duration{0, 100 * time.Millisecond, 200 * time.Millisecond} // d/2 of 0, 200ms, 400ms
	for i := range 3 {
		r, took := round(i)
		mustStatus(t, r, messages.StatusUnavailable)
		if !strings.Contains(r.verdict.Error, "initializing codex") || strings.Contains(r.verdict.Error, "cooling down") {
			t.Errorf("round %d: error %q, want a failed start", i, r.verdict.Error)
		}
		if took < minWait[i] {
			t.Errorf("round %d failed after %v: the restart did not back off %v", i, took, minWait[i])
		}
		t.Logf("round %d: %v: %s", i, took, r.verdict.Error)
		thirdCrash = time.Now()
	}
	if n := countMethod(recordedRequests(t, record), "initialize"); n != 3 {
		t.Fatalf("%d starts, want 3", n)
	}

	// Past the limit: a clear verdict at once, and no start.
	for i := 3; i < 6; i++ {
		r, took := round(i)
		mustStatus(t, r, messages.StatusUnavailable)
		for _, want := range []string{ErrUnavailable.Error(), "3 times", "cooling down until"} {
			if !strings.Contains(r.verdict.Error, want) {
				t.Errorf("cool-down verdict %q does not say %q", r.verdict.Error, want)
			}
		}
		if n := strings.Count(r.verdict.Error, ErrUnavailable.Error()); n != 1 {
			t.Errorf("cool-down verdict %q names %q %d times, want once", r.verdict.Error, ErrUnavailable, n)
		}
		// At once, not after the cool-down (or a backoff); a round trip
		// through the tree may take a second on a loaded machine.
		if took > cooldown/2 {
			t.Errorf("cool-down verdict took %v", took)
		}
	}
	if n := countMethod(recordedRequests(t, record), "initialize"); n != 3 {
		t.Fatalf("%d starts during the cool-down, want none beyond 3", n)
	}

	// After the cool-down a start is tried again (at once: the counter was reset).
	heal()
	time.Sleep(time.Until(thirdCrash.Add(cooldown + 50*time.Millisecond))) // the cool-down passing is the point
	r, took := round(9)
	mustStatus(t, r, messages.StatusCompleted)
	if took > 5*time.Second {
		t.Errorf("the first round after the cool-down took %v", took)
	}
}

// TestRestartCounterForgetsOldCrashes: crashes older than RestartWindow do
// not count toward the limit. The "crash" here is a start that fails at
// once (no executable), counted like a death, so that the timing depends on
// the actors only, not on how fast a process starts on a busy machine.
func TestRestartCounterForgetsOldCrashes(t *testing.T) {
	// Rounds 1 and 2 must both fall within one window: on a loaded
	// machine two rounds took longer than a short one.
	const window = 2 * time.Second
	h := supHarness(t, func(c *tree) {
		c.CodexBin = filepath.Join(t.TempDir(), "no-such-codex")
		c.RestartLimit = 2
		c.RestartWindow = window
		c.RestartBackoff = 20 * time.Millisecond
		c.Cooldown = time.Minute
	})
	c := h.caller()
	round := func(i int) roundResult {
		r := h.round(c, messages.StartRound{User: "alice", Thread: "mesh/f", Text: "hi", RoundID: fmt.Sprintf("f-%d", i)})
		mustStatus(t, r, messages.StatusUnavailable)
		return r
	}
	cooling := func(r roundResult) bool { return strings.Contains(r.verdict.Error, "cooling down") }

	if r := round(0); cooling(r) {
		t.Fatalf("first failed start: %q", r.verdict.Error)
	}
	time.Sleep(window + 50*time.Millisecond) // the crash ageing out of the window is the point
	start := time.Now()
	if r := round(1); cooling(r) {
		t.Fatalf("second crash, the first one out of the window: %q; the old crash was counted", r.verdict.Error)
	}
	if r := round(2); cooling(r) { // this crash reaches the limit; its round gets the crash
		t.Fatalf("round 2: %q: cooling down one crash early", r.verdict.Error)
	}
	r := round(3)
	if !cooling(r) {
		t.Fatalf("two crashes within %v (limit 2): verdict %+v, want a cool-down", time.Since(start), r.verdict)
	}
	if !strings.Contains(r.verdict.Error, "2 times within "+window.String()) {
		t.Errorf("cool-down verdict %q does not give the count and window", r.verdict.Error)
	}
}
