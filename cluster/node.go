package cluster

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// Errors of [Node.Owner]. Each means "not now": a caller may retry the
// same message a lease TTL later.
var (
	// ErrFenced: this member's lease may have lapsed; it owns nothing
	// until it renews it.
	ErrFenced = errors.New("this member is fenced: its etcd lease may have lapsed")
	// ErrOwnerLeaving: the user's owner has left the member set and its
	// key has not expired yet.
	ErrOwnerLeaving = errors.New("the user's owner is leaving the cluster")
	// ErrTooManyHops: the message was forwarded twice already.
	ErrTooManyHops = errors.New("the user's owner moved while the message was forwarded")
)

// MaxHops is how many times a message may be forwarded between members.
const MaxHops = 2

// Config is one member's settings.
type Config struct {
	// Client talks to etcd (the node does not close it).
	Client *clientv3.Client
	// Endpoints are one client per etcd endpoint, the nearest (an embedded
	// member's own) first; nil: Client alone. The node's calls go to one
	// endpoint at a time, each attempt bounded ([Deadline.Attempt]), and
	// move to the next when one fails: a dead, frozen or cut-off endpoint
	// costs one attempt (gRPC's balancer would keep a frozen one's
	// connection for its keepalive's ten seconds or more). The node does
	// not close them.
	Endpoints []*clientv3.Client
	// Cluster names the cluster: every key lives under /meshweaver/<Cluster>/.
	Cluster string
	// Member is this member's id, unique in the cluster and stable across
	// restarts. Addr is its hollywood remote address, which other members
	// forward to.
	Member string
	Addr   string
	// TTL is the lease's time to live; Margin how long before its earliest
	// expiry the member fences itself.
	TTL    time.Duration
	Margin time.Duration
	// CallTimeout bounds each etcd call of Owner, over all its attempts
	// (default 2s, at most the TTL less the margin).
	CallTimeout time.Duration
	// Now is the clock of the fencing arithmetic (default [BootNow], which
	// counts a suspension; tests give a clock they move).
	Now func() time.Time
	// OnFence is called, on the node's renewal goroutine, when the member
	// must stop every app-server now: its lease may lapse (etcd
	// unreachable, quorum lost) or has lapsed. It may block until they
	// are stopped (bounded: Close waits for it too): the node renews and
	// revokes nothing meanwhile, and revokes the fenced lease, freeing
	// its users for other members, only after it returned.
	OnFence func()
	// OnDeadline is called after every renewal with the new fence time, on
	// the Now clock, and the lease it belongs to, for the out-of-process
	// fence (nil: none).
	OnDeadline func(fenceAt time.Time, lease clientv3.LeaseID)
	// Logger receives the node's lines (slog.Default when nil).
	Logger *slog.Logger
}

// Node is one member of a cluster: its lease, its view of the members,
// the users it owns. Its methods are safe for concurrent use; Owner and
// Release are what the actor tree calls (actors.Placement).
type Node struct {
	cfg      Config
	log      *slog.Logger
	members  string // key prefix of the member keys
	owners   string // key prefix of the ownership keys
	cancel   context.CancelFunc
	wg       sync.WaitGroup
	released chan struct{} // closed by Close
	every    time.Duration // how often the lease is renewed
	attempt  time.Duration // how long one call may wait on one endpoint
	clients  []*clientv3.Client
	pref     atomic.Int32 // index in clients of the endpoint to try first
	now      func() time.Time

	mu       sync.Mutex
	lease    clientv3.LeaseID
	deadline Deadline
	fenced   bool
	live     map[string]string        // member id → address
	owned    map[string]int64         // user → creation revision of its key (the fencing token)
	watchers map[string]chan struct{} // member address → closed when it leaves
	watchOn  int                      // index in clients of the endpoint the member watch runs on
	rewatch  context.CancelFunc       // ends the member watch, to start it again on the endpoint preferred now
	events   chan Event               // optional: tests observe transitions
}

// Event is a transition of the node, for tests and logs.
type Event struct {
	Kind   string // "joined", "fenced", "renewed", "renew-retried", "renewed-late", "member-up", "member-down", "lease-lost"
	Member string
	At     time.Time
}

