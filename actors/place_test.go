package actors

import (
	"sync"
	"sync/atomic"
	"testing"

	"github.com/meshweaver/supervisor/messages"
	"github.com/meshweaver/supervisor/testkit/fakeappserver"
)

// TestPlacementLookupDoesNotBlockRoot: while the cluster lookup of one
// user hangs (etcd slow), the root serves another user; the hung user's
// messages wait in order behind one lookup and run once it answers.
func TestPlacementLookupDoesNotBlockRoot(t *testing.T) {
	release := make(chan struct{})
	var once sync.Once
	unblock := func() { once.Do(func() { close(release) }) }
	var slowLookups, aliceLookups atomic.Int32
	p := &fakePlacement{owner: func(user string, _ int) (bool, string, error) {
		switch user {
		case "slow":
			slowLookups.Add(1)
			<-release
		case "alice":
			aliceLookups.Add(1)
		}
		return true, "", nil
	}}
	var owned sync.Map // what a Node knows from memory: the users it claimed
	p.known = func(user string) (bool, bool, error) {
		_, ok := owned.Load(user)
		return ok, ok, nil
	}
	p.owner = func(f func(string, int) (bool, string, error)) func(string, int) (bool, string, error) {
		return func(user string, hops int) (bool, string, error) {
			local, addr, err := f(user, hops)
			if err == nil && local {
				owned.Store(user, true)
			}
			return local, addr, err
		}
	}(p.owner)
	h := fakeHarness(t, fakeappserver.Config{ReplyText: "ok"}, func(c *tree) { c.Placement = p })
	t.Cleanup(unblock) // before the tree's cleanup (LIFO): the root waits for its lookups
	c := h.caller()

	first := messages.StartRound{User: "slow", Thread: "t1", Text: "first", RoundID: newRoundID()}
	second := messages.StartRound{User: "slow", Thread: "t1", Text: "second", RoundID: newRoundID()}
	h.roundAsync(c, first)
	h.roundAsync(c, second)
	for i := range 2 {
		mustStatus(t, h.round(c, messages.StartRound{User: "alice", Thread: "t1", Text: "hi"}), messages.StatusCompleted)
		if i == 0 && aliceLookups.Load() != 1 {
			t.Fatalf("alice looked up %d times, want 1", aliceLookups.Load())
		}
	}
	if n := aliceLookups.Load(); n != 1 {
		t.Errorf("alice looked up %d times; the second round should be answered from memory", n)
	}

	unblock()
	// Same thread: the rounds run in the order admitted; a swap would
	// drop the second's verdict while the first is collected.
	for _, m := range []messages.StartRound{first, second} {
		if r := c.collect(t, m.RoundID, waitFor); r.verdict.Status != messages.StatusCompleted {
			t.Fatalf("%s: verdict %+v, want completed", m.Text, r.verdict)
		}
	}
	if n := slowLookups.Load(); n != 1 {
		t.Errorf("slow looked up %d times, want 1 (the second message waited for the first's lookup)", n)
	}
}
