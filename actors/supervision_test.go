package actors

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/meshweaver/supervisor/third_party/hollywood/actor"
	"github.com/meshweaver/supervisor/third_party/hollywood/remote"

	"github.com/meshweaver/supervisor/codexrpc"
	"github.com/meshweaver/supervisor/messages"
	"github.com/meshweaver/supervisor/store"
	"github.com/meshweaver/supervisor/testkit/codexhome"
	"github.com/meshweaver/supervisor/testkit/fakeappserver"
	"github.com/meshweaver/supervisor/testkit/mockmodel"
	"github.com/meshweaver/supervisor/testkit/proctest"
)

// ---------------------------------------------------------------------------
// Helpers shared with outbox_test.go.

// waitFor bounds every wait of these tests: nothing here sleeps to wait for
// an outcome.
const waitFor = 15 * time.Second

// logRecord is one log line of the tree, with its attributes as text.
type logRecord struct {
	at    time.Time
	level slog.Level
	msg   string
	attrs map[string]string
}

// logTap records the tree's log lines so that tests can wait for what the
// actors did (an eviction, a contained panic, a crash) instead of sleeping.
type logTap struct {
	mu      sync.Mutex
	recs    []logRecord
	changed chan struct{} // closed and replaced on every record
}

func newLogTap() *logTap { return &logTap{changed: make(chan struct{})} }

func (lt *logTap) add(r logRecord) {
	lt.mu.Lock()
	defer lt.mu.Unlock()
	lt.recs = append(lt.recs, r)
	close(lt.changed)
	lt.changed = make(chan struct{})
}

// mark is the number of records so far, to wait for later ones only.
func (lt *logTap) mark() int {
	lt.mu.Lock()
	defer lt.mu.Unlock()
	return len(lt.recs)
}

// count is how many records from index from on match.
func (lt *logTap) count(from int, match func(logRecord) bool) int {
	lt.mu.Lock()
	defer lt.mu.Unlock()
	n := 0
	for _, r := range lt.recs[from:] {
		if match(r) {
			n++
		}
	}
	return n
}

// wait returns the first record from index from on that matches, waiting
// up to d for it.
func (lt *logTap) wait(t testing.TB, from int, d time.Duration, what string, match func(logRecord) bool) logRecord {
	t.Helper()
	deadline := time.NewTimer(d)
	defer deadline.Stop()
	for {
		lt.mu.Lock()
		for _, r := range lt.recs[from:] {
			if match(r) {
				lt.mu.Unlock()
				return r
			}
		}
		from = len(lt.recs)
		ch := lt.changed
		lt.mu.Unlock()
		select {
		case <-ch:
		case <-deadline.C:
			t.Fatalf("no log line %s within %v", what, d)
		}
	}
}

// waitN waits for n records from index from on that match.
func (lt *logTap) waitN(t testing.TB, from, n int, d time.Duration, what string, match func(logRecord) bool) {
	t.Helper()
	for range n {
		lt.wait(t, from, d, what, match)
		lt.mu.Lock()
		for i := from; i < len(lt.recs); i++ {
			if match(lt.recs[i]) {
				from = i + 1
				break
			}
		}
		lt.mu.Unlock()
	}
}

// logMsg matches a message, and attributes by substring.
func logMsg(msg string, attrs ...string) func(logRecord) bool {
	return func(r logRecord) bool {
		if r.msg != msg {
			return false
		}
		for i := 0; i+1 < len(attrs); i += 2 {
			if !strings.Contains(r.attrs[attrs[i]], attrs[i+1]) {
				return false
			}
		}
		return true
	}
}

type tapHandler struct {
	tap   *logTap
	attrs []slog.Attr
	next  slog.Handler
}

func (h *tapHandler) Enabled(context.Context, slog.Level) bool { return true }

func (h *tapHandler) Handle(ctx context.Context, r slog.Record) error {
	m := make(map[string]string, len(h.attrs)+r.NumAttrs())
	for _, a := range h.attrs {
		m[a.Key] = a.Value.String()
	}
	r.Attrs(func(a slog.Attr) bool {
		m[a.Key] = a.Value.String()
		return true
	})
	h.tap.add(logRecord{at: r.Time, level: r.Level, msg: r.Message, attrs: m})
	if h.next.Enabled(ctx, r.Level) {
		return h.next.Handle(ctx, r)
	}
	return nil
}

func (h *tapHandler) WithAttrs(as []slog.Attr) slog.Handler {
	return &tapHandler{tap: h.tap, attrs: append(append([]slog.Attr(nil), h.attrs...), as...), next: h.next.WithAttrs(as)}
}

func (h *tapHandler) WithGroup(name string) slog.Handler {
	return &tapHandler{tap: h.tap, attrs: h.attrs, next: h.next.WithGroup(name)}
}

// withFake points the tree at the fake app-server (this test binary
// re-executed, see main_test.go) configured by fc.
func withFake(t testing.TB, fc fakeappserver.Config) func(*Config) {
	t.Helper()
	l, err := fakeappserver.Relaunch(fc, "")
	if err != nil {
		t.Fatal(err)
	}
	return func(c *Config) {
		c.CodexBin, c.CodexArgs = l.Path, l.Args
		c.CodexEnv = append(c.CodexEnv, l.Env...)
	}
}

// heldFake is withFake with HoldTurns: each turn pauses after its first
// delta until heldRound interrupts it. Then every notification of the turn
// comes well after turn/start's answer, which keeps these tests clear of the
// race TestSupervisionTurnEndBeforeTurnStarted shows (with a fake that ends
// its turns at once, about one round in ten loses its thread id, journal
// entry and unsubscribe).
func heldFake(t testing.TB, fc fakeappserver.Config) func(*Config) {
	fc.HoldTurns = true
	return withFake(t, fc)
}

