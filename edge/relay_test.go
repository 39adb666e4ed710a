package edge

import (
	"testing"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/meshweaver/supervisor/messages"
	"github.com/meshweaver/supervisor/third_party/hollywood/actor"
)

// TestGateRelayAnswers: with Relays set, a cluster member's answers reach
// the daemon's relay actors (no sender needed); anything else addressed to
// a relay, or from an identity that is not a member, is refused without
// an answer; without Relays a relay is no target at all.
func TestGateRelayAnswers(t *testing.T) {
	p := mustPolicy(t, `{"version": 1, "grants": [
		{"identities": ["spiffe://mesh/supervisor-*"], "users": ["*"], "kinds": ["rounds", "control", "login", "account", "cluster"]},
		{"identities": ["spiffe://mesh/gateway"], "users": ["*"], "kinds": ["rounds"]}]}`)
	relay := actor.NewPID(self, "meshweaver/root/relay/h1-3")
	member := "spiffe://mesh/supervisor-2"
	r := newRig(t, p, func(c *Config) { c.Relays = "meshweaver/root/relay/" })

	for _, ans := range []any{
		messages.RoundEvent{RoundID: "r1", Seq: 1, Kind: messages.KindText, Text: "hi"},
		messages.RoundFinished{RoundID: "r1", Status: messages.StatusFailed, Retryable: true},
		messages.Rejected{Type: "start_round.v1", Reason: "no"},
		messages.AccountResponse{User: "bob"},
	} {
		msg, ok := r.g.Check(Input{Identity: member, Addr: peer, Target: relay, Msg: enc(t, ans)})
		if !ok || messages.IsEnvelope(msg) {
			t.Fatalf("%T to a relay from a member: ok=%v, delivered %T", ans, ok, msg)
		}
	}
	for _, tc := range []struct {
		name, identity, reason string
		msg                    any
	}{
		{"a command to a relay", member, ReasonTarget, messages.StartRound{User: "bob", Thread: "t", Text: "hi"}},
		{"an answer from a caller", "spiffe://mesh/gateway", ReasonUnauthorized, messages.RoundFinished{RoundID: "r1"}},
	} {
		before := testutil.ToFloat64(r.rej.WithLabelValues(tc.reason))
		if _, ok := r.g.Check(Input{Identity: tc.identity, Addr: peer, Target: relay, Sender: caller, Msg: enc(t, tc.msg)}); ok {
			t.Fatalf("%s: accepted", tc.name)
		}
		if got := testutil.ToFloat64(r.rej.WithLabelValues(tc.reason)) - before; got != 1 {
			t.Fatalf("%s: %v refusals counted as %s, want 1", tc.name, got, tc.reason)
		}
	}
	if len(r.replies) != 0 {
		t.Fatalf("refusals about relays were answered: %v", r.replies)
	}

	single := newRig(t, p, nil)
	if _, ok := single.g.Check(Input{Identity: member, Addr: peer, Target: relay, Sender: caller, Msg: enc(t, messages.RoundFinished{RoundID: "r1"})}); ok {
		t.Fatal("a relay target passed a gate without Relays")
	}
}

// TestGateRelayStreamsAreNotRateLimited: a member streams 500 events of
// relayed rounds in one instant (the clock does not move) and every one
// reaches the relay: its callers were held to the rate where they came in,
// and a dropped event or verdict would hang a round. A caller's identity
// sending answers to a relay is still held to the rate (then refused).
func TestGateRelayStreamsAreNotRateLimited(t *testing.T) {
	p := mustPolicy(t, `{"version": 1, "grants": [
		{"identities": ["spiffe://mesh/supervisor-*"], "users": ["*"], "kinds": ["cluster"]},
		{"identities": ["spiffe://mesh/gateway"], "users": ["*"], "kinds": ["rounds"]}]}`)
	relay := actor.NewPID(self, "meshweaver/root/relay/h1-3")
	r := newRig(t, p, func(c *Config) { c.Relays = "meshweaver/root/relay/" })
	for i := range 500 {
		ev := messages.RoundEvent{RoundID: "r1", Seq: uint64(i + 1), Kind: messages.KindText, Text: "x"}
		if _, ok := r.g.Check(Input{Identity: "spiffe://mesh/supervisor-2", Addr: peer, Target: relay, Msg: enc(t, ev)}); !ok {
			t.Fatalf("event %d of a member's relayed stream refused", i+1)
		}
	}
	for range 100 {
		r.g.Check(Input{Identity: "spiffe://mesh/gateway", Addr: peer, Target: relay, Msg: enc(t, messages.RoundFinished{RoundID: "r1"})})
	}
	if got := testutil.ToFloat64(r.rej.WithLabelValues(ReasonRate)); got == 0 {
		t.Fatal("a non-member's flood of answers to a relay was not rate limited")
	}
}
