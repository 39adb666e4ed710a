package main

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/meshweaver/supervisor/client"
	"github.com/meshweaver/supervisor/messages"
	"github.com/meshweaver/supervisor/testkit/cutproxy"
	"github.com/meshweaver/supervisor/testkit/etcdtest"
)

// rejoinWithin is how soon a fenced member must serve again once its
// cause (a partition from etcd) ends (issue 22).
const rejoinWithin = 2 * time.Second

// TestClusterPartition: three daemons on an etcd cluster of three
// processes; member 2 reaches every etcd endpoint through a proxy the
// test controls and its callers reach it directly. The proxies are cut
// (every connection closed, new ones refused), healed, then blackholed
// (nothing passes, nothing is closed: the nastier case), healed. Each
// time the cut-off member fences before its lease can expire, the others
// take its user only after that (its owner key lives until the lease
// expires), no home has two app-servers (the /proc check), the bystanders
// on members 0 and 1 complete rounds throughout with no fence, and the
// fenced member serves again within rejoinWithin of the heal.
func TestClusterPartition(t *testing.T) {
	longCluster(t)
	ec := etcdtest.Start(t, 3)
	var proxies []*cutproxy.Proxy
	var eps []string
	for _, m := range ec.Members {
		p := cutproxy.Start(t, strings.TrimPrefix(m.Client, "http://"))
		proxies = append(proxies, p)
		eps = append(eps, "http://"+p.Addr())
	}
	const victim = 2
	tc := newTestClusterVia(t, 3, ec, map[int]string{victim: strings.Join(eps, ",")})
	clients := []*client.Client{tc.dial(0), tc.dial(1), tc.dial(2)}

	// A bystander on each other member, with its app-server, and rounds
	// for both from their owners all along.
	by := map[int]string{}
	for u := 0; len(by) < 2; u++ {
		user := fmt.Sprintf("by%d", u)
		if _, v, _ := roundRetrying(t, clients[0], messages.StartRound{User: user, Thread: "t1", Text: "hello"}, time.Minute); v.Status != messages.StatusCompleted {
			t.Fatalf("%s's first round: %+v", user, v)
		}
		if o := tc.ownerOf(user); o != victim && by[o] == "" {
			by[o] = user
		}
		if u > 40 {
			t.Fatal("40 users and no bystander on both other members")
		}
	}
	byApps := map[string][]int{}
	for _, u := range by {
		byApps[u] = tc.appServersOf(tc.home(u))
	}
	rounds := startSteadyRounds(t, clients, by)

	for _, mode := range []string{"cut", "blackhole"} {
		// A user the victim owns, with its app-server running there.
		user := tc.userOn(clients[victim], victim, mode)
		home := tc.home(user)
		if n := len(tc.appServersOf(home)); n != 1 {
			t.Fatalf("%s: %s has %d app-servers, want 1", mode, user, n)
		}
		fencesBefore := tc.metric(victim, "supervisor_cluster_fences_total")
		cut := time.Now()
		for _, p := range proxies {
			if mode == "cut" {
				p.Cut()
			} else {
				p.Blackhole()
			}
		}
		// The victim's app-server goes (its fence), then its key (the
		// lease's expiry), in that order.
		var fenced, expired time.Time
		if !pollUntil(3*testLeaseTTL, func() bool {
			now := time.Now()
			if fenced.IsZero() && len(tc.appServersOf(home)) == 0 {
				fenced = now
			}
			if expired.IsZero() && tc.ownerOf(user) != victim {
				expired = now
			}
			return !fenced.IsZero() && !expired.IsZero()
		}) {
			t.Fatalf("%s: after %v the app-server is gone at %v, the key at %v", mode, 3*testLeaseTTL, fenced, expired)
		}
		t.Logf("%s: fenced %v after the cut, owner key gone %v after (TTL %v, margin %v)", mode,
			fenced.Sub(cut).Round(time.Millisecond), expired.Sub(cut).Round(time.Millisecond), testLeaseTTL, testFenceMargin)
		if fenced.Sub(cut) >= testLeaseTTL-testFenceMargin/2 {
			t.Errorf("%s: fenced %v after the cut: too near the lease's expiry (TTL %v)", mode, fenced.Sub(cut), testLeaseTTL)
		}
		if !fenced.Before(expired) {
			t.Errorf("%s: the key went (%v) before the fence (%v)", mode, expired.Sub(cut), fenced.Sub(cut))
		}
		// The lease's last renewal was sent at most a renewal interval
		// and an attempt before the cut; etcd expires it a TTL after.
		if early := testLeaseTTL - time.Second; expired.Sub(cut) < early {
			t.Errorf("%s: the key went %v after the cut, before the lease could expire (%v)", mode, expired.Sub(cut), early)
		}
		if v := tc.metric(victim, "supervisor_cluster_fences_total"); v <= fencesBefore {
			t.Errorf("%s: the victim's fences went from %v to %v", mode, fencesBefore, v)
		}
		// A survivor takes the user over, the thread resumed.
		if _, v, _ := roundRetrying(t, clients[0], messages.StartRound{User: user, Thread: "t1", Text: "taken over " + mode}, time.Minute); v.Status != messages.StatusCompleted || !v.Resumed {
			t.Fatalf("%s: %s's round on a survivor: %+v", mode, user, v)
		}
		if o := tc.ownerOf(user); o == victim || o < 0 {
			t.Fatalf("%s: %s owned by %d after the takeover", mode, user, o)
		}
		// Through the cut-off member, rounds are refused as retryable.
		ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
		_, v, err := roundOnce(ctx, clients[victim], messages.StartRound{User: by[0], Thread: "t1", Text: "via the cut-off member"})
		cancel()
		if err != nil || v.Status == messages.StatusCompleted || !v.Retryable {
			t.Errorf("%s: a round through the cut-off member: %+v, %v; want a retryable refusal", mode, v, err)
		}

		// Healed, the member serves at once: its first round that
		// completes (relayed to a bystander's owner) is the measure.
		healed := time.Now()
		for _, p := range proxies {
			if err := p.Heal(); err != nil {
				t.Fatal(err)
			}
		}
		back := time.Duration(-1)
		deadline := time.Now().Add(time.Minute)
		for back < 0 && time.Now().Before(deadline) {
			ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
			_, v, err := roundOnce(ctx, clients[victim], messages.StartRound{User: by[0], Thread: "t1", Text: "back " + mode})
			cancel()
			switch {
			case err != nil:
				t.Fatalf("%s: a round through the healed member: %v", mode, err)
			case v.Status == messages.StatusCompleted:
				back = time.Since(healed)
			case !v.Retryable:
				t.Fatalf("%s: a round through the healed member: %+v", mode, v)
			default:
				time.Sleep(50 * time.Millisecond) // a caller's retry pause
			}
		}
		if back < 0 {
			t.Fatalf("%s: the healed member did not serve within a minute", mode)
		}
		t.Logf("%s: the fenced member served a round %v after the heal", mode, back.Round(time.Millisecond))
		if back > rejoinWithin {
			t.Errorf("%s: the fenced member served %v after the heal, want within %v", mode, back, rejoinWithin)
		}
	}

	stats := rounds.stop()
	for i := range 2 {
		if v := tc.metric(i, "supervisor_cluster_fences_total"); v != 0 {
			t.Errorf("bystander member %s fenced %v times", tc.members[i].id, v)
		}
	}
	for u, apps := range byApps {
		if now := tc.appServersOf(tc.home(u)); !slices.Equal(now, apps) {
			t.Errorf("bystander %s's app-servers went from %v to %v", u, apps, now)
		}
	}
	for _, u := range by {
		s := stats[u]
		t.Logf("bystander %s: %d rounds completed, %d not, longest gap between completions %v", u, s.completed, len(s.failed), s.gap.Round(time.Millisecond))
		if s.completed < 5 || len(s.failed) > 0 {
			t.Errorf("bystander %s: %d rounds completed, failures %v", u, s.completed, s.failed)
		}
	}
}

