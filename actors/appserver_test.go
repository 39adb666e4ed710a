package actors

import (
	"go/ast"
	"go/parser"
	"go/token"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/meshweaver/supervisor/messages"
	"github.com/meshweaver/supervisor/testkit/fakeappserver"
)

// A CLI may write turn/start's answer after the turn's turn/started and
// item notifications: the answer reaches the round through the app-server
// actor in that wire order, and the round still gets everything (every
// delta, its thread, its record for the next round's resume).
func TestTurnResultAfterNotifications(t *testing.T) {
	h := supHarness(t, withFake(t, fakeappserver.Config{ReplyText: "one two three", TurnResultLast: true}))
	c := h.caller()
	for i := range 5 {
		r := h.round(c, messages.StartRound{User: "ann", Thread: "mesh/order", Text: "hi " + itoa(i)})
		mustStatus(t, r, messages.StatusCompleted)
		if got := r.text(); got != "one two three" {
			t.Errorf("round %d: text %q, want every delta", i, got)
		}
		if r.verdict.CodexThreadID == "" {
			t.Errorf("round %d: the verdict names no thread", i)
		}
		if i > 0 && !r.verdict.Resumed {
			t.Errorf("round %d: not resumed (the first round's record is missing): %+v", i, r.verdict)
		}
	}
}

// A second round on a thread still loaded with the same settings runs on
// it as it is: no thread/unsubscribe, no thread/resume. Other developer
// instructions reload it (unsubscribe and resume), and so does a process
// restart, which forgets what it held.
func TestWarmThreadNotResumedAgain(t *testing.T) {
	record := filepath.Join(t.TempDir(), "received.jsonl")
	m := NewMetrics(nil)
	h := supHarness(t, withFake(t, fakeappserver.Config{RecordPath: record}), func(c *tree) { c.Metrics = m })
	c := h.caller()
	r1 := h.round(c, messages.StartRound{User: "wes", Thread: "mesh/w", Text: "one", DeveloperInstructions: "be brief"})
	mustStatus(t, r1, messages.StatusCompleted)
	r2 := h.round(c, messages.StartRound{User: "wes", Thread: "mesh/w", Text: "two", DeveloperInstructions: "be brief"})
	mustStatus(t, r2, messages.StatusCompleted)
	reqs := recordedRequests(t, record)
	if n, u := countMethod(reqs, "thread/resume"), countMethod(reqs, "thread/unsubscribe"); n != 0 || u != 0 {
		t.Errorf("the warm round made %d thread/resume and %d thread/unsubscribe calls, want none", n, u)
	}
	if !r2.verdict.Resumed || r2.verdict.CodexThreadID != r1.verdict.CodexThreadID || r2.text() == "" {
		t.Errorf("warm round: %+v (text %q), want the first round's thread, resumed, streamed", r2.verdict, r2.text())
	}
	if got := counterValue(t, m.WarmThreads); got != 1 {
		t.Errorf("warm opens counted = %v, want 1", got)
	}
	r3 := h.round(c, messages.StartRound{User: "wes", Thread: "mesh/w", Text: "three", DeveloperInstructions: "be verbose"})
	mustStatus(t, r3, messages.StatusCompleted)
	reqs = recordedRequests(t, record)
	if n, u := countMethod(reqs, "thread/resume"), countMethod(reqs, "thread/unsubscribe"); n != 1 || u != 1 {
		t.Errorf("changed instructions made %d thread/resume and %d thread/unsubscribe calls, want 1 and 1", n, u)
	}
	if !r3.verdict.Resumed || r3.verdict.CodexThreadID != r1.verdict.CodexThreadID {
		t.Errorf("reloaded round: %+v, want the first round's thread resumed", r3.verdict)
	}
}