// Join grants the member's lease, registers its member key and starts
// renewing the lease and watching the members. Close (or Leave) ends it.
func Join(ctx context.Context, cfg Config) (*Node, error) {
	switch {
	case cfg.Client == nil:
		return nil, errors.New("cluster: no etcd client")
	case cfg.Cluster == "" || strings.Contains(cfg.Cluster, "/"):
		return nil, fmt.Errorf("cluster: invalid cluster name %q", cfg.Cluster)
	case cfg.Member == "" || strings.Contains(cfg.Member, "/"):
		return nil, fmt.Errorf("cluster: invalid member id %q", cfg.Member)
	case cfg.Addr == "":
		return nil, errors.New("cluster: no member address")
	case cfg.TTL < 2*time.Second || cfg.TTL%time.Second != 0:
		return nil, fmt.Errorf("cluster: lease TTL %v must be whole seconds, at least 2s", cfg.TTL)
	case cfg.Margin <= 0 || cfg.Margin >= cfg.TTL:
		return nil, fmt.Errorf("cluster: fence margin %v must be positive and below the TTL %v", cfg.Margin, cfg.TTL)
	}
	if cfg.CallTimeout <= 0 {
		cfg.CallTimeout = 2 * time.Second
	}
	if budget := cfg.TTL - cfg.Margin; cfg.CallTimeout > budget {
		cfg.CallTimeout = budget
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if cfg.Now == nil {
		cfg.Now = BootNow
	}
	prefix := "/meshweaver/" + cfg.Cluster + "/"
	n := &Node{
		cfg: cfg, log: cfg.Logger.With("component", "cluster", "member", cfg.Member),
		members: prefix + "members/", owners: prefix + "owners/",
		released: make(chan struct{}),
		live:     map[string]string{}, owned: map[string]int64{}, watchers: map[string]chan struct{}{},
	}
	d := NewDeadline(cfg.TTL, cfg.Margin, time.Time{})
	n.every, n.attempt, n.now = d.RenewEvery(), d.Attempt(), cfg.Now
	n.clients = slices.Clone(cfg.Endpoints)
	if len(n.clients) == 0 {
		n.clients = []*clientv3.Client{cfg.Client}
	}
	if err := n.registerWait(ctx); err != nil {
		return nil, err
	}
	rev, err := n.listMembers(ctx)
	if err != nil {
		n.revoke()
		return nil, err
	}
	runCtx, cancel := context.WithCancel(context.Background())
	n.cancel = cancel
	n.wg.Add(2)
	go n.renewLoop(runCtx)
	go n.watchLoop(runCtx, rev)
	n.log.Info("joined the cluster", "cluster", cfg.Cluster, "addr", cfg.Addr, "ttl", cfg.TTL, "fence_margin", cfg.Margin)
	return n, nil
}

// errRegistered: the member key exists, held by another lease.
var errRegistered = errors.New("registered already")

// registerWait registers the member, waiting while its key is held by
// another lease: this member's previous life (killed and restarted)
// holds it until its lease expires, at most a TTL. Another live process
// with the same id holds it for ever: ctx ends the wait.
func (n *Node) registerWait(ctx context.Context) error {
	warned := false
	for {
		err := n.register(ctx)
		if !errors.Is(err, errRegistered) {
			return err
		}
		if !warned {
			n.log.Warn("the member id is still registered (this member's previous life, until its lease expires, or another process with the same --member): waiting", "ttl", n.cfg.TTL)
			warned = true
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("registering member %q: %w (another process with this id?)", n.cfg.Member, err)
		case <-time.After(200 * time.Millisecond):
		}
	}
}

// register grants a fresh lease and puts the member key on it, trying
// the endpoints in turn for at most the fence window.
func (n *Node) register(ctx context.Context) error {
	type granted struct {
		lease clientv3.LeaseID
		sent  time.Time
	}
	// One attempt at a time: two at once could each grant a lease, and
	// the second would find the first's key.
	window := n.cfg.TTL - n.cfg.Margin
	got, err := try(n, ctx, n.now().Add(window), window/3, 0, func(ctx context.Context, c *clientv3.Client) (granted, error) {
		sent := n.now()
		g, err := c.Grant(ctx, int64(n.cfg.TTL/time.Second))
		if err != nil {
			return granted{}, fmt.Errorf("granting the member's etcd lease: %w", err)
		}
		// A member id is registered once: a second process with the same
		// id (or this one's previous life, whose lease has not expired)
		// must not share it.
		key := n.members + n.cfg.Member
		resp, err := c.Txn(ctx).
			If(clientv3.Compare(clientv3.CreateRevision(key), "=", 0)).
			Then(clientv3.OpPut(key, n.cfg.Addr, clientv3.WithLease(g.ID))).
			Commit()
		if err == nil && !resp.Succeeded {
			err = errRegistered
		}
		if err != nil {
			rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), n.attempt)
			_, _ = c.Revoke(rctx, g.ID) // else it expires after the TTL
			cancel()
			return granted{}, fmt.Errorf("registering member %q: %w", n.cfg.Member, err)
		}
		return granted{g.ID, sent}, nil
	}, func(err error) bool { return errors.Is(err, errRegistered) })
	if err != nil {
		return err
	}
	n.mu.Lock()
	n.lease = got.lease
	n.deadline = NewDeadline(n.cfg.TTL, n.cfg.Margin, got.sent)
	n.fenced = false
	n.mu.Unlock()
	n.emit("joined", n.cfg.Member)
	if n.cfg.OnDeadline != nil {
		n.cfg.OnDeadline(n.deadline.FenceAt(), got.lease)
	}
	return nil
}

