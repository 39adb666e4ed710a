package actors

import (
	"fmt"
	"log/slog"
	"strconv"
	"strings"
	"sync"
	"time"

	"google.golang.org/protobuf/types/known/anypb"

	"github.com/meshweaver/supervisor/edge"
	"github.com/meshweaver/supervisor/messages"
	"github.com/meshweaver/supervisor/third_party/hollywood/actor"
)

// Fence tells the root that this cluster member lost, or may be about to
// lose, its lease: every user actor is stopped at once (their app-servers
// with them), and messages for those users are placed again. The daemon
// sends it from the cluster node's OnFence. It never crosses the remote
// (Done could not).
type Fence struct {
	// Done, when not nil, is closed once every user actor that was live at
	// the fence (stopping already or not) has stopped, its app-server
	// with it: at once when there was none, at the latest when the root
	// stops. The daemon waits for it before its node may revoke the lease.
	Done chan struct{}
}

// relayKind is the kind of the relay actors under the root; their ids
// ("h<hops>-<n>") tell the member a message is forwarded to how many hops
// it has made (relayHops).
const relayKind = "relay"

// RelayPrefix is the id prefix of the relay actors, which other members'
// answers address (the edge lets answers through to them).
const RelayPrefix = RootKind + "/" + RootID + "/" + relayKind + "/"

// relayRequestTimeout bounds a relayed request that is not a round (a
// login, an account query): the owner answers once.
const relayRequestTimeout = 2 * time.Minute

// ownerGone is the relay's watch firing: the owner left the cluster.
type ownerGone struct{}

// relayTimeout ends a relayed request the owner never answered.
type relayTimeout struct{}

// relayActor forwards one message for a user that another member owns to
// that member's root, and streams what comes back (a round's events and
// verdict, or a request's one answer) to the original caller. If the
// owner leaves the cluster first (dies, is fenced, stops), a round ends
// with a failed verdict marked Retryable, within about the lease TTL. It
// is the sender the owner sees, so the owner's edge authorizes this
// member's identity (docs/SECURITY.md#cluster-members), and the owner's
// round log takes it for the caller: so it watches the real caller, and
// when that caller goes (or the relay stops first) it tells the owner
// (DetachRound), whose log then runs the caller grace.
type relayActor struct {
	cfg     *tree
	log     *slog.Logger
	to      *actor.PID // the owner's root
	msg     any        // what is forwarded (a StartRound has its ReplyTo cleared)
	replyTo *actor.PID // the original caller
	// round: a StartRound or an AttachRound, which stream events and a
	// verdict (the round's id and thread; an attach knows no thread).
	round   *roundRef
	release func() // the hold on the caller's address and the drain gate; nil when none
	gone    <-chan struct{}

	stop chan struct{}
	wg   sync.WaitGroup
	done bool
}

// roundRef names the round a relay streams, and its user.
type roundRef struct{ user, id, thread string }

func newRelay(cfg *tree, to *actor.PID, msg any, replyTo *actor.PID, release func(), gone <-chan struct{}) actor.Producer {
	return func() actor.Receiver {
		r := &relayActor{cfg: cfg, log: cfg.Logger.With("actor", "relay", "owner", to.Address),
			to: to, msg: msg, replyTo: replyTo, release: release, gone: gone, stop: make(chan struct{})}
		switch m := msg.(type) {
		case messages.StartRound:
			r.round = &roundRef{user: m.User, id: m.RoundID, thread: m.Thread}
		case messages.AttachRound:
			r.round = &roundRef{user: m.User, id: m.RoundID}
		}
		return r
	}
}

func (r *relayActor) Receive(c *actor.Context) {
	switch m := c.Message().(type) {
	case actor.Initialized:
		return
	case actor.Started:
		r.start(c)
		return
	case actor.Stopped:
		r.shutdown(c)
		return
	case ownerGone:
		r.fail(c, fmt.Sprintf("the member owning this user (%s) left the cluster (it died, was fenced or stopped); send the round again: the thread resumes on the user's next owner", r.to.Address))
		return
	case relayTimeout:
		r.fail(c, "the member owning this user did not answer")
		return
	case actor.RemoteUnreachableEvent:
		switch {
		case m.ListenAddr == r.to.Address:
			r.fail(c, fmt.Sprintf("the member owning this user (%s) cannot be reached; send it again", r.to.Address))
		case r.replyTo != nil && m.ListenAddr == r.replyTo.Address && m.ListenAddr != c.Engine().Address():
			r.callerLeft(c) // a remote caller's connection is lost
		}
		return
	case actor.ActorStoppedEvent:
		if r.replyTo != nil && m.PID.Equals(r.replyTo) {
			r.callerLeft(c) // a local caller (the gateway's) stopped
		}
		return
	}
	msg := c.Message()
	if env, ok := msg.(*anypb.Any); ok { // no edge gate in front (tests)
		var err error
		if msg, err = messages.Decode(env); err != nil {
			r.log.Warn("undecodable reply from the owner; dropped", "err", err)
			return
		}
	}
	if r.done || !edge.IsReply(msg) || !r.mine(msg) {
		return // the engine's other events, or a late answer to an earlier relay of the same id
	}
	deliver(c.Engine(), r.replyTo, msg, r.log)
	switch msg.(type) {
	case messages.RoundEvent, messages.LoginChallenge: // more follows: the verdict, the login's end
		return
	}
	r.finish(c)
}

