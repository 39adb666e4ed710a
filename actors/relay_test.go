package actors

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/meshweaver/supervisor/messages"
	"github.com/meshweaver/supervisor/testkit/fakeappserver"
	"github.com/meshweaver/supervisor/third_party/hollywood/actor"
	"github.com/meshweaver/supervisor/third_party/hollywood/remote"
)

func TestRelayHops(t *testing.T) {
	for _, tc := range []struct {
		sender *actor.PID
		want   int
	}{
		{nil, 0},
		{actor.NewPID("b:1", "meshweaver/root/relay/h1-7"), 1},
		{actor.NewPID("b:1", "meshweaver/root/relay/h2-1"), 2},
		{actor.NewPID("self:1", "meshweaver/root/relay/h1-7"), 0}, // never from itself
		{actor.NewPID("b:1", "caller/3"), 0},
		{actor.NewPID("b:1", "meshweaver/root/relay/hx-1"), 0},
		{actor.NewPID("b:1", "meshweaver/root/relay/h-3-1"), 0},
	} {
		if got := relayHops(tc.sender, "self:1"); got != tc.want {
			t.Errorf("relayHops(%v) = %d, want %d", tc.sender, got, tc.want)
		}
	}
}

// fakePlacement is a cluster view scripted by the test.
type fakePlacement struct {
	mu       sync.Mutex
	owner    func(user string, hops int) (bool, string, error)
	known    func(user string) (local, known bool, err error)
	hops     []int
	watch    map[string]chan struct{}
	released []string
}

func (p *fakePlacement) Owner(user string, hops int) (bool, string, error) {
	p.mu.Lock()
	p.hops = append(p.hops, hops)
	f := p.owner
	p.mu.Unlock()
	return f(user, hops)
}

// Known knows nothing unless the test says (known): the root looks every
// user up with Owner, on its goroutine.
func (p *fakePlacement) Known(user string) (bool, bool, error) {
	p.mu.Lock()
	f := p.known
	p.mu.Unlock()
	if f == nil {
		return false, false, nil
	}
	return f(user)
}

func (p *fakePlacement) Watch(addr string) <-chan struct{} {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.watch == nil {
		p.watch = map[string]chan struct{}{}
	}
	if p.watch[addr] == nil {
		p.watch[addr] = make(chan struct{})
	}
	return p.watch[addr]
}

func (p *fakePlacement) Release(user string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.released = append(p.released, user)
}

func (p *fakePlacement) leave(addr string) {
	p.Watch(addr)
	p.mu.Lock()
	defer p.mu.Unlock()
	close(p.watch[addr])
}

func (p *fakePlacement) seenHops() []int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([]int(nil), p.hops...)
}

// member is one daemon's tree on a remote engine, its placement scripted.
func member(t *testing.T, fc fakeappserver.Config, p *fakePlacement, opts ...func(*Config)) (*actor.Engine, *actor.PID) {
	t.Helper()
	e, root, _ := memberRemote(t, fc, p, opts...)
	return e, root
}

// memberRemote is member with its remote, which a test may stop (a
// member's death as its peers see it).
func memberRemote(t *testing.T, fc fakeappserver.Config, p *fakePlacement, opts ...func(*Config)) (*actor.Engine, *actor.PID, *remote.Remote) {
	t.Helper()
	l, err := fakeappserver.Relaunch(fc, "")
	if err != nil {
		t.Fatal(err)
	}
	e, rem := remoteEngine(t)
	homes := t.TempDir()
	cfg := Config{
		Homes: homes, Workspace: t.TempDir(), CodexBin: l.Path, CodexArgs: l.Args, CodexEnv: l.Env,
		StopGrace: time.Second,
	}
	for _, o := range opts {
		o(&cfg)
	}
	root, err := SpawnRoot(e, cfg, Deps{Logger: testLogger(t), Placement: p})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		<-e.PoisonCtx(ctx, root).Done()
		rem.Stop().Wait()
		checkNoAppServers(t, homes)
	})
	return e, root, rem
}