// renewLoop keeps the lease alive and fences the member when it cannot.
func (n *Node) renewLoop(ctx context.Context) {
	defer n.wg.Done()
	t := time.NewTicker(n.every)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		n.renew(ctx)
	}
}

// renew renews the lease, trying the endpoints in turn until one answers
// or the fence time passes; then it fences the member. A dead or frozen
// endpoint, or an etcd leader election, is waited out: only a lease that
// cannot be renewed before the fence time fences.
func (n *Node) renew(ctx context.Context) {
	n.mu.Lock()
	lease, fenceAt, fenced := n.lease, n.deadline.FenceAt(), n.fenced
	n.mu.Unlock()
	if fenced {
		// The lease is as good as gone: start a new life. OnFence, which
		// returned before this goroutine came here, saw the app-servers
		// stopped (or had the fence helper kill them), so the old lease
		// (if etcd still has it) is revoked first: its users are free at
		// once, for this member or another.
		_, _ = try(n, ctx, n.now().Add(n.attempt), n.attempt, 0, func(ctx context.Context, c *clientv3.Client) (*clientv3.LeaseRevokeResponse, error) {
			return c.Revoke(ctx, lease)
		}, func(error) bool { return true })
		if err := n.register(ctx); err != nil {
			n.log.Warn("rejoining the cluster", "err", err)
		} else {
			n.log.Info("rejoined the cluster")
		}
		return
	}
	start := n.now()
	var tries atomic.Int32
	sent, err := try(n, ctx, fenceAt, n.attempt, n.attempt/4, func(ctx context.Context, c *clientv3.Client) (time.Time, error) {
		sent := n.now()
		tries.Add(1)
		_, err := c.KeepAliveOnce(ctx, lease)
		return sent, err
	}, func(err error) bool { return errors.Is(err, rpctypes.ErrLeaseNotFound) })
	if ctx.Err() != nil {
		return
	}
	switch {
	case err == nil:
		n.mu.Lock()
		n.deadline.Renewed(sent)
		at := n.deadline.FenceAt()
		n.mu.Unlock()
		// The fence helper hears of the new fence time first, and only
		// then is the lateness judged: were the member descheduled (or
		// stopped) between a judgement and the helper's line, the helper
		// would kill the app-servers at the old fence time while the
		// member, judged on time, never fenced (a kill unlogged and
		// uncounted).
		if n.cfg.OnDeadline != nil {
			n.cfg.OnDeadline(at, lease)
		}
		if late := n.now().Sub(fenceAt); late >= 0 {
			// etcd answered in time, but this member learnt of it (or told
			// its helper) only past the old fence time (its goroutine not
			// run for a while, a loaded machine): the fence helper, which
			// heard of no newer fence time then, may have killed the
			// app-servers at that instant. Fence here as well, so that the
			// daemon does not go on serving (and restarting) what its
			// helper killed, unlogged and uncounted.
			n.log.Error("the etcd keepalive came back (or the fence helper was told of it) only after the fence time: stopping every app-server (the fence helper may have killed them at that time)",
				"late", late.Round(time.Millisecond), "attempts", tries.Load())
			n.emit("renewed-late", n.cfg.Member)
			n.fence()
			return
		}
		if k := tries.Load(); k > 1 {
			n.log.Warn("renewed the member's etcd lease after more than one attempt (an endpoint down, or an etcd election)", "attempts", k, "took", n.now().Sub(start).Round(time.Millisecond))
			n.emit("renew-retried", n.cfg.Member)
			// The member watch may hang on the endpoint that failed (a
			// frozen one answers nothing until gRPC's keepalive gives up,
			// ten seconds or more): move it to the one that answered.
			n.mu.Lock()
			if p := int(n.pref.Load()); p != n.watchOn && n.rewatch != nil {
				n.rewatch()
			}
			n.mu.Unlock()
		}
	case errors.Is(err, rpctypes.ErrLeaseNotFound):
		n.log.Error("the member's etcd lease expired: stopping every app-server", "err", err)
		n.emit("lease-lost", n.cfg.Member)
		n.fence()
	default:
		n.log.Error("no etcd keepalive before the fence time: stopping every app-server (etcd unreachable or without quorum)", "err", err, "attempts", tries.Load())
		n.fence()
	}
}

