package actors

import (
	"testing"

	"github.com/meshweaver/supervisor/codexrpc"
	"github.com/meshweaver/supervisor/third_party/hollywood/actor"
)

// The router's rules, as a script: a subscribed thread's notifications go
// to its round; others are kept, up to the limit in all, and handed over on
// subscribe; an unsubscribe (by that round only) forgets what was kept;
// reset names every subscribed round and forgets everything.
func TestThreadRouter(t *testing.T) {
	r := newThreadRouter(3)
	a, b := actor.NewPID("local", "round/a"), actor.NewPID("local", "round/b")
	n := func(m string) *codexrpc.Notification { return &codexrpc.Notification{Method: m} }
	methods := func(ns []*codexrpc.Notification) (out []string) {
		for _, x := range ns {
			out = append(out, x.Method)
		}
		return out
	}
	eq := func(got, want []string) bool {
		if len(got) != len(want) {
			return false
		}
		for i := range got {
			if got[i] != want[i] {
				return false
			}
		}
		return true
	}

	if _, ok := r.route("t1", n("early-1")); ok {
		t.Fatal("a thread nobody subscribed to was routed")
	}
	r.route("t1", n("early-2"))
	if got := methods(r.subscribe(subscribe{threadID: "t1", round: a})); !eq(got, []string{"early-1", "early-2"}) {
		t.Errorf("subscribe handed over %v, want the two kept, in order", got)
	}
	if to, ok := r.route("t1", n("live")); !ok || !to.Equals(a) {
		t.Errorf("route of a subscribed thread = %v, %v; want round a", to, ok)
	}
	if s, ok := r.lookup("t1"); !ok || !s.round.Equals(a) || r.active() != 1 {
		t.Errorf("lookup = %+v, %v; active %d", s, ok, r.active())
	}

	// Another round's unsubscribe leaves the subscription.
	r.unsubscribe("t1", b)
	if _, ok := r.lookup("t1"); !ok {
		t.Error("round b's unsubscribe removed round a's subscription")
	}
	r.unsubscribe("t1", a)
	if _, ok := r.route("t1", n("after")); ok || r.active() != 0 {
		t.Errorf("routed after the unsubscribe (active %d)", r.active())
	}
	// What came after the round left (a late MCP startup status) is not
	// replayed to the next round.
	if got := r.subscribe(subscribe{threadID: "t1", round: b}); len(got) != 0 {
		t.Errorf("the next round got %v, said after the previous one left", methods(got))
	}
	// A round that reopens the thread (a resume) has what it says from
	// then on kept for its subscription.
	r.unsubscribe("t1", b)
	r.route("t1", n("late"))
	r.reopen("t1")
	r.route("t1", n("resumed"))
	if got := methods(r.subscribe(subscribe{threadID: "t1", round: b})); !eq(got, []string{"resumed"}) {
		t.Errorf("after reopen, subscribe handed over %v, want [resumed]", got)
	}

	// The limit: at 3 kept in all, the next one drops everything kept.
	r.route("t2", n("x1"))
	r.route("t3", n("x2"))
	r.route("t3", n("x3"))
	r.route("t4", n("x4"))
	if got := methods(r.subscribe(subscribe{threadID: "t3", round: a})); len(got) != 0 {
		t.Errorf("kept past the limit: %v", got)
	}
	if got := methods(r.subscribe(subscribe{threadID: "t4", round: a})); !eq(got, []string{"x4"}) {
		t.Errorf("after the drop, kept %v, want [x4]", got)
	}

	// The threads that were left are remembered, at most limit of them,
	// the oldest forgotten first.
	for _, id := range []string{"l1", "l2", "l3", "l4"} {
		r.subscribe(subscribe{threadID: id, round: a})
		r.unsubscribe(id, a)
	}
	if _, ok := r.route("l2", n("late")); ok || len(r.early["l2"]) != 0 {
		t.Error("a late notice of a thread that was left was kept")
	}
	r.route("l1", n("unknown again"))
	if len(r.early["l1"]) != 1 || len(r.left) != 3 {
		t.Errorf("the oldest left thread is still remembered (%d kept, %d left)", len(r.early["l1"]), len(r.left))
	}

	rounds := r.reset()
	if len(rounds) != 3 || r.active() != 0 {
		t.Errorf("reset named %d rounds (want 3: t1, t3, t4), active after %d", len(rounds), r.active())
	}
	if _, ok := r.route("t1", n("y")); ok {
		t.Error("routed after reset")
	}
}

// rounds names every subscribed round once, whatever number of threads it
// holds (a rate-limit update goes to each once).
func TestThreadRouterRounds(t *testing.T) {
	r := newThreadRouter(3)
	a, b := actor.NewPID("local", "round/a"), actor.NewPID("local", "round/b")
	if got := r.rounds(); len(got) != 0 {
		t.Fatalf("rounds of an empty router = %v", got)
	}
	r.subscribe(subscribe{threadID: "t1", round: a})
	r.subscribe(subscribe{threadID: "t2", round: a})
	r.subscribe(subscribe{threadID: "t3", round: b})
	got := map[string]int{}
	for _, p := range r.rounds() {
		got[p.String()]++
	}
	if len(got) != 2 || got[a.String()] != 1 || got[b.String()] != 1 {
		t.Errorf("rounds = %v, want a and b once each", got)
	}
	r.unsubscribe("t3", b)
	if rs := r.rounds(); len(rs) != 1 || !rs[0].Equals(a) {
		t.Errorf("rounds after b left = %v", rs)
	}
}
