package main

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/pem"
	"fmt"
	"net"
	"net/url"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/meshweaver/supervisor/actors"
	"github.com/meshweaver/supervisor/cluster"
	"github.com/meshweaver/supervisor/edge"
	"github.com/meshweaver/supervisor/messages"
	"github.com/meshweaver/supervisor/third_party/hollywood/actor"
	"github.com/meshweaver/supervisor/third_party/hollywood/remote"
)

// memberPolicy grants the members (supervisor-*) the cluster kind and a
// caller only rounds for alice.
const memberPolicy = `{"version": 1, "grants": [
  {"identities": ["spiffe://mesh/supervisor-*"], "users": ["*"], "kinds": ["rounds", "control", "login", "account", "cluster"]},
  {"identities": ["spiffe://mesh/alice-agent"], "users": ["alice"], "kinds": ["rounds", "control"]}
]}`

// memberDialRig is a daemon's TLS reloader wired as serve wires it, with
// a member list the test sets, and the certificates of a CA.
type memberDialRig struct {
	certs   *tlsReloader
	conf    *tls.Config
	ca      *tlsCA
	dir     string
	mu      sync.Mutex
	members map[string]string
}

func newMemberDialRig(t *testing.T) *memberDialRig {
	t.Helper()
	dir := t.TempDir()
	ca := tlsNewCA(t, dir, "ca", "meshweaver test CA")
	cert, key := ca.issueURI(t, dir, "member-a", "spiffe://mesh/supervisor-a")
	policy, err := edge.ParsePolicy([]byte(memberPolicy))
	if err != nil {
		t.Fatal(err)
	}
	certs, conf, err := newTLSReloader(tlsOptions{cert: cert, key: key, ca: ca.pem})
	if err != nil {
		t.Fatal(err)
	}
	rig := &memberDialRig{certs: certs, conf: conf, ca: ca, dir: dir, members: map[string]string{}}
	// As serve sets them.
	certs.admit = policy.Names
	certs.member = func(id string) bool { return policy.Allows(id, "*", edge.KindCluster) }
	certs.members = func() map[string]string {
		rig.mu.Lock()
		defer rig.mu.Unlock()
		out := map[string]string{}
		for k, v := range rig.members {
			out[k] = v
		}
		return out
	}
	return rig
}

func (rig *memberDialRig) setMembers(m map[string]string) {
	rig.mu.Lock()
	rig.members = m
	rig.mu.Unlock()
}

// state is the connection state of a dial whose peer presents the
// certificate file.
func leafState(t *testing.T, certFile string) tls.ConnectionState {
	t.Helper()
	b, err := os.ReadFile(certFile)
	if err != nil {
		t.Fatal(err)
	}
	blk, _ := pem.Decode(b)
	c, err := x509.ParseCertificate(blk.Bytes)
	if err != nil {
		t.Fatal(err)
	}
	return tls.ConnectionState{PeerCertificates: []*x509.Certificate{c}}
}