// try calls call on the etcd endpoints, first the one that answered
// last, each attempt bounded by attempt, until an attempt succeeds, its
// error is final (a nil final: none is), ctx ends or the clock reaches
// until. It returns the successful attempt's value, or the last error.
//
// A positive stagger starts another attempt, on the next endpoint, every
// stagger while none has answered, for calls that may run twice
// (keepalives, reads, a claim that finds its own key): an attempt stuck
// on a frozen endpoint, or on a follower still forwarding to a dead
// leader, does not hold the next one back, so a renewal succeeds soon
// after etcd elects a new leader. With one endpoint, or stagger 0, one
// attempt runs at a time (more would only load a slow etcd further).
func try[T any](n *Node, ctx context.Context, until time.Time, attempt, stagger time.Duration, call func(context.Context, *clientv3.Client) (T, error), final func(error) bool) (T, error) {
	var zero T
	type result struct {
		k   int
		v   T
		err error
	}
	ctx, cancel := context.WithCancel(ctx)
	res := make(chan result)
	inflight := 0
	defer func() { // every attempt's goroutine ends before try returns
		cancel()
		for ; inflight > 0; inflight-- {
			<-res
		}
	}()
	next := int(n.pref.Load())
	launch := func() bool {
		left := until.Sub(n.now())
		if left <= 0 {
			return false
		}
		k := next % len(n.clients)
		next++
		actx, acancel := context.WithTimeout(ctx, min(attempt, left))
		inflight++
		go func() {
			defer acancel()
			v, err := call(actx, n.clients[k])
			res <- result{k, v, err}
		}()
		return true
	}
	lastErr := fmt.Errorf("etcd did not answer in time: %w", context.DeadlineExceeded)
	if !launch() {
		return zero, lastErr
	}
	hedge := stagger > 0 && len(n.clients) > 1
	if !hedge {
		stagger = attempt
	}
	stagger = max(stagger, 20*time.Millisecond)
	timer := time.NewTimer(stagger)
	defer timer.Stop()
	for {
		select {
		case r := <-res:
			inflight--
			if r.err == nil {
				n.pref.Store(int32(r.k))
				return r.v, nil
			}
			lastErr = r.err
			if ctx.Err() != nil || (final != nil && final(r.err)) {
				return zero, r.err
			}
			if inflight == 0 {
				// An endpoint that fails at once (refused, no leader yet)
				// is not tried again in a spin.
				timer.Reset(min(20*time.Millisecond, stagger))
			}
		case <-timer.C:
			if (hedge || inflight == 0) && !launch() && inflight == 0 {
				return zero, lastErr
			}
			timer.Reset(stagger)
		}
	}
}

// fence drops every ownership and has the daemon stop its app-servers.
// It runs on the renewal goroutine and calls OnFence there, unlocked and
// not in a goroutine of its own: the next renew, which revokes the old
// lease, cannot start before OnFence returned.
func (n *Node) fence() {
	n.mu.Lock()
	n.fenced = true
	n.owned = map[string]int64{}
	n.mu.Unlock()
	n.emit("fenced", n.cfg.Member)
	if n.cfg.OnFence != nil {
		n.cfg.OnFence()
	}
}