// heldRound runs a round on a heldFake tree: at the first event it
// interrupts the turn, and it returns once the verdict (interrupted) came.
func (h *harness) heldRound(c *caller, m messages.StartRound) roundResult {
	h.t.Helper()
	if m.RoundID == "" {
		m.RoundID = newRoundID()
	}
	h.roundAsync(c, m)
	var res roundResult
	deadline := time.NewTimer(90 * time.Second)
	defer deadline.Stop()
	for {
		select {
		case msg := <-c.ch:
			switch v := msg.(type) {
			case messages.RoundEvent:
				if v.RoundID != m.RoundID {
					continue
				}
				if want := uint64(len(res.events) + 1); v.Seq != want {
					h.t.Errorf("event seq %d, want %d", v.Seq, want)
				}
				res.events = append(res.events, v)
				if len(res.events) == 1 {
					h.engine.SendWithSender(h.root, messages.InterruptRound{User: m.User, Thread: m.Thread, RoundID: m.RoundID}, c.pid)
				}
			case messages.RoundFinished:
				if v.RoundID == m.RoundID {
					res.verdict = v
					if v.Status != messages.StatusInterrupted {
						h.t.Fatalf("held round: verdict %+v, want interrupted", v)
					}
					return res
				}
			}
		case <-deadline.C:
			h.t.Fatalf("held round %s: no verdict (events so far: %d)", m.RoundID, len(res.events))
		}
	}
}

// realCLI keeps the real CLI from running the user's login shell for its
// shell snapshot. That shell runs in a session of its own and, on a machine
// whose shell start-up is slow (pyenv rehash), still forks when the
// app-server is stopped: the stop kills the descendants it saw when it
// began, and what they fork meanwhile outlives the app-server for a moment
// and fails the leftover check of these tests.
func realCLI(c *Config) { c.Overrides = append(c.Overrides, "features.shell_snapshot=false") }

// supHarness is newHarness with a log tap, and with a check, after the tree
// has stopped, that no app-server (real or fake) of its homes is left.
func supHarness(t *testing.T, mutates ...func(*Config)) (*harness, *logTap) {
	t.Helper()
	homes := t.TempDir()
	t.Cleanup(func() { checkNoAppServers(t, homes) }) // runs after the tree's cleanup
	tap := newLogTap()
	h := newHarness(t, func(c *Config) {
		c.Homes = homes
		c.Logger = slog.New(&tapHandler{tap: tap, next: testLogger(t).Handler()})
		for _, m := range mutates {
			m(c)
		}
	})
	return h, tap
}

// appServersUnder lists the pids of the live processes whose CODEX_HOME is
// under homes: every app-server of the tree, real or fake, and what they
// started.
func appServersUnder(homes string) []int {
	var out []int
	for _, p := range proctest.List(proctest.NotSelf, proctest.UnderHome(homes)) {
		out = append(out, p.PID)
	}
	return out
}

// checkNoAppServers fails the test if an app-server is left after the tree
// stopped, and kills it.
func checkNoAppServers(t *testing.T, homes string) {
	t.Helper()
	proctest.WaitGone(t, 0, 0, proctest.NotSelf, proctest.UnderHome(homes))
}

// waitGone waits until pid has exited.
func waitGone(t testing.TB, pid int, d time.Duration) {
	t.Helper()
	poll(t, d, fmt.Sprintf("process %d to end", pid), func() bool { return !proctest.Alive(pid) })
}

// poll checks cond every 10ms until it holds, for at most d. It is for
// state that nothing announces (/proc, files).
func poll(t testing.TB, d time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(d)
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %v waiting for %s", d, what)
		}
		<-tick.C
	}
}

func userHome(t testing.TB, h *harness, user string) string {
	t.Helper()
	home, err := store.HomeDir(h.cfg.Homes, user)
	if err != nil {
		t.Fatal(err)
	}
	return home
}

// appServerPID is the pid the user's codex actor recorded for its live
// app-server (0 when there is no record).
func appServerPID(t testing.TB, h *harness, user string) int {
	t.Helper()
	rec, err := store.ReadProcRecord(ProcRecordPath(userHome(t, h, user)))
	if err != nil {
		return 0
	}
	return rec.PID
}

// liveAppServerPID waits for the user's pid record to name a running process.
func liveAppServerPID(t testing.TB, h *harness, user string) int {
	t.Helper()
	var pid int
	poll(t, waitFor, user+"'s app-server pid record", func() bool {
		pid = appServerPID(t, h, user)
		return pid > 0 && proctest.Alive(pid)
	})
	return pid
}

func mustStatus(t testing.TB, r roundResult, want messages.VerdictStatus) {
	t.Helper()
	if r.verdict.Status != want {
		t.Fatalf("verdict = %+v, want status %s", r.verdict, want)
	}
}

// roundAsync sends a StartRound without waiting for its verdict.
func (h *harness) roundAsync(c *caller, m messages.StartRound) {
	h.engine.SendWithSender(h.root, m, c.pid)
}

// waitFirstEvent waits for the round's first event from codex (not a status).
func (c *caller) waitFirstEvent(t testing.TB, roundID string, d time.Duration) messages.RoundEvent {
	t.Helper()
	deadline := time.NewTimer(d)
	defer deadline.Stop()
	for {
		select {
		case m := <-c.ch:
			switch m := m.(type) {
			case messages.RoundEvent:
				// The daemon's own status ("starting codex") comes before
				// the turn: the first event from codex is the one waited for.
				if m.RoundID == roundID && m.Kind != messages.KindStatus {
					return m
				}
			case messages.RoundFinished:
				if m.RoundID == roundID {
					t.Fatalf("round %s finished before any event: %+v", roundID, m)
				}
			}
		case <-deadline.C:
			t.Fatalf("round %s: no event within %v", roundID, d)
		}
	}
}

// recordedRequests reads a fake's RecordPath: the requests it received,
// in order.
type recordedRequest struct {
	Method string          `json:"method"`
	Params json.RawMessage `json:"params"`
}

func recordedRequests(t testing.TB, path string) []recordedRequest {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		t.Fatal(err)
	}
	var out []recordedRequest
	sc := bufio.NewScanner(bytes.NewReader(data))
	sc.Buffer(nil, 16<<20)
	for sc.Scan() {
		var r recordedRequest
		if json.Unmarshal(sc.Bytes(), &r) == nil && r.Method != "" {
			out = append(out, r)
		}
	}
	return out
}

func countMethod(reqs []recordedRequest, method string) int {
	n := 0
	for _, r := range reqs {
		if r.Method == method {
			n++
		}
	}
	return n
}

