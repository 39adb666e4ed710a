package actors

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/meshweaver/supervisor/actors/eventmap"
	"github.com/meshweaver/supervisor/actors/internal/textcut"
	"github.com/meshweaver/supervisor/actors/policy"
	"github.com/meshweaver/supervisor/actors/turninput"
	"github.com/meshweaver/supervisor/codexproto"
	"github.com/meshweaver/supervisor/codexrpc"
	"github.com/meshweaver/supervisor/mcpfront"
	"github.com/meshweaver/supervisor/messages"
	"github.com/meshweaver/supervisor/store"
	"github.com/meshweaver/supervisor/third_party/hollywood/actor"
)

// roundActor runs one round, as a state machine driven by messages and
// without goroutines: it asks the registry for the mesh thread's codex
// thread, has the app-server actor open it (resume, or start seeded with a
// transcript when the resume is refused) and start the turn, maps the
// routed notifications (and the calls' answers, in wire order with them)
// to events for the caller, and sends exactly one verdict. It then records
// what the journal needs and stops itself.
//
// Where it is in that is its phase (roundphase.go, with the table of the
// changes it may make), and nothing else: no boolean here encodes a phase.
type roundActor struct {
	roundWiring
	req    roundRequest
	phase  roundPhase // changed by enter only
	mapper *eventmap.Mapper

	thread  roundThread  // the codex thread, and how it was had
	turn    roundTurn    // the codex turn
	verdict roundVerdict // the verdict, and the writes it waits for
	out     outbox       // toward the caller (see emit)
	clock   roundClock   // the round's times, and its stall ticker
}

// roundThread is the round's codex thread, and how it was had.
type roundThread struct {
	known   threadLookup // the registry's answer (after a refused resume, with the journal's turns)
	id      string
	by      openedBy
	lostCtx bool // a fresh thread without the mesh thread's earlier turns
}

// openedBy is how the round's codex thread was had.
type openedBy uint8

const (
	notOpened      openedBy = iota
	openedFresh             // thread/start: the mesh thread had no codex thread (or its record was damaged)
	openedResumed           // thread/resume
	openedWarm              // loaded already with the round's settings: taken as it is, no resume
	openedFellBack          // the resume was refused: thread/start, seeded with a transcript (set at the refusal)
)

// resumed says the thread is the one the registry named, as it was.
func (b openedBy) resumed() bool { return b == openedResumed || b == openedWarm }

// stamp puts the thread and how it was had into the verdict.
func (t *roundThread) stamp(v *messages.RoundFinished) {
	v.CodexThreadID, v.Resumed, v.FellBack, v.ContextLost = t.id, t.by.resumed(), t.by == openedFellBack, t.lostCtx
}

// roundTurn is the round's codex turn.
type roundTurn struct {
	id string // from turn/start's answer (see currentTurn)
	// begun: the CLI accepted the turn, so the user's message is in the
	// thread whatever the end, and the journal keeps it.
	begun bool
	// owed: an interrupt was asked before the turn had an id; it is sent
	// as soon as it has one. It is a request held, not a phase: the round
	// goes on opening meanwhile.
	owed bool
	end  *eventmap.TurnEnd // what turn/completed said; nil until the turn's end came
	// open counts the turn's items started and not completed (its root
	// thread's); overBudget: the budget was spent while nothing ran, so
	// the turn is interrupted at its next item (a tool, or the next
	// request's answer), and a turn that ends first ends as it did.
	open       int
	overBudget bool
}

// roundVerdict is the round's verdict once decided, and the answers it
// waits for (see finish). What could not be written is named in it.
type roundVerdict struct {
	decided *messages.RoundFinished
	// owed counts the answers the verdict waits for: the registry's to the
	// round's writes, and turn/start's while it is on its way (a fresh
	// thread's record is written once it comes).
	owed     int
	notSaved []string            // the writes that failed (earlier rounds' too)
	limit    string              // a limit of the user's met during the round (limits.go)
	budget   *messages.ErrorInfo // the user's token budget, spent before or during the round (ledger.go)
}

// roundClock is the round's times, and the ticker that checks them (see
// checkStall).
type roundClock struct {
	ticker       actor.SendRepeater
	startedAt    time.Time
	lastProgress time.Time
	stalledAt    time.Time // when a stalled turn was interrupted
	firstDelta   time.Time // when the first text delta came (FirstDelta)
}

