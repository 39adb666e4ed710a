package main

import (
	"context"
	"log/slog"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"testing/synctest"
	"time"
)

// feedWatchdog, in a bubble, with a 10 s interval: it feeds at once and
// then every 5 s while the tree answers; a tree that stops answering gets
// no feed (the longest gap reaches the interval, when systemd restarts the
// daemon), and one that answers again is fed again, every 5 s; the feeding
// ends with its context.
func TestFeedWatchdogWhileTheTreeAnswers(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		start := time.Now()
		var mu sync.Mutex
		var feeds []time.Duration // since start
		notify := func(states ...string) {
			if !slices.Equal(states, []string{"WATCHDOG=1"}) {
				t.Errorf("notify%q, want WATCHDOG=1", states)
			}
			mu.Lock()
			defer mu.Unlock()
			feeds = append(feeds, time.Since(start))
		}
		fed := func() []time.Duration {
			synctest.Wait()
			mu.Lock()
			defer mu.Unlock()
			return slices.Clone(feeds)
		}
		var wedged atomic.Bool
		alive := func(ctx context.Context) error {
			if wedged.Load() {
				<-ctx.Done() // the root's mailbox is not served
				return ctx.Err()
			}
			return nil
		}
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan struct{})
		go func() {
			defer close(done)
			feedWatchdog(ctx, 10*time.Second, alive, notify, slog.New(slog.DiscardHandler))
		}()
		s := time.Second
		time.Sleep(21 * s)
		if got, want := fed(), []time.Duration{0, 5 * s, 10 * s, 15 * s, 20 * s}; !slices.Equal(got, want) {
			t.Errorf("answering tree: fed at %v, want %v", got, want)
		}
		wedged.Store(true)
		time.Sleep(30 * s) // to 51 s
		if got := fed(); len(got) != 5 {
			t.Errorf("wedged tree from 21 s to 51 s: fed at %v, want no feed after 20 s", got)
		}
		wedged.Store(false)
		// The ping that started at 50 s fails at 55 s; the next, at 55 s,
		// is answered.
		time.Sleep(15 * s) // to 66 s
		if got, want := fed()[5:], []time.Duration{55 * s, 60 * s, 65 * s}; !slices.Equal(got, want) {
			t.Errorf("tree answering again from 51 s: fed at %v, want %v", got, want)
		}
		cancel()
		<-done
		n := len(fed())
		time.Sleep(time.Minute)
		if got := fed(); len(got) != n {
			t.Errorf("fed after its context ended: %v", got[n:])
		}
	})
}

// TestServeFeedsTheWatchdog runs the built binary as systemd runs a unit
// with WatchdogSec=2: WATCHDOG_USEC and WATCHDOG_PID (its own pid cannot
// be known before the start, so none: any pid may feed) next to
// $NOTIFY_SOCKET. After READY=1 it sends WATCHDOG=1 again and again, and
// STOPPING=1 at SIGTERM, after which no feed follows.
func TestServeFeedsTheWatchdog(t *testing.T) {
	b := newBinaryServe(t)
	sock, states := notifySocket(t)
	t.Setenv("NOTIFY_SOCKET", sock)
	t.Setenv("WATCHDOG_USEC", strconv.Itoa(int((2 * time.Second).Microseconds())))
	srv := opsStartServe(t, b.exe, b.args...)
	waitState(t, srv, states, "READY=1")
	for i := range 3 {
		waitState(t, srv, states, "WATCHDOG=1")
		t.Logf("feed %d", i+1)
	}
	if m := srv.waitMsg("feeding systemd's watchdog"); m["interval"] != "2s" {
		t.Errorf("the log names the interval %v, want 2s", m["interval"])
	}
	if err := srv.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	// A feed already on its way may come before STOPPING=1, none after.
	timer := time.NewTimer(opsWait)
	defer timer.Stop()
	for stopping := false; !stopping; {
		select {
		case s := <-states:
			stopping = s == "STOPPING=1"
			if !stopping && s != "WATCHDOG=1" {
				t.Errorf("sd_notify: got %q while waiting for STOPPING=1", s)
			}
		case <-timer.C:
			t.Fatalf("sd_notify: no STOPPING=1 within %v of SIGTERM", opsWait)
		}
	}
	if !srv.wait(opsWait) || srv.err != nil {
		t.Fatalf("serve after SIGTERM: %v, want exit 0", srv.err)
	}
	select {
	case s := <-states:
		t.Errorf("sd_notify after STOPPING=1: %q", s)
	default:
	}
}
