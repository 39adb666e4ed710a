package actors

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/meshweaver/supervisor/messages"
	"github.com/meshweaver/supervisor/testkit/fakeappserver"
	"github.com/meshweaver/supervisor/testkit/proctest"
)

// Idle eviction and the node's cap.

// TestEvictIdleThenResume: an app-server idle for IdleTimeout is stopped;
// the next round starts a fresh one and resumes the thread.
func TestEvictIdleThenResume(t *testing.T) {
	const idle = 300 * time.Millisecond
	h := supHarness(t, heldFake(t, fakeappserver.Config{}), func(c *tree) { c.IdleTimeout = idle })
	events := tapEvents(t, h.engine)
	c := h.caller()
	// held runs a round whose turn is held until the app-server's pid is
	// read: the app-server is busy meanwhile, so not evicted. (Read after
	// the verdict, on a loaded machine the pid was gone already, evicted
	// as it should be.) It returns when the interrupt was sent: the
	// app-server's last use comes after that.
	held := func(id, text string) (r roundResult, pid int, sent time.Time) {
		t.Helper()
		h.roundAsync(c, messages.StartRound{User: "alice", Thread: "mesh/e", Text: text, RoundID: id})
		c.waitFirstEvent(t, id, waitFor)
		pid = liveAppServerPID(t, h, "alice")
		sent = time.Now()
		h.engine.SendWithSender(h.root, messages.InterruptRound{User: "alice", Thread: "mesh/e", RoundID: id}, c.pid)
		r = c.collect(t, id, waitFor)
		mustStatus(t, r, messages.StatusInterrupted)
		return r, pid, sent
	}
	r1, pid1, sent := held("e-1", "one")

	ev := waitEvent(t, events, 0, waitFor, "of an idle eviction",
		func(e AppServerEvicted) bool { return strings.HasPrefix(e.Why, "idle for") })
	if since := ev.At.Sub(sent); since < idle {
		t.Errorf("evicted %v after the round's interrupt, IdleTimeout is %v", since, idle)
	}
	waitGone(t, pid1, waitFor)
	poll(t, waitFor, "the pid record to go", func() bool { return appServerPID(t, h, "alice") == 0 })

	r2, pid2, _ := held("e-2", "two")
	if !r2.verdict.Resumed || r2.verdict.CodexThreadID != r1.verdict.CodexThreadID {
		t.Errorf("after eviction: verdict %+v, want thread %s resumed", r2.verdict, r1.verdict.CodexThreadID)
	}
	if pid2 == pid1 {
		t.Errorf("the round after eviction ran on the evicted process %d", pid1)
	}
}

// TestEvictLRUCapKeepsPinnedLogin: with MaxLive=1 starting a second user's
// app-server stops the first, idle one; one pinned by a login in progress
// is kept.
func TestEvictLRUCapKeepsPinnedLogin(t *testing.T) {
	h := supHarness(t, heldFake(t, fakeappserver.Config{}), func(c *tree) { c.MaxLive = 1 })
	events := tapEvents(t, h.engine)
	c := h.caller()
	h.heldRound(c, messages.StartRound{User: "alice", Thread: "mesh/l", Text: "one"})
	alice := liveAppServerPID(t, h, "alice")

	// carol's login starts (and pins) her app-server: alice's, idle, goes.
	h.engine.SendWithSender(h.root, messages.StartLogin{User: "carol"}, c.pid)
	waitMsg[messages.LoginChallenge](t, c, waitFor)
	carol := liveAppServerPID(t, h, "carol")
	waitEvent(t, events, 0, waitFor, "of alice's eviction for the cap", func(e AppServerEvicted) bool {
		return e.User == "alice" && strings.Contains(e.Why, "cap")
	})
	waitGone(t, alice, waitFor)

	// dave's start finds carol's app-server pinned: it stays.
	from := events.mark()
	h.heldRound(c, messages.StartRound{User: "dave", Thread: "mesh/l", Text: "two"})
	if !proctest.Alive(carol) {
		t.Fatalf("carol's app-server, pinned by her login, was stopped")
	}
	if n := countEvents(events, from, func(e AppServerEvicted) bool { return e.User == "carol" }); n != 0 {
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
	h := supHarness(t, heldFake(t, fakeappserver.Config{}), func(c *tree) { c.MaxLive = 1 })
	c := h.caller()
	h.engine.SendWithSender(h.root, messages.StartLogin{User: "carol"}, c.pid)
	waitMsg[messages.LoginChallenge](t, c, waitFor)
	h.heldRound(c, messages.StartRound{User: "dave", Thread: "mesh/x", Text: "one"})
	// Two live, over the cap of one, as carol's login needs its process.
	h.engine.SendWithSender(h.root, messages.CancelLogin{User: "carol"}, c.pid)
	waitMsg[messages.LoginFinished](t, c, waitFor)
	h.heldRound(c, messages.StartRound{User: "erin", Thread: "mesh/x", Text: "two"})
	// The victims' stops (StopGrace each) may take seconds on a loaded
	// machine; a node that stays over the cap stays so for ever.
	poll(t, waitFor, "one live app-server with MaxLive=1 and none busy, after erin's start: a node once over "+
		"the cap must get back under it (one victim per start kept it over)",
		func() bool { return len(appServersUnder(h.cfg.Homes)) <= 1 })
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
	h := supHarness(t, func(c *tree) {
		c.CodexBin, c.CodexArgs = script, slow.Args
		c.CodexEnv = append(c.CodexEnv, append(slow.Env, "FAKE_NORMAL="+normal)...)
		c.MaxLive = 1
		c.CallTimeout = hungCallTimeout // bob's fresh fake starts within it on a loaded machine
	})
	events := tapEvents(t, h.engine)
	ca, cb := h.caller(), h.caller()
	h.roundAsync(ca, messages.StartRound{User: "alice", Thread: "mesh/s", Text: "slow", RoundID: "s-1"})
	waitEvent(t, events, 0, waitFor, "of alice's app-server ready", func(e AppServerReady) bool { return e.User == "alice" })
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
	h := supHarness(t, heldFake(t, fakeappserver.Config{}), func(c *tree) {
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
