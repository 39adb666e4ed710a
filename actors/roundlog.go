package actors

import (
	"fmt"
	"log/slog"
	"strconv"
	"time"

	"github.com/meshweaver/supervisor/actors/internal/textcut"
	"github.com/meshweaver/supervisor/actors/policy"
	"github.com/meshweaver/supervisor/codexproto"
	"github.com/meshweaver/supervisor/codexrpc"
	"github.com/meshweaver/supervisor/messages"
	"github.com/meshweaver/supervisor/store"
	"github.com/meshweaver/supervisor/third_party/hollywood/actor"
)

// roundLog stands between a round and its callers, one per admitted round
// (a child of the user actor; the round actor is its child). It numbers
// and keeps the round's events (bounded), forwards them to the callers
// attached, and keeps the verdict for RoundRetention after the end, so
// that a caller that lost its connection can attach again (AttachRound)
// and get what it missed exactly once. A caller that disappears (its
// address unreachable, or a local caller stopped) does not end the round
// at once: after CallerGrace with nobody attached, the round is
// interrupted. It also puts the requests of a round with on_request ask to
// the callers and answers codex with what they say (package policy says
// what a request shows and what a caller's answer becomes).
type roundLog struct {
	logWiring
	req   roundRequest // as admitted: replyTo is the first caller
	id    string       // the actor id, also the round actor's
	round *actor.PID   // the running round; nil before runRound

	keptEvents
	verdict *messages.RoundFinished
	logCallers
	stopping bool // in Stopped: nothing more is sent to the tree

	asks   map[string]*pendingAsk
	askSeq uint64
	tools  map[string]*pendingTool // the dynamic tools' calls sent to their servers (tools.go)
}

// logWiring is what a round's log talks to.
type logWiring struct {
	cfg    *tree
	log    *slog.Logger
	codex  *actor.PID
	reg    *actor.PID
	engine *actor.Engine
	self   *actor.PID
	parent *actor.PID
}

// keptEvents are the events a log keeps: seqs first..first+len-1, at most
// RoundLogEvents of them and RoundLogBytes in all; older ones are dropped
// first. seq is the last one's.
type keptEvents struct {
	events []messages.RoundEvent
	first  uint64
	bytes  int
	seq    uint64
}

// logCallers are the round's callers and the grace a round without one
// runs on.
type logCallers struct {
	callers    []logCaller
	watching   bool // subscribed to the engine's event stream
	graceTimer *time.Timer
	graceGen   uint64
	lostAt     time.Time // when the last caller went; zero while one is attached
	abandoned  bool      // the grace ran out: the round was interrupted for it
}

// logCaller is one caller attached to a round log.
type logCaller struct {
	pid     *actor.PID
	release func() // the hold on its address; nil when none
	alias   string // the round id the caller knows the round by, if not the round's own
}

// Messages of the round log.
type (
	// runRound tells a round log that its thread is free: the round runs.
	runRound struct{}
	// attachLog attaches a caller: the events after after, then the rest.
	attachLog struct {
		after   uint64
		to      *actor.PID
		release func()
		alias   string
	}
	// logFinished tells the user actor that a round has its verdict and
	// how many bytes its log keeps.
	logFinished struct {
		roundID string
		bytes   int
	}
	// logExpired asks the user actor to forget a finished round whose
	// retention is over (the user actor stops the log: no attach can be
	// on its way to it then).
	logExpired struct{ roundID string }
	// dropQueued asks the user actor to take a round that never ran off
	// its thread's queue: its caller is gone past the grace.
	dropQueued struct{ thread, roundID string }
	// graceOver ends a caller's grace period (gen: the loss it was for).
	graceOver struct{ gen uint64 }
	// retentionOver ends a finished round's retention.
	retentionOver struct{}
)

// stoppingError is the error of a round cut short by the daemon's stop
// (the round actor's Stopped says the same).
const stoppingError = "the daemon is stopping"

// fencedError is the verdict of a round cut short by a fence (Fence).
const fencedError = "this cluster member was fenced (it may lose its lease, and another member may own the user now): " +
	"the round was cut short; send it again: the thread resumes on the user's next owner"

