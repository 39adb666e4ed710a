package cluster

import (
	"flag"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"
)

var flagSim = flag.Bool("cluster.sim", false, "simulate 100 members and 20,000 users against an embedded etcd (default: 10 members, 2,000 users)")

// TestSimulateMembers backs the scale plan of docs/DEPLOY.md: members
// (each a Node with its own etcd client, as a daemon has) against one
// embedded etcd; every user is claimed by its rendezvous member, from 32
// callers at once; then one member dies and its users are claimed again
// by the survivors. It reports the claim transactions' rate and latency,
// the keepalives a second, and what the death cost.
func TestSimulateMembers(t *testing.T) {
	members, users := 10, 2000
	if *flagSim {
		members, users = 100, 20_000
	}
	if testing.Short() {
		members, users = 5, 500
	}
	te := startEtcd(t)
	ttl, margin := 4*time.Second, 1500*time.Millisecond
	nodes := make([]*Node, members)
	ids := make([]string, members)
	for i := range nodes {
		c, err := NewClient(te.url, TLSFiles{})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		ids[i] = fmt.Sprintf("sim-%03d", i)
		nodes[i] = testNode(t, c, ids[i], ttl, margin, nil)
	}
	waitMembers(t, nodes[0], members)
	byID := map[string]*Node{}
	for i, n := range nodes {
		byID[ids[i]] = n
	}

	// Every user claimed by its rendezvous member, 32 at a time.
	claim := func(names []string, at func(string) *Node) (lat []time.Duration, took time.Duration) {
		jobs := make(chan string)
		var mu sync.Mutex
		var wg sync.WaitGroup
		start := time.Now()
		for range 32 {
			wg.Go(func() {
				for u := range jobs {
					t0 := time.Now()
					local, _, err := at(u).Owner(u, 1)
					d := time.Since(t0)
					if err != nil || !local {
						t.Errorf("claiming %s: local=%v err=%v", u, local, err)
					}
					mu.Lock()
					lat = append(lat, d)
					mu.Unlock()
				}
			})
		}
		for _, u := range names {
			jobs <- u
		}
		close(jobs)
		wg.Wait()
		return lat, time.Since(start)
	}
	names := make([]string, users)
	for i := range names {
		names[i] = fmt.Sprintf("user-%06d", i)
	}
	lat, took := claim(names, func(u string) *Node { return byID[Pick(u, ids)] })
	p50, p99 := percentile(lat, 50), percentile(lat, 99)
	t.Logf("%d members, %d users: %d claims in %v = %.0f txn/s; latency p50 %v, p99 %v",
		members, users, users, took.Round(time.Millisecond), float64(users)/took.Seconds(), p50, p99)
	every := NewDeadline(ttl, margin, time.Time{}).RenewEvery() // the nodes' own is their renew loop's
	t.Logf("keepalives: %d members / %v = %.1f/s; keys held: %d ownership + %d member",
		members, every, float64(members)/every.Seconds(), users, members)
	busiest := 0
	for _, n := range nodes {
		busiest = max(busiest, n.Owned())
	}
	t.Logf("busiest member owns %d users (mean %d)", busiest, users/members)

	// A member dies (no revoke): the survivors see it within the TTL,
	// and its users are claimed by their new rendezvous members.
	dead := nodes[members/2]
	var orphans []string
	dead.mu.Lock()
	for u := range dead.owned {
		orphans = append(orphans, u)
	}
	dead.mu.Unlock()
	ev := nodes[0].Events()
	died := time.Now()
	dead.Close()
	waitEvent(t, ev, "member-down", dead.cfg.Member, 3*ttl)
	noticed := time.Since(died)
	rest := slices.DeleteFunc(slices.Clone(ids), func(id string) bool { return id == dead.cfg.Member })
	lat, took = claim(orphans, func(u string) *Node { return byID[Pick(u, rest)] })
	t.Logf("death of a member owning %d users: noticed after %v (TTL %v); its users claimed again in %v (p99 %v)",
		len(orphans), noticed.Round(time.Millisecond), ttl, took.Round(time.Millisecond), percentile(lat, 99))
	if noticed > ttl+2*time.Second {
		t.Errorf("the death was noticed after %v, want within about the TTL %v", noticed, ttl)
	}
	if p99 > 2*time.Second {
		t.Errorf("claim p99 %v: etcd cannot keep up", p99)
	}
}

func percentile(d []time.Duration, p int) time.Duration {
	if len(d) == 0 {
		return 0
	}
	s := slices.Clone(d)
	slices.Sort(s)
	return s[min(len(s)-1, len(s)*p/100)].Round(100 * time.Microsecond)
}

// BenchmarkClaim is one member claiming users one after another.
func BenchmarkClaim(b *testing.B) {
	te := startEtcd(b)
	n := testNode(b, te.client, "bench", 10*time.Second, 3*time.Second, nil)
	i := 0
	for b.Loop() {
		i++
		if local, _, err := n.Owner(fmt.Sprintf("u%d", i), 1); err != nil || !local {
			b.Fatal(local, err)
		}
	}
}