// userOn runs a first round for fresh users through c until one is owned
// by member, and returns it.
func (tc *testCluster) userOn(c *client.Client, member int, prefix string) string {
	tc.t.Helper()
	for i := range 40 {
		user := fmt.Sprintf("%s-%d", prefix, i)
		if _, v, _ := roundRetrying(tc.t, c, messages.StartRound{User: user, Thread: "t1", Text: "hello"}, time.Minute); v.Status != messages.StatusCompleted {
			tc.t.Fatalf("%s's first round: %+v", user, v)
		}
		if tc.ownerOf(user) == member {
			return user
		}
	}
	tc.t.Fatalf("40 users and none on member %d", member)
	return ""
}

// pollUntil checks cond every 20 ms until it holds (true) or within
// passes (false).
func pollUntil(within time.Duration, cond func() bool) bool {
	deadline := time.Now().Add(within)
	for {
		if cond() {
			return true
		}
		if time.Now().After(deadline) {
			return false
		}
		time.Sleep(20 * time.Millisecond) // a poll period, the outcome is cond's
	}
}

// steadyRounds sends rounds for some users through their owners, one at a
// time per user, until stop.
type steadyRounds struct {
	quit chan struct{}
	wg   sync.WaitGroup
	mu   sync.Mutex
	by   map[string]*steadyStats
}

type steadyStats struct {
	completed int
	failed    []string
	last      time.Time
	gap       time.Duration // the longest time between two completions
}

// startSteadyRounds starts one goroutine per user of users (member index →
// user) sending rounds through that member; stop ends and joins them.
func startSteadyRounds(t *testing.T, clients []*client.Client, users map[int]string) *steadyRounds {
	s := &steadyRounds{quit: make(chan struct{}), by: map[string]*steadyStats{}}
	for i, u := range users {
		st := &steadyStats{last: time.Now()}
		s.by[u] = st
		s.wg.Go(func() {
			for k := 0; ; k++ {
				select {
				case <-s.quit:
					return
				case <-time.After(100 * time.Millisecond): // the callers' pace
				}
				ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
				_, v, err := roundOnce(ctx, clients[i], messages.StartRound{User: u, Thread: "t1", Text: fmt.Sprintf("steady %d", k)})
				cancel()
				s.mu.Lock()
				if err == nil && v.Status == messages.StatusCompleted {
					st.completed++
					st.gap = max(st.gap, time.Since(st.last))
					st.last = time.Now()
				} else {
					st.failed = append(st.failed, fmt.Sprintf("%v %s %s", err, v.Status, v.Error))
				}
				s.mu.Unlock()
			}
		})
	}
	t.Cleanup(func() { s.stop() })
	return s
}

// stop ends the rounds (idempotent) and returns the figures per user.
func (s *steadyRounds) stop() map[string]steadyStats {
	select {
	case <-s.quit:
	default:
		close(s.quit)
	}
	s.wg.Wait()
	s.mu.Lock()
	defer s.mu.Unlock()
	out := map[string]steadyStats{}
	for u, st := range s.by {
		out[u] = *st
	}
	return out
}