// TestMemberDialDecision: a dial to a live member's address needs an
// identity granted the cluster kind; any other address keeps the rule for
// callers (an identity some grant names); the member list is read at the
// dial, so a member that left no longer counts and one that joined does.
func TestMemberDialDecision(t *testing.T) {
	rig := newMemberDialRig(t)
	member, _ := rig.ca.issueURI(t, rig.dir, "member-b", "spiffe://mesh/supervisor-b")
	caller, _ := rig.ca.issueURI(t, rig.dir, "alice", "spiffe://mesh/alice-agent")
	unnamed, _ := rig.ca.issueURI(t, rig.dir, "mallory", "spiffe://mesh/mallory")
	rogue := tlsNewCA(t, rig.dir, "rogue", "meshweaver test CA")
	rogueMember, _ := rogue.issueURI(t, rig.dir, "rogue-b", "spiffe://mesh/supervisor-b")
	const memberAddr, callerAddr = "127.0.0.1:4100", "127.0.0.1:4200"
	rig.setMembers(map[string]string{"a": "127.0.0.1:4000", "b": memberAddr})
	for _, tc := range []struct {
		name, addr, cert string
		want             string // "" admitted, else a part of the error
	}{
		{"member at a member's address", memberAddr, member, ""},
		{"caller at a member's address", memberAddr, caller, "cluster kind"},
		{"unnamed at a member's address", memberAddr, unnamed, "cluster kind"},
		{"member of another CA at a member's address", memberAddr, rogueMember, "unknown authority"},
		{"caller at a caller's address", callerAddr, caller, ""},
		{"member at a caller's address", callerAddr, member, ""},
		{"unnamed at a caller's address", callerAddr, unnamed, "no grant"},
		{"member of another CA at a caller's address", callerAddr, rogueMember, "unknown authority"},
	} {
		err := rig.certs.verifyDialledTo(tc.addr)(leafState(t, tc.cert))
		switch {
		case tc.want == "" && err != nil:
			t.Errorf("%s: %v, want admitted", tc.name, err)
		case tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)):
			t.Errorf("%s: %v, want refused naming %q", tc.name, err, tc.want)
		}
	}
	// The list as it is at the dial: b left, so its address is a caller's.
	rig.setMembers(map[string]string{"a": "127.0.0.1:4000"})
	if err := rig.certs.verifyDialledTo(memberAddr)(leafState(t, caller)); err != nil {
		t.Errorf("caller at the address of a member that left: %v, want admitted", err)
	}
	// c joined at the caller's address: it needs the grant from then on.
	rig.setMembers(map[string]string{"a": "127.0.0.1:4000", "c": callerAddr})
	if err := rig.certs.verifyDialledTo(callerAddr)(leafState(t, caller)); err == nil || !strings.Contains(err.Error(), "cluster kind") {
		t.Errorf("caller at the address of a member that joined: %v, want refused", err)
	}
	// The config's own check (anything the remote dials without the
	// per-address one) keeps the callers' rule.
	if err := rig.certs.verifyDialled(leafState(t, caller)); err != nil {
		t.Errorf("verifyDialled, caller: %v, want admitted", err)
	}
}

// TestTwoURISANsRefused: a certificate of the CA that carries two URI SANs
// (a member's and a caller's) names no one identity, and every handshake
// the daemon verifies refuses it, naming why: a connection to the remote or
// the gateway (the server config both take), with --authz and with
// --authz-allow-any, and a dial at a member's address or a caller's.
// Without the check the first URI was the identity: at a member's address
// the member's name let a caller's certificate in.
func TestTwoURISANsRefused(t *testing.T) {
	rig := newMemberDialRig(t)
	member, err := url.Parse("spiffe://mesh/supervisor-b")
	if err != nil {
		t.Fatal(err)
	}
	caller, err := url.Parse("spiffe://mesh/alice-agent")
	if err != nil {
		t.Fatal(err)
	}
	two, _ := rig.ca.issueFor(t, rig.dir, "two-names", []net.IP{net.IPv4(127, 0, 0, 1)}, nil, member, caller)
	const memberAddr, callerAddr = "127.0.0.1:4100", "127.0.0.1:4200"
	rig.setMembers(map[string]string{"a": "127.0.0.1:4000", "b": memberAddr})
	server, err := rig.conf.GetConfigForClient(nil)
	if err != nil {
		t.Fatal(err)
	}
	refused := func(what string, err error) {
		t.Helper()
		if err == nil || !strings.Contains(err.Error(), "2 URI SANs") {
			t.Errorf("%s: %v, want refused naming the 2 URI SANs", what, err)
		}
	}
	cs := leafState(t, two)
	cs.VerifiedChains = [][]*x509.Certificate{cs.PeerCertificates} // crypto/tls verified the chain
	refused("an incoming handshake, --authz", server.VerifyConnection(cs))
	refused("a dial at a member's address", rig.certs.verifyDialledTo(memberAddr)(leafState(t, two)))
	refused("a dial at a caller's address", rig.certs.verifyDialledTo(callerAddr)(leafState(t, two)))
	refused("a dial without the per-address check", rig.certs.verifyDialled(leafState(t, two)))
	rig.certs.admit, rig.certs.member = nil, nil // --authz-allow-any
	refused("an incoming handshake, --authz-allow-any", server.VerifyConnection(cs))
	refused("a dial, --authz-allow-any", rig.certs.verifyDialledTo(callerAddr)(leafState(t, two)))
	// One URI SAN of the same CA still passes.
	one, _ := rig.ca.issueURI(t, rig.dir, "one-name", "spiffe://mesh/supervisor-b")
	if err := rig.certs.verifyDialledTo(memberAddr)(leafState(t, one)); err != nil {
		t.Errorf("a member's certificate with one URI SAN: %v, want admitted", err)
	}
}

