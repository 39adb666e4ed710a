package actors

import (
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/meshweaver/supervisor/messages"
	"github.com/meshweaver/supervisor/testkit/fakeappserver"
	"github.com/meshweaver/supervisor/third_party/hollywood/actor"
)

// waitGauge waits until get returns want, or fails at the deadline.
func waitGauge(t *testing.T, what string, get func() float64, want float64) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	tick := time.NewTicker(5 * time.Millisecond)
	defer tick.Stop()
	for get() != want {
		if time.Now().After(deadline) {
			t.Fatalf("%s is %v, want %v", what, get(), want)
		}
		<-tick.C
	}
}

// The node holds at most MaxUsers user actors; a message for one more is
// refused with a clear reason and counted. UserIdle is long here, so
// nothing is reaped while the test looks: on a loaded machine a short one
// freed a slot before the third user asked.
func TestUsersCapped(t *testing.T) {
	m := NewMetrics(nil)
	h := fakeHarness(t, fakeappserver.Config{}, func(c *tree) {
		c.MaxUsers, c.UserIdle, c.Metrics = 2, time.Hour, m
	})
	c := h.caller()
	setKeys(t, h, c, "u1", "u2")
	h.engine.SendWithSender(h.root, messages.SetAPIKey{User: "u3", APIKey: "sk-test-1"}, c.pid)
	rej, ok := c.next(t).(messages.Rejected)
	if !ok || !strings.Contains(rej.Reason, "cap of 2 live users") || rej.Class != messages.RefusalUnavailable {
		t.Fatalf("past the cap: %#v, want a Rejected of class unavailable naming the cap", rej)
	}
	if got := testutil.ToFloat64(m.RemoteRejected.WithLabelValues("user-cap")); got != 1 {
		t.Fatalf("user-cap refusals counted %v, want 1", got)
	}
	if got := testutil.ToFloat64(m.Users); got != 2 {
		t.Fatalf("%v user actors, want 2", got)
	}
}

// User actors with nothing to do are reaped after UserIdle, which makes
// room again under the cap: a round for a third user then runs on a fresh
// actor, which is not reaped while its app-server lives.
func TestUsersReaped(t *testing.T) {
	m := NewMetrics(nil)
	h := fakeHarness(t, fakeappserver.Config{}, func(c *tree) {
		c.MaxUsers, c.UserIdle, c.IdleTimeout, c.Metrics = 2, 100*time.Millisecond, 200*time.Millisecond, m
		c.RoundRetention = 100 * time.Millisecond // a kept round keeps its user actor
	})
	c := h.caller()
	users := func() float64 { return testutil.ToFloat64(m.Users) }
	setKeys(t, h, c, "u1", "u2")
	waitGauge(t, "user actors after idling", users, 0)

	r := h.round(c, messages.StartRound{RoundID: "r1", User: "u3", Thread: "t", Text: "hi"})
	if r.verdict.Status != messages.StatusCompleted {
		t.Fatalf("round after reaping: %+v", r.verdict)
	}
	waitGauge(t, "user actors after the app-server's idle stop", users, 0)
	if got := testutil.ToFloat64(m.Evictions.WithLabelValues("idle")); got != 1 {
		t.Fatalf("idle evictions %v, want 1 (the user was reaped only after its app-server stopped)", got)
	}
}

// setKeys stores a test API key for each user through the root.
func setKeys(t *testing.T, h *harness, c *caller, users ...string) {
	t.Helper()
	for _, u := range users {
		h.engine.SendWithSender(h.root, messages.SetAPIKey{User: u, APIKey: "sk-test-1"}, c.pid)
		if r, ok := c.next(t).(messages.APIKeyStored); !ok {
			t.Fatalf("SetAPIKey %s: %#v", u, r)
		}
	}
}

// The reap protocol, driven by hand: the root declines a user actor's
// offer to be reaped while a message it sent has not reached the actor
// (the counts differ), accepts it when they match, and a message for the
// user that arrives while the actor stops waits for it and goes to its
// successor.
func TestUserReapProtocol(t *testing.T) {
	m := NewMetrics(nil)
	h := fakeHarness(t, fakeappserver.Config{}, func(c *tree) { c.UserIdle, c.Metrics = time.Hour, m })
	c := h.caller()
	users := func() float64 { return testutil.ToFloat64(m.Users) }
	// The root counts each reap as it decides it, before it answers the
	// next message: so after a round trip the count is exact.
	reaps := func() int { return int(testutil.ToFloat64(m.UserReaps)) }
	setKey := func() { t.Helper(); setKeys(t, h, c, "u1") }
	setKey() // the root has sent the actor 1 message
	pid := actor.NewPID(h.engine.Address(), h.root.ID+"/user/u1")

	// A stale offer (the actor had seen 0) is declined: the next message
	// still finds the same actor.
	h.engine.Send(h.root, userIdle{user: "u1", pid: pid, received: 0})
	setKey() // now 2
	if got := reaps(); got != 0 {
		t.Fatalf("%d reaps after a stale offer, want 0", got)
	}
	// A current offer is taken; a message right behind it waits for the
	// actor to stop and is answered by its successor.
	h.engine.Send(h.root, userIdle{user: "u1", pid: pid, received: 2})
	setKey()
	if got := reaps(); got != 1 {
		t.Fatalf("%d reaps after a current offer, want 1", got)
	}
	waitGauge(t, "user actors after the reap and a new message (the successor)", users, 1)
	// And a current offer with nothing behind it leaves no actor.
	h.engine.Send(h.root, userIdle{user: "u1", pid: pid, received: 1})
	waitGauge(t, "user actors after the last reap", users, 0)
	if got := reaps(); got != 2 {
		t.Fatalf("%d reaps in all, want 2", got)
	}
}