// Threads idle for ThreadIdle are unloaded: the next round resumes.
func TestIdleThreadUnloaded(t *testing.T) {
	record := filepath.Join(t.TempDir(), "received.jsonl")
	h := supHarness(t, withFake(t, fakeappserver.Config{RecordPath: record}),
		func(c *tree) { c.ThreadIdle = 100 * time.Millisecond })
	c := h.caller()
	r1 := h.round(c, messages.StartRound{User: "ida", Thread: "mesh/i", Text: "one"})
	mustStatus(t, r1, messages.StatusCompleted)
	poll(t, waitFor, "the idle thread to be unloaded", func() bool {
		return countMethod(recordedRequests(t, record), "thread/unsubscribe") == 1
	})
	r2 := h.round(c, messages.StartRound{User: "ida", Thread: "mesh/i", Text: "two"})
	mustStatus(t, r2, messages.StatusCompleted)
	if n := countMethod(recordedRequests(t, record), "thread/resume"); n != 1 || !r2.verdict.Resumed {
		t.Errorf("after unloading: %d thread/resume calls, verdict %+v; want one resume", n, r2.verdict)
	}
}

// WarmUp starts the user's app-server and loads the mesh thread with the
// next round's settings: that round makes no thread/resume.
func TestWarmUpLoadsThread(t *testing.T) {
	record := filepath.Join(t.TempDir(), "received.jsonl")
	h := supHarness(t, withFake(t, fakeappserver.Config{RecordPath: record}))
	c := h.caller()
	r1 := h.round(c, messages.StartRound{User: "val", Thread: "mesh/v", Text: "one"})
	mustStatus(t, r1, messages.StatusCompleted)
	// A restart forgets the loaded threads: stop the app-server.
	// (The round's unsubscribe reaches the app-server actor around its
	// verdict: until then the app-server is not idle, and evictNow does
	// nothing.)
	pid := liveAppServerPID(t, h, "val")
	poll(t, waitFor, "the idle app-server to stop", func() bool {
		h.engine.Send(h.childPID("user/val/codex/main"), evictNow{})
		return syscall.Kill(pid, 0) != nil
	})

	h.engine.SendWithSender(h.root, messages.WarmUp{User: "val", Thread: "mesh/v"}, c.pid)
	deadline := time.After(waitFor)
	for warmed := false; !warmed; {
		select {
		case msg := <-c.ch:
			if w, ok := msg.(messages.WarmedUp); ok {
				if w.Error != "" || w.User != "val" {
					t.Fatalf("WarmedUp = %+v", w)
				}
				warmed = true
			}
		case <-deadline:
			t.Fatal("no WarmedUp")
		}
	}
	if n := countMethod(recordedRequests(t, record), "thread/resume"); n != 1 {
		t.Fatalf("the warm-up made %d thread/resume calls, want 1", n)
	}
	r2 := h.round(c, messages.StartRound{User: "val", Thread: "mesh/v", Text: "two"})
	mustStatus(t, r2, messages.StatusCompleted)
	if n := countMethod(recordedRequests(t, record), "thread/resume"); n != 1 || !r2.verdict.Resumed {
		t.Errorf("the round after the warm-up: %d thread/resume calls in all, verdict %+v; want it warm", n, r2.verdict)
	}
	// An invalid one is refused.
	h.engine.SendWithSender(h.root, messages.WarmUp{}, c.pid)
	deadline = time.After(waitFor)
	for {
		select {
		case msg := <-c.ch:
			if rj, ok := msg.(messages.Rejected); ok {
				if !strings.Contains(rj.Reason, "user is empty") {
					t.Errorf("rejected %+v", rj)
				}
				return
			}
		case <-deadline:
			t.Fatal("an invalid WarmUp was not rejected")
		}
	}
}