// maxCallers bounds the callers attached to one round; one more pushes
// the oldest out.
const maxCallers = 8

func newRoundLog(cfg *tree, req roundRequest, id string, codex, registry *actor.PID) actor.Producer {
	return func() actor.Receiver {
		return &roundLog{
			logWiring: logWiring{cfg: cfg, codex: codex, reg: registry,
				log: cfg.Logger.With("user", userTag(req.User), "thread", store.KeyPrefix(req.Thread),
					"round", req.RoundID, "actor", "roundlog")},
			req: req, id: id, keptEvents: keptEvents{first: 1},
			asks: make(map[string]*pendingAsk),
		}
	}
}

func (l *roundLog) Receive(c *actor.Context) {
	switch m := c.Message().(type) {
	case actor.Started:
		l.engine, l.self, l.parent = c.Engine(), c.PID(), c.Parent()
		l.attach(attachLog{to: l.req.replyTo, release: l.req.release})
	case actor.Stopped:
		l.stopped()
	case runRound:
		l.run(c)
	case messages.RoundEvent:
		if l.verdict == nil {
			l.record(m)
		}
	case messages.RoundFinished:
		l.finish(m)
	case roundDone:
		c.Engine().Send(l.parent, m) // the round's parent is this log
	case attachLog:
		l.attach(m)
	case actor.RemoteUnreachableEvent:
		l.lost(func(p *actor.PID) bool { return p.Address == m.ListenAddr })
	case actor.ActorStoppedEvent:
		if m.PID.Address == l.engine.Address() {
			l.lost(func(p *actor.PID) bool { return p.Equals(m.PID) })
		}
	case messages.DetachRound:
		// A caller says it left (another member's relay, whose caller
		// went): that caller only, whatever else it names.
		if from := c.Sender(); from != nil {
			l.lost(func(p *actor.PID) bool { return p.Equals(from) })
		}
	case graceOver:
		l.graceOver(m)
	case retentionOver:
		c.Engine().Send(l.parent, logExpired{roundID: l.req.RoundID})
	case messages.InterruptRound, messages.SteerRound:
		if l.round == nil || l.verdict != nil {
			deliver(c.Engine(), c.Sender(), messages.RoundControlled{RoundID: l.req.RoundID,
				Error: "no running round on that mesh thread"}, l.log)
			return
		}
		c.Engine().SendWithSender(l.round, m, c.Sender())
	case messages.AnswerRequest:
		deliver(c.Engine(), c.Sender(), l.answer(m), l.log)
	case serverAsk:
		l.ask(m)
	case messages.ToolCallResult:
		l.toolResult(m)
	case toolExpired:
		l.toolExpired(m)
	case askExpired:
		l.expire(m)
	}
}

// run starts the round actor, replying to this log.
func (l *roundLog) run(c *actor.Context) {
	if l.round != nil || l.verdict != nil {
		return
	}
	req := l.req
	req.replyTo, req.release = l.self, nil // the log holds the callers' addresses
	// The codex actor answers in-line from the subscription's auto-approve
	// flag; on_request decides it (an asked request never gets there).
	req.AutoApprove = l.policy() == messages.PolicyAuto
	if l.policy() == messages.PolicyAsk || len(l.req.Tools) > 0 {
		// Before the round can subscribe its thread: the codex actor puts
		// the thread's requests (its children's too) to this log: all of
		// them under ask, else its tools' calls (tools.go).
		c.Engine().Send(l.codex, askVia{round: c.PID().Child("round/" + l.id), log: l.self, all: l.policy() == messages.PolicyAsk})
	}
	l.round = c.SpawnChild(newRoundActor(l.cfg, req, l.codex, l.reg), "round",
		spawnOpts(l.id, l.log, roundPanicked)...)
}

// record numbers an event, keeps it and forwards it to the callers.
func (l *roundLog) record(ev messages.RoundEvent) {
	l.seq++
	ev.RoundID, ev.Seq = l.req.RoundID, l.seq
	l.events = append(l.events, ev)
	l.bytes += eventSize(ev)
	for len(l.events) > 1 && (len(l.events) > l.cfg.RoundLogEvents || l.bytes > l.cfg.RoundLogBytes) {
		l.bytes -= eventSize(l.events[0])
		l.events[0] = messages.RoundEvent{}
		l.events = l.events[1:]
		l.first++
	}
	for _, cl := range l.callers {
		l.send(cl, ev)
	}
}