// TestRelayedRound: a round sent to a member that does not own the user is
// relayed to the owner (one hop, which the owner sees), and its events and
// verdict come back to the caller through the relay.
func TestRelayedRound(t *testing.T) {
	pb := &fakePlacement{owner: func(string, int) (bool, string, error) { return true, "", nil }}
	eb, _ := member(t, fakeappserver.Config{ReplyText: "from b"}, pb)
	pa := &fakePlacement{owner: func(string, int) (bool, string, error) { return false, eb.Address(), nil }}
	ea, roota := member(t, fakeappserver.Config{ReplyText: "from a"}, pa)
	c, ce, _ := remoteCaller(t)
	env, err := messages.Encode(messages.StartRound{RoundID: "r1", User: "alice", Thread: "t1", Text: "hi"})
	if err != nil {
		t.Fatal(err)
	}
	ce.SendWithSender(actor.NewPID(ea.Address(), roota.ID), env, c.pid)
	r := c.collect(t, "r1", 60*time.Second)
	if r.verdict.Status != messages.StatusCompleted || r.text() != "from b" {
		t.Fatalf("relayed round: verdict %+v, text %q; want completed by b", r.verdict, r.text())
	}
	if got := pb.seenHops(); len(got) == 0 || got[0] != 1 {
		t.Fatalf("the owner saw hops %v, want 1", got)
	}
	if got := pa.seenHops(); len(got) == 0 || got[0] != 0 {
		t.Fatalf("the first member saw hops %v, want 0", got)
	}
	// A request that is not a round: its one answer comes back.
	env, err = messages.Encode(messages.AccountRequest{User: "alice"})
	if err != nil {
		t.Fatal(err)
	}
	ce.SendWithSender(actor.NewPID(ea.Address(), roota.ID), env, c.pid)
	if a := waitMsg[messages.AccountResponse](t, c, 30*time.Second); a.User != "alice" || a.Error != "" {
		t.Fatalf("relayed account answer %+v", a)
	}
}

// TestRelayOwnerLeaves: when the owner leaves the cluster mid-round, the
// relayed round ends failed and retryable.
func TestRelayOwnerLeaves(t *testing.T) {
	pb := &fakePlacement{owner: func(string, int) (bool, string, error) { return true, "", nil }}
	eb, _ := member(t, fakeappserver.Config{ReplyText: "never", HoldTurns: true}, pb)
	pa := &fakePlacement{owner: func(string, int) (bool, string, error) { return false, eb.Address(), nil }}
	ea, roota := member(t, fakeappserver.Config{}, pa)
	c, ce, _ := remoteCaller(t)
	env, err := messages.Encode(messages.StartRound{RoundID: "r2", User: "alice", Thread: "t1", Text: "hi"})
	if err != nil {
		t.Fatal(err)
	}
	ce.SendWithSender(actor.NewPID(ea.Address(), roota.ID), env, c.pid)
	// The round runs on b (its turn held): an event comes back through the relay.
	if ev := waitMsg[messages.RoundEvent](t, c, 30*time.Second); ev.RoundID != "r2" {
		t.Fatalf("event %+v, want one of r2", ev)
	}
	pa.leave(eb.Address())
	v := waitMsg[messages.RoundFinished](t, c, 10*time.Second)
	if v.RoundID != "r2" || v.Status != messages.StatusFailed || !v.Retryable {
		t.Fatalf("verdict %+v, want r2 failed and retryable", v)
	}
}

// TestPlacementRefusalIsRetryable: a member that cannot place a user
// (fenced) answers the round unavailable and retryable, and starts nothing.
func TestPlacementRefusalIsRetryable(t *testing.T) {
	p := &fakePlacement{owner: func(string, int) (bool, string, error) { return false, "", errors.New("fenced") }}
	h := newHarness(t, func(c *tree) { c.Placement = p })
	c := h.caller()
	r := h.round(c, messages.StartRound{User: "alice", Thread: "t1", Text: "hi"})
	if r.verdict.Status != messages.StatusUnavailable || !r.verdict.Retryable {
		t.Fatalf("verdict %+v, want unavailable and retryable", r.verdict)
	}
}

// TestFenceStopsUsersAndReleases: Fence stops every user actor (and its
// app-server); a user actor that ends with nothing waiting is released.
func TestFenceStopsUsersAndReleases(t *testing.T) {
	p := &fakePlacement{owner: func(string, int) (bool, string, error) { return true, "", nil }}
	h := fakeHarness(t, fakeappserver.Config{ReplyText: "ok"}, func(c *tree) { c.Placement = p })
	c := h.caller()
	if r := h.round(c, messages.StartRound{User: "alice", Thread: "t1", Text: "hi"}); r.verdict.Status != messages.StatusCompleted {
		t.Fatalf("verdict %+v", r.verdict)
	}
	h.engine.Send(h.root, Fence{})
	poll(t, 10*time.Second, "alice released", func() bool {
		p.mu.Lock()
		defer p.mu.Unlock()
		return len(p.released) == 1 && p.released[0] == "alice"
	})
	checkNoAppServers(t, h.cfg.Homes)
}
