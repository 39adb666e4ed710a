package cluster

import (
	"context"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/meshweaver/supervisor/testkit/etcdtest"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
	"google.golang.org/grpc"
)

// joinBeside joins member id to the cluster "t" of ec as a daemon beside
// etcd member i would: its endpoints ordered with member i's first.
func joinBeside(t *testing.T, ec *etcdtest.Cluster, i int, id string, ttl, margin time.Duration, now func() time.Time) *Node {
	t.Helper()
	balanced, err := NewClient(ec.Endpoints(), TLSFiles{})
	if err != nil {
		t.Fatal(err)
	}
	eps, err := EndpointClients(ec.Endpoints(), ec.Members[i].Client, TLSFiles{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		balanced.Close()
		for _, c := range eps {
			c.Close()
		}
	})
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	n, err := Join(ctx, Config{
		Client: balanced, Endpoints: eps, Cluster: "t", Member: id, Addr: "addr-" + id,
		TTL: ttl, Margin: margin, Now: now, Logger: slog.New(slog.DiscardHandler),
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(n.Close) // before the clients close: cleanups run last first
	return n
}

// TestSurvivorsOutliveAMemberDeath: three daemons' nodes, each beside one
// process of a three-member etcd cluster (its own endpoint first), with a
// lease TTL of 5s and a fence margin of 2s. The member that leads etcd
// dies with its daemon: its etcd process is SIGKILLed (or SIGSTOPped,
// frozen past the TTL) and its node stops renewing. The two other nodes
// are the bystanders: neither fences, both keep the users they own, both
// see the dead member leave, and a survivor takes the dead member's user
// over once its lease expires.
func TestSurvivorsOutliveAMemberDeath(t *testing.T) {
	for _, how := range []string{"SIGKILL", "SIGSTOP"} {
		t.Run(how, func(t *testing.T) {
			ec := etcdtest.Start(t, 3)
			if err := CheckTimings(5*time.Second, 2*time.Second, etcdtest.ElectionTimeout); err != nil {
				t.Fatal(err)
			}
			dead := ec.Leader()
			nodes := make([]*Node, 3)
			for i := range nodes {
				nodes[i] = joinBeside(t, ec, i, fmt.Sprintf("m%d", i), 5*time.Second, 2*time.Second, nil)
			}
			var survivors []int
			events := map[int]<-chan Event{}
			for i, n := range nodes {
				user := fmt.Sprintf("user-of-m%d", i)
				if local, _, err := n.Owner(user, 1); !local || err != nil {
					t.Fatalf("m%d claims %s: local=%v err=%v", i, user, local, err)
				}
				if i != dead {
					survivors = append(survivors, i)
					events[i] = n.Events()
				}
			}
			waitMembers(t, nodes[survivors[0]], 3)
			waitMembers(t, nodes[survivors[1]], 3)
			t.Logf("etcd's leader is e%d: m%d dies with it; m%d and m%d are the bystanders", dead, dead, survivors[0], survivors[1])

			start := time.Now()
			switch how {
			case "SIGKILL":
				ec.Members[dead].Kill()
			case "SIGSTOP":
				ec.Members[dead].Stop()
			}
			nodes[dead].Close() // the daemon died (or froze) with its etcd

			// Each survivor sees the dead member leave: its lease expired,
			// under etcd's new leader. Nothing else may happen to it first.
			for _, i := range survivors {
				for {
					e := waitEventAny(t, events[i], 4*5*time.Second)
					if e.Kind == "fenced" || e.Kind == "lease-lost" {
						t.Fatalf("bystander m%d: %s %v after the death of m%d", i, e.Kind, e.At.Sub(start).Round(time.Millisecond), dead)
					}
					if e.Kind == "member-down" && e.Member == fmt.Sprintf("m%d", dead) {
						took := e.At.Sub(start)
						t.Logf("m%d saw m%d leave %v after its death", i, dead, took.Round(time.Millisecond))
						// The lease lives its TTL from the last renewal; etcd's
						// new leader adds an election timeout when it takes
						// the leases over. A watch left on the frozen endpoint
						// saw it after 12s: the watch moves to the endpoint
						// that answers.
						if limit := 5*time.Second + 3*etcdtest.ElectionTimeout + 2*time.Second; took > limit {
							t.Errorf("m%d saw m%d leave %v after its death, want within %v", i, dead, took, limit)
						}
						break
					}
				}
			}
			// Two more renewal windows without a fence, then the users.
			quiet := time.After(2 * (5*time.Second - 2*time.Second))
			for _, i := range survivors {
			drain:
				for {
					select {
					case e := <-events[i]:
						if e.Kind == "fenced" || e.Kind == "lease-lost" {
							t.Fatalf("bystander m%d: %s %v after the death of m%d", i, e.Kind, e.At.Sub(start).Round(time.Millisecond), dead)
						}
					case <-quiet:
						break drain
					}
				}
				quiet = time.After(0)
			}
			for _, i := range survivors {
				user := fmt.Sprintf("user-of-m%d", i)
				if local, _, err := nodes[i].Owner(user, 0); !local || err != nil {
					t.Errorf("bystander m%d lost %s: local=%v err=%v", i, user, local, err)
				}
			}
			orphan := fmt.Sprintf("user-of-m%d", dead)
			if local, _, err := nodes[survivors[0]].Owner(orphan, 1); !local || err != nil {
				t.Errorf("m%d takes %s over: local=%v err=%v", survivors[0], orphan, local, err)
			}
			if how == "SIGSTOP" {
				ec.Members[dead].Cont()
			}
		})
	}
}

// waitEventAny waits for the next event of the node.
func waitEventAny(t *testing.T, ev <-chan Event, within time.Duration) Event {
	t.Helper()
	select {
	case e := <-ev:
		return e
	case <-time.After(within):
		t.Fatalf("no event within %v", within)
		return Event{}
	}
}

// TestSuspendedMemberFences: a member whose machine was suspended for
// longer than its lease wakes to a boot clock past its fence time (the
// monotonic clock would not have moved). Its next renewal fences it
// before it acts on the lease, however fast etcd answers, and it then
// rejoins with a new lease.
func TestSuspendedMemberFences(t *testing.T) {
	te := startEtcd(t)
	var suspended atomic.Int64 // how long the fake machine slept
	now := func() time.Time { return BootNow().Add(time.Duration(suspended.Load())) }
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	n, err := Join(ctx, Config{Client: te.client, Cluster: "t", Member: "a", Addr: "addr-a",
		TTL: 3 * time.Second, Margin: time.Second, Now: now, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(n.Close)
	ev := n.Events()
	if local, _, err := n.Owner("alice", 1); !local || err != nil {
		t.Fatalf("claim: local=%v err=%v", local, err)
	}
	suspended.Store(int64(time.Minute))
	if _, _, err := n.Known("alice"); err != ErrFenced {
		t.Fatalf("Known right after the resume: %v, want ErrFenced (the lease may be gone)", err)
	}
	waitEvent(t, ev, "fenced", "a", 5*time.Second)
	waitEvent(t, ev, "joined", "a", 5*time.Second)
	if local, _, err := n.Owner("alice", 1); !local || err != nil {
		t.Fatalf("claim after the rejoin: local=%v err=%v", local, err)
	}
}

// TestLateRenewalFences: etcd answers a keepalive in time, but the member
// learns of the answer only past its fence time (the machine was not
// running it, as on a loaded host: the fake clock jumps there while the
// answer is on its way). Its fence helper, which heard of no newer fence
// time, kills the app-servers at that instant; the member fences too, and
// says so, rather than renewing on as if nothing were killed.
func TestLateRenewalFences(t *testing.T) {
	te := startEtcd(t)
	var (
		skew  atomic.Int64 // how far the fake clock is ahead of the boot clock
		armed atomic.Bool
		node  atomic.Pointer[Node]
	)
	now := func() time.Time { return BootNow().Add(time.Duration(skew.Load())) }
	// Past the fence time by 100ms once an armed keepalive's answer is in:
	// the fence time the answer brings (its send time plus 2s) is still
	// ahead, so only the lateness can fence.
	late := func(ctx context.Context, desc *grpc.StreamDesc, cc *grpc.ClientConn, method string, streamer grpc.Streamer, opts ...grpc.CallOption) (grpc.ClientStream, error) {
		s, err := streamer(ctx, desc, cc, method, opts...)
		if err != nil || method != "/etcdserverpb.Lease/LeaseKeepAlive" {
			return s, err
		}
		return &lateStream{ClientStream: s, after: func() {
			if n := node.Load(); n != nil && armed.CompareAndSwap(true, false) {
				skew.Add(int64(n.FenceAt().Sub(now()) + 100*time.Millisecond))
			}
		}}, nil
	}
	c, err := clientv3.New(clientv3.Config{Endpoints: []string{te.url}, DialTimeout: 5 * time.Second,
		DialOptions: []grpc.DialOption{grpc.WithStreamInterceptor(late)}, Logger: zap.NewNop()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	n, err := Join(ctx, Config{Client: c, Cluster: "t", Member: "a", Addr: "addr-a",
		TTL: 3 * time.Second, Margin: time.Second, Now: now, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(n.Close)
	node.Store(n)
	ev := n.Events()
	if local, _, err := n.Owner("alice", 1); !local || err != nil {
		t.Fatalf("claim: local=%v err=%v", local, err)
	}
	armed.Store(true)
	waitEvent(t, ev, "fenced", "a", 10*time.Second)
	if armed.Load() {
		t.Fatal("fenced before the late answer")
	}
}

// lateStream calls after once each message is received.
type lateStream struct {
	grpc.ClientStream
	after func()
}

func (s *lateStream) RecvMsg(m any) error {
	err := s.ClientStream.RecvMsg(m)
	if err == nil {
		s.after()
	}
	return err
}

// TestDeadlineToldBeforeLateness: a renewal tells the fence helper its
// new fence time before it judges whether it came back late. Here the
// member is descheduled right after telling it (the fake clock jumps past
// the old fence time inside OnDeadline): judged after the line, the
// renewal is late, and the member fences and says so. Judged before it,
// the member would serve on while its helper, which heard of no newer
// fence time in time, had killed the app-servers.
func TestDeadlineToldBeforeLateness(t *testing.T) {
	te := startEtcd(t)
	var (
		skew   atomic.Int64 // how far the fake clock is ahead of the boot clock
		armed  atomic.Bool
		mu     sync.Mutex
		told   time.Time            // the last fence time OnDeadline heard
		jumped = make(chan bool, 1) // whether the new fence time was ahead after the jump
	)
	now := func() time.Time { return BootNow().Add(time.Duration(skew.Load())) }
	onDeadline := func(at time.Time, _ clientv3.LeaseID) {
		mu.Lock()
		prev := told
		told = at
		mu.Unlock()
		if armed.CompareAndSwap(true, false) {
			// Past the old fence time by 100ms; the new one (its send
			// time plus 2s) is still ahead, so only the lateness can fence.
			skew.Add(int64(prev.Sub(now()) + 100*time.Millisecond))
			jumped <- now().Before(at)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	n, err := Join(ctx, Config{Client: te.client, Cluster: "t", Member: "a", Addr: "addr-a",
		TTL: 3 * time.Second, Margin: time.Second, Now: now, OnDeadline: onDeadline, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(n.Close)
	ev := n.Events()
	if local, _, err := n.Owner("alice", 1); !local || err != nil {
		t.Fatalf("claim: local=%v err=%v", local, err)
	}
	armed.Store(true)
	select {
	case ahead := <-jumped:
		if !ahead {
			t.Fatal("the new fence time told is not ahead of the clock")
		}
	case <-time.After(10 * time.Second):
		t.Fatal("no renewal within 10s")
	}
	waitEvent(t, ev, "renewed-late", "a", 2*3*time.Second)
	waitEvent(t, ev, "fenced", "a", time.Second)
}

// TestFencedLeaseKeptUntilOnFenceReturns: a fenced member revokes its old
// lease (so that other members may claim its users) only once OnFence
// returned, that is once the daemon's app-servers are stopped: OnFence
// blocks here until the test releases it, and the lease (and the users'
// keys on it) outlive several renewal periods meanwhile. Released, the
// member revokes it, before it could have expired, and rejoins.
func TestFencedLeaseKeptUntilOnFenceReturns(t *testing.T) {
	te := startEtcd(t)
	ttl, margin := 6*time.Second, 3*time.Second
	var suspended atomic.Int64 // how long the fake machine slept
	now := func() time.Time { return BootNow().Add(time.Duration(suspended.Load())) }
	entered, release := make(chan struct{}, 1), make(chan struct{})
	var once sync.Once
	unblock := func() { once.Do(func() { close(release) }) }
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	n, err := Join(ctx, Config{Client: te.client, Cluster: "t", Member: "a", Addr: "addr-a",
		TTL: ttl, Margin: margin, Now: now, Logger: slog.New(slog.DiscardHandler),
		OnFence: func() {
			select {
			case entered <- struct{}{}:
			default:
			}
			<-release // the daemon's app-servers stopping
		}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(n.Close)
	t.Cleanup(unblock) // runs first: Close waits for OnFence
	ev := n.Events()
	if local, _, err := n.Owner("alice", 1); !local || err != nil {
		t.Fatalf("claim: local=%v err=%v", local, err)
	}
	n.mu.Lock()
	lease, every := n.lease, n.every
	n.mu.Unlock()
	// The lease's last renewal, on the boot clock: etcd counts its TTL
	// from later than this.
	renewed := n.FenceAt().Add(-(ttl - margin))
	alive := func() bool {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		r, err := te.client.TimeToLive(ctx, lease)
		if err != nil {
			t.Fatal(err)
		}
		return r.TTL > 0
	}

	suspended.Store(int64(time.Minute)) // the next renewal finds its fence time passed
	select {
	case <-entered:
	case <-time.After(10 * time.Second):
		t.Fatal("not fenced within 10s")
	}
	// Three renewal periods with OnFence blocked: a renewal goroutine
	// that went on would have revoked the lease in the first.
	window := time.After(3 * every)
wait:
	for {
		select {
		case e := <-ev:
			if e.Kind == "joined" {
				t.Fatal("rejoined (so revoked the old lease) while OnFence had not returned")
			}
		case <-window:
			break wait
		}
	}
	if !alive() {
		t.Fatal("the old lease is gone while OnFence had not returned")
	}
	unblock()
	waitEvent(t, ev, "joined", "a", 10*time.Second)
	if alive() {
		t.Fatal("the old lease still exists after the rejoin")
	}
	if took := BootNow().Sub(renewed); took >= ttl {
		t.Fatalf("the check came %v after the last renewal, past the TTL %v: revoked or expired cannot be told apart", took, ttl)
	}
}