// lastTurnText is the text of the last turn/start the fake received.
func lastTurnText(t testing.TB, path string) string {
	t.Helper()
	reqs := recordedRequests(t, path)
	for i := len(reqs) - 1; i >= 0; i-- {
		if reqs[i].Method != "turn/start" {
			continue
		}
		var p struct {
			Input []struct {
				Text string `json:"text"`
			} `json:"input"`
		}
		if err := json.Unmarshal(reqs[i].Params, &p); err != nil || len(p.Input) == 0 {
			t.Fatalf("turn/start params %s: %v", reqs[i].Params, err)
		}
		return p.Input[0].Text
	}
	t.Fatalf("no turn/start recorded in %s", path)
	return ""
}

// childPID is the PID of an actor of the tree, by its path under the root.
func (h *harness) childPID(path string) *actor.PID {
	return actor.NewPID(h.engine.Address(), h.root.ID+"/"+path)
}

// ---------------------------------------------------------------------------
// Restart policy.

// TestRestartBackoffJitteredExponential checks the backoff itself: none
// after a clean history, then a uniformly jittered [d/2, d] with d doubling
// per recent crash, capped, and crashes older than the window not counted.
func TestRestartBackoffJitteredExponential(t *testing.T) {
	cfg := &Config{RestartBackoff: 100 * time.Millisecond, RestartBackoffMax: time.Second,
		RestartWindow: time.Minute, RestartLimit: 100, Cooldown: time.Minute, Logger: slog.New(slog.DiscardHandler)}
	a := &codexActor{cfg: cfg, log: cfg.Logger, restarts: newRestartPolicy(cfg)}
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
func healableFake(t *testing.T, bad, good fakeappserver.Config) (mutate func(*Config), heal func()) {
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
	return func(c *Config) {
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
	const cooldown = 1500 * time.Millisecond
	h, _ := supHarness(t, mutate, func(c *Config) {
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
		if took > time.Second {
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
	const window = 300 * time.Millisecond
	h, _ := supHarness(t, func(c *Config) {
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

// ---------------------------------------------------------------------------
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
	h, tap := supHarness(t, heldFake(t, fakeappserver.Config{}))
	probe := &eventProbe{}
	probe.spawn(t, h.engine)
	c := h.caller()
	r := h.heldRound(c, messages.StartRound{User: "alice", Thread: "mesh/p", Text: "one"})
	alicePID := liveAppServerPID(t, h, "alice")

	from := tap.mark()
	codex := h.childPID("user/alice/codex/main")
	login := h.childPID("user/alice/login/main")
	for range 5 {
		// A server request without a request: the codex actor dereferences nil.
		h.engine.Send(codex, codexServerRequest{reply: make(chan serverAnswer, 1)})
		// An account notification without a notification: the login actor does.
		h.engine.Send(login, accountNote{})
	}
	tap.waitN(t, from, 10, waitFor, "of ten contained panics", logMsg("actor panicked; contained"))

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
	h, _ := supHarness(t, withFake(t, fakeappserver.Config{HoldTurns: true, RecordPath: record}))
	probe := &eventProbe{}
	probe.spawn(t, h.engine)
	c := h.caller()
	h.roundAsync(c, messages.StartRound{User: "alice", Thread: "mesh/rp", Text: "hold", RoundID: "rp-1"})
	c.waitFirstEvent(t, "rp-1", waitFor)
	// A routed notification without a notification: the mapper dereferences nil.
	h.engine.Send(h.childPID("user/alice/round/r1"), roundNote{})
	r := c.collect(t, "rp-1", waitFor)
	mustStatus(t, r, messages.StatusFailed)
	if !strings.Contains(r.verdict.Error, "internal error") {
		t.Errorf("verdict error %q does not name an internal error", r.verdict.Error)
	}
	probe.check(t)
	// The held turn must not outlive its round.
	deadline := time.Now().Add(3 * time.Second)
	for countMethod(recordedRequests(t, record), "turn/interrupt") == 0 {
		if time.Now().After(deadline) {
			t.Fatalf("the round that panicked left its turn running in the app-server (no turn/interrupt " +
				"within 3s): roundPanicked must interrupt the turn before it finishes the round")
		}
		time.Sleep(10 * time.Millisecond) // polling the fake's record file
	}
}

// ---------------------------------------------------------------------------
// Idle eviction and the node's cap.

// TestEvictIdleThenResume: an app-server idle for IdleTimeout is stopped;
// the next round starts a fresh one and resumes the thread.
func TestEvictIdleThenResume(t *testing.T) {
	const idle = 300 * time.Millisecond
	h, tap := supHarness(t, heldFake(t, fakeappserver.Config{}), func(c *Config) { c.IdleTimeout = idle })
	c := h.caller()
	r1 := h.heldRound(c, messages.StartRound{User: "alice", Thread: "mesh/e", Text: "one"})
	done := time.Now()
	pid1 := liveAppServerPID(t, h, "alice")

	ev := tap.wait(t, 0, waitFor, "of an idle eviction", logMsg("stopping an idle codex app-server", "why", "idle for"))
	if since := ev.at.Sub(done); since < idle/2 {
		t.Errorf("evicted %v after the round, IdleTimeout is %v", since, idle)
	}
	waitGone(t, pid1, waitFor)
	poll(t, waitFor, "the pid record to go", func() bool { return appServerPID(t, h, "alice") == 0 })

	r2 := h.heldRound(c, messages.StartRound{User: "alice", Thread: "mesh/e", Text: "two"})
	if !r2.verdict.Resumed || r2.verdict.CodexThreadID != r1.verdict.CodexThreadID {
		t.Errorf("after eviction: verdict %+v, want thread %s resumed", r2.verdict, r1.verdict.CodexThreadID)
	}
	if pid2 := liveAppServerPID(t, h, "alice"); pid2 == pid1 {
		t.Errorf("the round after eviction ran on the evicted process %d", pid1)
	}
}

// TestEvictLRUCapKeepsPinnedLogin: with MaxLive=1 starting a second user's
// app-server stops the first, idle one; one pinned by a login in progress
// is kept.
func TestEvictLRUCapKeepsPinnedLogin(t *testing.T) {
	h, tap := supHarness(t, heldFake(t, fakeappserver.Config{}), func(c *Config) { c.MaxLive = 1 })
	c := h.caller()
	h.heldRound(c, messages.StartRound{User: "alice", Thread: "mesh/l", Text: "one"})
	alice := liveAppServerPID(t, h, "alice")

	// carol's login starts (and pins) her app-server: alice's, idle, goes.
	h.engine.SendWithSender(h.root, messages.StartLogin{User: "carol"}, c.pid)
	waitMsg[messages.LoginChallenge](t, c, waitFor)
	carol := liveAppServerPID(t, h, "carol")
	tap.wait(t, 0, waitFor, "of alice's eviction for the cap", logMsg("stopping an idle codex app-server",
		"user", userTag("alice"), "why", "cap"))
	waitGone(t, alice, waitFor)

	// dave's start finds carol's app-server pinned: it stays.
	from := tap.mark()
	h.heldRound(c, messages.StartRound{User: "dave", Thread: "mesh/l", Text: "two"})
	if !proctest.Alive(carol) {
		t.Fatalf("carol's app-server, pinned by her login, was stopped")
	}
	if n := tap.count(from, logMsg("stopping an idle codex app-server", "user", userTag("carol"))); n != 0 {
		t.Fatalf("carol's pinned app-server was evicted")
	}
	h.engine.SendWithSender(h.root, messages.CancelLogin{User: "carol"}, c.pid)
	if f := waitMsg[messages.LoginFinished](t, c, waitFor); f.Success {
		t.Errorf("cancelled login: %+v", f)
	}
}

// TestEvictLRUCapHoldsAfterPinEnds: once a pin that kept the node over
// MaxLive ends, the next start brings the node back to the cap.
func TestEvictLRUCapHoldsAfterPinEnds(t *testing.T) {
	h, _ := supHarness(t, heldFake(t, fakeappserver.Config{}), func(c *Config) { c.MaxLive = 1 })
	c := h.caller()
	h.engine.SendWithSender(h.root, messages.StartLogin{User: "carol"}, c.pid)
	waitMsg[messages.LoginChallenge](t, c, waitFor)
	h.heldRound(c, messages.StartRound{User: "dave", Thread: "mesh/x", Text: "one"})
	// Two live, over the cap of one, as carol's login needs its process.
	h.engine.SendWithSender(h.root, messages.CancelLogin{User: "carol"}, c.pid)
	waitMsg[messages.LoginFinished](t, c, waitFor)
	h.heldRound(c, messages.StartRound{User: "erin", Thread: "mesh/x", Text: "two"})
	deadline := time.Now().Add(3 * time.Second)
	for {
		live := appServersUnder(h.cfg.Homes)
		if len(live) <= 1 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d app-servers live with MaxLive=1 and none busy, after erin's start: a node once over "+
				"the cap must get back under it (one victim per start kept it over)", len(live))
		}
		time.Sleep(10 * time.Millisecond) // polling /proc
	}
}

// TestEvictLRUCapSparesRoundOpeningThread: a round that holds its user's
// client but has not subscribed yet (thread/start or thread/resume still
// running) must not lose its app-server to another user's start.
func TestEvictLRUCapSparesRoundOpeningThread(t *testing.T) {
	// alice's fake never answers thread/start; everyone else's is normal.
	slow, err := fakeappserver.Relaunch(fakeappserver.Config{HangOnMethod: "thread/start"}, "")
	if err != nil {
		t.Fatal(err)
	}
	normal := strings.TrimPrefix(fakeappserver.Env(fakeappserver.Config{}), fakeappserver.EnvVar+"=")
	script := filepath.Join(t.TempDir(), "codex")
	body := "#!/bin/sh\ncase \"$CODEX_HOME\" in */alice/.codex) ;; *) FAKE_APPSERVER_CONFIG=\"$FAKE_NORMAL\"; export FAKE_APPSERVER_CONFIG;; esac\nexec '" + slow.Path + "' \"$@\"\n"
	if err := os.WriteFile(script, []byte(body), 0o755); err != nil {
		t.Fatal(err)
	}
	h, tap := supHarness(t, func(c *Config) {
		c.CodexBin, c.CodexArgs = script, slow.Args
		c.CodexEnv = append(c.CodexEnv, append(slow.Env, "FAKE_NORMAL="+normal)...)
		c.MaxLive = 1
		c.CallTimeout = 3 * time.Second
	})
	ca, cb := h.caller(), h.caller()
	h.roundAsync(ca, messages.StartRound{User: "alice", Thread: "mesh/s", Text: "slow", RoundID: "s-1"})
	tap.wait(t, 0, waitFor, "of alice's app-server ready", logMsg("codex app-server ready", "user", userTag("alice")))
	alice := liveAppServerPID(t, h, "alice")
	r := h.round(cb, messages.StartRound{User: "bob", Thread: "mesh/s", Text: "fast"})
	mustStatus(t, r, messages.StatusCompleted)
	ra := ca.collect(t, "s-1", waitFor)
	if strings.Contains(ra.verdict.Error, "deadline") && proctest.Alive(alice) {
		return // alice's round ran into its own deadline, on its own process
	}
	t.Fatalf("bob's start evicted alice's app-server while her round was opening its thread "+
		"(client acquired, not yet subscribed: the round must hold a lease): alice's verdict %+v, process alive %v",
		ra.verdict, proctest.Alive(alice))
}

func waitMsg[T any](t testing.TB, c *caller, d time.Duration) T {
	t.Helper()
	deadline := time.NewTimer(d)
	defer deadline.Stop()
	for {
		select {
		case m := <-c.ch:
			if v, ok := m.(T); ok {
				return v
			}
		case <-deadline.C:
			var zero T
			t.Fatalf("no %T within %v", zero, d)
		}
	}
}

// TestEvictIdleUserMemory measures what an idle user costs the daemon once
// its app-server is gone: heap and goroutines per user.
func TestEvictIdleUserMemory(t *testing.T) {
	// MaxLive=1: each user's start evicts the previous user's app-server.
	h, _ := supHarness(t, heldFake(t, fakeappserver.Config{}), func(c *Config) {
		c.MaxLive = 1
		c.Logger = testLogger(t) // no log tap: it would hold every line
	})
	c := h.caller()
	settle := func() (heap uint64, goroutines int) {
		// The goroutines of a stopped app-server (readers, stop) wind down
		// a little after its exit: wait for the count to hold for 100ms.
		n, same := runtime.NumGoroutine(), 0
		poll(t, waitFor, "the goroutine count to settle", func() bool {
			if m := runtime.NumGoroutine(); m != n {
				n, same = m, 0
				return false
			}
			same++
			return same >= 10
		})
		var ms runtime.MemStats
		for range 3 {
			runtime.GC()
		}
		runtime.ReadMemStats(&ms)
		return ms.HeapAlloc, n
	}
	// A: users that ran a round, then lost their app-server to the cap.
	const evicted = 6
	roundUser := func(i int) {
		h.heldRound(c, messages.StartRound{User: fmt.Sprintf("r%03d", i), Thread: "mesh/m", Text: "hi"})
	}
	roundUser(0)
	roundUser(1)
	waitLive := func() {
		poll(t, waitFor, "one live app-server", func() bool { return len(appServersUnder(h.cfg.Homes)) == 1 })
	}
	waitLive()
	heap0, g0 := settle()
	start := time.Now()
	for i := 2; i < evicted+2; i++ {
		roundUser(i)
	}
	waitLive()
	heapA, gA := settle()
	tookA := time.Since(start)

	// B: 200 users that never needed an app-server (an API key stored).
	const idleUsers = 200
	start = time.Now()
	for i := range idleUsers {
		h.engine.SendWithSender(h.root, messages.SetAPIKey{User: fmt.Sprintf("k%03d", i), APIKey: "sk-test-memory"}, c.pid)
	}
	for range idleUsers {
		waitMsg[messages.APIKeyStored](t, c, waitFor)
	}
	heapB, gB := settle()
	tookB := time.Since(start)

	perA := float64(int64(heapA)-int64(heap0)) / evicted
	perB := float64(int64(heapB)-int64(heapA)) / idleUsers
	gperA := float64(gA-g0) / evicted
	gperB := float64(gB-gA) / idleUsers
	t.Logf("idle user after a round and eviction: %.1f KiB heap, %.2f goroutines each (%d users, %v)", perA/1024, gperA, evicted, tookA)
	t.Logf("idle user that never started an app-server: %.1f KiB heap, %.2f goroutines each (%d users, %v)", perB/1024, gperB, idleUsers, tookB)
	if gperA > 1.5 || gperB > 1.5 {
		t.Errorf("an idle user holds more than its idle ticker's goroutine: %.2f / %.2f", gperA, gperB)
	}
	if perA > 256<<10 || perB > 256<<10 {
		t.Errorf("an idle user costs more than 256 KiB of heap: %.0f / %.0f bytes", perA, perB)
	}
	start = time.Now()
	ctx, cancel := context.WithTimeout(context.Background(), waitFor)
	defer cancel()
	<-h.engine.PoisonCtx(ctx, h.root).Done()
	t.Logf("stopping the tree of %d users took %v", evicted+2+idleUsers, time.Since(start))
}

// ---------------------------------------------------------------------------
// Deadlines.

// TestStallInterruptsTurn: a turn without progress for StallTimeout is
// interrupted and failed with a verdict naming the stall; the thread then
// serves the next round.
func TestStallInterruptsTurn(t *testing.T) {
	const stall = time.Second
	h, _ := supHarness(t, realCLI, func(c *Config) { c.StallTimeout = stall })
	c := h.caller()
	h.model.Enqueue(mockmodel.Text("thinking ").Hang())
	start := time.Now()
	r1 := h.round(c, messages.StartRound{User: "alice", Thread: "mesh/stall", Text: "hang"})
	took := time.Since(start)
	mustStatus(t, r1, messages.StatusFailed)
	if !strings.Contains(r1.verdict.Error, "no progress for "+stall.String()) {
		t.Errorf("verdict error %q does not name the stall", r1.verdict.Error)
	}
	if took < stall || took > stall+10*time.Second {
		t.Errorf("the stalled round ended after %v, StallTimeout %v", took, stall)
	}
	if got := r1.text(); got != "thinking " {
		t.Errorf("text before the stall = %q", got)
	}
	h.model.Enqueue(mockmodel.Text("done"))
	r2 := h.round(c, messages.StartRound{User: "alice", Thread: "mesh/stall", Text: "again"})
	mustStatus(t, r2, messages.StatusCompleted)
	if r2.text() != "done" || !r2.verdict.Resumed || r2.verdict.CodexThreadID != r1.verdict.CodexThreadID {
		t.Errorf("round after the stall: text %q, verdict %+v", r2.text(), r2.verdict)
	}
}

// TestDeadlineOnHungRPC: an RPC the app-server never answers ends at
// CallTimeout with a failed verdict naming the deadline.
func TestDeadlineOnHungRPC(t *testing.T) {
	const callTimeout = time.Second
	h, _ := supHarness(t, withFake(t, fakeappserver.Config{HangOnMethod: "thread/start"}),
		func(c *Config) { c.CallTimeout = callTimeout })
	c := h.caller()
	start := time.Now()
	h.roundAsync(c, messages.StartRound{User: "alice", Thread: "mesh/d", Text: "hi", RoundID: "d-1"})
	r := c.collect(t, "d-1", callTimeout+5*time.Second)
	took := time.Since(start)
	mustStatus(t, r, messages.StatusFailed)
	if !strings.Contains(r.verdict.Error, "starting a codex thread") ||
		!strings.Contains(r.verdict.Error, context.DeadlineExceeded.Error()) {
		t.Errorf("verdict error %q does not name the thread/start deadline", r.verdict.Error)
	}
	if took < callTimeout {
		t.Errorf("failed after %v, before the %v deadline", took, callTimeout)
	}
}

// ---------------------------------------------------------------------------
// A caller that goes away.

// remoteEngine is an engine with a remote on a free loopback port.
func remoteEngine(t *testing.T) (*actor.Engine, *remote.Remote) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	_ = ln.Close()
	rem := remote.New(addr, remote.NewConfig())
	e, err := actor.NewEngine(actor.NewEngineConfig().WithRemote(rem))
	if err != nil {
		t.Fatal(err)
	}
	return e, rem
}

// remoteCaller is a caller on its own engine and remote.
func remoteCaller(t *testing.T) (*caller, *actor.Engine, *remote.Remote) {
	e, rem := remoteEngine(t)
	c := &caller{ch: make(chan any, 4096)}
	c.pid = e.SpawnFunc(func(ctx *actor.Context) {
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
	t.Cleanup(func() {
		<-e.Poison(c.pid).Done()
		rem.Stop().Wait() // a no-op when the test stopped it
	})
	return c, e, rem
}

// TestCallerGoneInterruptsRound: when the caller's node becomes
// unreachable mid-round, the round interrupts its turn, and the thread
// serves the next round from another caller.
func TestCallerGoneInterruptsRound(t *testing.T) {
	bin, err := codexhome.CodexBin()
	if err != nil {
		t.Fatalf("the real codex CLI is required: %v", err)
	}
	model, err := mockmodel.Start(mockmodel.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(model.Close)
	homes := t.TempDir()
	t.Cleanup(func() { checkNoAppServers(t, homes) })
	tap := newLogTap()
	de, drem := remoteEngine(t)
	cfg := Config{
		Homes: homes, Workspace: t.TempDir(), CodexBin: bin,
		Overrides: append(codexhome.Overrides(model.URL()), "features.shell_snapshot=false"),
		Logger:    slog.New(&tapHandler{tap: tap, next: testLogger(t).Handler()}), StopGrace: time.Second,
	}
	root, err := SpawnRoot(de, cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		<-de.PoisonCtx(ctx, root).Done()
		if ctx.Err() != nil {
			t.Errorf("stopping the tree timed out")
		}
		drem.Stop().Wait()
	})
	send := func(e *actor.Engine, from *actor.PID, m messages.StartRound) {
		env, err := messages.Encode(m)
		if err != nil {
			t.Fatal(err)
		}
		e.SendWithSender(root, env, from)
	}

	c1, e1, rem1 := remoteCaller(t)
	model.Enqueue(mockmodel.Text("partial ").Hang())
	send(e1, c1.pid, messages.StartRound{User: "alice", Thread: "mesh/gone", Text: "hang", RoundID: "g-1"})
	c1.waitFirstEvent(t, "g-1", 60*time.Second)
	from := tap.mark()
	rem1.Stop().Wait()
	tap.wait(t, from, waitFor, "of the round noticing its caller is gone",
		logMsg("the caller is unreachable; interrupting the round"))
	fin := tap.wait(t, from, waitFor, "of the round finishing", logMsg("round finished"))
	if fin.attrs["status"] != string(messages.StatusInterrupted) {
		t.Errorf("the round of a gone caller finished %q, want interrupted (its turn interrupted)", fin.attrs["status"])
	}
	if n := tap.count(from, logMsg("codex app-server died")); n != 0 {
		t.Errorf("the app-server died instead of interrupting the turn")
	}

	c2, e2, _ := remoteCaller(t)
	model.Enqueue(mockmodel.Text("back"))
	send(e2, c2.pid, messages.StartRound{User: "alice", Thread: "mesh/gone", Text: "again", RoundID: "g-2"})
	r := c2.collect(t, "g-2", 60*time.Second)
	mustStatus(t, r, messages.StatusCompleted)
	if r.text() != "back" || !r.verdict.Resumed {
		t.Errorf("next round: text %q, verdict %+v", r.text(), r.verdict)
	}
	reqs := model.Requests()
	if !strings.Contains(strings.Join(reqs[len(reqs)-1].UserTexts(), "\n"), "hang") {
		t.Errorf("the resumed thread lost the interrupted turn's message")
	}
}

// ---------------------------------------------------------------------------
// On-disk damage.

// TestDamageRegistryAndJournal: a damaged thread record makes the round
// start a fresh thread, seeded with the journal, and the record is
// rewritten; a damaged journal counts as empty and is rewritten.
func TestDamageRegistryAndJournal(t *testing.T) {
	record := filepath.Join(t.TempDir(), "record.jsonl")
	h, _ := supHarness(t, heldFake(t, fakeappserver.Config{RecordPath: record}))
	c := h.caller()
	const key = "mesh/damaged"
	home := userHome(t, h, "alice")
	reg, jr := store.NewRegistry(filepath.Dir(home)), store.NewJournal(filepath.Dir(home))
	n := 0
	round := func(text string) roundResult {
		n++
		return h.heldRound(c, messages.StartRound{User: "alice", Thread: key, Text: text, RoundID: fmt.Sprintf("dmg-%d", n)})
	}
	// The registry actor has written before the verdict is sent (the
	// verdict names a failed write); these check what is on disk.
	recorded := func(threadID string) {
		t.Helper()
		poll(t, waitFor, "the thread record of "+threadID, func() bool {
			id, err := reg.Lookup(key)
			return err == nil && id == threadID
		})
	}
	// journaled waits for a valid journal whose last user turn is last; the
	// held turns answer "Hello " before they are interrupted.
	journaled := func(last string) []store.Turn {
		t.Helper()
		var turns []store.Turn
		poll(t, waitFor, "a valid journal ending with "+last, func() bool {
			var err error
			turns, err = jr.Turns(key)
			n := len(turns)
			return err == nil && n >= 2 && turns[n-2].Role == store.RoleUser && turns[n-2].Text == last &&
				turns[n-1].Role == store.RoleAssistant
		})
		return turns
	}

	r := round("first message")
	recorded(r.verdict.CodexThreadID)
	journaled("first message")
	valid, err := os.ReadFile(reg.Path(key))
	if err != nil {
		t.Fatal(err)
	}
	for _, d := range []struct {
		name string
		data []byte
	}{
		{"empty", nil},
		{"truncated", valid[:len(valid)/2]},
		{"garbage", []byte("\x00\xffnot a record at all\n")},
		{"another key", otherKeyRecord(t)},
	} {
		prev := r.verdict.CodexThreadID
		if err := os.WriteFile(reg.Path(key), d.data, 0o600); err != nil {
			t.Fatal(err)
		}
		text := "after " + d.name
		r = round(text)
		if r.verdict.Resumed || r.verdict.CodexThreadID == prev || r.verdict.CodexThreadID == "" {
			t.Errorf("%s record: verdict %+v, want a fresh thread", d.name, r.verdict)
		}
		if r.verdict.ContextLost || r.verdict.NotSaved != "" {
			t.Errorf("%s record: verdict %+v, want the context kept (journal) and everything saved", d.name, r.verdict)
		}
		if got := lastTurnText(t, record); !strings.Contains(got, "first message") || !strings.HasSuffix(got, text) {
			t.Errorf("%s record: the fresh thread was not seeded with the journal: %q", d.name, got)
		}
		recorded(r.verdict.CodexThreadID)
		journaled(text)
	}

	// A record of a thread the CLI does not know (rollouts lost): fall back.
	prev := r.verdict.CodexThreadID
	if err := reg.Record(key, "0199a0a0-0000-7000-8000-000000000000"); err != nil {
		t.Fatal(err)
	}
	r = round("after lost rollout")
	if !r.verdict.FellBack || r.verdict.CodexThreadID == prev || r.verdict.ContextLost {
		t.Errorf("unknown thread: verdict %+v, want a fallback to a fresh thread seeded with the journal", r.verdict)
	}
	if got := lastTurnText(t, record); !strings.Contains(got, "first message") {
		t.Errorf("the fallback thread was not seeded with the journal: %q", got)
	}
	recorded(r.verdict.CodexThreadID)
	journaled("after lost rollout")

	// A garbage journal with a good record: the thread resumes, the journal
	// starts over.
	prev = r.verdict.CodexThreadID
	if err := os.WriteFile(jr.Path(key), []byte("{\"format\":\"garbage\"\n\x00\x01"), 0o600); err != nil {
		t.Fatal(err)
	}
	r = round("after garbage journal")
	if !r.verdict.Resumed || r.verdict.CodexThreadID != prev {
		t.Errorf("garbage journal: verdict %+v, want thread %s resumed", r.verdict, prev)
	}
	if turns := journaled("after garbage journal"); len(turns) != 2 {
		t.Errorf("the rewritten journal holds %d turns, want just this round's 2: %+v", len(turns), turns)
	}

	// Both damaged: a fresh thread with no transcript, both rewritten.
	for _, p := range []string{reg.Path(key), jr.Path(key)} {
		if err := os.WriteFile(p, []byte("garbage"), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	r = round("after both")
	if r.verdict.Resumed || !r.verdict.ContextLost {
		t.Errorf("both damaged: verdict %+v, want a fresh thread that says it lost the context", r.verdict)
	}
	if got := lastTurnText(t, record); got != "after both" {
		t.Errorf("both damaged: the fresh thread got %q, want the bare message", got)
	}
	recorded(r.verdict.CodexThreadID)
	if turns := journaled("after both"); len(turns) != 2 {
		t.Errorf("the rewritten journal holds %d turns, want 2", len(turns))
	}
}

// ---------------------------------------------------------------------------
// Orphans.

// sleeper starts `sleep 60` in its own process group, as a stand-in for an
// app-server a killed daemon left behind. exited is closed when it ends.
func sleeper(t *testing.T) (pid int, rec store.ProcRecord, exited chan struct{}) {
	t.Helper()
	cmd := exec.Command("sleep", "60")
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited = make(chan struct{})
	go func() {
		_ = cmd.Wait()
		close(exited)
	}()
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		<-exited
	})
	st, err := store.ProcStartTime(cmd.Process.Pid)
	if err != nil {
		t.Fatal(err)
	}
	return cmd.Process.Pid, store.ProcRecord{PID: cmd.Process.Pid, StartTime: st, Exe: "/bin/sleep"}, exited
}

func writeProcRecord(t *testing.T, homes, user string, rec store.ProcRecord) string {
	t.Helper()
	home, err := store.HomeDir(homes, user)
	if err != nil {
		t.Fatal(err)
	}
	path := ProcRecordPath(home)
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := store.WriteProcRecord(path, rec); err != nil {
		t.Fatal(err)
	}
	return path
}

func waitClosed(t *testing.T, ch <-chan struct{}, d time.Duration, what string) {
	t.Helper()
	select {
	case <-ch:
	case <-time.After(d):
		t.Fatalf("%s: not within %v", what, d)
	}
}

// TestOrphanReapOrphans: a recorded process that is provably ours is
// ended; one whose start time does not match is never signalled.
func TestOrphanReapOrphans(t *testing.T) {
	homes := t.TempDir()
	log := slog.New(slog.DiscardHandler)
	_, ours, oursExited := sleeper(t)
	oursRec := writeProcRecord(t, homes, "alice", ours)
	stranger, strangerRec, strangerExited := sleeper(t)
	strangerRec.StartTime++ // the pid was reused by another process
	strangerPath := writeProcRecord(t, homes, "bob", strangerRec)
	if err := os.MkdirAll(filepath.Join(homes, "carol", "meshweaver"), 0o700); err != nil {
		t.Fatal(err)
	}
	garbage := filepath.Join(homes, "carol", "meshweaver", ProcRecordName)
	if err := os.WriteFile(garbage, []byte("pid 1\n"), 0o600); err != nil {
		t.Fatal(err)
	}

	if n := ReapOrphans(homes, 500*time.Millisecond, log); n != 1 {
		t.Errorf("ReapOrphans ended %d, want 1", n)
	}
	waitClosed(t, oursExited, waitFor, "the recorded process ending")
	select {
	case <-strangerExited:
		t.Fatalf("a process whose start time does not match the record was signalled")
	default:
	}
	if !proctest.Alive(stranger) {
		t.Fatalf("the stranger %d is not running", stranger)
	}
	for _, p := range []string{oursRec, strangerPath, garbage} {
		if _, err := os.Stat(p); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("record %s is still there (%v)", p, err)
		}
	}
}

// TestOrphanReapedBeforeStart: the codex actor ends the process its home's
// record names before it starts an app-server there.
func TestOrphanReapedBeforeStart(t *testing.T) {
	h, tap := supHarness(t, withFake(t, fakeappserver.Config{}))
	leftover, rec, exited := sleeper(t)
	writeProcRecord(t, h.cfg.Homes, "alice", rec)
	c := h.caller()
	mustStatus(t, h.round(c, messages.StartRound{User: "alice", Thread: "mesh/o", Text: "hi"}), messages.StatusCompleted)
	waitClosed(t, exited, waitFor, "the leftover process ending")
	tap.wait(t, 0, waitFor, "of the reap", logMsg("ended an app-server a previous daemon left running"))
	if pid := liveAppServerPID(t, h, "alice"); pid == leftover {
		t.Errorf("the record still names the leftover")
	}
}

// otherKeyRecord is a valid thread record of another mesh thread.
func otherKeyRecord(t *testing.T) []byte {
	t.Helper()
	reg := store.NewRegistry(t.TempDir())
	if err := reg.Record("mesh/other", "0199a0a0-0000-7000-8000-000000000001"); err != nil {
		t.Fatal(err)
	}
	data, err := os.ReadFile(reg.Path("mesh/other"))
	if err != nil {
		t.Fatal(err)
	}
	return data
}

// ---------------------------------------------------------------------------
// Order of a turn's end and turn/start's answer.

// gatedWriter holds back every write that carries hold until gate closes.
type gatedWriter struct {
	io.WriteCloser
	hold []byte
	gate <-chan struct{}
}

func (w gatedWriter) Write(p []byte) (int, error) {
	if bytes.Contains(p, w.hold) {
		<-w.gate
	}
	return w.WriteCloser.Write(p)
}

// inProcessFake is a client of a fake app-server served in this process.
// Requests of the method hold are sent only once gate is closed.
func inProcessFake(t *testing.T, fc fakeappserver.Config, hold string, gate <-chan struct{}) *codexrpc.Client {
	t.Helper()
	toFakeR, toFakeW := io.Pipe()
	fromFakeR, fromFakeW := io.Pipe()
	served := make(chan struct{})
	go func() {
		defer close(served)
		_ = fc.Serve(context.Background(), toFakeR, fromFakeW, io.Discard)
		_ = fromFakeW.Close()
	}()
	w := gatedWriter{WriteCloser: toFakeW, hold: []byte(`"method":"` + hold + `"`), gate: gate}
	conn := codexrpc.NewConn(fromFakeR, w, codexrpc.Options{Logger: slog.New(slog.DiscardHandler)})
	t.Cleanup(func() {
		_ = conn.Close() // the fake sees EOF and returns
		<-served
		ctx, cancel := context.WithTimeout(context.Background(), waitFor)
		defer cancel()
		_ = conn.Wait(ctx)
	})
	client := codexrpc.NewClient(conn)
	ctx, cancel := context.WithTimeout(context.Background(), waitFor)
	defer cancel()
	if _, err := client.Initialize(ctx, codexrpc.ClientInfo{Name: "test", Version: "1"}); err != nil {
		t.Fatal(err)
	}
	return client
}

// TestSupervisionTurnEndBeforeTurnStarted: the turn's notifications reach
// the round through the codex actor, turn/start's answer through the
// driver goroutine; nothing orders the two. With an app-server that ends a
// turn quickly (the fake app-server ends its turns while answering
// turn/start; the real CLI when a turn fails at once) turn/completed often
// arrives first (measured: 3 rounds in 40 with -race, 14 in 40 without).
// Here a stub codex actor routes turn/completed as soon as the round
// subscribes, and turn/start reaches the fake only after that: the order
// is certain. The round must still name
// its thread in the verdict, unsubscribe (or the user's app-server counts
// as busy forever: no idle eviction, never an LRU victim) and journal the
// user's message.
func TestSupervisionTurnEndBeforeTurnStarted(t *testing.T) {
	tree := runStubRound(t, "mesh/race", func(c *actor.Context, m subscribe) {
		params, _ := json.Marshal(map[string]any{"threadId": m.threadID,
			"turn": map[string]any{"id": "0199a0a0-0000-7000-8000-0000000000aa", "status": "completed", "items": []any{}}})
		c.Send(m.round, roundNote{note: &codexrpc.Notification{Method: codexrpc.NoteTurnCompleted, Params: params}})
	})
	v := tree.verdict(t)
	thread := <-tree.threads
	var bugs []string
	if v.CodexThreadID != thread {
		bugs = append(bugs, fmt.Sprintf("the verdict names thread %q, not %q", v.CodexThreadID, thread))
	}
	select {
	case <-tree.unsubs:
	case <-time.After(time.Second):
		bugs = append(bugs, "the round never unsubscribed from the thread")
	}
	select {
	case <-tree.journal:
	case <-time.After(time.Second):
		bugs = append(bugs, "the user's message was not journaled")
	}
	if len(bugs) > 0 {
		t.Fatalf("turn/completed routed before the driver's turnStarted (verdict %+v): %s",
			v, strings.Join(bugs, "; "))
	}
}

// ---------------------------------------------------------------------------
// Stopping an app-server ends its process group.

// TestSupervisionStopEndsAppServerGroup: an app-server is started in its
// own process group so that a stop reaches everything it started, and a
// stop also ends the descendants it finds outside that group (a command in
// a session of its own, like the real CLI's shell-snapshot shell). When the
// app-server exits politely at stdin EOF, neither may outlive it.
func TestSupervisionStopEndsAppServerGroup(t *testing.T) {
	l, err := fakeappserver.Relaunch(fakeappserver.Config{}, "")
	if err != nil {
		t.Fatal(err)
	}
	// The launcher leaves a background process in the app-server's group,
	// and one in a session of its own, as codex does with the shell it runs
	// for its snapshot.
	script := filepath.Join(t.TempDir(), "codex")
	body := "#!/bin/sh\nsleep 60 </dev/null >/dev/null 2>&1 &\nsetsid sleep 61 </dev/null >/dev/null 2>&1 &\n" +
		"exec '" + l.Path + "' \"$@\"\n"
	if err := os.WriteFile(script, []byte(body), 0o755); err != nil {
		t.Fatal(err)
	}
	h, _ := supHarness(t, func(c *Config) {
		c.CodexBin, c.CodexArgs = script, l.Args
		c.CodexEnv = append(c.CodexEnv, l.Env...)
		c.StopGrace = 200 * time.Millisecond
	})
	c := h.caller()
	mustStatus(t, h.round(c, messages.StartRound{User: "alice", Thread: "mesh/g", Text: "hi"}), messages.StatusCompleted)
	group := liveAppServerPID(t, h, "alice")
	poll(t, waitFor, "the launcher's two sleeps", func() bool { return len(appServersUnder(h.cfg.Homes)) == 3 })
	ctx, cancel := context.WithTimeout(context.Background(), waitFor)
	defer cancel()
	<-h.engine.PoisonCtx(ctx, h.root).Done()
	waitGone(t, group, waitFor)
	// The strays are SIGKILLed by the stop; one may still be on its way out
	// (state R with the kill pending) for a moment after it.
	var left []string
	deadline := time.Now().Add(waitFor)
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	for {
		left = left[:0]
		for _, pid := range appServersUnder(h.cfg.Homes) {
			left = append(left, proctest.Describe(pid))
		}
		if len(left) == 0 || time.Now().After(deadline) {
			break
		}
		<-tick.C
	}
	if len(left) > 0 {
		t.Errorf("the app-server exited at stdin EOF and its stop left its process group behind: %s",
			strings.Join(left, "; "))
	}
}