// send delivers one reply to a caller, under the round id it knows.
func (l *roundLog) send(cl logCaller, msg any) {
	if cl.alias != "" {
		switch m := msg.(type) {
		case messages.RoundEvent:
			m.RoundID = cl.alias
			msg = m
		case messages.RoundFinished:
			m.RoundID = cl.alias
			msg = m
		}
	}
	deliver(l.engine, cl.pid, msg, l.log)
}

// eventSize is what an event costs the log, roughly its encoded size.
func eventSize(ev messages.RoundEvent) int {
	n := 64 + len(ev.Text) + len(ev.ItemID)
	if t := ev.Tool; t != nil {
		n += len(t.Name) + len(t.Args) + len(t.Cwd) + len(t.CallID)
		for _, p := range t.Paths {
			n += len(p.Path) + 16
		}
	}
	if r := ev.Result; r != nil {
		n += len(r.Output) + len(r.Fault) + len(r.Name) + len(r.CallID)
	}
	if q := ev.Request; q != nil {
		n += len(q.Command) + len(q.Cwd) + len(q.Reason) + len(q.Message) + len(q.Schema) + len(q.Outcome)
		for _, x := range q.Questions {
			n += len(x.Question) + len(x.Header) + len(x.ID)
			for _, o := range x.Options {
				n += len(o)
			}
		}
	}
	return n
}

// attach replays what the caller has not seen and keeps it attached until
// the verdict; after the verdict it gets the verdict at once.
func (l *roundLog) attach(m attachLog) {
	if m.to == nil {
		if m.release != nil {
			m.release()
		}
		return
	}
	cl := logCaller{pid: m.to, release: m.release, alias: m.alias}
	if cl.alias == l.req.RoundID {
		cl.alias = ""
	}
	if m.after < l.first-1 { // not m.after+1: the largest seq would wrap to 0
		// What the caller missed is partly gone: say so, under the last
		// dropped seq, so that seqs still only grow.
		l.send(cl, messages.RoundEvent{RoundID: l.req.RoundID, Seq: l.first - 1, Kind: messages.KindError,
			Text: fmt.Sprintf("events %d to %d of this round are no longer kept", m.after+1, l.first-1)})
	}
	for _, ev := range l.events {
		if ev.Seq > m.after {
			l.send(cl, ev)
		}
	}
	if l.verdict != nil {
		l.send(cl, *l.verdict)
		if cl.release != nil {
			cl.release()
		}
		return
	}
	if len(l.callers) >= maxCallers {
		if old := l.callers[0]; old.release != nil {
			old.release()
		}
		l.callers = l.callers[1:]
	}
	l.callers = append(l.callers, cl)
	l.watch()
	if !l.lostAt.IsZero() {
		l.log.Info("a caller attached again", "after", time.Since(l.lostAt).Round(time.Millisecond))
		l.lostAt = time.Time{}
	}
	l.graceGen++ // a grace period running is over
	if l.graceTimer != nil {
		l.graceTimer.Stop()
	}
}

// watch subscribes to the engine's events while the round runs with
// callers: the loss of a remote address, the stop of a local actor.
func (l *roundLog) watch() {
	if !l.watching {
		l.watching = true
		l.engine.Subscribe(l.self)
	}
}

func (l *roundLog) unwatch() {
	if l.watching {
		l.watching = false
		l.engine.Unsubscribe(l.self)
	}
}