// roundWiring is who a round works with: its configuration and logger,
// and the actors it sends to.
type roundWiring struct {
	cfg      *tree
	log      *slog.Logger
	engine   *actor.Engine
	self     *actor.PID
	parent   *actor.PID // the round log
	codex    *actor.PID // the app-server actor
	registry *actor.PID
}

// after sends the round msg once d has passed.
func (w *roundWiring) after(d time.Duration, msg any) {
	engine, self := w.engine, w.self
	time.AfterFunc(d, func() { engine.Send(self, msg) })
}

// Messages the round actor sends itself.
type (
	flushOutbox struct{}
	stallTick   struct{}
	savesLate   struct{} // the registry did not answer the round's writes in time
)

// Tags of the round's calls (appCall), echoed in their answers.
type (
	turnStartCall struct{}
	nameCall      struct{}
	controlCall   struct {
		method string
		reply  *actor.PID // who asked (nil: the round itself)
	}
)

func newRoundActor(cfg *tree, req roundRequest, codex, registry *actor.PID) actor.Producer {
	return func() actor.Receiver {
		return &roundActor{
			roundWiring: roundWiring{cfg: cfg, codex: codex, registry: registry,
				log: cfg.Logger.With("user", userTag(req.User), "thread", store.KeyPrefix(req.Thread),
					"round", req.RoundID)},
			req:    req,
			mapper: roundMapper(req.StartRound),
		}
	}
}

// roundPanicked gives the caller its verdict when the round actor itself
// fails: the guard has contained the panic; the round must still end once.
func roundPanicked(c *actor.Context, v any) {
	if r, ok := c.Receiver().(*roundActor); ok && !r.phase.decided() {
		if r.currentTurn() != "" {
			r.interruptTurn(nil) // the turn must not run on without its round
		}
		r.finish(messages.StatusFailed, fmt.Sprintf("internal error in the daemon: %v", v), "")
	}
}

func (r *roundActor) Receive(c *actor.Context) {
	switch m := c.Message().(type) {
	case actor.Started:
		r.engine, r.self, r.parent = c.Engine(), c.PID(), c.Parent()
		r.enter(phaseLookup)
		r.clock.lastProgress = time.Now()
		r.clock.startedAt = r.clock.lastProgress
		r.clock.ticker = c.SendRepeat(c.PID(), stallTick{}, tickInterval(min(r.cfg.StallTimeout, r.cfg.CallTimeout)))
		if r.req.replyTo != nil && r.req.replyTo.Address != c.Engine().Address() {
			c.Engine().Subscribe(c.PID()) // to learn when the caller is unreachable
		}
		r.cfg.Metrics.RoundsInFlight.Inc()
		r.log.Info("round started")
		c.Send(r.registry, lookupThread{key: r.req.Thread, round: c.PID(), admit: true})
	case actor.Stopped:
		if !r.phase.decided() {
			r.finish(messages.StatusInterrupted, "the daemon is stopping", "")
		}
		if r.phase == phaseSaving { // the registry's answers cannot come any more
			r.conclude()
		}
	case flushOutbox:
		r.out.fired()
		r.flush(false)
	case stallTick:
		r.checkStall()
	case actor.RemoteUnreachableEvent:
		if !r.phase.decided() && r.out.state != outboxClosed && r.req.replyTo != nil && m.ListenAddr == r.req.replyTo.Address {
			r.log.Warn("the caller is unreachable; interrupting the round")
			r.out.close()
			r.stop()
		}
	case approvalAnswered:
		if !r.phase.decided() {
			r.emit(approvalNotice(m))
		}
	case appServerStarting:
		if !r.phase.decided() {
			r.emit(messages.RoundEvent{Kind: messages.KindStatus, Text: messages.StatusStartingCodex})
		}
	case threadLookup:
		r.looked(m)
	case threadOpenResult:
		r.threadOpened(m)
	case appAnswer:
		r.answered(m)
	case saved:
		r.verdict.owed--
		if m.err != nil {
			r.verdict.notSaved = append(r.verdict.notSaved, m.what+": "+m.err.Error())
		}
		if r.phase == phaseSaving && r.verdict.owed <= 0 {
			r.conclude()
		}
	case savesLate:
		if r.phase == phaseSaving {
			r.verdict.notSaved = append(r.verdict.notSaved, fmt.Sprintf("the registry did not answer within %v", r.cfg.CallTimeout))
			r.conclude()
		}
	case roundNote:
		r.onNote(m.note, eventmap.ReadHead(m.note))
	case roundNotes:
		for i, n := range m.notes {
			r.onNote(n, m.heads[i])
		}
	case questionAsked:
		if !r.phase.decided() {
			r.emit(messages.RoundEvent{Kind: messages.KindQuestion, Text: m.text})
		}
	case limitMet:
		if !r.phase.decided() {
			r.verdict.limit = m.resource
		}
	case budgetMet:
		if !r.phase.decided() && r.verdict.budget == nil {
			r.verdict.budget = m.info
			if r.turn.open > 0 {
				r.budgetStop()
			} else {
				r.turn.overBudget = true
			}
		}
	case codexLost:
		if !r.phase.decided() && r.out.state == outboxClosed {
			r.finish(messages.StatusInterrupted, "the caller is unreachable", "")
		} else if !r.phase.decided() {
			r.finish(messages.StatusFailed, m.err.Error(), "")
		}
	case messages.InterruptRound:
		r.onInterrupt(c)
	case messages.SteerRound:
		r.onSteer(c, m)
	}
}