// An app-server that hangs while a round opens its thread: the call's
// deadline asks for a health call, which goes unanswered; the round gets a
// failed verdict within about two call timeouts, the process is killed and
// counted as hung, and the next round runs on a fresh one.
func TestHungDuringOpenThread(t *testing.T) {
	const callTimeout = hungCallTimeout // it bounds the fresh fake's start too (see hung_test.go)
	m := NewMetrics(nil)
	h := supHarness(t, withFake(t, fakeappserver.Config{}), func(c *tree) { c.CallTimeout, c.Metrics = callTimeout, m })
	c := h.caller()
	mustStatus(t, h.round(c, messages.StartRound{User: "hal", Thread: "mesh/h1", Text: "one"}), messages.StatusCompleted)
	pid := liveAppServerPID(t, h, "hal")
	stopGroup(t, pid)
	start := time.Now()
	r := h.round(c, messages.StartRound{User: "hal", Thread: "mesh/h2", Text: "two"})
	took := time.Since(start)
	t.Logf("the round opening a thread on the stopped app-server got its verdict after %v: %s", took, r.verdict.Error)
	mustStatus(t, r, messages.StatusFailed)
	if limit := 3*callTimeout + 2*time.Second; took > limit {
		t.Errorf("the round on the hung app-server got its verdict after %v, want within %v", took, limit)
	}
	waitGone(t, pid, waitFor)
	if got := counterValue(t, m.Hung); got != 1 {
		t.Errorf("hung app-servers counted = %v, want 1", got)
	}
	r3 := h.round(c, messages.StartRound{User: "hal", Thread: "mesh/h2", Text: "three"})
	mustStatus(t, r3, messages.StatusCompleted)
	if got := liveAppServerPID(t, h, "hal"); got == pid {
		t.Errorf("the next round ran on the hung app-server %d", pid)
	}
}

// With the real CLI: a second round on a thread still loaded with the same
// settings makes no thread/resume (the warm-open counter moves, the
// resume counter does not), and still streams and records; changed
// developer instructions reload the thread.
func TestWarmThreadRealCLI(t *testing.T) {
	m := NewMetrics(nil)
	h := supHarness(t, realCLI, func(c *tree) { c.Metrics = m })
	c := h.caller()
	r1 := h.round(c, messages.StartRound{User: "rae", Thread: "mesh/real", Text: "hi", DeveloperInstructions: "be brief"})
	mustStatus(t, r1, messages.StatusCompleted)
	r2 := h.round(c, messages.StartRound{User: "rae", Thread: "mesh/real", Text: "again", DeveloperInstructions: "be brief"})
	mustStatus(t, r2, messages.StatusCompleted)
	if got := counterValue(t, m.ThreadResumes); got != 0 {
		t.Errorf("thread/resume calls = %v, want 0 for the warm round", got)
	}
	if got := counterValue(t, m.WarmThreads); got != 1 {
		t.Errorf("warm opens = %v, want 1", got)
	}
	if r2.text() == "" || !r2.verdict.Resumed || r2.verdict.CodexThreadID != r1.verdict.CodexThreadID {
		t.Errorf("warm round: %+v (text %q)", r2.verdict, r2.text())
	}
	r3 := h.round(c, messages.StartRound{User: "rae", Thread: "mesh/real", Text: "more", DeveloperInstructions: "be verbose"})
	mustStatus(t, r3, messages.StatusCompleted)
	if got := counterValue(t, m.ThreadResumes); got != 1 {
		t.Errorf("thread/resume calls after changed instructions = %v, want 1", got)
	}
	if !r3.verdict.Resumed || r3.verdict.CodexThreadID != r1.verdict.CodexThreadID || r3.text() == "" {
		t.Errorf("reloaded round: %+v", r3.verdict)
	}
}

// The round and login actors are state machines driven by messages: their
// calls are the app-server actor's, and they start no goroutine.
func TestRoundAndLoginStartNoGoroutine(t *testing.T) {
	for _, file := range []string{"round.go", "login.go"} {
		f, err := parser.ParseFile(token.NewFileSet(), file, nil, 0)
		if err != nil {
			t.Fatal(err)
		}
		ast.Inspect(f, func(n ast.Node) bool {
			if _, ok := n.(*ast.GoStmt); ok {
				t.Errorf("%s has a go statement", file)
			}
			return true
		})
	}
}
