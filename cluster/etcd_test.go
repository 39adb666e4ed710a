package cluster

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/server/v3/embed"
)

// freePort returns a loopback port nobody listens on right now.
func freePort(t testing.TB) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

// testEtcd is a one-member embedded etcd and a client of it.
type testEtcd struct {
	e      *embed.Etcd
	client *clientv3.Client
	url    string
}

func startEtcd(t testing.TB) *testEtcd {
	t.Helper()
	peer := fmt.Sprintf("http://127.0.0.1:%d", freePort(t))
	client := fmt.Sprintf("http://127.0.0.1:%d", freePort(t))
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	e, err := StartEmbedded(ctx, EmbedConfig{
		Name: "e1", Dir: filepath.Join(t.TempDir(), "etcd"), Peer: peer, Client: client,
		Initial: "e1=" + peer, Token: "test",
	})
	if err != nil {
		t.Fatal(err)
	}
	c, err := NewClient(client, TLSFiles{})
	if err != nil {
		e.Close()
		t.Fatal(err)
	}
	te := &testEtcd{e: e, client: c, url: client}
	t.Cleanup(func() {
		c.Close()
		te.stop()
	})
	return te
}

func (te *testEtcd) stop() {
	if te.e != nil {
		te.e.Close()
		<-te.e.Server.StopNotify()
		te.e = nil
	}
}

