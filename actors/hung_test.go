package actors

import (
	"fmt"
	"os"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	"github.com/meshweaver/supervisor/demomodel"
	"github.com/meshweaver/supervisor/messages"
	"github.com/meshweaver/supervisor/testkit/fakeappserver"
	"github.com/meshweaver/supervisor/testkit/proctest"
)

// counterValue reads a counter.
func counterValue(t *testing.T, c prometheus.Counter) float64 {
	t.Helper()
	var d dto.Metric
	if err := c.Write(&d); err != nil {
		t.Fatal(err)
	}
	return d.GetCounter().GetValue()
}

// stopGroup SIGSTOPs an app-server's process group: it is alive and its
// pipes are open, but it answers nothing (a hung CLI, as kill -STOP shows).
//
// kill returns once the signal is pending, not once the group is stopped:
// one thread of each process takes it and stops the others only when it
// runs. On a loaded machine that was seen 55ms later, while another thread
// of the fake read round two's turn/start and ran the whole turn (the
// round completed on the "stopped" process, which then sat stopped and
// idle, with nothing to time out). So it returns once every thread of the
// group is stopped.
func stopGroup(t *testing.T, pid int) {
	t.Helper()
	if err := syscall.Kill(-pid, syscall.SIGSTOP); err != nil {
		t.Fatalf("SIGSTOP %d: %v", pid, err)
	}
	poll(t, waitFor, fmt.Sprintf("process group %d to stop", pid), func() bool { return groupStopped(pid) })
}

// groupStopped reports that process group pgid has members and every live
// thread of each is stopped (state T, or t when traced).
func groupStopped(pgid int) bool {
	members := proctest.GroupMembers(pgid)
	if len(members) == 0 {
		return false
	}
	for _, p := range members {
		tasks, err := os.ReadDir(fmt.Sprintf("/proc/%d/task", p.PID))
		if err != nil {
			return false
		}
		for _, e := range tasks {
			tid, err := strconv.Atoi(e.Name())
			if err != nil {
				continue
			}
			// A thread's stat is at /proc/TID/stat too.
			if th, ok := proctest.Read(tid); ok && th.Live() && th.State != 'T' && th.State != 't' {
				return false
			}
		}
	}
	return true
}

// hungCallTimeout is the CallTimeout of the tests of a hung app-server:
// every call of a live one (the fake or the real CLI), its start and
// initialize included, answers well within it even under -race on a
// loaded 2-core machine, where a fresh fake's initialize took over a
// second and the real CLI's over two.
const hungCallTimeout = 5 * time.Second

// A round waiting on an app-server that stops answering mid-turn gets its
// verdict from the periodic health call (not from the stall deadline, ten
// minutes off); the process is killed, counted as hung, and the next round
// runs on a fresh one.
func TestHungAppServerReplacedMidRound(t *testing.T) {
	// Long enough for a fresh fake to start and answer initialize on a
	// loaded machine (with 1s the next round's start timed out under CI
	// load); the bound below is still minutes short of the stall deadline.
	const callTimeout = hungCallTimeout
	m := NewMetrics(nil)
	h := supHarness(t, heldFake(t, fakeappserver.Config{}),
		func(c *tree) { c.CallTimeout, c.Metrics = callTimeout, m })
	c := h.caller()
	h.roundAsync(c, messages.StartRound{User: "alice", Thread: "mesh/h", Text: "hi", RoundID: "h-1"})
	c.waitFirstEvent(t, "h-1", waitFor)
	pid := liveAppServerPID(t, h, "alice")
	stopGroup(t, pid)
	start := time.Now()
	r := c.collect(t, "h-1", 30*time.Second)
	took := time.Since(start)
	t.Logf("the round on the stopped app-server got its verdict %v after the stop", took)
	mustStatus(t, r, messages.StatusFailed)
	if !strings.Contains(r.verdict.Error, "stopped answering") {
		t.Errorf("verdict error %q does not say the app-server stopped answering", r.verdict.Error)
	}
	// Silent for a call's length, then a health call of at most that long,
	// noticed within a tick (a quarter of it).
	if limit := 3*callTimeout + 2*time.Second; took > limit {
		t.Errorf("the hung app-server was noticed after %v, want within %v", took, limit)
	}
	waitGone(t, pid, waitFor)
	if got := counterValue(t, m.Hung); got != 1 {
		t.Errorf("hung app-servers counted = %v, want 1", got)
	}
	if got := counterValue(t, m.Deaths); got != 1 {
		t.Errorf("deaths counted = %v, want 1", got)
	}
	h.heldRound(c, messages.StartRound{User: "alice", Thread: "mesh/h", Text: "again", RoundID: "h-2"})
	if got := liveAppServerPID(t, h, "alice"); got == pid {
		t.Errorf("the next round ran on the hung app-server %d", pid)
	}
	if got := counterValue(t, m.Restarts); got != 1 {
		t.Errorf("restarts counted = %v, want 1", got)
	}
}