// lost detaches the callers gone matches; with none left the grace
// period starts.
func (l *roundLog) lost(gone func(*actor.PID) bool) {
	if l.verdict != nil || len(l.callers) == 0 {
		return
	}
	kept := l.callers[:0]
	for _, cl := range l.callers {
		if gone(cl.pid) {
			if cl.release != nil {
				cl.release()
			}
			continue
		}
		kept = append(kept, cl)
	}
	l.callers = kept
	if len(l.callers) > 0 || !l.lostAt.IsZero() {
		return
	}
	l.lostAt = time.Now()
	l.graceGen++
	gen, engine, self := l.graceGen, l.engine, l.self
	l.log.Warn("the caller is gone; the round goes on while it may attach again", "grace", l.cfg.CallerGrace)
	l.engine.BroadcastEvent(CallerGone{RoundID: l.req.RoundID})
	l.graceTimer = time.AfterFunc(l.cfg.CallerGrace, func() { engine.Send(self, graceOver{gen: gen}) })
}

// graceOver interrupts a round nobody attached to within the grace.
func (l *roundLog) graceOver(m graceOver) {
	if m.gen != l.graceGen || l.verdict != nil || len(l.callers) > 0 {
		return
	}
	l.log.Warn("no caller attached within the grace; interrupting the round", "grace", l.cfg.CallerGrace)
	l.engine.BroadcastEvent(CallerGraceOver{RoundID: l.req.RoundID})
	l.abandoned = true
	if l.round == nil {
		l.engine.Send(l.parent, dropQueued{thread: l.req.Thread, roundID: l.req.RoundID})
		return
	}
	l.engine.Send(l.round, messages.InterruptRound{User: l.req.User, Thread: l.req.Thread, RoundID: l.req.RoundID})
}

// finish keeps the verdict, hands it to the callers, and keeps the log
// for RoundRetention.
func (l *roundLog) finish(v messages.RoundFinished) {
	if l.verdict != nil {
		return
	}
	if v.Status == messages.StatusInterrupted && l.abandoned {
		v.Error = fmt.Sprintf("the caller was gone for %v (the caller grace); the round was interrupted", l.cfg.CallerGrace)
	} else if v.Status == messages.StatusInterrupted && v.Error == stoppingError && l.req.fenced != nil && l.req.fenced.Load() {
		// Cut short by the stop the fence began (not a caller's interrupt
		// that came just before it).
		v.Status, v.Retryable = messages.StatusFailed, true
		v.Error = fencedError
	}
	v.RoundID = l.req.RoundID
	l.closeAsks("canceled: the round ended")
	l.verdict = &v
	if l.round == nil {
		// It never ran: it leaves the drain gate here (a round that ran
		// leaves it itself).
		l.req.trace.finished(&v)
		l.cfg.rounds.leave()
	}
	for _, cl := range l.callers {
		l.send(cl, v)
		if cl.release != nil {
			cl.release()
		}
	}
	l.callers = nil
	l.unwatch()
	l.graceGen++
	if l.graceTimer != nil {
		l.graceTimer.Stop()
	}
	if l.stopping {
		return // its parent and the codex actor are stopping too
	}
	if l.policy() == messages.PolicyAsk && l.round != nil {
		l.engine.Send(l.codex, askViaGone{round: l.round})
	}
	l.engine.Send(l.parent, logFinished{roundID: l.req.RoundID, bytes: l.bytes})
	engine, self := l.engine, l.self
	l.graceTimer = time.AfterFunc(l.cfg.RoundRetention, func() { engine.Send(self, retentionOver{}) })
}

// stopped is the log's end. Its round (a child) has stopped before it;
// when the daemon stops, the round's verdict may still be in this log's
// mailbox, unread: the callers get one here.
func (l *roundLog) stopped() {
	if l.graceTimer != nil {
		l.graceTimer.Stop()
	}
	if l.verdict == nil {
		l.stopping = true
		l.finish(messages.RoundFinished{RoundID: l.req.RoundID, Thread: l.req.Thread,
			Status: messages.StatusInterrupted, Error: stoppingError})
		if l.round == nil { // a round that ran counted its own verdict
			l.cfg.Metrics.Rounds.WithLabelValues(string(l.verdict.Status)).Inc()
		}
	}
	l.unwatch()
}

// policy is the round's effective request policy.
func (l *roundLog) policy() messages.RequestPolicy {
	return policy.Effective(l.req.OnRequest, l.req.AutoApprove)
}

