package remote

import (
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"fmt"
	"net"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/meshweaver/supervisor/third_party/hollywood/actor"
	"google.golang.org/protobuf/types/known/wrapperspb"
)

// blackHole is a TCP listener that never accepts: connects succeed (the
// kernel queues them) and a TLS handshake never gets an answer.
func blackHole(t testing.TB) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	return ln.Addr().String()
}

// TestSenderBindingTLS: under mutual TLS a sender is delivered only when its
// address, dialled back, presents the connection's own identity.
func TestSenderBindingTLS(t *testing.T) {
	p := newPKI(t)
	lim := Limits{DialTimeout: 500 * time.Millisecond}
	gateSaw := make(chan Inbound, 16)
	d := newNode(t, NewConfig().WithTLS(p.config(t, "spiffe://mesh/daemon")).WithLimits(lim).
		WithGate(func(in Inbound) (any, bool) { gateSaw <- in; return in.Msg, true }))
	alice := newNode(t, NewConfig().WithTLS(p.config(t, "spiffe://mesh/alice")).WithLimits(lim))

	// Alice as herself: delivered, and the reply comes back.
	alice.e.SendWithSender(d.echo, wrapperspb.String("hi"), alice.sink)
	if got := alice.recv(t).msg.(*wrapperspb.StringValue).GetValue(); got != "hi" {
		t.Fatalf("echo %q", got)
	}
	in := <-gateSaw
	if in.Peer.Identity != "uri:spiffe://mesh/alice" || in.Peer.TLS == nil {
		t.Errorf("peer identity %q, TLS %v", in.Peer.Identity, in.Peer.TLS != nil)
	}

	// Bob, with a certificate of the same CA, names Alice as the sender.
	bob := dialRaw(t, d.addr, p.config(t, "spiffe://mesh/bob"))
	bob.send(t, one(d.echo, alice.sink, wrapperspb.String("as alice")))
	if rf := d.ref.wait(t); rf.Reason != RefuseSender || rf.Peer.Identity != "uri:spiffe://mesh/bob" {
		t.Errorf("refusal %q for %q (%v), want %q for bob", rf.Reason, rf.Peer.Identity, rf.Err, RefuseSender)
	}
	// Bob names an address that never answers the handshake: refused
	// within about DialTimeout, and nothing is ever sent there.
	start := time.Now()
	bob.send(t, one(d.echo, actor.NewPID(blackHole(t), "x"), wrapperspb.String("into the hole")))
	if rf := d.ref.wait(t); rf.Reason != RefuseSender {
		t.Errorf("refusal %q (%v), want %q", rf.Reason, rf.Err, RefuseSender)
	}
	if took := time.Since(start); took > 3*lim.DialTimeout {
		t.Errorf("black-holed sender refused after %v, DialTimeout %v", took, lim.DialTimeout)
	}
	// Bob as himself would need a listener presenting bob's certificate; his
	// own connection still works for a message without a sender.
	bob.send(t, one(d.sink, nil, wrapperspb.String("anonymous")))
	if got := d.recv(t).msg.(*wrapperspb.StringValue).GetValue(); got != "anonymous" {
		t.Fatalf("got %q", got)
	}
	if got := (<-gateSaw).Peer.Identity; got != "uri:spiffe://mesh/bob" {
		t.Errorf("identity %q", got)
	}
	select {
	case m := <-alice.got:
		t.Fatalf("alice got a reply to bob's forgery: %v", m.msg)
	default:
	}
}