// An app-server that stops answering between rounds is killed by a health
// call (the one a timed-out call asks for, or the tick's while a round
// waits on a silent process): at most one round fails by its deadline, and
// the round after completes on a fresh process and resumes the thread,
// instead of every later round failing by timeout until idle eviction.
func TestHungAppServerReplacedBetweenRounds(t *testing.T) {
	const callTimeout = hungCallTimeout // see TestHungAppServerReplacedMidRound
	m := NewMetrics(nil)
	h := supHarness(t, withFake(t, fakeappserver.Config{}),
		func(c *tree) { c.CallTimeout, c.Metrics = callTimeout, m })
	c := h.caller()
	r1 := h.round(c, messages.StartRound{User: "bob", Thread: "mesh/b", Text: "one"})
	mustStatus(t, r1, messages.StatusCompleted)
	pid := liveAppServerPID(t, h, "bob")
	stopGroup(t, pid)
	r2 := h.round(c, messages.StartRound{User: "bob", Thread: "mesh/b", Text: "two"})
	switch r2.verdict.Status {
	case messages.StatusFailed:
	case messages.StatusCompleted:
		// A health call in flight when the process stopped (asked for by a
		// slow call of the first round) replaced it before this round.
		if got := appServerPID(t, h, "bob"); got == pid {
			t.Errorf("round two completed on the stopped app-server %d", pid)
		}
	default:
		t.Errorf("round two: verdict %+v, want failed (or completed on a fresh process)", r2.verdict)
	}
	waitGone(t, pid, waitFor)
	r3 := h.round(c, messages.StartRound{User: "bob", Thread: "mesh/b", Text: "three"})
	mustStatus(t, r3, messages.StatusCompleted)
	if !r3.verdict.Resumed || r3.verdict.CodexThreadID != r1.verdict.CodexThreadID {
		t.Errorf("the round after the hang did not resume the thread: %+v (first %+v)", r3.verdict, r1.verdict)
	}
	if got := counterValue(t, m.Hung); got != 1 {
		t.Errorf("hung app-servers counted = %v, want 1", got)
	}
}

// A method the app-server never answers is not a hung app-server: the
// health call its deadline asks for is answered, and nothing is killed.
func TestSlowMethodIsNotHung(t *testing.T) {
	const callTimeout = hungCallTimeout // the fake answers a health call well within it, even on a busy machine
	m := NewMetrics(nil)
	h := supHarness(t, withFake(t, fakeappserver.Config{HangOnMethod: "thread/start"}),
		func(c *tree) { c.CallTimeout, c.Metrics = callTimeout, m })
	c := h.caller()
	r := h.round(c, messages.StartRound{User: "carol", Thread: "mesh/s", Text: "hi"})
	mustStatus(t, r, messages.StatusFailed)
	pid := liveAppServerPID(t, h, "carol")
	r = h.round(c, messages.StartRound{User: "carol", Thread: "mesh/s", Text: "hi"})
	mustStatus(t, r, messages.StatusFailed)
	if got := liveAppServerPID(t, h, "carol"); got != pid {
		t.Errorf("the app-server was replaced (%d → %d) though it answered", pid, got)
	}
	if got := counterValue(t, m.Hung) + counterValue(t, m.Deaths); got != 0 {
		t.Errorf("hung + deaths counted = %v, want 0", got)
	}
}

// The real CLI, stopped with SIGSTOP between rounds (the fault of issue
// 11 as it was seen): one round fails by its deadline, the health call it
// asks for kills the app-server, and the next round resumes the thread on a
// fresh one. The CLI's own behaviour is the point: it answers the health
// call while it runs, and a stopped one answers nothing.
func TestRealCLIHungAppServerReplaced(t *testing.T) {
	// The real CLI's start and initialize are bounded by it too: with 2s
	// the first round's initialize timed out in a loaded full run.
	const callTimeout = hungCallTimeout
	m := NewMetrics(nil)
	h := supHarness(t, realCLI, func(c *tree) { c.CallTimeout, c.Metrics = callTimeout, m })
	c := h.caller()
	h.model.Enqueue(demomodel.Text("one"))
	r1 := h.round(c, messages.StartRound{User: "dora", Thread: "mesh/real", Text: "one"})
	mustStatus(t, r1, messages.StatusCompleted)
	pid := liveAppServerPID(t, h, "dora")
	stopGroup(t, pid)
	start := time.Now()
	r2 := h.round(c, messages.StartRound{User: "dora", Thread: "mesh/real", Text: "two"})
	mustStatus(t, r2, messages.StatusFailed)
	t.Logf("the round on the stopped app-server failed after %v: %s", time.Since(start), r2.verdict.Error)
	waitGone(t, pid, waitFor)
	h.model.Enqueue(demomodel.Text("three"))
	start = time.Now()
	r3 := h.round(c, messages.StartRound{User: "dora", Thread: "mesh/real", Text: "three"})
	mustStatus(t, r3, messages.StatusCompleted)
	t.Logf("the next round completed after %v", time.Since(start))
	if !r3.verdict.Resumed || r3.verdict.CodexThreadID != r1.verdict.CodexThreadID || r3.text() != "three" {
		t.Errorf("the round after the hang: text %q, verdict %+v; want thread %s resumed", r3.text(), r3.verdict, r1.verdict.CodexThreadID)
	}
	if got := counterValue(t, m.Hung); got != 1 {
		t.Errorf("hung app-servers counted = %v, want 1", got)
	}
}
