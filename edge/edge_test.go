package edge

import (
	"bytes"
	"log/slog"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"go.uber.org/goleak"
	"google.golang.org/protobuf/types/known/anypb"

	"github.com/meshweaver/supervisor/messages"
	"github.com/meshweaver/supervisor/third_party/hollywood/actor"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

const testPolicy = `{
  "version": 1,
  "grants": [
    {"identities": ["spiffe://mesh/gateway"], "users": ["*"], "kinds": ["rounds", "control"]},
    {"identities": ["spiffe://mesh/agent-*"], "users": ["team-*", "alice"], "kinds": ["rounds", "control", "account"]},
    {"identities": ["ops"], "users": ["*"], "kinds": ["login", "account"]},
    {"identities": ["*"], "users": ["public"], "kinds": ["account"]}
  ]
}`

func mustPolicy(t *testing.T, s string) *Policy {
	t.Helper()
	p, err := ParsePolicy([]byte(s))
	if err != nil {
		t.Fatal(err)
	}
	return p
}

func TestPolicyAllows(t *testing.T) {
	p := mustPolicy(t, testPolicy)
	for _, tc := range []struct {
		identity, user string
		kind           Kind
		want           bool
	}{
		{"spiffe://mesh/gateway", "bob", KindRounds, true},
		{"spiffe://mesh/gateway", "bob", KindControl, true},
		{"spiffe://mesh/gateway", "bob", KindLogin, false},
		{"spiffe://mesh/gateway", "bob", KindAccount, false},
		{"spiffe://mesh/agent-7", "team-x", KindRounds, true},
		{"spiffe://mesh/agent-7", "alice", KindAccount, true},
		{"spiffe://mesh/agent-7", "bob", KindRounds, false},
		{"spiffe://mesh/agent-7", "team-x", KindLogin, false},
		{"spiffe://mesh/agent-7/sub", "team-x", KindRounds, false}, // "*" stops at "/"
		{"spiffe://mesh/gatewayX", "bob", KindRounds, false},
		{"ops", "anyone", KindLogin, true},
		{"ops", "anyone", KindRounds, false},
		{"spiffe://other/x", "public", KindAccount, true}, // a lone "*" crosses "/"
		{"", "public", KindAccount, true},
		{"", "bob", KindRounds, false},
	} {
		if got := p.Allows(tc.identity, tc.user, tc.kind); got != tc.want {
			t.Errorf("Allows(%q, %q, %s) = %v, want %v", tc.identity, tc.user, tc.kind, got, tc.want)
		}
	}
	var none *Policy
	if !none.Allows("x", "y", KindLogin) {
		t.Error("a nil policy must allow everything")
	}
	empty := mustPolicy(t, `{"version": 1, "grants": []}`)
	if empty.Allows("x", "y", KindRounds) {
		t.Error("an empty policy must allow nothing")
	}
}

// TestPolicyNames: which identities the handshake admits (some grant
// names them at all).
func TestPolicyNames(t *testing.T) {
	p := mustPolicy(t, `{"version": 1, "grants": [
		{"identities": ["spiffe://mesh/gateway"], "users": ["*"], "kinds": ["rounds"]},
		{"identities": ["spiffe://mesh/agent-*"], "users": ["alice"], "kinds": ["account"]}]}`)
	for _, tc := range []struct {
		identity string
		want     bool
	}{
		{"spiffe://mesh/gateway", true},
		{"spiffe://mesh/agent-7", true},
		{"spiffe://mesh/agent-7/sub", false},
		{"spiffe://mesh/mallory", false},
		{"", false},
	} {
		if got := p.Names(tc.identity); got != tc.want {
			t.Errorf("Names(%q) = %v, want %v", tc.identity, got, tc.want)
		}
	}
	if !mustPolicy(t, testPolicy).Names("anyone") { // a grant to "*"
		t.Error(`a grant to "*" must name every identity`)
	}
	var none *Policy
	if !none.Names("x") {
		t.Error("a nil policy must name every identity")
	}
}

func TestParsePolicyErrors(t *testing.T) {
	for _, tc := range []struct {
		name, in string
		want     []string // substrings of the error
	}{
		{"unknown top field", "{\n\"version\": 1,\n\"grant\": []\n}", []string{"line 3", `unknown field "grant"`}},
		{"unknown grant field", "{\"version\": 1, \"grants\": [\n{\"identities\": [\"a\"], \"users\": [\"b\"], \"kinds\": [\"rounds\"],\n \"user\": [\"c\"]}]}", []string{"line 3", `unknown field "user"`}},
		{"type mismatch", `{"version": "1"}`, []string{"line 1", `field "version"`}},
		{"no version", `{"grants": []}`, []string{"version 0", "reads version 1"}},
		{"future version", `{"version": 2, "grants": []}`, []string{"version 2"}},
		{"unknown kind", `{"version": 1, "grants": [{"identities": ["a"], "users": ["b"], "kinds": ["admin"]}]}`, []string{"grants[0].kinds", `"admin"`}},
		{"bad pattern", `{"version": 1, "grants": [{"identities": ["a["], "users": ["b"], "kinds": ["rounds"]}]}`, []string{"grants[0]", `bad pattern "a["`}},
		{"empty list", `{"version": 1, "grants": [{"identities": ["a"], "users": [], "kinds": ["rounds"]}]}`, []string{"grants[0]", "at least one"}},
		{"trailing data", `{"version": 1, "grants": []} {}`, []string{"after the top-level object"}},
		{"syntax", "{\n\"version\": 1,,\n}", []string{"line 2"}},
	} {
		_, err := ParsePolicy([]byte(tc.in))
		if err == nil {
			t.Errorf("%s: no error", tc.name)
			continue
		}
		for _, w := range tc.want {
			if !strings.Contains(err.Error(), w) {
				t.Errorf("%s: error %q does not contain %q", tc.name, err, w)
			}
		}
	}
}

func TestKindOf(t *testing.T) {
	for _, tc := range []struct {
		msg  any
		kind Kind
	}{
		{messages.StartRound{User: "u"}, KindRounds},
		{messages.InterruptRound{User: "u"}, KindControl},
		{messages.SteerRound{User: "u"}, KindControl},
		{messages.StartLogin{User: "u"}, KindLogin},
		{messages.CancelLogin{User: "u"}, KindLogin},
		{messages.SetAPIKey{User: "u"}, KindLogin},
		{messages.Logout{User: "u"}, KindLogin},
		{messages.AccountRequest{User: "u"}, KindAccount},
		{messages.ModelsRequest{User: "u"}, KindAccount},
		{messages.RateLimitsRequest{User: "u"}, KindAccount},
		{messages.WarmUp{User: "u"}, KindRounds},
		{messages.AttachRound{User: "u"}, KindRounds},
		{messages.DetachRound{User: "u"}, KindRounds},
	} {
		k, u, ok := KindOf(tc.msg)
		if !ok || k != tc.kind || u != "u" {
			t.Errorf("KindOf(%T) = %s, %q, %v; want %s, \"u\", true", tc.msg, k, u, ok, tc.kind)
		}
	}
	if _, _, ok := KindOf(messages.RoundFinished{}); ok {
		t.Error("a reply type must not be accepted as a command")
	}
}

func TestPeerLimitsBounded(t *testing.T) {
	t0 := time.Unix(1000, 0)
	p := newPeerLimits(3, time.Minute, 1, 2, 1, 1)
	for i, k := range []string{"a", "b", "c"} {
		p.allowMsg(k, t0.Add(time.Duration(i)*time.Second))
	}
	// Full, none idle: the least recently seen ("a") goes.
	p.allowMsg("d", t0.Add(5*time.Second))
	if _, ok := p.m["a"]; ok || p.len() != 3 {
		t.Fatalf("after a 4th peer: %d peers, a kept = %v; want 3 without a", p.len(), ok)
	}
	// Later, all idle: they all go but the new one.
	p.allowMsg("e", t0.Add(time.Hour))
	if p.len() != 1 {
		t.Fatalf("after idling: %d peers, want 1", p.len())
	}
	// The bucket: burst 2, then refused, then refilled after 1s.
	now := t0.Add(2 * time.Hour)
	var got []bool
	for range 3 {
		got = append(got, p.allowMsg("x", now))
	}
	if !got[0] || !got[1] || got[2] {
		t.Fatalf("burst of 2 at one instant: %v, want [true true false]", got)
	}
	if !p.allowMsg("x", now.Add(time.Second)) {
		t.Fatal("no token after 1s at 1/s")
	}
}

func TestSampler(t *testing.T) {
	t0 := time.Unix(1000, 0)
	s := NewSampler(2, time.Minute)
	var logged, skippedTotal int
	for i := range 100 {
		ok, skipped := s.Take("r", t0.Add(time.Duration(i)*time.Millisecond))
		if ok {
			logged++
		}
		skippedTotal += skipped
	}
	if logged != 2 || skippedTotal != 0 {
		t.Fatalf("first window: %d logged, %d reported skipped; want 2, 0", logged, skippedTotal)
	}
	if ok, _ := s.Take("other", t0); !ok {
		t.Fatal("reasons must be sampled separately")
	}
	ok, skipped := s.Take("r", t0.Add(time.Minute))
	if !ok || skipped != 98 {
		t.Fatalf("next window: ok %v skipped %d; want true, 98", ok, skipped)
	}
}

// rig is a gate with a recording reply function and a manual clock.
type rig struct {
	g       *Gate
	mu      sync.Mutex
	replies []reply
	now     time.Time
	rej     *prometheus.CounterVec
	logs    *bytes.Buffer
}

type reply struct {
	to  *actor.PID
	msg any
}

const self = "10.0.0.1:4100"

var (
	root   = actor.NewPID(self, "meshweaver/root")
	caller = actor.NewPID("10.0.0.2:5000", "caller/cli")
	peer   = &net.TCPAddr{IP: net.ParseIP("10.0.0.2"), Port: 40000}
)

func newRig(t *testing.T, p *Policy, mutate func(*Config)) *rig {
	t.Helper()
	r := &rig{now: time.Unix(1000, 0), logs: &bytes.Buffer{},
		rej: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "x"}, []string{"reason"})}
	cfg := Config{Self: self, Root: root, Policy: p, Rejected: r.rej,
		Logger: slog.New(slog.NewTextHandler(r.logs, nil)),
		Now:    func() time.Time { return r.now },
		Reply: func(to *actor.PID, msg any) {
			r.mu.Lock()
			defer r.mu.Unlock()
			r.replies = append(r.replies, reply{to, msg})
		}}
	if mutate != nil {
		mutate(&cfg)
	}
	r.g = New(cfg)
	return r
}

