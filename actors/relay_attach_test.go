package actors

import (
	"strings"
	"testing"
	"time"

	"github.com/meshweaver/supervisor/messages"
	"github.com/meshweaver/supervisor/testkit/fakeappserver"
	"github.com/meshweaver/supervisor/third_party/hollywood/actor"
	"github.com/meshweaver/supervisor/third_party/hollywood/remote"
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

	// The first caller runs the round on b directly.
	c1, ce1, _ := remoteCaller(t)
	sendEncoded(t, ce1, actor.NewPID(eb.Address(), rootb.ID), c1.pid, messages.StartRound{RoundID: "r4", User: "alice", Thread: "t1", Text: "hi"})
	first := c1.waitFirstEvent(t, "r4", 30*time.Second)

	// The second caller, on a, attaches from the start.
	c2, ce2, _ := remoteCaller(t)
	sendEncoded(t, ce2, actor.NewPID(ea.Address(), roota.ID), c2.pid, messages.AttachRound{User: "alice", RoundID: "r4"})
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
	sendEncoded(t, ce3, actor.NewPID(ea.Address(), roota.ID), c3.pid, messages.InterruptRound{User: "alice", Thread: "t1", RoundID: "r4"})
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

// TestRelayedCallerLeftReachesOwner: a round owned by b runs for a caller
// of member a. The caller goes, as b cannot see: its node drops, or (a
// local caller, as the gateway's) it stops: a's relay tells b
// (DetachRound); a stops (its relay's end tells b too); or a's node drops
// (b loses a's address, where its caller, the relay, is); or a's relay
// loses b's address while b lives (the caller gets its retryable verdict
// and b is told the relay left). Each is the
// caller's departure on b: the caller grace, then the round is
// interrupted, one verdict, kept for a caller attaching later. The
// bystander, bob, whose caller is attached to b directly and stays, runs
// on untouched.
func TestRelayedCallerLeftReachesOwner(t *testing.T) {
	for _, tc := range []struct {
		name    string
		local   bool // the caller is an actor on a's engine
		verdict bool // the caller stays and gets the relay's verdict
		fault   func(f relayFault)
	}{
		{"caller dropped", false, false, func(f relayFault) { f.callerRem.Stop().Wait() }},
		{"local caller stopped", true, false, func(f relayFault) { <-f.a.Poison(f.caller).Done() }},
		{"relaying member stops", false, false, func(f relayFault) { <-f.a.Poison(f.rootA).Done() }},
		{"relaying member dropped", false, false, func(f relayFault) { f.remA.Stop().Wait() }},
		// The relay's connection to the owner breaks while both live: the
		// caller gets its retryable verdict, and the owner is told.
		{"owner unreachable from the relay", false, true, func(f relayFault) {
			f.a.BroadcastEvent(actor.RemoteUnreachableEvent{ListenAddr: f.owner})
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			relayedCallerLeaves(t, tc.local, tc.verdict, tc.fault)
		})
	}
}

// relayFault is what a fault of relayedCallerLeaves may act on.
type relayFault struct {
	caller    *actor.PID
	callerRem *remote.Remote // nil for a local caller
	a         *actor.Engine
	rootA     *actor.PID
	remA      *remote.Remote
	owner     string // b's address
}

func relayedCallerLeaves(t *testing.T, local, verdict bool, fault func(relayFault)) {
	const grace = 500 * time.Millisecond
	pb := &fakePlacement{owner: func(string, int) (bool, string, error) { return true, "", nil }}
	eb, rootb := member(t, fakeappserver.Config{ReplyText: "held", HoldTurns: true}, pb,
		func(c *Config) { c.CallerGrace = grace })
	events := tapEvents(t, eb)
	pa := &fakePlacement{owner: func(string, int) (bool, string, error) { return false, eb.Address(), nil }}
	ea, roota, rema := memberRemote(t, fakeappserver.Config{}, pa)
	toA, toB := actor.NewPID(ea.Address(), roota.ID), actor.NewPID(eb.Address(), rootb.ID)

	// The bystander runs on b, its caller attached there directly.
	cb, ceb, _ := remoteCaller(t)
	sendEncoded(t, ceb, toB, cb.pid, messages.StartRound{RoundID: "bob-1", User: "bob", Thread: "t1", Text: "hi"})
	cb.waitFirstEvent(t, "bob-1", 30*time.Second)

	// Alice's round through a; then the fault.
	f := relayFault{a: ea, rootA: roota, remA: rema, owner: eb.Address()}
	var c1 *caller
	ce1 := ea
	if local {
		h := &harness{t: t, engine: ea}
		c1 = h.caller()
	} else {
		c1, ce1, f.callerRem = remoteCaller(t)
	}
	f.caller = c1.pid
	sendEncoded(t, ce1, toA, c1.pid, messages.StartRound{RoundID: "r7", User: "alice", Thread: "t1", Text: "hi"})
	c1.waitFirstEvent(t, "r7", 30*time.Second)
	mark := events.mark()
	gone := time.Now() // before: the owner may hear of it before fault returns
	fault(f)
	if verdict { // the caller is still there: the relay's verdict
		if v := waitMsg[messages.RoundFinished](t, c1, 30*time.Second); v.RoundID != "r7" || v.Status != messages.StatusFailed || !v.Retryable {
			t.Errorf("the caller's verdict %+v, want r7 failed and retryable", v)
		}
	}
	waitEvent(t, events, mark, 30*time.Second, "for r7 on the owner", func(e CallerGone) bool { return e.RoundID == "r7" })
	waitEvent(t, events, mark, 30*time.Second, "for r7 on the owner", func(e CallerGraceOver) bool { return e.RoundID == "r7" })
	if d := time.Since(gone); d < grace {
		t.Errorf("the owner gave up %v after the caller left, before the %v grace", d, grace)
	}

	// Attached later (on b: a may be gone): the one verdict, interrupted
	// for the grace.
	c2, ce2, _ := remoteCaller(t)
	sendEncoded(t, ce2, toB, c2.pid, messages.AttachRound{User: "alice", RoundID: "r7"})
	v := waitMsg[messages.RoundFinished](t, c2, 30*time.Second)
	if v.RoundID != "r7" || v.Status != messages.StatusInterrupted || !strings.Contains(v.Error, "caller grace") {
		t.Fatalf("verdict %+v, want r7 interrupted naming the caller grace", v)
	}
	if n := countEvents(events, mark, func(e CallerGraceOver) bool { return e.RoundID == "r7" }); n != 1 {
		t.Errorf("the grace ran out %d times for r7, want once", n)
	}

	// The bystander never lost its caller; it is interrupted only when asked.
	if n := countEvents(events, 0, func(e CallerGone) bool { return e.RoundID == "bob-1" }); n != 0 {
		t.Errorf("bob's round lost its caller %d times", n)
	}
	sendEncoded(t, ceb, toB, cb.pid, messages.InterruptRound{User: "bob", Thread: "t1", RoundID: "bob-1"})
	if v := waitMsg[messages.RoundFinished](t, cb, 30*time.Second); v.RoundID != "bob-1" || v.Status != messages.StatusInterrupted || strings.Contains(v.Error, "grace") {
		t.Errorf("bob's verdict %+v, want interrupted by its own caller", v)
	}
}

// TestDetachRoundIsNotPlaced: a DetachRound for a user the member does
// not run claims nobody and is not relayed: the member looks nobody up.
func TestDetachRoundIsNotPlaced(t *testing.T) {
	pa := &fakePlacement{owner: func(string, int) (bool, string, error) { return false, "127.0.0.1:1", nil }}
	ea, roota := member(t, fakeappserver.Config{}, pa)
	c, ce, _ := remoteCaller(t)
	for _, m := range []any{messages.DetachRound{User: "carol", RoundID: "r9"}, messages.DetachRound{User: "carol"}} {
		sendEncoded(t, ce, actor.NewPID(ea.Address(), roota.ID), c.pid, m)
	}
	// The second is invalid: its rejection comes after the first was handled.
	if rj := waitMsg[messages.Rejected](t, c, 30*time.Second); !strings.Contains(rj.Reason, "round_id is empty") {
		t.Fatalf("rejection %+v, want round_id is empty", rj)
	}
	if got := pa.seenHops(); len(got) != 0 {
		t.Errorf("a looked up %d users for a detach, want none", len(got))
	}
}