// emit queues an event for the caller (see outbox): past OutboxLimit held
// events the round is interrupted.
func (r *roundActor) emit(ev messages.RoundEvent) {
	r.req.trace.event(&ev)
	if r.out.state == outboxClosed {
		return
	}
	if ev.Kind == messages.KindText && r.clock.firstDelta.IsZero() {
		r.clock.firstDelta = time.Now()
		r.cfg.Metrics.FirstDelta.Observe(r.clock.firstDelta.Sub(r.clock.startedAt).Seconds())
	}
	queued, overflowed := r.out.add(ev, r.cfg.OutboxLimit)
	if !queued {
		return
	}
	if overflowed {
		r.log.Warn("the caller cannot keep up; interrupting the round", "held", len(r.out.pending))
		r.stop()
	}
	r.flush(false)
}

// flush sends what the window allows (everything when all is set) and arms
// a timer for the rest.
func (r *roundActor) flush(all bool) {
	evs, arm, wait := r.out.take(time.Now(), all, r.cfg.OutboxWindow, r.cfg.OutboxBurst)
	for _, ev := range evs {
		ev.RoundID = r.req.RoundID
		deliver(r.engine, r.req.replyTo, ev, r.log)
	}
	if arm {
		r.after(wait, flushOutbox{})
	}
}

// onNote takes one notification of the round's thread (or of its child
// agents' threads), in wire order, with its header (eventmap.ReadHead).
func (r *roundActor) onNote(n *codexrpc.Notification, hd eventmap.Header) {
	if r.phase.decided() {
		return
	}
	if eventmap.IsProgress(n) {
		r.clock.lastProgress = time.Now()
	}
	switch n.Method {
	case codexproto.NoteTurnStarted:
		r.turn.begun = true // the CLI holds the user's message now
	case codexproto.NoteItemStarted:
		if hd.Err == nil && hd.Delta.ThreadID == r.thread.id {
			r.turn.open++
		}
		if r.turn.overBudget {
			r.turn.overBudget = false
			r.budgetStop()
		}
	case codexproto.NoteItemCompleted:
		if hd.Err == nil && hd.Delta.ThreadID == r.thread.id && r.turn.open > 0 {
			r.turn.open--
		}
	}
	events, end := r.mapper.Headed(n, hd)
	if r.phase == phaseTurnStart && r.mapper.TurnID() != "" {
		r.enter(phaseRunning) // turn/started came before turn/start's answer
	}
	if r.turn.owed && r.mapper.TurnID() != "" {
		r.turn.owed = false // asked before the turn had an id; it has one now
		r.interruptTurn(nil)
	}
	if cur := r.currentTurn(); end != nil && cur != "" && end.TurnID != "" && end.TurnID != cur {
		end = nil // another turn of the thread (an earlier round's): not this round's end
	}
	if end != nil {
		r.turn.begun = true // a turn that ended had begun
	}
	for _, ev := range events {
		r.emit(ev)
	}
	if len(events) == 0 && end == nil && r.req.RawEvents {
		ev := rawEvent(n, hd)
		if tid := hd.Delta.ThreadID; hd.Err == nil && tid != "" && tid != r.thread.id {
			ev.AgentThread = tid // a child agent's
		}
		r.emit(ev)
	}
	if end != nil {
		r.turnEnded(end)
	}
}