func (r *relayActor) start(c *actor.Context) {
	env, err := messages.Encode(r.msg)
	if err != nil {
		r.fail(c, "cannot forward the message: "+err.Error())
		return
	}
	// A lost connection to the owner (its process died, a refused dial)
	// is heard on the event stream, before its lease expires.
	c.Engine().Subscribe(c.PID())
	c.Engine().SendWithSender(r.to, env, c.PID())
	self, e := c.PID(), c.Engine()
	wait := relayRequestTimeout
	if _, ok := r.msg.(messages.StartLogin); ok {
		wait += r.cfg.LoginGrant // a device-code login waits for its approval
	}
	round := r.round != nil
	r.wg.Add(1)
	go func() {
		defer r.wg.Done()
		var timeout <-chan time.Time
		if !round { // a round has the owner's stall deadline; a request has this
			t := time.NewTimer(wait)
			defer t.Stop()
			timeout = t.C
		}
		select {
		case <-r.gone:
			e.Send(self, ownerGone{})
		case <-timeout:
			e.Send(self, relayTimeout{})
		case <-r.stop:
		}
	}()
}

// mine reports whether a round's event or verdict belongs to the relayed
// round (relay ids start again at 1 when the daemon restarts).
func (r *relayActor) mine(msg any) bool {
	if r.round == nil {
		return true
	}
	switch m := msg.(type) {
	case messages.RoundEvent:
		return m.RoundID == r.round.id
	case messages.RoundFinished:
		return m.RoundID == r.round.id
	}
	return true
}

// callerLeft ends a relayed round whose caller went: the owner is told
// (DetachRound), so that its round log runs the caller grace as for a
// caller of its own, and nobody is left to get a verdict.
func (r *relayActor) callerLeft(c *actor.Context) {
	if r.done || r.round == nil {
		return // a request's one answer has nobody to wait for it either; its timeout ends it
	}
	r.log.Info("the caller of a relayed round is gone; telling the owner", "round", r.round.id)
	r.detach(c)
	r.finish(c)
}

// detach tells the owner that this relay no longer listens to its round:
// the owner's round log drops this relay (its sender) and no other caller.
func (r *relayActor) detach(c *actor.Context) {
	if r.round == nil {
		return
	}
	env, err := messages.Encode(messages.DetachRound{User: r.round.user, RoundID: r.round.id})
	if err != nil {
		r.log.Warn("cannot encode a detach for the owner", "err", err)
		return
	}
	c.Engine().SendWithSender(r.to, env, c.PID())
}

// fail ends the relay with a retryable verdict (or a refusal, for a
// request that is not a round). The owner is told the relay left, too: a
// connection that broke while the owner lives (or an owner that left the
// cluster but still runs the round) would otherwise keep a round going
// for a caller that has its verdict and sends the round again, behind it
// on the thread. A dead owner never gets it (the dial fails, off the
// router, bounded by the remote's dial timeout).
func (r *relayActor) fail(c *actor.Context, why string) {
	if r.done {
		return
	}
	r.verdict(c, why)
	r.detach(c)
	r.finish(c)
}

// verdict tells the caller the relay ended without the owner's answer.
func (r *relayActor) verdict(c *actor.Context, why string) {
	if r.round != nil {
		deliver(c.Engine(), r.replyTo, messages.RoundFinished{
			RoundID: r.round.id, Thread: r.round.thread, Status: messages.StatusFailed,
			Error: why, Retryable: true,
		}, r.log)
		r.cfg.Metrics.Rounds.WithLabelValues(string(messages.StatusFailed)).Inc()
	} else {
		deliver(c.Engine(), r.replyTo, messages.NewRejected(r.msg, fmt.Errorf("%w: %s", messages.ErrInvalid, why)), r.log)
	}
}

func (r *relayActor) finish(c *actor.Context) {
	if r.done {
		return
	}
	r.done = true
	c.Engine().Poison(c.PID())
}

func (r *relayActor) shutdown(c *actor.Context) {
	if !r.done {
		r.verdict(c, "this member is stopping; send it again")
		r.detach(c) // the owner's round log no longer waits on this relay
	}
	r.done = true
	c.Engine().Unsubscribe(c.PID())
	close(r.stop)
	r.wg.Wait()
	if r.release != nil {
		r.release()
	}
}