// memberInbox is an actor that hands every message it gets to a channel,
// and the engine's RemoteUnreachableEvents to another.
type memberInbox struct {
	got         chan any
	unreachable chan actor.RemoteUnreachableEvent
}

func (m *memberInbox) Receive(c *actor.Context) {
	switch msg := c.Message().(type) {
	case actor.Initialized, actor.Started, actor.Stopped:
	case actor.RemoteUnreachableEvent:
		select {
		case m.unreachable <- msg:
		default:
		}
	default:
		select {
		case m.got <- msg:
		default:
		}
	}
}

func newMemberInbox(e *actor.Engine, name, id string) (*actor.PID, *memberInbox) {
	m := &memberInbox{got: make(chan any, 16), unreachable: make(chan actor.RemoteUnreachableEvent, 16)}
	return e.Spawn(func() actor.Receiver { return m }, name, actor.WithID(id)), m
}

// TestMemberDialNeedsClusterGrant: real remotes under mutual TLS. The
// daemon's remote, configured as serve configures it, sends to a peer at
// a member's address: a peer presenting a caller's identity (granted
// rounds, not cluster) is refused at the handshake and gets nothing, the
// daemon hearing why; a peer presenting a member's identity gets the
// message; and the caller's identity at an address that is no member's
// still gets it (the callers' rule is unchanged).
func TestMemberDialNeedsClusterGrant(t *testing.T) {
	rig := newMemberDialRig(t)
	self := mustFreeAddr(t)
	e, rem, err := newRemoteEngine(self, rig.conf, func(rc remote.Config) remote.Config {
		return rc.WithDialVerify(rig.certs.dialVerify())
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { rem.Stop().Wait() })
	watcher, events := newMemberInbox(e, "watcher", "inbox")
	e.Subscribe(watcher)
	t.Cleanup(func() { e.Unsubscribe(watcher); <-e.Poison(watcher).Done() })

	// peer listens at addr as id and returns its inbox.
	peer := func(name, id, addr string) (*actor.PID, *memberInbox) {
		t.Helper()
		cert, key := rig.ca.issueURI(t, rig.dir, name, id)
		pe, prem, err := newRemoteEngine(addr, tlsConfig(t, cert, key, rig.ca.pem))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { prem.Stop().Wait() })
		pid, in := newMemberInbox(pe, "root", "inbox")
		t.Cleanup(func() { <-pe.Poison(pid).Done() })
		return pid, in
	}
	const wait = 30 * time.Second
	delivered := func(what string, in *memberInbox) {
		t.Helper()
		select {
		case <-in.got:
		case ev := <-events.unreachable:
			t.Fatalf("%s: the peer was not reached: %v", what, ev.Err)
		case <-time.After(wait):
			t.Fatalf("%s: nothing arrived within %v", what, wait)
		}
	}

	// A caller's identity at a member's address.
	memberAddr := mustFreeAddr(t)
	rig.setMembers(map[string]string{"a": self, "b": memberAddr})
	to, in := peer("alice", "spiffe://mesh/alice-agent", memberAddr)
	e.Send(to, &actor.PID{Address: "prompt", ID: "for member b"})
	select {
	case ev := <-events.unreachable:
		if ev.ListenAddr != memberAddr || ev.Err == nil || !strings.Contains(ev.Err.Error(), "cluster kind") {
			t.Errorf("unreachable %s: %v, want %s refused for want of the cluster kind", ev.ListenAddr, ev.Err, memberAddr)
		}
	case m := <-in.got:
		t.Fatalf("a caller's identity at a member's address received %v", m)
	case <-time.After(wait):
		t.Fatalf("no verdict on the dial to %s within %v", memberAddr, wait)
	}
	select { // the dial failed, so nothing can come any more
	case m := <-in.got:
		t.Fatalf("a caller's identity at a member's address received %v", m)
	default:
	}

	// A member's identity at a member's address.
	memberAddr2 := mustFreeAddr(t)
	rig.setMembers(map[string]string{"a": self, "b": memberAddr2})
	to, in = peer("member-b", "spiffe://mesh/supervisor-b", memberAddr2)
	e.Send(to, &actor.PID{Address: "prompt", ID: "for member b"})
	delivered("a member's identity at its address", in)

	// The caller's identity at its own (no member's) address.
	to, in = peer("alice-listener", "spiffe://mesh/alice-agent", mustFreeAddr(t))
	e.Send(to, &actor.PID{Address: "answer", ID: "for alice"})
	delivered("a caller's identity at a caller's address", in)
}