// TestBlackHoleDoesNotDelayOthers: while a dial to a black-holed address
// is pending (a reply to it, and a forged sender being verified) and five
// closed ports are being retried, a healthy caller's round trips are as
// fast as before.
func TestBlackHoleDoesNotDelayOthers(t *testing.T) {
	p := newPKI(t)
	lim := Limits{DialTimeout: 5 * time.Second}
	d := newNode(t, NewConfig().WithTLS(p.config(t, "spiffe://mesh/daemon")).WithLimits(lim))
	h := newNode(t, NewConfig().WithTLS(p.config(t, "spiffe://mesh/healthy")).WithLimits(lim))

	roundTrips := func(n int) time.Duration {
		var total time.Duration
		for range n {
			start := time.Now()
			h.e.SendWithSender(d.echo, wrapperspb.String("ping"), h.sink)
			h.recv(t)
			total += time.Since(start)
		}
		return total / time.Duration(n)
	}
	roundTrips(20) // connections and verification warm
	baseline := roundTrips(200)

	hole := blackHole(t)
	d.e.Send(actor.NewPID(hole, "victim"), wrapperspb.String("reply into the hole"))
	for range 5 { // and closed ports (upstream: ~3 s of router time each)
		d.e.Send(actor.NewPID(freeAddr(t), "gone"), wrapperspb.String("reply to a closed port"))
	}
	attacker := dialRaw(t, d.addr, p.config(t, "spiffe://mesh/attacker"))
	attacker.send(t, one(d.echo, actor.NewPID(hole, "forged"), wrapperspb.String("x")))
	d.r.mu.Lock()
	w := d.r.writers[hole]
	d.r.mu.Unlock()
	if w == nil {
		t.Fatal("no writer to the black hole")
	}

	attacked := roundTrips(200)
	select {
	case <-w.ready:
		t.Fatal("the black-holed dial finished before the measurement did: make DialTimeout longer")
	default:
	}
	t.Logf("mean round trip: baseline %v, with a black-holed dial pending %v", baseline, attacked)
	if attacked > baseline*3/2+5*time.Millisecond {
		t.Errorf("round trips slowed from %v to %v", baseline, attacked)
	}
}

// TestDialGivesUp: an address where nothing listens is given up after the
// tries, bounded in time, with RemoteUnreachableEvent; the next send to it
// dials again.
func TestDialGivesUp(t *testing.T) {
	lim := Limits{DialTimeout: 300 * time.Millisecond}
	n := newNode(t, NewConfig().WithLimits(lim))
	events := subscribe(t, n.e)
	dead := freeAddr(t)
	start := time.Now()
	n.e.Send(actor.NewPID(dead, "x"), wrapperspb.String("lost"))
	waitEvent(t, events, func(ev any) bool {
		u, ok := ev.(actor.RemoteUnreachableEvent)
		return ok && u.ListenAddr == dead
	})
	if took := time.Since(start); took > 2*lim.DialTimeout+time.Second {
		t.Errorf("gave up after %v; bound 2×DialTimeout = %v", took, 2*lim.DialTimeout)
	}
	n.r.mu.Lock()
	_, still := n.r.writers[dead]
	n.r.mu.Unlock()
	if still {
		t.Error("the failed writer is still registered")
	}
}

// subscribe returns the engine's events (a bounded channel; extra events are
// dropped).
func subscribe(t testing.TB, e *actor.Engine) <-chan any {
	t.Helper()
	ch := make(chan any, 1024)
	pid := e.SpawnFunc(func(c *actor.Context) {
		switch c.Message().(type) {
		case actor.Initialized, actor.Started, actor.Stopped:
			return
		}
		select {
		case ch <- c.Message():
		default:
		}
	}, "events")
	e.Subscribe(pid)
	t.Cleanup(func() {
		e.Unsubscribe(pid)
		<-e.Poison(pid).Done()
	})
	return ch
}

// waitEvent waits for the first event that matches.
func waitEvent(t testing.TB, ch <-chan any, match func(any) bool) any {
	t.Helper()
	deadline := time.After(10 * time.Second)
	for {
		select {
		case ev := <-ch:
			if match(ev) {
				return ev
			}
		case <-deadline:
			t.Fatal("no matching event within 10s")
			return nil
		}
	}
}

