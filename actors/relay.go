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
// sends it from the cluster node's OnFence. It never crosses the remote.
type Fence struct{}

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
// member's identity (docs/SECURITY.md#cluster-members).
type relayActor struct {
	cfg     *Config
	log     *slog.Logger
	to      *actor.PID // the owner's root
	msg     any        // what is forwarded (a StartRound has its ReplyTo cleared)
	replyTo *actor.PID // the original caller
	round   *messages.StartRound
	release func() // the hold on the caller's address and the drain gate; nil when none
	gone    <-chan struct{}

	stop chan struct{}
	wg   sync.WaitGroup
	done bool
}

func newRelay(cfg *Config, to *actor.PID, msg any, replyTo *actor.PID, release func(), gone <-chan struct{}) actor.Producer {
	return func() actor.Receiver {
		r := &relayActor{cfg: cfg, log: cfg.Logger.With("actor", "relay", "owner", to.Address),
			to: to, msg: msg, replyTo: replyTo, release: release, gone: gone, stop: make(chan struct{})}
		if sr, ok := msg.(messages.StartRound); ok {
			r.round = &sr
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
		if m.ListenAddr == r.to.Address {
			r.fail(c, fmt.Sprintf("the member owning this user (%s) cannot be reached; send it again", r.to.Address))
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
		return m.RoundID == r.round.RoundID
	case messages.RoundFinished:
		return m.RoundID == r.round.RoundID
	}
	return true
}

// fail ends the relay with a retryable verdict (or a refusal, for a
// request that is not a round).
func (r *relayActor) fail(c *actor.Context, why string) {
	if r.done {
		return
	}
	r.verdict(c, why)
	r.finish(c)
}

// verdict tells the caller the relay ended without the owner's answer.
func (r *relayActor) verdict(c *actor.Context, why string) {
	if r.round != nil {
		deliver(c.Engine(), r.replyTo, messages.RoundFinished{
			RoundID: r.round.RoundID, Thread: r.round.Thread, Status: messages.StatusFailed,
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

// place asks the cluster where user's message goes (always here without
// a Placement). False means the message is taken care of: relayed to the
// member that owns the user, or refused as retryable.
func (r *rootActor) place(c *actor.Context, user string, msg any, replyTo *actor.PID) bool {
	if r.cfg.Placement == nil {
		return true
	}
	hops := relayHops(c.Sender(), c.Engine().Address())
	local, addr, err := r.cfg.Placement.Owner(user, hops)
	if err == nil && local {
		return true
	}
	if err == nil && (addr == "" || addr == c.Engine().Address()) {
		err = fmt.Errorf("the cluster placed the user on this member's own address %q without claiming it", addr)
	}
	if err != nil {
		r.log.Warn("cannot place a user's message", "user", userTag(user), "err", err)
		if sr, ok := msg.(messages.StartRound); ok {
			r.cfg.Metrics.Rounds.WithLabelValues(string(messages.StatusUnavailable)).Inc()
			deliver(c.Engine(), replyTo, messages.RoundFinished{RoundID: sr.RoundID, Thread: sr.Thread,
				Status: messages.StatusUnavailable, Error: "no member can serve this user now: " + err.Error(), Retryable: true}, r.log)
		} else {
			deliver(c.Engine(), replyTo, messages.NewRejected(msg, fmt.Errorf("%w: no member can serve this user now: %v", messages.ErrInvalid, err)), r.log)
		}
		return false
	}
	var release func()
	if sr, ok := msg.(messages.StartRound); ok {
		sr.ReplyTo = nil // the owner replies to the relay
		msg = sr
		r.cfg.rounds.enter()
		var hold func()
		if r.cfg.Hold != nil && replyTo != nil && replyTo.Address != c.Engine().Address() {
			hold = r.cfg.Hold(replyTo.Address)
		}
		release = func() {
			if hold != nil {
				hold()
			}
			r.cfg.rounds.leave()
		}
	}
	r.relays++
	to := actor.NewPID(addr, RootKind+"/"+RootID)
	c.SpawnChild(newRelay(r.cfg, to, msg, replyTo, release, r.cfg.Placement.Watch(addr)), relayKind,
		spawnOpts(fmt.Sprintf("h%d-%d", hops+1, r.relays), r.log, nil)...)
	return false
}

// unclaim gives up a user this member claimed but runs no actor for.
func (r *rootActor) unclaim(user string) {
	if r.cfg.Placement != nil && r.users[user] == nil {
		r.cfg.Placement.Release(user)
	}
}

// ownedHere reports whether this member still serves user.
func (r *rootActor) ownedHere(user string) bool {
	if r.cfg.Placement == nil {
		return true
	}
	local, _, err := r.cfg.Placement.Owner(user, MaxRelayHops)
	return err == nil && local
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
// and another member may own these users a moment later.
func (r *rootActor) fence(c *actor.Context) {
	n := 0
	for _, u := range r.users {
		if !u.stopping {
			u.stopping = true
			u.fenced.Store(true) // before the stop: its round logs read it
			c.Engine().Poison(u.pid)
			n++
		}
	}
	r.log.Warn("fenced: stopping every user's actors and app-server", "users", n)
}