// relayHops is how many hops a message has made: its sender is the relay
// of another member ("…/meshweaver/root/relay/h<n>-…"), else 0. A caller
// that poses as a relay only limits its own forwarding.
func relayHops(sender *actor.PID, self string) int {
	if sender == nil || sender.Address == self {
		return 0
	}
	_, rest, ok := strings.Cut(sender.ID, "/"+relayKind+"/h")
	if !ok {
		return 0
	}
	digits, _, _ := strings.Cut(rest, "-")
	n, err := strconv.Atoi(digits)
	if err != nil || n < 0 {
		return 0
	}
	return n
}

// placeReq is a message for a user that waits for its placement.
type placeReq struct {
	msg     any
	replyTo *actor.PID
	hops    int
	then    func(*actor.Context) // where it goes on once the user is placed here
}

// placed is the answer of a lookup of user's owner, for messages of hops.
type placed struct {
	user  string
	hops  int
	local bool
	addr  string
	err   error
}

// place finds where user's message goes (always here without a
// Placement): here, it goes on with then; at another member, it is
// relayed there; when no member can serve the user, it is refused as
// retryable. Receive never waits for the cluster: what the member knows
// (a user it owns, its fence) is answered from memory, anything else is
// looked up on a goroutine of the root and answered by a placed message;
// meanwhile the user's further messages wait, in order (placing).
func (r *rootActor) place(c *actor.Context, user string, msg any, replyTo *actor.PID, then func(*actor.Context)) {
	if r.cfg.Placement == nil {
		then(c)
		return
	}
	r.placeOne(c, user, placeReq{msg: msg, replyTo: replyTo, hops: relayHops(c.Sender(), c.Engine().Address()), then: then})
}

func (r *rootActor) placeOne(c *actor.Context, user string, q placeReq) {
	if waiting, ok := r.placing[user]; ok {
		if len(waiting) >= maxPending {
			r.refuse(c, q, messages.StatusBusy, "too many messages for this user at once", false)
			return
		}
		r.placing[user] = append(waiting, q)
		return
	}
	if local, known, err := r.cfg.Placement.Known(user); known {
		r.placeDone(c, user, q, local, "", err)
		return
	}
	r.placing[user] = []placeReq{q}
	r.lookups.Add(1)
	e, self, p := c.Engine(), c.PID(), r.cfg.Placement
	go func() {
		defer r.lookups.Done()
		local, addr, err := p.Owner(user, q.hops)
		e.Send(self, placed{user: user, hops: q.hops, local: local, addr: addr, err: err})
	}()
}

// placed applies a lookup's answer to the messages that waited for it;
// from the first one of another hop count on (its answer may differ),
// they are placed afresh, in order.
func (r *rootActor) placed(c *actor.Context, m placed) {
	queue := r.placing[m.user]
	delete(r.placing, m.user)
	if m.err == nil && m.local {
		if _, known, err := r.cfg.Placement.Known(m.user); known && err != nil {
			m.local, m.err = false, err // fenced while it looked
		}
	}
	for i, q := range queue {
		if q.hops != m.hops {
			for _, rest := range queue[i:] {
				r.placeOne(c, m.user, rest)
			}
			return
		}
		r.placeDone(c, m.user, q, m.local, m.addr, m.err)
	}
}

// placeDone sends q where the answer says.
func (r *rootActor) placeDone(c *actor.Context, user string, q placeReq, local bool, addr string, err error) {
	if err == nil && local {
		q.then(c)
		return
	}
	if err == nil && (addr == "" || addr == c.Engine().Address()) {
		err = fmt.Errorf("the cluster placed the user on this member's own address %q without claiming it", addr)
	}
	if err != nil {
		r.log.Warn("cannot place a user's message", "user", userTag(user), "err", err)
		r.refuse(c, q, messages.StatusUnavailable, "no member can serve this user now: "+err.Error(), true)
		return
	}
	r.relay(c, addr, q)
}

// refuse answers a message that will not be served: a round gets a
// verdict of status, anything else a rejection.
func (r *rootActor) refuse(c *actor.Context, q placeReq, status messages.VerdictStatus, why string, retryable bool) {
	if sr, ok := q.msg.(messages.StartRound); ok {
		r.cfg.Metrics.Rounds.WithLabelValues(string(status)).Inc()
		deliver(c.Engine(), q.replyTo, messages.RoundFinished{RoundID: sr.RoundID, Thread: sr.Thread,
			Status: status, Error: why, Retryable: retryable}, r.log)
		return
	}
	if q.replyTo != nil {
		deliver(c.Engine(), q.replyTo, messages.NewRejected(q.msg, fmt.Errorf("%w: %s", messages.ErrInvalid, why)), r.log)
	}
}

