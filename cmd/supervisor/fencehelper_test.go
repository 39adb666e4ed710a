package main

import (
	"log/slog"
	"syscall"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/meshweaver/supervisor/cluster"
	"github.com/meshweaver/supervisor/testkit/proctest"
	"github.com/meshweaver/supervisor/testkit/syncbuf"
)

// TestFenceHelperStartedAgain: the daemon keeps its fence helper
// running. A helper SIGKILLed while the daemon serves is started again
// and written the last fence time, which it then enforces (it kills the
// fake daemon's app-server once that time passes: without the time
// written again it would know none). A helper that stops reading (here
// SIGSTOPped, its pipe filled) is killed at the first write it does not
// take within writeWait and started again, so renewals never wait on it.
// Each restart is counted; the daemon's stop ends the last helper and
// starts none.
func TestFenceHelperStartedAgain(t *testing.T) {
	dir := t.TempDir()
	exe := opsBuild(t, dir)
	sh, app := fakeDaemonScript(t, "setsid sleep 60 & echo $!; exec sleep 60")
	var logs syncbuf.Buffer
	restarts := prometheus.NewCounter(prometheus.CounterOpts{Name: "restarts"})
	h := newFenceHelper(exe, sh.Process.Pid, []string{"--member", "m1", "--poll", "10ms"}, &logs,
		slog.New(slog.NewTextHandler(&logs, nil)), restarts)
	h.writeWait, h.restartWait = 200*time.Millisecond, 50*time.Millisecond
	if err := h.start(); err != nil {
		t.Fatal(err)
	}
	stopped := false
	t.Cleanup(func() {
		if !stopped {
			h.stop()
		}
	})
	restarted := func(from int, n float64) int {
		t.Helper()
		var now int
		if !proctest.Poll(10*time.Second, 10*time.Millisecond, func() bool {
			now = h.pid()
			return now != 0 && now != from && testutil.ToFloat64(restarts) == n
		}) {
			t.Fatalf("the helper %d was not started again (now %d, %v restarts):\n%s", from, now, testutil.ToFloat64(restarts), logs.String())
		}
		return now
	}

	// A fence time 1.5 s away, then the helper's death.
	at := cluster.BootNow().Add(1500 * time.Millisecond)
	h.deadline(at, 42)
	first := h.pid()
	if err := syscall.Kill(first, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	second := restarted(first, 1)
	if !proctest.Alive(app) {
		t.Fatal("the app-server died before its fence time")
	}
	if !proctest.Poll(10*time.Second, 10*time.Millisecond, func() bool { return !proctest.Alive(app) }) {
		t.Fatalf("the helper started again did not enforce the last fence time:\n%s", logs.String())
	}
	if now := cluster.BootNow(); now.Before(at) {
		t.Fatalf("the app-server was killed %v before its fence time", at.Sub(now))
	}

	// A helper that reads nothing: the writes fill its pipe, the first
	// one not taken kills it.
	if err := syscall.Kill(second, syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	far := cluster.BootNow().Add(time.Hour)
	for i := 0; h.pid() == second && i < 100000; i++ {
		h.deadline(far, 42)
	}
	third := restarted(second, 2)
	if proctest.Alive(second) {
		t.Errorf("the stopped helper %d lives on", second)
	}

	h.stop()
	stopped = true
	if proctest.Alive(third) {
		t.Errorf("the last helper %d outlived the daemon's stop", third)
	}
	if got := testutil.ToFloat64(restarts); got != 2 {
		t.Errorf("restarts counted = %v, want 2", got)
	}
}