// rawEvent is a notification no other event carries, for a caller that
// asked for raw events: its method and params as codex sent them.
func rawEvent(n *codexrpc.Notification, hd eventmap.Header) messages.RoundEvent {
	raw := &messages.RawNote{Method: n.Method, Params: string(n.Params)}
	if len(raw.Params) > messages.MaxRawParams {
		raw.Params, raw.Cut = raw.Params[:messages.MaxRawParams], true
	}
	ev := messages.RoundEvent{Kind: messages.KindRaw, Raw: raw}
	if hd.Err == nil {
		ev.ItemID = hd.Delta.ItemID
	}
	return ev
}

// budgetStop interrupts the turn: the user's token budget is spent.
func (r *roundActor) budgetStop() {
	r.log.Info("interrupting the turn: the user's token budget is spent", "spent", r.verdict.budget.Spent, "budget", r.verdict.budget.Budget)
	r.stop()
}

// currentTurn is the round's turn id: from turn/start's answer, or from
// the turn/started notification when the CLI wrote that first (both reach
// the round in wire order, through the app-server actor).
func (r *roundActor) currentTurn() string {
	if r.turn.id != "" {
		return r.turn.id
	}
	return r.mapper.TurnID()
}

// stop interrupts the turn, or asks for that as soon as it has an id.
func (r *roundActor) stop() {
	if r.currentTurn() == "" {
		r.turn.owed = true
		return
	}
	r.interruptTurn(nil)
}

// checkStall interrupts a turn that made no progress for StallTimeout, and
// gives up on it when even the interrupt is not answered.
func (r *roundActor) checkStall() {
	if r.phase.decided() {
		return
	}
	if r.currentTurn() == "" {
		// Every step of the opening has its deadline in the app-server
		// actor; this one bounds them all, whatever goes wrong. (turn/start
		// has the app-server actor's CallTimeout.)
		if d := openWait(r.cfg); r.phase != phaseTurnStart && time.Since(r.clock.startedAt) >= d {
			r.finish(messages.StatusFailed, fmt.Sprintf("the codex thread was not opened within %v", d), "")
		}
		return
	}
	switch {
	case r.clock.stalledAt.IsZero() && time.Since(r.clock.lastProgress) >= r.cfg.StallTimeout:
		r.log.Warn("the turn made no progress; interrupting it", "for", r.cfg.StallTimeout)
		r.clock.stalledAt = time.Now()
		r.interruptTurn(nil)
	case !r.clock.stalledAt.IsZero() && time.Since(r.clock.stalledAt) >= r.cfg.CallTimeout:
		r.finish(messages.StatusFailed, fmt.Sprintf("the turn made no progress for %v and did not end when interrupted", r.cfg.StallTimeout), "")
	}
}

func (r *roundActor) turnEnded(end *eventmap.TurnEnd) {
	r.turn.end = end
	switch {
	case r.out.state == outboxClosed:
		r.finish(messages.StatusInterrupted, "the caller is unreachable", "")
		return
	case r.out.state == outboxOverflowed:
		r.finish(messages.StatusInterrupted, "", end.CodexErrorInfo)
		return
	case !r.clock.stalledAt.IsZero():
		r.finish(messages.StatusFailed, fmt.Sprintf("the turn made no progress for %v and was interrupted", r.cfg.StallTimeout), end.CodexErrorInfo)
		return
	}
	switch end.Status {
	case codexproto.TurnCompleted:
		r.finish(messages.StatusCompleted, "", "")
	case codexproto.TurnInterrupted:
		r.finish(messages.StatusInterrupted, cmp.Or(end.Error, "the turn was interrupted"), end.CodexErrorInfo)
	default:
		r.finish(messages.StatusFailed, cmp.Or(end.Error, "the turn failed"), end.CodexErrorInfo)
	}
}