// testNode joins member id to the cluster "t" with a short lease.
func testNode(t testing.TB, c *clientv3.Client, id string, ttl, margin time.Duration, onFence func()) *Node {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	n, err := Join(ctx, Config{
		Client: c, Cluster: "t", Member: id, Addr: "addr-" + id, TTL: ttl, Margin: margin,
		OnFence: onFence, Logger: slog.New(slog.DiscardHandler),
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(n.Close)
	return n
}

// waitEvent waits for the node's next event of kind about member.
func waitEvent(t testing.TB, ev <-chan Event, kind, member string, within time.Duration) Event {
	t.Helper()
	deadline := time.After(within)
	for {
		select {
		case e := <-ev:
			if e.Kind == kind && (member == "" || e.Member == member) {
				return e
			}
		case <-deadline:
			t.Fatalf("no %s event for %q within %v", kind, member, within)
		}
	}
}

// TestClaimRace: three members claim 100 users at once, each as if the
// message had been forwarded (so each tries to claim): every user ends with
// exactly one owner, and the others name that owner's address.
func TestClaimRace(t *testing.T) {
	te := startEtcd(t)
	nodes := []*Node{
		testNode(t, te.client, "a", 5*time.Second, 2*time.Second, nil),
		testNode(t, te.client, "b", 5*time.Second, 2*time.Second, nil),
		testNode(t, te.client, "c", 5*time.Second, 2*time.Second, nil),
	}
	const users = 100
	type answer struct {
		local bool
		addr  string
		err   error
	}
	answers := make([][3]answer, users)
	var wg sync.WaitGroup
	for u := range users {
		for i, n := range nodes {
			wg.Go(func() {
				l, a, err := n.Owner(fmt.Sprintf("u%03d", u), 1)
				answers[u][i] = answer{l, a, err}
			})
		}
	}
	wg.Wait()
	for u, as := range answers {
		owners := 0
		var owner string
		for i, a := range as {
			if a.err != nil {
				t.Fatalf("user %d, member %d: %v", u, i, a.err)
			}
			if a.local {
				owners++
				owner = "addr-" + nodes[i].cfg.Member
			}
		}
		if owners != 1 {
			t.Fatalf("user %d has %d owners, want 1", u, owners)
		}
		for i, a := range as {
			if !a.local && a.addr != owner {
				t.Fatalf("user %d: member %d points at %q, the owner is %q", u, i, a.addr, owner)
			}
		}
	}
	total := 0
	for _, n := range nodes {
		total += n.Owned()
	}
	if total != users {
		t.Fatalf("members own %d users in all, want %d", total, users)
	}
}

// TestRendezvousRouting: an unforwarded message for a user nobody owns goes
// to the rendezvous choice, which claims it when the message arrives.
func TestRendezvousRouting(t *testing.T) {
	te := startEtcd(t)
	a := testNode(t, te.client, "a", 5*time.Second, 2*time.Second, nil)
	b := testNode(t, te.client, "b", 5*time.Second, 2*time.Second, nil)
	waitMembers(t, a, 2)
	waitMembers(t, b, 2)
	for i := range 20 {
		u := fmt.Sprintf("user-%d", i)
		pick := Pick(u, []string{"a", "b"})
		first, other := a, b
		if pick == "a" {
			first, other = b, a
		}
		local, addr, err := first.Owner(u, 0)
		if err != nil || local || addr != "addr-"+pick {
			t.Fatalf("%s at the non-chosen member: local=%v addr=%q err=%v, want a forward to addr-%s", u, local, addr, err, pick)
		}
		if local, _, err := other.Owner(u, 1); err != nil || !local {
			t.Fatalf("%s at its chosen member: local=%v err=%v", u, local, err)
		}
		// Now the key decides, for both.
		if local, addr, err := first.Owner(u, 0); err != nil || local || addr != "addr-"+pick {
			t.Fatalf("%s after the claim: local=%v addr=%q err=%v", u, local, addr, err)
		}
	}
	// A message forwarded twice is not forwarded again.
	if _, _, err := a.Owner(firstOwnedBy(t, b), MaxHops); err != ErrTooManyHops {
		t.Fatalf("third hop: err = %v, want ErrTooManyHops", err)
	}
}

func firstOwnedBy(t *testing.T, n *Node) string {
	n.mu.Lock()
	defer n.mu.Unlock()
	for u := range n.owned {
		return u
	}
	t.Fatal("the member owns nobody")
	return ""
}

func waitMembers(t testing.TB, n *Node, want int) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for len(n.Members()) != want {
		if time.Now().After(deadline) {
			t.Fatalf("member %s sees %v, want %d members", n.cfg.Member, n.Members(), want)
		}
		time.Sleep(10 * time.Millisecond) // polling a view that a watch fills
	}
}

// TestLeaveHandsOverAtOnce: a member that leaves revokes its lease, so its
// users are free at once (not a TTL later) and watchers learn it.
func TestLeaveHandsOverAtOnce(t *testing.T) {
	te := startEtcd(t)
	a := testNode(t, te.client, "a", 10*time.Second, 3*time.Second, nil)
	b := testNode(t, te.client, "b", 10*time.Second, 3*time.Second, nil)
	waitMembers(t, b, 2)
	ev := b.Events()
	if local, _, err := a.Owner("alice", 1); !local || err != nil {
		t.Fatalf("a claims alice: local=%v err=%v", local, err)
	}
	gone := b.Watch("addr-a")
	start := time.Now()
	if err := a.Leave(context.Background()); err != nil {
		t.Fatal(err)
	}
	select {
	case <-gone:
	case <-time.After(5 * time.Second):
		t.Fatal("b's watch on a did not fire after a left")
	}
	waitEvent(t, ev, "member-down", "a", 5*time.Second)
	if local, _, err := b.Owner("alice", 0); !local || err != nil {
		t.Fatalf("b takes alice over: local=%v err=%v", local, err)
	}
	// Half the TTL: an expiry would take all of it, and on a loaded
	// machine (-race, an in-process etcd, two shared cores) the revoke,
	// the watch and the claim take seconds.
	if took := time.Since(start); took > 5*time.Second {
		t.Fatalf("takeover took %v, want well under the 10s TTL", took)
	}
}

// TestDeathExpiresWithin: a member that stops renewing (Close, like a
// SIGKILL) is seen leaving within its TTL, and its users are free then.
func TestDeathExpiresWithin(t *testing.T) {
	te := startEtcd(t)
	ttl := 2 * time.Second
	a := testNode(t, te.client, "a", ttl, time.Second, nil)
	b := testNode(t, te.client, "b", ttl, time.Second, nil)
	waitMembers(t, b, 2)
	ev := b.Events()
	if local, _, err := a.Owner("alice", 1); !local || err != nil {
		t.Fatalf("a claims alice: local=%v err=%v", local, err)
	}
	start := time.Now()
	a.Close()
	e := waitEvent(t, ev, "member-down", "a", 3*ttl)
	took := e.At.Sub(start)
	t.Logf("death noticed after %v (TTL %v)", took, ttl)
	// etcd checks expiry every 500ms and its leader may extend a lease on
	// election; on a loaded machine (-race, two shared cores) the watch
	// event comes later still. About the TTL, not twice it.
	if took > 2*ttl {
		t.Fatalf("death noticed after %v, want within about the TTL %v", took, ttl)
	}
	if local, _, err := b.Owner("alice", 0); !local || err != nil {
		t.Fatalf("b takes alice over: local=%v err=%v", local, err)
	}
}

// TestFenceOnEtcdLoss: when etcd goes away the member fences itself (calls
// OnFence, refuses ownership) before its lease could have expired.
func TestFenceOnEtcdLoss(t *testing.T) {
	te := startEtcd(t)
	ttl, margin := 3*time.Second, time.Second
	var fencedAt atomic.Int64
	fenced := make(chan struct{}, 1)
	a := testNode(t, te.client, "a", ttl, margin, func() {
		fencedAt.CompareAndSwap(0, BootNow().UnixNano()) // FenceAt's clock
		select {
		case fenced <- struct{}{}:
		default:
		}
	})
	if local, known, err := a.Known("alice"); known || local || err != nil {
		t.Fatalf("Known before the claim: local=%v known=%v err=%v, want not known", local, known, err)
	}
	if local, _, err := a.Owner("alice", 1); !local || err != nil {
		t.Fatalf("claim: local=%v err=%v", local, err)
	}
	if local, known, err := a.Known("alice"); !known || !local || err != nil {
		t.Fatalf("Known after the claim: local=%v known=%v err=%v, want local from memory", local, known, err)
	}
	lastRenewal := a.FenceAt().Add(-(ttl - margin))
	te.stop()
	select {
	case <-fenced:
	case <-time.After(2 * ttl):
		t.Fatal("not fenced within two TTLs of losing etcd")
	}
	at := time.Unix(0, fencedAt.Load())
	if expiry := lastRenewal.Add(ttl); !at.Before(expiry) {
		t.Fatalf("fenced at %v, after the lease could expire (%v)", at, expiry)
	}
	t.Logf("fenced %v before the earliest expiry", lastRenewal.Add(ttl).Sub(at))
	if _, _, err := a.Owner("alice", 0); err != ErrFenced {
		t.Fatalf("Owner after the fence: err = %v, want ErrFenced", err)
	}
	if _, known, err := a.Known("alice"); !known || err != ErrFenced {
		t.Fatalf("Known after the fence: known=%v err=%v, want ErrFenced", known, err)
	}
}

// TestRejoinAfterLeaseLoss: a lease that expired under a live member (it
// was paused) fences it, then it registers again with a new lease.
func TestRejoinAfterLeaseLoss(t *testing.T) {
	te := startEtcd(t)
	a := testNode(t, te.client, "a", 3*time.Second, time.Second, nil)
	ev := a.Events()
	if local, _, err := a.Owner("alice", 1); !local || err != nil {
		t.Fatalf("claim: local=%v err=%v", local, err)
	}
	a.mu.Lock()
	lease := a.lease
	a.mu.Unlock()
	if _, err := te.client.Revoke(context.Background(), lease); err != nil { // as if it expired
		t.Fatal(err)
	}
	waitEvent(t, ev, "lease-lost", "a", 5*time.Second)
	waitEvent(t, ev, "fenced", "a", time.Second)
	start := time.Now()
	waitEvent(t, ev, "joined", "a", 5*time.Second)
	t.Logf("rejoined %v after the fence", time.Since(start))
	if local, _, err := a.Owner("alice", 1); !local || err != nil {
		t.Fatalf("claim after the rejoin: local=%v err=%v", local, err)
	}
	if tok := a.Token("alice"); tok == 0 {
		t.Fatal("no fencing token after the claim")
	}
}