// listMembers reads the member keys and returns the revision to watch
// from.
func (n *Node) listMembers(ctx context.Context) (int64, error) {
	resp, err := try(n, ctx, n.now().Add(n.cfg.TTL), n.cfg.CallTimeout, n.cfg.CallTimeout/2, func(ctx context.Context, c *clientv3.Client) (*clientv3.GetResponse, error) {
		return c.Get(ctx, n.members, clientv3.WithPrefix())
	}, nil)
	if err != nil {
		return 0, fmt.Errorf("listing the cluster's members: %w", err)
	}
	live := map[string]string{}
	for _, kv := range resp.Kvs {
		live[strings.TrimPrefix(string(kv.Key), n.members)] = string(kv.Value)
	}
	n.mu.Lock()
	for id, addr := range n.live {
		if live[id] != addr {
			n.memberDownLocked(id, addr)
		}
	}
	n.live = live
	n.mu.Unlock()
	return resp.Header.Revision, nil
}

// watchLoop follows the member keys, on the endpoint preferred when the
// watch starts; a broken or moved watch lists them again.
func (n *Node) watchLoop(ctx context.Context, rev int64) {
	defer n.wg.Done()
	for ctx.Err() == nil {
		k := int(n.pref.Load()) % len(n.clients)
		wctx, cancel := context.WithCancel(clientv3.WithRequireLeader(ctx))
		n.mu.Lock()
		n.watchOn, n.rewatch = k, cancel
		n.mu.Unlock()
		for resp := range n.clients[k].Watch(wctx, n.members, clientv3.WithPrefix(), clientv3.WithRev(rev+1)) {
			if resp.Err() != nil {
				n.log.Warn("watching the cluster's members", "err", resp.Err())
				break
			}
			for _, ev := range resp.Events {
				id := strings.TrimPrefix(string(ev.Kv.Key), n.members)
				n.mu.Lock()
				if ev.Type == clientv3.EventTypeDelete {
					if addr, ok := n.live[id]; ok {
						delete(n.live, id)
						n.memberDownLocked(id, addr)
					}
				} else {
					n.live[id] = string(ev.Kv.Value)
				}
				n.mu.Unlock()
				if ev.Type == clientv3.EventTypeDelete {
					n.emit("member-down", id)
				} else {
					n.emit("member-up", id)
				}
			}
			rev = resp.Header.Revision
		}
		cancel()
		// The watch ended (no leader, compaction, a lost connection):
		// list again after a pause, so no change is missed.
		select {
		case <-ctx.Done():
			return
		case <-time.After(n.every):
		}
		if r, err := n.listMembers(ctx); err == nil {
			rev = r
		}
	}
}

// memberDownLocked wakes whoever watches a member that left.
func (n *Node) memberDownLocked(id, addr string) {
	if ch, ok := n.watchers[addr]; ok {
		close(ch)
		delete(n.watchers, addr)
	}
	n.log.Info("a member left the cluster", "left", id, "addr", addr)
}