// The ask policy's messages.
type (
	// askVia tells the codex actor to hand the server requests of round's
	// thread (and of its child agents' threads) to log.
	askVia struct {
		round, log *actor.PID
		all        bool // every request (on_request ask); else only the dynamic tools' calls
	}
	// askViaGone ends an askVia.
	askViaGone struct{ round *actor.PID }
	// serverAsk is a server request for a round with on_request ask; the
	// log answers reply once (buffered: it never blocks).
	serverAsk struct {
		req   *codexrpc.Request
		child string // the child agent's thread that asked; "" for the round's own
		reply chan serverAnswer
	}
	// askExpired is an asked request's deadline.
	askExpired struct{ id string }
)

// maxAskWait is how long the codex actor's request handler waits for a
// round log's answer: longer than any ask deadline, so that the log's
// expiry (which tells the caller) always comes first.
const maxAskWait = messages.MaxAskTimeoutMS*time.Millisecond + 10*time.Second

// pendingAsk is a request put to the callers, not answered yet.
type pendingAsk struct {
	req   *codexrpc.Request
	reply chan serverAnswer
	timer *time.Timer
}

// ask puts a server request to the callers, with a deadline.
func (l *roundLog) ask(m serverAsk) {
	if m.req.Method == codexproto.ReqToolCall {
		l.callTool(m)
		return
	}
	shown, ok := policy.Describe(m.req, l.cfg.grantBounds())
	if !ok || l.verdict != nil {
		res, err := policy.Decline(m.req.Method)
		m.reply <- serverAnswer{result: res, err: err}
		return
	}
	l.askSeq++
	id := "q" + strconv.FormatUint(l.askSeq, 10)
	timeout := time.Duration(l.req.AskTimeoutMS) * time.Millisecond
	if timeout <= 0 {
		timeout = messages.DefaultAskTimeoutMS * time.Millisecond
	}
	shown.RequestID, shown.ChildThreadID = id, m.child
	shown.DeadlineUnixMilli = time.Now().Add(timeout).UnixMilli()
	l.record(messages.RoundEvent{Kind: messages.KindRequest, ItemID: shown.ItemID, Request: &shown})
	engine, self := l.engine, l.self
	l.asks[id] = &pendingAsk{req: m.req, reply: m.reply,
		timer: time.AfterFunc(timeout, func() { engine.Send(self, askExpired{id: id}) })}
}

// answer hands a caller's answer to codex, if the request is still open.
func (l *roundLog) answer(m messages.AnswerRequest) messages.RoundControlled {
	ans := messages.RoundControlled{RoundID: m.RoundID}
	a := l.asks[m.RequestID]
	if a == nil {
		ans.Error = fmt.Sprintf("no open request %q in this round", textcut.Runes(m.RequestID, 64))
		return ans
	}
	res, outcome, err := policy.CallerAnswer(a.req, m, l.cfg.grantBounds())
	if err != nil {
		ans.Error = err.Error()
		return ans
	}
	a.reply <- serverAnswer{result: res}
	a.timer.Stop()
	delete(l.asks, m.RequestID)
	l.record(messages.RoundEvent{Kind: messages.KindRequestClosed, Request: &messages.ServerRequest{RequestID: m.RequestID, Outcome: outcome}})
	ans.OK = true
	return ans
}

// expire declines an asked request nobody answered in time.
func (l *roundLog) expire(m askExpired) {
	if a := l.asks[m.id]; a != nil {
		l.log.Info("an asked request expired; declined", "request", m.id, "method", a.req.Method)
		l.closeAsk(m.id, a, "expired: declined")
	}
}

// closeAsks declines every open request (the round ends).
func (l *roundLog) closeAsks(outcome string) {
	l.closeTools()
	for id, a := range l.asks {
		l.closeAsk(id, a, outcome)
	}
}

func (l *roundLog) closeAsk(id string, a *pendingAsk, outcome string) {
	res, err := policy.Decline(a.req.Method)
	a.reply <- serverAnswer{result: res, err: err}
	a.timer.Stop()
	delete(l.asks, id)
	l.record(messages.RoundEvent{Kind: messages.KindRequestClosed, Request: &messages.ServerRequest{RequestID: id, Outcome: outcome}})
}