func TestDefaultIdentify(t *testing.T) {
	u, _ := url.Parse("spiffe://mesh/alice")
	for _, tc := range []struct {
		name string
		cs   *tls.ConnectionState
		want string
	}{
		{"nil", nil, ""},
		{"no certificate", &tls.ConnectionState{}, ""},
		{"URI SAN first", &tls.ConnectionState{PeerCertificates: []*x509.Certificate{
			{URIs: []*url.URL{u}, Subject: pkix.Name{CommonName: "cn"}}}}, "uri:spiffe://mesh/alice"},
		{"CN otherwise", &tls.ConnectionState{PeerCertificates: []*x509.Certificate{
			{Subject: pkix.Name{CommonName: "cn"}}}}, "cn:cn"},
		{"a CN spelling a URI stays a CN", &tls.ConnectionState{PeerCertificates: []*x509.Certificate{
			{Subject: pkix.Name{CommonName: "spiffe://mesh/alice"}}}}, "cn:spiffe://mesh/alice"},
		{"neither (DNS names only)", &tls.ConnectionState{PeerCertificates: []*x509.Certificate{
			{DNSNames: []string{"alice.example"}}}}, ""},
	} {
		if got := DefaultIdentify(tc.cs); got != tc.want {
			t.Errorf("%s: %q, want %q", tc.name, got, tc.want)
		}
	}
}

// TestCheckIdentity: a certificate with URI SANs names its peer only if it
// carries exactly one; CN-only and SAN-less certificates are DefaultIdentify's
// to name, and VerifyIdentity refuses two URIs even when the first is the one
// expected.
func TestCheckIdentity(t *testing.T) {
	alice, _ := url.Parse("spiffe://mesh/alice")
	bob, _ := url.Parse("spiffe://mesh/bob")
	state := func(c *x509.Certificate) *tls.ConnectionState {
		return &tls.ConnectionState{PeerCertificates: []*x509.Certificate{c}}
	}
	for _, tc := range []struct {
		name string
		cs   *tls.ConnectionState
		ok   bool
	}{
		{"nil", nil, true},
		{"no certificate", &tls.ConnectionState{}, true},
		{"one URI SAN", state(&x509.Certificate{URIs: []*url.URL{alice}}), true},
		{"CN only", state(&x509.Certificate{Subject: pkix.Name{CommonName: "cn"}}), true},
		{"two URI SANs", state(&x509.Certificate{URIs: []*url.URL{alice, bob}}), false},
		{"the same URI twice", state(&x509.Certificate{URIs: []*url.URL{alice, alice}}), false},
	} {
		err := CheckIdentity(tc.cs)
		if (err == nil) != tc.ok || (err != nil && !strings.Contains(err.Error(), "exactly one")) {
			t.Errorf("%s: %v, want ok %v", tc.name, err, tc.ok)
		}
	}
	two := *state(&x509.Certificate{URIs: []*url.URL{alice, bob}})
	two.VerifiedChains = [][]*x509.Certificate{two.PeerCertificates} // as a server after crypto/tls
	if err := VerifyIdentity("uri:spiffe://mesh/alice", nil)(two); err == nil || !strings.Contains(err.Error(), "2 URI SANs") {
		t.Errorf("VerifyIdentity of a certificate with two URI SANs, the first expected: %v, want refused", err)
	}
}