func enc(t *testing.T, v any) *anypb.Any {
	t.Helper()
	a, err := messages.Encode(v)
	if err != nil {
		t.Fatal(err)
	}
	return a
}

func (r *rig) last(t *testing.T) reply {
	t.Helper()
	if len(r.replies) == 0 {
		t.Fatal("no reply")
	}
	return r.replies[len(r.replies)-1]
}

func TestGateRefusals(t *testing.T) {
	p := mustPolicy(t, testPolicy)
	round := messages.StartRound{RoundID: "r1", User: "bob", Thread: "t", Text: "hi"}
	for _, tc := range []struct {
		name     string
		in       Input
		reason   string
		replyTo  *actor.PID // nil: no reply
		contains string
		verdict  bool // a RoundFinished rather than a Rejected
	}{
		{"to a sibling of root", Input{Identity: "spiffe://mesh/gateway", Target: actor.NewPID(self, "meshweaver/other"), Sender: caller, Msg: enc(t, round)},
			ReasonTarget, caller, "only meshweaver/root may be addressed", false},
		{"to a stream writer", Input{Identity: "spiffe://mesh/gateway", Target: actor.NewPID(self, "stream/10.0.0.2:5000"), Sender: caller, Msg: enc(t, round)},
			ReasonTarget, caller, "only meshweaver/root", false},
		{"to another node", Input{Identity: "spiffe://mesh/gateway", Target: actor.NewPID("10.9.9.9:1", "meshweaver/root"), Sender: caller, Msg: enc(t, round)},
			ReasonTarget, caller, "only meshweaver/root", false},
		{"internal sender", Input{Identity: "spiffe://mesh/gateway", Target: root, Sender: actor.NewPID(self, "stream/10.0.0.2:5000"), Msg: enc(t, round)},
			ReasonInternal, nil, "", false},
		{"no sender", Input{Identity: "spiffe://mesh/gateway", Target: root, Msg: enc(t, round)},
			ReasonNoSender, nil, "", false},
		{"unknown type", Input{Identity: "spiffe://mesh/gateway", Target: root, Sender: caller, Msg: &anypb.Any{TypeUrl: "meshweaver/nope.v1"}},
			ReasonUnknown, caller, "unknown", false},
		{"malformed", Input{Identity: "spiffe://mesh/gateway", Target: root, Sender: caller, Msg: &anypb.Any{TypeUrl: messages.TypeURLPrefix + "start_round.v1", Value: []byte{0xc1}}},
			ReasonMalformed, caller, "malformed", false},
		{"a reply type", Input{Identity: "spiffe://mesh/gateway", Target: root, Sender: caller, Msg: enc(t, messages.RoundFinished{RoundID: "x"})},
			ReasonUnknown, caller, "does not accept", false},
		{"invalid round", Input{Identity: "spiffe://mesh/gateway", Target: root, Sender: caller, Msg: enc(t, messages.StartRound{RoundID: "r2", User: "bob", Thread: "t"})},
			ReasonInvalid, caller, "text", true},
		{"bad user id", Input{Identity: "ops", Target: root, Sender: caller, Msg: enc(t, messages.Logout{User: "../etc"})},
			ReasonInvalid, caller, "", false},
		{"reply_to elsewhere", Input{Identity: "spiffe://mesh/gateway", Target: root, Sender: caller,
			Msg: enc(t, messages.StartRound{RoundID: "r3", User: "bob", Thread: "t", Text: "x", ReplyTo: &messages.PID{Address: "10.7.7.7:1", ID: "a"}})},
			ReasonInvalid, caller, "reply_to must be on the sender's node", true},
		{"round by the wrong identity", Input{Identity: "spiffe://mesh/agent-1", Target: root, Sender: caller, Msg: enc(t, round)},
			ReasonUnauthorized, caller, `identity "spiffe://mesh/agent-1" may not send rounds for user "bob"`, true},
		{"round by the wrong identity, reply_to", Input{Identity: "spiffe://mesh/agent-1", Target: root, Sender: caller,
			Msg: enc(t, messages.StartRound{RoundID: "r4", User: "bob", Thread: "t", Text: "x", ReplyTo: &messages.PID{Address: caller.Address, ID: "caller/other"}})},
			ReasonUnauthorized, actor.NewPID(caller.Address, "caller/other"), "may not send rounds", true},
		{"interrupt", Input{Identity: "spiffe://mesh/agent-1", Target: root, Sender: caller, Msg: enc(t, messages.InterruptRound{User: "bob", Thread: "t"})},
			ReasonUnauthorized, caller, "may not send control", false},
		{"set api key", Input{Identity: "spiffe://mesh/gateway", Target: root, Sender: caller, Msg: enc(t, messages.SetAPIKey{User: "bob", APIKey: "sk-secret-value"})},
			ReasonUnauthorized, caller, "may not send login", false},
		{"models", Input{Identity: "spiffe://mesh/gateway", Target: root, Sender: caller, Msg: enc(t, messages.ModelsRequest{User: "bob"})},
			ReasonUnauthorized, caller, "may not send account", false},
	} {
		r := newRig(t, p, nil)
		in := tc.in
		in.Addr = peer
		if _, ok := r.g.Check(in); ok {
			t.Errorf("%s: passed", tc.name)
			continue
		}
		if got := testutil.ToFloat64(r.rej.WithLabelValues(tc.reason)); got != 1 {
			t.Errorf("%s: reason %s counted %v times, want 1", tc.name, tc.reason, got)
		}
		if strings.Contains(r.logs.String(), "sk-secret-value") {
			t.Errorf("%s: the API key reached the log", tc.name)
		}
		if tc.replyTo == nil {
			if len(r.replies) != 0 {
				t.Errorf("%s: answered %v, want no answer", tc.name, r.replies)
			}
			continue
		}
		rep := r.last(t)
		if !rep.to.Equals(tc.replyTo) {
			t.Errorf("%s: answered to %v, want %v", tc.name, rep.to, tc.replyTo)
		}
		var text string
		switch m := rep.msg.(type) {
		case messages.RoundFinished:
			if !tc.verdict || m.Status != messages.StatusRejected {
				t.Errorf("%s: answered %+v", tc.name, m)
			}
			text = m.Error
		case messages.Rejected:
			if tc.verdict {
				t.Errorf("%s: answered a Rejected, want a RoundFinished", tc.name)
			}
			text = m.Reason
		default:
			t.Errorf("%s: answered %T", tc.name, m)
		}
		if !strings.Contains(text, tc.contains) || strings.Contains(text, "sk-secret-value") {
			t.Errorf("%s: answer %q does not name %q (or leaks the key)", tc.name, text, tc.contains)
		}
	}
}