// Owner says where user's messages go: local when this member owns it (or
// has just claimed it), else the remote address of the member that owns
// it or should claim it. hops is how often the message was forwarded
// already: a forwarded message is never sent on to the rendezvous choice,
// only to an owner the key names, and not past MaxHops.
func (n *Node) Owner(user string, hops int) (local bool, addr string, err error) {
	n.mu.Lock()
	valid := !n.fenced && n.deadline.Valid(n.now())
	_, owned := n.owned[user]
	lease := n.lease
	n.mu.Unlock()
	if !valid {
		return false, "", ErrFenced
	}
	if owned {
		return true, "", nil
	}
	until := n.now().Add(n.cfg.CallTimeout)
	key := n.owners + user
	get, err := try(n, context.Background(), until, n.cfg.CallTimeout, n.cfg.CallTimeout/2, func(ctx context.Context, c *clientv3.Client) (*clientv3.GetResponse, error) {
		return c.Get(ctx, key)
	}, nil)
	if err != nil {
		return false, "", fmt.Errorf("looking up the owner of a user: %w", err)
	}
	if len(get.Kvs) == 0 {
		if hops == 0 {
			if pick := Pick(user, n.liveIDs()); pick != "" && pick != n.cfg.Member {
				n.mu.Lock()
				addr := n.live[pick]
				n.mu.Unlock()
				return false, addr, nil
			}
		}
		// A retried claim whose first try committed finds its own key
		// (owner and lease this member's) and takes it below.
		txn, err := try(n, context.Background(), until, n.cfg.CallTimeout, n.cfg.CallTimeout/2, func(ctx context.Context, c *clientv3.Client) (*clientv3.TxnResponse, error) {
			return c.Txn(ctx).
				If(clientv3.Compare(clientv3.CreateRevision(key), "=", 0)).
				Then(clientv3.OpPut(key, n.cfg.Member, clientv3.WithLease(lease))).
				Else(clientv3.OpGet(key)).
				Commit()
		}, nil)
		if err != nil {
			return false, "", fmt.Errorf("claiming a user: %w", err)
		}
		if txn.Succeeded {
			return n.claimed(user, lease, txn.Header.Revision)
		}
		get = (*clientv3.GetResponse)(txn.Responses[0].GetResponseRange())
		if len(get.Kvs) == 0 { // deleted in between: the next message tries again
			return false, "", ErrOwnerLeaving
		}
	}
	kv := get.Kvs[0]
	owner := string(kv.Value)
	if owner == n.cfg.Member {
		if clientv3.LeaseID(kv.Lease) != lease {
			// This member's previous life (killed, restarted) still holds
			// the key until its lease expires.
			return false, "", ErrOwnerLeaving
		}
		return n.claimed(user, lease, kv.CreateRevision)
	}
	if hops >= MaxHops {
		return false, "", ErrTooManyHops
	}
	n.mu.Lock()
	addr, ok := n.live[owner]
	n.mu.Unlock()
	if !ok {
		return false, "", ErrOwnerLeaving
	}
	return false, addr, nil
}

// Known is Owner from memory only (actors.Placement): a fenced member (or
// one past its fence time) answers ErrFenced, a user it owns is local;
// anything else is not known without etcd (known false).
func (n *Node) Known(user string) (local, known bool, err error) {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.fenced || !n.deadline.Valid(n.now()) {
		return false, true, ErrFenced
	}
	if _, owned := n.owned[user]; owned {
		return true, true, nil
	}
	return false, false, nil
}

// claimed records an ownership, unless the lease changed under it.
func (n *Node) claimed(user string, lease clientv3.LeaseID, rev int64) (bool, string, error) {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.fenced || n.lease != lease || !n.deadline.Valid(n.now()) {
		return false, "", ErrFenced
	}
	if _, ok := n.owned[user]; !ok {
		n.log.Debug("claimed a user", "token", rev)
	}
	n.owned[user] = rev
	return true, "", nil
}

// Token is the fencing token of a user this member owns (the creation
// revision of its key), 0 when it owns none.
func (n *Node) Token(user string) int64 {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.owned[user]
}

// Release gives a user up (its actors went idle; its app-server is
// stopped): the key is deleted if it is still the one this member
// created, so a successor's key is never touched. It does not wait.
func (n *Node) Release(user string) {
	n.mu.Lock()
	rev, ok := n.owned[user]
	delete(n.owned, user)
	select {
	case <-n.released:
		ok = false
	default:
	}
	if ok {
		n.wg.Add(1) // under mu: stop closes released under it before waiting
	}
	n.mu.Unlock()
	if !ok {
		return
	}
	go func() {
		defer n.wg.Done()
		ctx, cancel := context.WithTimeout(context.Background(), n.cfg.CallTimeout)
		defer cancel()
		key := n.owners + user
		_, err := n.cfg.Client.Txn(ctx).
			If(clientv3.Compare(clientv3.CreateRevision(key), "=", rev)).
			Then(clientv3.OpDelete(key)).
			Commit()
		if err != nil {
			n.log.Warn("releasing a user (its key expires with the lease)", "err", err)
		}
	}()
}

// Watch returns a channel closed when the member at addr leaves the
// cluster (its key deleted or expired); already closed if it is not a
// member now.
func (n *Node) Watch(addr string) <-chan struct{} {
	n.mu.Lock()
	defer n.mu.Unlock()
	for _, a := range n.live {
		if a == addr {
			ch, ok := n.watchers[addr]
			if !ok {
				ch = make(chan struct{})
				n.watchers[addr] = ch
			}
			return ch
		}
	}
	ch := make(chan struct{})
	close(ch)
	return ch
}