// TestTwoURISANsRefusedAtTheHandshake: a remote whose TLS config checks only
// the chain still refuses a peer whose certificate carries two URI SANs, on
// either side: its connection in is refused (handshake) before any frame is
// delivered, and its listener, dialled, is unreachable with that reason.
func TestTwoURISANsRefusedAtTheHandshake(t *testing.T) {
	p := newPKI(t)
	gateSaw := make(chan Inbound, 16)
	d := newNode(t, NewConfig().WithTLS(p.config(t, "spiffe://mesh/daemon")).
		WithGate(func(in Inbound) (any, bool) { gateSaw <- in; return in.Msg, true }))

	in := dialRaw(t, d.addr, p.config(t, "spiffe://mesh/alice", "spiffe://mesh/daemon"))
	_ = in.stream.Send(one(d.echo, nil, wrapperspb.String("two names")))
	rf := d.ref.wait(t)
	if rf.Reason != RefuseHandshake || rf.Err == nil || !strings.Contains(rf.Err.Error(), "2 URI SANs") {
		t.Errorf("refusal %q (%v), want %q naming the two URI SANs", rf.Reason, rf.Err, RefuseHandshake)
	}
	in.closed(t)
	select {
	case got := <-gateSaw:
		t.Errorf("the gate saw a message of a two-URI certificate: %v", got.Peer.Identity)
	default:
	}

	events := subscribe(t, d.e)
	twoNames := newNode(t, NewConfig().WithTLS(p.config(t, "spiffe://mesh/bob", "spiffe://mesh/daemon")))
	d.e.Send(twoNames.sink, wrapperspb.String("for bob"))
	ev := waitEvent(t, events, func(ev any) bool { _, ok := ev.(actor.RemoteUnreachableEvent); return ok }).(actor.RemoteUnreachableEvent)
	if ev.ListenAddr != twoNames.addr || ev.Err == nil || !strings.Contains(ev.Err.Error(), "2 URI SANs") {
		t.Errorf("unreachable %s: %v, want %s refused for its two URI SANs", ev.ListenAddr, ev.Err, twoNames.addr)
	}
	select {
	case m := <-twoNames.got:
		t.Errorf("a listener with two URI SANs received %v", m.msg)
	default:
	}
}

// TestCustomIdentify: WithIdentify names the peers (both the connection and
// the dial-back use it).
func TestCustomIdentify(t *testing.T) {
	p := newPKI(t)
	byCN := func(cs *tls.ConnectionState) string {
		if cs == nil || len(cs.PeerCertificates) == 0 {
			return ""
		}
		return "cn:" + cs.PeerCertificates[0].Subject.CommonName
	}
	seen := make(chan string, 4)
	d := newNode(t, NewConfig().WithTLS(p.config(t, "spiffe://mesh/daemon")).WithIdentify(byCN).
		WithGate(func(in Inbound) (any, bool) { seen <- in.Peer.Identity; return in.Msg, true }))
	a := newNode(t, NewConfig().WithTLS(p.config(t, "spiffe://mesh/a")).WithIdentify(byCN))
	a.e.SendWithSender(d.echo, wrapperspb.String("x"), a.sink)
	a.recv(t)
	if got := <-seen; got != "cn:cn-spiffe://mesh/a" {
		t.Errorf("identity %q", got)
	}
}