func TestGatePasses(t *testing.T) {
	r := newRig(t, mustPolicy(t, testPolicy), nil)
	for _, in := range []Input{
		{Identity: "spiffe://mesh/gateway", Msg: enc(t, messages.StartRound{User: "bob", Thread: "t", Text: "hi"})},
		{Identity: "spiffe://mesh/gateway", Msg: enc(t, messages.SteerRound{User: "bob", Thread: "t", Text: "hi"})},
		{Identity: "ops", Msg: enc(t, messages.SetAPIKey{User: "bob", APIKey: "sk-x"})},
		{Identity: "spiffe://mesh/agent-2", Msg: enc(t, messages.ModelsRequest{User: "alice"})},
		{Identity: "spiffe://mesh/agent-2", Msg: messages.AccountRequest{User: "team-a"}}, // already decoded
	} {
		in.Target, in.Sender, in.Addr = root, caller, peer
		msg, ok := r.g.Check(in)
		if !ok {
			t.Fatalf("%s refused: %v", in.Identity, r.replies)
		}
		if messages.IsEnvelope(msg) {
			t.Fatalf("delivered %T, want the decoded message", msg)
		}
	}
	if len(r.replies) != 0 {
		t.Fatalf("answers to accepted messages: %v", r.replies)
	}
}

