package actors

import (
	"testing"
	"time"

	"github.com/meshweaver/supervisor/messages"
	"github.com/meshweaver/supervisor/testkit/fakeappserver"
	"github.com/meshweaver/supervisor/third_party/hollywood/actor"
)

// TestRelayedAttachAndInterrupt: a round runs on the owner b; a caller
// connected to member a attaches to it (AttachRound is placed and relayed
// like a round), gets every event from the first, then interrupts it
// through a, and gets the verdict.
func TestRelayedAttachAndInterrupt(t *testing.T) {
	pb := &fakePlacement{owner: func(string, int) (bool, string, error) { return true, "", nil }}
	eb, rootb := member(t, fakeappserver.Config{ReplyText: "held", HoldTurns: true}, pb)
	pa := &fakePlacement{owner: func(string, int) (bool, string, error) { return false, eb.Address(), nil }}
	ea, roota := member(t, fakeappserver.Config{}, pa)
	send := func(e *actor.Engine, to *actor.PID, c *caller, m any) {
		t.Helper()
		env, err := messages.Encode(m)
		if err != nil {
			t.Fatal(err)
		}
		e.SendWithSender(to, env, c.pid)
	}

	// The first caller runs the round on b directly.
	c1, ce1, _ := remoteCaller(t)
	send(ce1, actor.NewPID(eb.Address(), rootb.ID), c1, messages.StartRound{RoundID: "r4", User: "alice", Thread: "t1", Text: "hi"})
	first := c1.waitFirstEvent(t, "r4", 30*time.Second)

	// The second caller, on a, attaches from the start.
	c2, ce2, _ := remoteCaller(t)
	send(ce2, actor.NewPID(ea.Address(), roota.ID), c2, messages.AttachRound{User: "alice", RoundID: "r4"})
	ev := waitMsg[messages.RoundEvent](t, c2, 30*time.Second)
	if ev.RoundID != "r4" || ev.Seq != 1 {
		t.Fatalf("first event through a: %+v, want r4 seq 1", ev)
	}
	for ev.Seq < first.Seq { // the replay reaches what c1 saw first
		next := waitMsg[messages.RoundEvent](t, c2, 30*time.Second)
		if next.Seq != ev.Seq+1 {
			t.Fatalf("replayed seq %d after %d, want each once in order", next.Seq, ev.Seq)
		}
		ev = next
	}

	// The interrupt also goes through a to b.
	c3, ce3, _ := remoteCaller(t)
	send(ce3, actor.NewPID(ea.Address(), roota.ID), c3, messages.InterruptRound{User: "alice", Thread: "t1", RoundID: "r4"})
	if rc := waitMsg[messages.RoundControlled](t, c3, 30*time.Second); !rc.OK {
		t.Fatalf("interrupt through a: %+v", rc)
	}
	for _, c := range []*caller{c2, c1} {
		if v := waitMsg[messages.RoundFinished](t, c, 30*time.Second); v.RoundID != "r4" || v.Status != messages.StatusInterrupted {
			t.Fatalf("verdict %+v, want r4 interrupted", v)
		}
	}
	if got := pa.seenHops(); len(got) != 2 {
		t.Errorf("a placed %d messages (%v), want 2: the attach and the interrupt", len(got), got)
	}
	if got := pb.seenHops(); len(got) < 3 || got[1] != 1 || got[2] != 1 {
		t.Errorf("b saw hops %v, want 0 (the round), then 1 and 1 (relayed from a)", got)
	}
}

// TestRelayedAttachUnknownRound: an attach relayed to the owner for a
// round it does not know gets not_found, and the owner keeps no claim.
func TestRelayedAttachUnknownRound(t *testing.T) {
	pb := &fakePlacement{owner: func(string, int) (bool, string, error) { return true, "", nil }}
	eb, _ := member(t, fakeappserver.Config{}, pb)
	pa := &fakePlacement{owner: func(string, int) (bool, string, error) { return false, eb.Address(), nil }}
	ea, roota := member(t, fakeappserver.Config{}, pa)
	c, ce, _ := remoteCaller(t)
	env, err := messages.Encode(messages.AttachRound{User: "bob", RoundID: "nope"})
	if err != nil {
		t.Fatal(err)
	}
	ce.SendWithSender(actor.NewPID(ea.Address(), roota.ID), env, c.pid)
	if v := waitMsg[messages.RoundFinished](t, c, 30*time.Second); v.RoundID != "nope" || v.Status != messages.StatusNotFound {
		t.Fatalf("verdict %+v, want not_found", v)
	}
	poll(t, waitFor, "b releases bob", func() bool {
		pb.mu.Lock()
		defer pb.mu.Unlock()
		return len(pb.released) == 1 && pb.released[0] == "bob"
	})
}