// finish decides the verdict, once: it stops the round's work, hands the
// journal what the turn left, and sends the verdict (conclude) once the
// registry has answered the round's writes, so that the verdict can say
// what was not saved.
func (r *roundActor) finish(status messages.VerdictStatus, errText, info string) {
	if r.phase.decided() || !r.enter(phaseSaving) {
		return
	}
	if r.out.state == outboxOverflowed && status == messages.StatusInterrupted {
		errText = fmt.Sprintf("the caller could not keep up; the round was interrupted (%d events dropped)", r.out.dropped)
	}
	r.clock.ticker.Stop()
	v := &messages.RoundFinished{
		RoundID: r.req.RoundID, Thread: r.req.Thread, Status: status,
		Error: errText, CodexErrorInfo: info,
	}
	r.verdict.decided = v
	r.mapper.Decorate(v, r.turn.end)
	if r.verdict.limit != "" {
		// The limit is why the round failed, or what its turn worked
		// around: either way the caller is told, typed.
		info, text := limitError(r.verdict.limit)
		v.ErrorInfo = info
		if v.Error != "" {
			text += ": " + v.Error
		}
		v.Error = text
	}
	if b := r.verdict.budget; b != nil && status != messages.StatusCompleted {
		v.ErrorInfo = b
		if status != messages.StatusRejected {
			text := budgetText(b)
			if v.Error != "" {
				text += ": " + v.Error
			}
			v.Error = text
		}
	}
	if r.turn.begun {
		// The CLI keeps the user's message in the thread whatever the end;
		// the journal keeps what the transcript fallback needs.
		turns := []store.Turn{{Role: store.RoleUser, Text: r.req.Text}}
		if a := r.mapper.Answer(); a != "" {
			turns = append(turns, store.Turn{Role: store.RoleAssistant, Text: a})
		}
		r.verdict.owed++
		r.engine.Send(r.registry, appendTurns{key: r.req.Thread, turns: turns, round: r.self})
	}
	if r.verdict.owed > 0 {
		// The registry's answers, and turn/start's (a turn that ended
		// before its start was answered still records a fresh thread).
		r.after(r.cfg.CallTimeout, savesLate{})
		return
	}
	r.conclude()
}

// conclude sends the verdict and winds the round down.
func (r *roundActor) conclude() {
	if !r.enter(phaseConcluded) {
		return
	}
	defer r.req.settle(r.cfg)
	// Winding down frees the thread for its next round and drops the
	// subscription. It comes before the verdict: a caller's next command
	// on the thread, sent when the verdict came, must find the thread
	// free (sent after it, a compaction asked at once was refused now and
	// then: "a round runs on the thread"). The round's parent, its log,
	// forwards roundDone to the user actor before it forwards the verdict.
	// It happens whatever fails below too.
	wound := false
	windDown := func() {
		if wound {
			return
		}
		wound = true
		if r.thread.id != "" {
			// A turn that ended leaves the thread loaded for the next round.
			r.engine.Send(r.codex, unsubscribe{threadID: r.thread.id, round: r.self, keep: r.turn.end != nil})
		}
		r.engine.Send(r.parent, roundDone{key: r.req.Thread, roundID: r.req.RoundID})
	}
	defer func() {
		windDown()
		r.engine.Poison(r.self)
	}()
	v := *r.verdict.decided
	r.thread.stamp(&v)
	v.NotSaved = strings.Join(r.verdict.notSaved, "; ")
	r.req.trace.finished(&v)
	took := time.Since(r.clock.startedAt)
	r.cfg.Metrics.RoundsInFlight.Dec()
	r.cfg.Metrics.Rounds.WithLabelValues(string(v.Status)).Inc()
	r.cfg.Metrics.RoundDuration.Observe(took.Seconds())
	if r.req.replyTo != nil && r.req.replyTo.Address != r.engine.Address() {
		r.engine.Unsubscribe(r.self)
	}
	windDown()
	if r.out.state != outboxClosed { // nothing more goes to a caller that is gone
		r.flush(true) // every event goes before the verdict
		deliver(r.engine, r.req.replyTo, v, r.log)
	}
	attrs := []any{"status", v.Status, "duration", took, "resumed", v.Resumed, "warm", r.thread.by == openedWarm,
		"fell_back", v.FellBack, "context_lost", v.ContextLost, "not_saved", v.NotSaved}
	level := slog.LevelInfo
	if v.Status == messages.StatusFailed || v.Status == messages.StatusUnavailable {
		// A round that failed is the operator's to see; one interrupted
		// (by its caller, the drain, a stall) or refused is not a failure.
		class := messages.ErrorOther
		if v.ErrorInfo != nil && v.ErrorInfo.Class != "" {
			class = v.ErrorInfo.Class
		}
		level = slog.LevelWarn
		attrs = append(attrs, "class", class, "err", textcut.Bytes(v.Error, 1024))
	}
	r.log.Log(context.Background(), level, "round finished", attrs...)
	r.engine.BroadcastEvent(RoundEnded{User: r.req.User, RoundID: r.req.RoundID, Status: v.Status})
}

func (r *roundActor) onInterrupt(c *actor.Context) {
	sender := c.Sender()
	if r.phase.decided() {
		deliver(r.engine, sender, messages.RoundControlled{RoundID: r.req.RoundID, Error: "the round has already finished"}, r.log)
		return
	}
	if r.currentTurn() == "" {
		r.turn.owed = true
		deliver(r.engine, sender, messages.RoundControlled{RoundID: r.req.RoundID, OK: true}, r.log)
		return
	}
	r.interruptTurn(sender)
}