func TestGateRateLimitsMessagesAndAnswers(t *testing.T) {
	r := newRig(t, nil, func(c *Config) {
		c.PeerRate, c.PeerBurst, c.ReplyRate, c.ReplyBurst, c.LogFirst = 20, 40, 5, 20, 3
	})
	in := Input{Target: root, Sender: caller, Addr: peer, Msg: enc(t, messages.AccountRequest{User: "bob"})}
	passed := 0
	for range 1000 {
		if _, ok := r.g.Check(in); ok {
			passed++
		}
	}
	if passed != 40 {
		t.Fatalf("%d of 1000 passed at one instant, want the burst of 40", passed)
	}
	if got := testutil.ToFloat64(r.rej.WithLabelValues(ReasonRate)); got != 960 {
		t.Fatalf("rate refusals counted %v, want 960", got)
	}
	if len(r.replies) != 20 {
		t.Fatalf("%d refusals answered, want the reply burst of 20", len(r.replies))
	}
	if rej, ok := r.replies[0].msg.(messages.Rejected); !ok || !strings.Contains(rej.Reason, "rate limited: 20 messages/s per peer") {
		t.Fatalf("answer %+v does not name the limit", r.replies[0].msg)
	}
	if n := strings.Count(r.logs.String(), "\n"); n != 3 {
		t.Fatalf("%d log lines for 960 refusals, want the 3 sampled", n)
	}
	// Another peer is not affected; the first recovers with time.
	other := in
	other.Addr = &net.TCPAddr{IP: net.ParseIP("10.0.0.3"), Port: 1}
	if _, ok := r.g.Check(other); !ok {
		t.Fatal("another peer was limited")
	}
	r.now = r.now.Add(time.Second)
	for range 20 {
		if _, ok := r.g.Check(in); !ok {
			t.Fatal("no recovery after 1s at 20/s")
		}
	}
	r.now = r.now.Add(2 * time.Minute)
	for range 41 {
		r.g.Check(in)
	}
	if !strings.Contains(r.logs.String(), "count=957") {
		t.Fatalf("no summary of the lines left out:\n%s", r.logs.String())
	}
}

