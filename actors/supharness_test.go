package actors

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"testing"
	"time"

	"github.com/meshweaver/supervisor/third_party/hollywood/actor"

	"github.com/meshweaver/supervisor/messages"
	"github.com/meshweaver/supervisor/store"
	"github.com/meshweaver/supervisor/testkit/fakeappserver"
	"github.com/meshweaver/supervisor/testkit/proctest"
)

// Helpers shared by the tests of the tree (supHarness, the log tap, the
// fake variants, waits), split by topic into the files around this one.

// waitFor bounds every wait of these tests: nothing here sleeps to wait for
// an outcome.
const waitFor = 15 * time.Second

// withFake points the tree at the fake app-server (this test binary
// re-executed, see main_test.go) configured by fc.
func withFake(t testing.TB, fc fakeappserver.Config) func(*tree) {
	t.Helper()
	l, err := fakeappserver.Relaunch(fc, "")
	if err != nil {
		t.Fatal(err)
	}
	return func(c *tree) {
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
func heldFake(t testing.TB, fc fakeappserver.Config) func(*tree) {
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
func realCLI(c *tree) { c.Overrides = append(c.Overrides, "features.shell_snapshot=false") }

// supHarness is newHarness with a check, after the tree has stopped, that
// no app-server (real or fake) of its homes is left. Tests wait for what
// the tree did on its events (tapEvents), not on its log.
func supHarness(t *testing.T, mutates ...func(*tree)) *harness {
	t.Helper()
	homes := t.TempDir()
	t.Cleanup(func() { checkNoAppServers(t, homes) }) // runs after the tree's cleanup
	return newHarness(t, func(c *tree) {
		c.Homes = homes
		for _, m := range mutates {
			m(c)
		}
	})
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