// Members returns the live members: id → address.
func (n *Node) Members() map[string]string {
	n.mu.Lock()
	defer n.mu.Unlock()
	out := make(map[string]string, len(n.live))
	for k, v := range n.live {
		out[k] = v
	}
	return out
}

// Owned is how many users this member owns.
func (n *Node) Owned() int {
	n.mu.Lock()
	defer n.mu.Unlock()
	return len(n.owned)
}

// FenceAt is when the member fences itself unless it renews its lease,
// on the Config.Now clock.
func (n *Node) FenceAt() time.Time {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.deadline.FenceAt()
}

func (n *Node) liveIDs() []string {
	n.mu.Lock()
	defer n.mu.Unlock()
	ids := make([]string, 0, len(n.live))
	for id := range n.live {
		ids = append(ids, id)
	}
	slices.Sort(ids)
	return ids
}

// Events returns a channel of the node's transitions (buffered; events
// are dropped when it is full). Call it before anything happens.
func (n *Node) Events() <-chan Event {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.events == nil {
		n.events = make(chan Event, 256)
	}
	return n.events
}

func (n *Node) emit(kind, member string) {
	n.mu.Lock()
	ch := n.events
	n.mu.Unlock()
	if ch == nil {
		return
	}
	select {
	case ch <- Event{Kind: kind, Member: member, At: time.Now()}:
	default:
	}
}

// Leave revokes the lease — every key of this member is deleted at once,
// so the survivors take its users over immediately — and stops the node.
// Call it after the member's app-servers are stopped.
func (n *Node) Leave(ctx context.Context) error {
	n.stop()
	n.mu.Lock()
	lease, fenced := n.lease, n.fenced
	n.mu.Unlock()
	if fenced {
		return nil
	}
	if err := n.revokeLease(ctx, lease, n.now().Add(n.cfg.CallTimeout), n.cfg.CallTimeout/2, 0); err != nil {
		return fmt.Errorf("leaving the cluster: %w", err)
	}
	n.log.Info("left the cluster")
	return nil
}

// Close stops the node without revoking its lease: its keys expire after
// the TTL, as if the member had died.
func (n *Node) Close() { n.stop() }

func (n *Node) stop() {
	n.mu.Lock()
	select {
	case <-n.released:
		n.mu.Unlock()
		return
	default:
	}
	close(n.released)
	n.mu.Unlock()
	n.cancel()
	n.wg.Wait()
}

// Revoke revokes a lease through clients (one per endpoint), trying them
// in turn as the node's own calls do, each attempt bounded by attempt,
// for at most within: the fence helper's leave on behalf of a daemon
// that died. A lease etcd no longer has is not an error.
func Revoke(ctx context.Context, clients []*clientv3.Client, lease clientv3.LeaseID, within, attempt time.Duration) error {
	if len(clients) == 0 {
		return errors.New("cluster: no etcd endpoint to revoke the lease through")
	}
	n := &Node{clients: clients, now: BootNow}
	if err := n.revokeLease(ctx, lease, n.now().Add(within), attempt, attempt/4); err != nil {
		return fmt.Errorf("revoking lease %x: %w", int64(lease), err)
	}
	return nil
}

// revokeLease revokes lease through the node's endpoints (try, with its
// until, attempt and stagger); a lease etcd no longer has is not an error.
func (n *Node) revokeLease(ctx context.Context, lease clientv3.LeaseID, until time.Time, attempt, stagger time.Duration) error {
	_, err := try(n, ctx, until, attempt, stagger, func(ctx context.Context, c *clientv3.Client) (*clientv3.LeaseRevokeResponse, error) {
		return c.Revoke(ctx, lease)
	}, func(err error) bool { return errors.Is(err, rpctypes.ErrLeaseNotFound) })
	if errors.Is(err, rpctypes.ErrLeaseNotFound) {
		return nil
	}
	return err
}

func (n *Node) revoke() {
	ctx, cancel := context.WithTimeout(context.Background(), n.cfg.CallTimeout)
	defer cancel()
	_, _ = n.cfg.Client.Revoke(ctx, n.lease)
}