func TestPeerKey(t *testing.T) {
	if k := PeerKey("spiffe://a", peer, caller); k != "id:spiffe://a" {
		t.Errorf("TLS key %q", k)
	}
	if k := PeerKey("", peer, caller); k != "ip:10.0.0.2" {
		t.Errorf("plaintext key %q", k)
	}
	lo := &net.TCPAddr{IP: net.ParseIP("127.0.0.1"), Port: 5}
	if k := PeerKey("", lo, actor.NewPID("127.0.0.1:7000", "x")); k != "loopback:127.0.0.1:7000" {
		t.Errorf("loopback key %q", k)
	}
}

// BenchmarkGateCheck is what the gate adds to one message: the root
// decoded and validated it before the gate existed, so the new cost is the
// target and sender checks, one limiter and the policy match.
func BenchmarkGateCheck(b *testing.B) {
	p, err := ParsePolicy([]byte(testPolicy))
	if err != nil {
		b.Fatal(err)
	}
	g := New(Config{Self: self, Root: root, Policy: p, PeerRate: 1e12, PeerBurst: 1 << 30,
		Reply: func(*actor.PID, any) { b.Fatal("refused") }})
	a, err := messages.Encode(messages.StartRound{User: "team-a", Thread: "t", Text: strings.Repeat("x", 1000)})
	if err != nil {
		b.Fatal(err)
	}
	in := Input{Identity: "spiffe://mesh/agent-3", Addr: peer, Target: root, Sender: caller, Msg: a}
	b.ReportAllocs()
	for b.Loop() {
		if _, ok := g.Check(in); !ok {
			b.Fatal("refused")
		}
	}
}