// interruptTurn asks the app-server actor for turn/interrupt; the verdict
// comes with turn/completed (interrupted). Reply, if set, gets the answer.
func (r *roundActor) interruptTurn(reply *actor.PID) {
	r.engine.Send(r.codex, appCall{method: codexproto.MethodTurnInterrupt, thread: r.thread.id, to: r.self,
		params: codexproto.TurnInterruptParams{ThreadID: r.thread.id, TurnID: r.currentTurn()},
		tag:    controlCall{method: "interrupt", reply: reply}})
	if r.phase != phaseInterrupting {
		r.enter(phaseInterrupting)
	}
}

func (r *roundActor) onSteer(c *actor.Context, m messages.SteerRound) {
	sender := c.Sender()
	if r.phase.decided() || r.currentTurn() == "" {
		deliver(r.engine, sender, messages.RoundControlled{RoundID: r.req.RoundID, Error: "no running turn to steer yet"}, r.log)
		return
	}
	r.engine.Send(r.codex, appCall{method: codexproto.MethodTurnSteer, thread: r.thread.id, to: r.self,
		params: codexproto.TurnSteerParams{ThreadID: r.thread.id, ExpectedTurnID: r.currentTurn(),
			Input: codexproto.TextInput(m.Text), ClientUserMessageID: m.ClientMessageID},
		tag: controlCall{method: "steer", reply: sender}})
}

// looked opens the thread the registry named (or a fresh one). After a
// refused resume it is the second lookup, for the journal: the thread is
// fresh whatever the registry still names.
func (r *roundActor) looked(known threadLookup) {
	switch r.phase {
	case phaseLookup:
		if known.budget != nil { // before any model request
			r.verdict.budget = known.budget
			r.finish(messages.StatusRejected, budgetText(known.budget), "")
			return
		}
		if known.lowDisk != "" {
			r.verdict.limit = diskFloor
			r.finish(messages.StatusRejected, known.lowDisk, "")
			return
		}
		r.thread.known = known
		r.verdict.notSaved = append(r.verdict.notSaved, known.notSaved...) // earlier rounds' writes, failing still
		if known.threadID != "" {
			r.enter(phaseResume)
		} else {
			r.enter(phaseFresh)
		}
		r.open(known.threadID)
	case phaseFallBack:
		r.thread.known.turns, r.thread.known.damaged = known.turns, r.thread.known.damaged || known.damaged
		r.enter(phaseFresh)
		r.open("")
	}
}

// open asks the app-server actor for the thread (resumed) or, with no
// thread id, a fresh one.
func (r *roundActor) open(threadID string) {
	r.engine.Send(r.codex, openThread{round: r.self, threadID: threadID, settings: r.settings(),
		autoApprove: r.req.AutoApprove, secrets: []string{r.req.MCPToken}, trace: r.req.trace.threadContext()})
}

// settings are the thread settings of this round.
func (r *roundActor) settings() threadSettings {
	s := roundSettings(r.cfg, mcpfront.Key{User: r.req.User, Thread: r.req.Thread}, r.req.DeveloperInstructions,
		r.req.MCPURL, r.req.MCPToken)
	s.DynamicTools = toolSpecs(r.req.Tools)
	return s
}