// relay forwards q to the owner at addr through a relay actor.
func (r *rootActor) relay(c *actor.Context, addr string, q placeReq) {
	var release func()
	msg := q.msg
	switch m := msg.(type) {
	case messages.StartRound:
		m.ReplyTo = nil // the owner replies to the relay
		msg = m
		r.cfg.rounds.enter()
		hold := r.hold(c, q.replyTo)
		release = func() {
			if hold != nil {
				hold()
			}
			r.cfg.rounds.leave()
		}
	case messages.AttachRound:
		m.ReplyTo = nil
		msg = m
		release = r.hold(c, q.replyTo)
	}
	r.relays++
	to := actor.NewPID(addr, RootKind+"/"+RootID)
	c.SpawnChild(newRelay(r.cfg, to, msg, q.replyTo, release, r.cfg.Placement.Watch(addr)), relayKind,
		spawnOpts(fmt.Sprintf("h%d-%d", q.hops+1, r.relays), r.log, nil)...)
}

// hold keeps a remote caller's address reachable while a relay streams to
// it (nil when there is nothing to hold).
func (r *rootActor) hold(c *actor.Context, replyTo *actor.PID) func() {
	if r.cfg.Hold != nil && replyTo != nil && replyTo.Address != c.Engine().Address() {
		return r.cfg.Hold(replyTo.Address)
	}
	return nil
}

// stopPlacing ends the root: the lookups in flight are waited for (each
// is bounded, see Placement), and what waited for them is answered.
func (r *rootActor) stopPlacing(c *actor.Context) {
	r.lookups.Wait()
	for user, queue := range r.placing {
		for _, q := range queue {
			r.refuse(c, q, messages.StatusUnavailable, "the daemon is shutting down", true)
		}
		delete(r.placing, user)
	}
}

// unclaim gives up a user this member claimed but runs no actor for.
func (r *rootActor) unclaim(user string) {
	if r.cfg.Placement != nil && r.users[user] == nil {
		r.cfg.Placement.Release(user)
	}
}

// ownedHere reports whether this member still serves user, as far as it
// knows without asking the cluster.
func (r *rootActor) ownedHere(user string) bool {
	if r.cfg.Placement == nil {
		return true
	}
	local, known, err := r.cfg.Placement.Known(user) // never the network here
	return known && err == nil && local
}

// MaxRelayHops is how often a message may be forwarded between members.
const MaxRelayHops = 2

// failPending answers what waited for a user actor that will not be
// replaced here: rounds get a retryable unavailable verdict.
func (r *rootActor) failPending(c *actor.Context, pending []pendingMsg, why string) {
	for _, p := range pending {
		if req, ok := p.msg.(roundRequest); ok {
			deliver(c.Engine(), req.replyTo, messages.RoundFinished{RoundID: req.RoundID, Thread: req.Thread,
				Status: messages.StatusUnavailable, Error: why, Retryable: true}, r.log)
			r.cfg.Metrics.Rounds.WithLabelValues(string(messages.StatusUnavailable)).Inc()
			req.settle(r.cfg)
		}
	}
}

// fence stops every user actor at once: the member may lose its lease,
// and another member may own these users a moment later. m.Done is
// closed once all of them (and any stopping already) are gone.
func (r *rootActor) fence(c *actor.Context, m Fence) {
	n := 0
	var wait map[string]*actor.PID
	if m.Done != nil {
		wait = make(map[string]*actor.PID, len(r.users))
	}
	for id, u := range r.users {
		if wait != nil {
			wait[id] = u.pid
		}
		if !u.stopping {
			u.stopping = true
			u.fenced.Store(true) // before the stop: its round logs read it
			c.Engine().Poison(u.pid)
			n++
		}
	}
	r.log.Warn("fenced: stopping every user's actors and app-server", "users", n)
	if m.Done == nil {
		return
	}
	if len(wait) == 0 {
		close(m.Done)
		return
	}
	r.fences = append(r.fences, pendingFence{done: m.Done, users: wait})
}

// pendingFence is a fence whose Done waits for user actors to stop.
type pendingFence struct {
	done  chan struct{}
	users map[string]*actor.PID // the user actors still to go
}

// fenceGone counts a stopped user actor off the pending fences, and
// closes the Done of each that has none left.
func (r *rootActor) fenceGone(user string, pid *actor.PID) {
	left := r.fences[:0]
	for _, f := range r.fences {
		if p, ok := f.users[user]; ok && p.Equals(pid) {
			delete(f.users, user)
		}
		if len(f.users) == 0 {
			close(f.done)
			continue
		}
		left = append(left, f)
	}
	clear(r.fences[len(left):])
	r.fences = left
}

// endFences closes every pending fence's Done: the root stopped, and
// its children (every user actor) with it.
func (r *rootActor) endFences() {
	for _, f := range r.fences {
		close(f.done)
	}
	r.fences = nil
}