// Admit is the gate for the HTTP gateway: the same rate, validation and
// authorization as Check, the new kinds included, and no reply_to.
func TestAdmit(t *testing.T) {
	p, err := ParsePolicy([]byte(`{"version":1,"grants":[{"identities":["spiffe://a"],"users":["u1"],"kinds":["rounds"]}]}`))
	if err != nil {
		t.Fatal(err)
	}
	g := New(Config{Self: "127.0.0.1:1", Root: actor.NewPID("127.0.0.1:1", "meshweaver/root"), Policy: p, PeerRate: 1, PeerBurst: 5})
	addr := &net.TCPAddr{IP: net.IPv4(10, 0, 0, 1), Port: 5}
	for _, tt := range []struct {
		name     string
		identity string
		msg      any
		reason   string
	}{
		{"granted round", "spiffe://a", messages.StartRound{User: "u1", Thread: "t", Text: "x"}, ""},
		{"attach is rounds", "spiffe://a", messages.AttachRound{User: "u1", RoundID: "r"}, ""},
		{"answer is control", "spiffe://a", messages.AnswerRequest{User: "u1", RoundID: "r", RequestID: "q", Decision: "accept"}, ReasonUnauthorized},
		{"another user", "spiffe://a", messages.StartRound{User: "u2", Thread: "t", Text: "x"}, ReasonUnauthorized},
		{"reply_to", "spiffe://a", messages.StartRound{User: "u1", Thread: "t", Text: "x", ReplyTo: &messages.PID{Address: "h:1", ID: "x"}}, ReasonInvalid},
		{"rate", "spiffe://a", messages.StartRound{User: "u1", Thread: "t", Text: "x"}, ReasonRate},
	} {
		reason, err := g.Admit(tt.identity, addr, tt.msg)
		if reason != tt.reason || (err == nil) != (tt.reason == "") {
			t.Errorf("%s: Admit = %q, %v; want %q", tt.name, reason, err, tt.reason)
		}
	}
	if _, err := g.Admit("", addr, messages.StartRound{User: "u1", Thread: "t"}); err == nil || !strings.Contains(err.Error(), "text is empty") {
		t.Errorf("invalid: %v", err)
	}
}