// threadOpened starts the turn in the opened thread, or starts afresh when
// the resume was refused.
func (r *roundActor) threadOpened(m threadOpenResult) {
	if r.phase != phaseResume && r.phase != phaseFresh {
		return
	}
	resuming := r.phase == phaseResume
	if m.err != nil {
		switch cls := codexrpc.Classify(m.err); {
		case m.unavailable:
			r.finish(messages.StatusUnavailable, unavailable(m.err).Error(), "")
		case resuming && (cls == codexrpc.ClassNoRollout || cls == codexrpc.ClassInvalidSessionID):
			r.log.Info("codex refused the resume; starting afresh with a transcript", "err", m.err)
			r.engine.Send(r.registry, forgetThread{key: r.req.Thread})
			r.thread.by = openedFellBack
			r.enter(phaseFallBack)
			// The registry did not read the journal for a thread it could
			// name (see registryActor.lookup): looked opens afresh with it.
			r.engine.Send(r.registry, lookupThread{key: r.req.Thread, round: r.self})
		case resuming:
			r.finish(messages.StatusFailed, fmt.Errorf("resuming the codex thread: %w", m.err).Error(), "")
		default:
			r.finish(messages.StatusFailed, fmt.Errorf("starting a codex thread: %w", m.err).Error(), "")
		}
		return
	}
	r.thread.id = m.threadID
	switch {
	case m.warm:
		r.thread.by = openedWarm
	case m.resumed:
		r.thread.by = openedResumed
	case r.thread.by != openedFellBack:
		r.thread.by = openedFresh
	}
	text := r.req.Text
	if !m.resumed {
		text = r.seeded(r.thread.known.turns)
		// The mesh thread had a history (its record or journal was there,
		// damaged, or its resume was refused) and none of it seeds this one.
		r.thread.lostCtx = (r.thread.known.damaged || r.thread.by == openedFellBack) && text == r.req.Text
	}
	r.mapper.SetThread(m.threadID, m.model)
	params, notes, err := r.turnStart(text, m.version)
	if err != nil {
		status := messages.StatusFailed
		if errors.Is(err, turninput.ErrInput) {
			status = messages.StatusRejected
		}
		r.finish(status, err.Error(), "")
		return
	}
	for _, n := range notes {
		r.emit(messages.RoundEvent{Kind: messages.KindNotice, Text: n})
	}
	r.verdict.owed++ // turn/start's answer: the verdict waits for it
	r.enter(phaseTurnStart)
	r.engine.Send(r.codex, appCall{method: codexproto.MethodTurnStart, thread: r.thread.id, to: r.self, tag: turnStartCall{},
		params: traced(params, r.req.trace.turnContext())})
}

// answered handles the answer to one of the round's calls. They come in
// wire order with the thread's notifications.
func (r *roundActor) answered(m appAnswer) {
	switch tag := m.tag.(type) {
	case turnStartCall:
		r.turnStartAnswered(m)
	case nameCall:
		if m.err != nil && !errors.Is(m.err, codexrpc.ErrClosed) {
			r.log.Debug("naming the thread", "err", m.err)
		}
	case controlCall:
		ans := messages.RoundControlled{RoundID: r.req.RoundID, OK: m.err == nil}
		if m.err != nil {
			ans.Error = m.err.Error()
		}
		deliver(r.engine, tag.reply, ans, r.log)
	}
}

// turnStartAnswered learns the turn's id; the first turn of a fresh thread
// records it (only now does it have a rollout to resume) and names it.
func (r *roundActor) turnStartAnswered(m appAnswer) {
	r.verdict.owed--
	defer func() {
		if r.phase == phaseSaving && r.verdict.owed <= 0 {
			r.conclude()
		}
	}()
	var turn codexproto.TurnResult
	err := m.err
	if err == nil {
		err = decodeResult(codexproto.MethodTurnStart, m.result, &turn)
	}
	if err != nil {
		if !r.phase.decided() {
			r.finish(messages.StatusFailed, fmt.Errorf("starting the turn: %w", err).Error(), "")
		}
		return
	}
	r.turn.id, r.turn.begun = turn.Turn.ID, true
	if r.phase == phaseTurnStart {
		r.enter(phaseRunning)
	}
	if r.turn.owed && !r.phase.decided() {
		r.turn.owed = false
		r.interruptTurn(nil)
	}
	if !r.thread.by.resumed() {
		r.verdict.owed++ // the verdict waits for the registry's answer
		r.engine.Send(r.registry, recordThread{key: r.req.Thread, threadID: r.thread.id, round: r.self})
		r.engine.Send(r.codex, appCall{method: codexproto.MethodThreadNameSet, thread: r.thread.id, to: r.self, tag: nameCall{},
			params: codexproto.ThreadNameSetParams{ThreadID: r.thread.id, Name: "mw-" + store.KeyPrefix(r.req.Thread)}})
	}
}

// seeded is the first message of a fresh thread: the new text, preceded by
// a bounded transcript of the mesh thread's earlier turns when there are any
// (from the round itself, else from the daemon's journal).
func (r *roundActor) seeded(journal []store.Turn) string {
	var turns []store.Turn
	if len(r.req.History) > 0 {
		for _, t := range r.req.History {
			turns = append(turns, store.Turn{Role: t.Role, Text: t.Text})
		}
	} else {
		turns = journal
	}
	// The CLI refuses an input over MaxInputChars: the transcript gets
	// what the new text leaves of it.
	budget := min(r.cfg.TranscriptBytes, MaxInputChars-utf8.RuneCountInString(r.req.Text)-2)
	if len(turns) == 0 || budget < 256 {
		return r.req.Text
	}
	t := store.Transcript(turns, r.cfg.TranscriptTurns, budget)
	if t == "" {
		return r.req.Text
	}
	return t + "\n\n" + r.req.Text
}