// memberDialPolicy is memberPolicy with alice granted rounds for every
// user, so that a user placed on any member is hers to ask for.
const memberDialPolicy = `{"version": 1, "grants": [
  {"identities": ["spiffe://mesh/supervisor-*"], "users": ["*"], "kinds": ["rounds", "control", "login", "account", "cluster"]},
  {"identities": ["spiffe://mesh/alice-agent"], "users": ["*"], "kinds": ["rounds", "control"]}
]}`

// TestClusterMemberDialNeedsClusterGrant: `supervisor serve` as a cluster
// member under mutual TLS (embedded etcd), and two more "members" the
// test writes into etcd, each a bare remote that owns one user: X
// presents alice's identity (a caller's, granted rounds), Y a member's.
// Alice's round for X's user is forwarded by the daemon to X's address:
// the dial is refused for want of the cluster grant, X receives nothing,
// and alice gets the relay's "cannot be reached" verdict. Her round for
// Y's user reaches Y. It checks serve's wiring: the member list is the
// cluster node's, read at the dial.
func TestClusterMemberDialNeedsClusterGrant(t *testing.T) {
	dir := t.TempDir()
	ca := tlsNewCA(t, dir, "ca", "meshweaver test CA")
	nodeCert, nodeKey := ca.issueURI(t, dir, "m0", "spiffe://mesh/supervisor-m0")
	aliceCert, aliceKey := ca.issueURI(t, dir, "alice", "spiffe://mesh/alice-agent")
	yCert, yKey := ca.issueURI(t, dir, "my", "spiffe://mesh/supervisor-my")
	authz := dir + "/authz.json"
	if err := os.WriteFile(authz, []byte(memberDialPolicy), 0o600); err != nil {
		t.Fatal(err)
	}
	peer, client := mustFreeAddr(t), mustFreeAddr(t)
	h := hostileStart(t, "--tls-cert", nodeCert, "--tls-key", nodeKey, "--tls-ca", ca.pem, "--authz", authz,
		"--cluster", "c1", "--member", "m0", "--etcd-name", "m0", "--etcd-dir", dir+"/etcd",
		"--etcd-peer-listen", "https://"+peer, "--etcd-client-listen", "https://"+client,
		"--etcd-initial-cluster", "m0=https://"+peer, "--log-level", "debug")
	// One CA for the callers and etcd: the start log says what it costs.
	h.srv.waitMsg("supervisor serving")
	if _, ok := h.srv.find(func(rec map[string]any) bool { return strings.HasPrefix(fmt.Sprint(rec["msg"]), etcdTrustWarning) }); !ok {
		t.Error("no start warning that etcd trusts the callers' CA")
	}
	etcd, err := cluster.NewClient("https://"+client, cluster.TLSFiles{Cert: nodeCert, Key: nodeKey, CA: ca.pem})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { etcd.Close() })

	// fake is a member at a fresh address presenting cert, owning user.
	fake := func(id, user, cert, key string) (string, chan any) {
		t.Helper()
		addr := mustFreeAddr(t)
		e, rem, err := newRemoteEngine(addr, tlsConfig(t, cert, key, ca.pem))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { rem.Stop().Wait() })
		root, in := newMemberInbox(e, actors.RootKind, actors.RootID)
		if root.ID != rootPID(addr).ID {
			t.Fatalf("fake root %s, want %s", root.ID, rootPID(addr).ID)
		}
		t.Cleanup(func() { <-e.Poison(root).Done() })
		ctx, cancel := context.WithTimeout(context.Background(), opsWait)
		defer cancel()
		if _, err := etcd.Put(ctx, "/meshweaver/c1/members/"+id, addr); err != nil {
			t.Fatal(err)
		}
		if _, err := etcd.Put(ctx, "/meshweaver/c1/owners/"+user, id); err != nil {
			t.Fatal(err)
		}
		return addr, in.got
	}
	xAddr, xGot := fake("mx", "xavier", aliceCert, aliceKey)
	_, yGot := fake("my", "yvonne", yCert, yKey)

	oc := opsNewCaller(t, h.addr, tlsConfig(t, aliceCert, aliceKey, ca.pem))
	// round sends a round for user until the daemon knows its owner (it
	// answers unavailable until its member watch has seen the fake's key)
	// and returns the verdict, or ok false when got received the round.
	round := func(user string, got chan any) (messages.RoundFinished, bool) {
		t.Helper()
		deadline := time.Now().Add(opsRoundWait)
		for i := 0; time.Now().Before(deadline); i++ {
			if i > 0 { // a pause between tries, not a wait for an outcome
				<-time.After(100 * time.Millisecond)
			}
			id := oc.start(messages.StartRound{User: user, Thread: "t", Text: "hello"})
			for {
				select {
				case <-got:
					return messages.RoundFinished{}, false
				case m := <-oc.c.inbox:
					oc.got = append(oc.got, m)
				case <-time.After(time.Until(deadline)):
					t.Fatalf("round for %s: no verdict within %v", user, opsRoundWait)
				}
				if v, done := verdictOf(oc.got, id); done {
					if v.Status == messages.StatusUnavailable && v.Retryable {
						break // not placed yet ("no member can serve this user now"): again
					}
					return v, true
				}
			}
		}
		t.Fatalf("round for %s: still not placed after %v", user, opsRoundWait)
		return messages.RoundFinished{}, false
	}

	v, ok := round("xavier", xGot)
	if !ok {
		t.Fatal("X, a caller's identity at a member's address, received alice's forwarded round")
	}
	if v.Status != messages.StatusFailed || !strings.Contains(v.Error, "cannot be reached") || !strings.Contains(v.Error, xAddr) {
		t.Errorf("round for X's user: %+v, want failed, X cannot be reached", v)
	}
	h.srv.waitCount("the refused dial to X", 1, func(rec map[string]any) bool {
		return rec["msg"] == "refused the certificate of a peer the daemon dialled" && rec["addr"] == xAddr &&
			rec["member"] == true && strings.Contains(fmt.Sprint(rec["err"]), "cluster kind")
	})
	select {
	case m := <-xGot:
		t.Fatalf("X received %v", m)
	default:
	}
	if v, ok := round("yvonne", yGot); ok {
		t.Fatalf("round for Y's user: %+v, want it forwarded to Y", v)
	}
}

// verdictOf finds round id's verdict among got.
func verdictOf(got []any, id string) (messages.RoundFinished, bool) {
	for _, m := range got {
		if v, ok := m.(messages.RoundFinished); ok && v.RoundID == id {
			return v, true
		}
	}
	return messages.RoundFinished{}, false
}