// TestRefusedSenderAnsweredOnItsConnection: a message whose sender cannot
// be bound (here its listener presents another identity than its
// connection) cannot be answered at the sender's address; Refusal.Reply
// sends the answer back over the connection the message came on, and a
// remote WithAnswers delivers it to the sender's actor at once.
func TestRefusedSenderAnsweredOnItsConnection(t *testing.T) {
	p := newPKI(t)
	lim := Limits{DialTimeout: 500 * time.Millisecond}
	refused := make(chan Refusal, 16)
	replied := make(chan [2]error, 16) // the two Reply calls' errors, checked on the test's goroutine
	d := newNode(t, NewConfig().WithTLS(p.config(t, "spiffe://mesh/daemon")).WithLimits(lim).
		WithOnRefuse(func(rf Refusal) {
			refused <- rf
			if rf.Reply != nil {
				replied <- [2]error{rf.Reply(rf.Sender, wrapperspb.String("refused: "+rf.Reason)),
					rf.Reply(actor.NewPID("127.0.0.1:1", "x"), wrapperspb.String("elsewhere"))}
			}
		}))
	conf := p.config(t, "spiffe://mesh/carol-listener")
	carolCert := p.config(t, "spiffe://mesh/carol").Certificates[0]
	conf.GetClientCertificate = func(*tls.CertificateRequestInfo) (*tls.Certificate, error) { return &carolCert, nil }
	carol := newNode(t, NewConfig().WithTLS(conf).WithLimits(lim).WithAnswers())
	start := time.Now()
	carol.e.SendWithSender(d.echo, wrapperspb.String("hi"), carol.sink)
	if rf := <-refused; rf.Reason != RefuseSender || rf.Sender == nil || rf.Sender.Address != carol.addr || rf.Msg == nil {
		t.Fatalf("refusal %+v, want %q with the sender and message", rf, RefuseSender)
	}
	if got := carol.recv(t).msg.(*wrapperspb.StringValue).GetValue(); got != "refused: "+RefuseSender {
		t.Fatalf("carol got %q", got)
	}
	if took := time.Since(start); took > 5*time.Second {
		t.Errorf("the refusal took %v", took)
	}
	// Before the cleanup closes the connections under a Send.
	if errs := <-replied; errs[0] != nil || errs[1] == nil {
		t.Errorf("reply to the sender: %v; to another node: %v (want it refused)", errs[0], errs[1])
	}
}

// TestDialVerifyPerAddress: WithDialVerify gives each dial the
// verification it picks for the address dialled, at that dial: a refusal
// ends the dial (RemoteUnreachableEvent with its error, nothing
// delivered), and a nil pick keeps the config's own VerifyConnection.
func TestDialVerifyPerAddress(t *testing.T) {
	p := newPKI(t)
	refused := newNode(t, NewConfig().WithTLS(p.config(t, "spiffe://mesh/caller")))
	kept := newNode(t, NewConfig().WithTLS(p.config(t, "spiffe://mesh/member")))
	conf := p.config(t, "spiffe://mesh/daemon")
	var mu sync.Mutex
	picked := map[string]int{}
	own := 0
	conf.VerifyConnection = func(tls.ConnectionState) error { mu.Lock(); own++; mu.Unlock(); return nil }
	d := newNode(t, NewConfig().WithTLS(conf).WithDialVerify(func(addr string) func(tls.ConnectionState) error {
		mu.Lock()
		picked[addr]++
		mu.Unlock()
		if addr != refused.addr {
			return nil
		}
		return func(cs tls.ConnectionState) error {
			return fmt.Errorf("%s presents %s, not a member", addr, DefaultIdentify(&cs))
		}
	}))
	events := subscribe(t, d.e)

	d.e.Send(refused.sink, wrapperspb.String("for a member"))
	ev := waitEvent(t, events, func(ev any) bool {
		u, ok := ev.(actor.RemoteUnreachableEvent)
		return ok && u.ListenAddr == refused.addr
	}).(actor.RemoteUnreachableEvent)
	if ev.Err == nil || !strings.Contains(ev.Err.Error(), "uri:spiffe://mesh/caller, not a member") {
		t.Errorf("unreachable: %v, want the pick's refusal", ev.Err)
	}
	d.e.Send(kept.sink, wrapperspb.String("for a member"))
	if got := kept.recv(t).msg.(*wrapperspb.StringValue).GetValue(); got != "for a member" {
		t.Errorf("got %q", got)
	}
	select {
	case m := <-refused.got:
		t.Errorf("the refused peer received %v", m.msg)
	default:
	}
	mu.Lock()
	defer mu.Unlock()
	if picked[refused.addr] != dialTries || picked[kept.addr] != 1 {
		t.Errorf("picks %v, want %d for %s (one a try) and 1 for %s", picked, dialTries, refused.addr, kept.addr)
	}
	if own != 1 {
		t.Errorf("the config's own VerifyConnection ran %d times, want once (the kept peer's dial)", own)
	}
}