// MaxInputChars is the longest text input codex 0.169.0 accepts in one
// turn/start (-32602 past it).
const MaxInputChars = 1 << 20

// overlay is a thread's config overlay: the mesh's MCP back-connection,
// in the CLI's own snake_case keys. With the daemon's MCP front mcpURL is
// the mesh thread's front URL and mcpToken is empty (the front adds it;
// see threadSettings.bind).
func overlay(mcpURL, mcpToken string) map[string]any {
	if mcpURL == "" {
		// A thread keeps the overlay it was last loaded with: a round
		// without the back-connection must switch it off explicitly.
		return map[string]any{"mcp_servers": map[string]any{"meshweaver": map[string]any{
			"url": "http://127.0.0.1:9/disabled", "enabled": false,
		}}}
	}
	server := map[string]any{"url": mcpURL}
	if mcpToken != "" {
		server["http_headers"] = map[string]string{"Authorization": "Bearer " + mcpToken}
	}
	return map[string]any{"mcp_servers": map[string]any{"meshweaver": server}}
}

// approvalNotice tells the caller that codex asked an approval and how the
// daemon answered it: a KindNotice "approval: <what>: approved" (or
// "declined"), ItemID the tool call's.
func approvalNotice(m approvalAnswered) messages.RoundEvent {
	var p codexproto.ApprovalParams
	_ = json.Unmarshal(m.req.Params, &p)
	what := "a file change"
	if m.req.Method == codexproto.ReqCommandApproval {
		what = "command " + textcut.Runes(p.Command, 200)
	}
	answer := "declined (the round has no auto_approve)"
	if m.approved {
		answer = "approved (auto_approve)"
	}
	return messages.RoundEvent{Kind: messages.KindNotice, ItemID: p.ItemID, Text: "approval asked for " + what + ": " + answer}
}

// roundMapper is the mapper of a round that asked for req.
func roundMapper(req messages.StartRound) *eventmap.Mapper {
	m := eventmap.NewMapper()
	m.Configure(req)
	return m
}

// turnStart is the round's turn/start: text (the request's, seeded for a
// fresh thread) with its inputs, within the operator's bounds, for a CLI
// of version v; notes tell the caller what was clamped.
func (r *roundActor) turnStart(text string, v codexproto.Version) (codexproto.TurnStartSurfaceParams, []string, error) {
	req := r.req.StartRound
	req.Text = text
	p, notes, err := turninput.Params(codexproto.TurnStartParams{ThreadID: r.thread.id, Summary: "auto",
		Model: r.req.Model, Effort: r.req.Effort, ClientUserMessageID: r.req.ClientMessageID},
		req, r.cfg.Workspace, v, r.bounds())
	if err == nil {
		if n := r.silentApprovals(p.ApprovalPolicy); n != "" {
			notes = append(notes, n)
		}
	}
	return p, notes, err
}

// silentApprovals is the notice for a round whose way of answering
// approvals (auto_approve, or on_request auto or ask) can never be used:
// under approval policy never codex asks for none, and runs only what its
// sandbox allows. "" when they agree.
func (r *roundActor) silentApprovals(approval string) string {
	if approval != codexproto.ApprovalNever {
		return ""
	}
	how := ""
	switch policy.Effective(r.req.OnRequest, r.req.AutoApprove) {
	case messages.PolicyAuto:
		how = "auto_approve approves nothing"
	case messages.PolicyAsk:
		how = "no approval will be put to you (questions and MCP elicitations still are)"
	default:
		return ""
	}
	fix := "this daemon allows no other (--allow-approval-policies)"
	for _, a := range []string{codexproto.ApprovalOnRequest, codexproto.ApprovalUntrusted} {
		if slices.Contains(r.cfg.ApprovalPolicies, a) || r.cfg.ApprovalPolicy == a {
			fix = "ask for approval policy " + a + " to be asked"
			break
		}
	}
	return fmt.Sprintf("approval policy never: codex asks for no approval, so %s; commands run only as far as the sandbox allows. %s", how, fix)
}

// bounds are the operator's bounds on a round's sandbox and approval
// policy.
func (r *roundActor) bounds() turninput.Bounds {
	return turninput.Bounds{Sandbox: r.cfg.Sandbox, Approval: r.cfg.ApprovalPolicy,
		MaxSandbox: r.cfg.MaxSandbox, Approvals: r.cfg.ApprovalPolicies}
}
