package actors

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"time"
	"unicode/utf8"

	"github.com/meshweaver/supervisor/codexrpc"
	"github.com/meshweaver/supervisor/messages"
	"github.com/meshweaver/supervisor/store"
	"github.com/meshweaver/supervisor/third_party/hollywood/actor"
)

// roundActor runs one round: a driver goroutine opens the thread (resume,
// or start seeded with a transcript) and starts the turn; the actor maps the
// routed notifications to events for the caller and sends exactly one
// verdict. It then records what the journal needs and stops itself.
type roundActor struct {
	cfg      *Config
	req      roundRequest
	id       string
	log      *slog.Logger
	codex    *actor.PID
	registry *actor.PID
	parent   *actor.PID

	engine *actor.Engine
	self   *actor.PID
	seq    uint64
	mapper *mapper
	done   bool

	threadID  string
	turnID    string
	client    *codexrpc.Client
	gen       uint64 // the generation of the process client talks to
	resumed   bool
	fellBack  bool
	lostCtx   bool // a fresh thread without the mesh thread's earlier turns
	interrupt bool // asked before the turn had an id

	// The verdict waits for the registry's answers to the round's writes
	// (see finish); what could not be written is named in it.
	verdict   *messages.RoundFinished
	saving    int
	notSaved  []string
	concluded bool

	// The outbox toward the caller (see emit).
	pending     []messages.RoundEvent
	windowStart time.Time
	sentInWin   int
	flushArmed  bool

	ticker       actor.SendRepeater
	lastProgress time.Time
	stalledAt    time.Time // when a stalled turn was interrupted
	callerGone   bool
	turnBegun    bool // the CLI accepted the turn: the message is in the thread
	overflowed   bool // the outbox passed its limit: the round is being interrupted
	dropped      int  // events dropped after the overflow
	startedAt    time.Time
	firstDelta   bool

	cancel context.CancelFunc
	// ctrl bounds the interrupt and steer calls: each has CallTimeout, and
	// a round that stops gives those in flight controlGrace, then cancels.
	ctrl       context.Context
	ctrlCancel context.CancelFunc
	wg         sync.WaitGroup
}

// controlGrace is how long a stopping round lets an interrupt or steer
// call in flight finish (it is on the wire already; this is the wait for
// its answer) before cancelling it.
const controlGrace = 2 * time.Second

// Messages the round actor sends itself.
type (
	flushOutbox struct{}
	stallTick   struct{}
	savesLate   struct{} // the registry did not answer the round's writes in time
	// recordPending tells the round, before the registry can answer, that
	// the driver asked for its thread's record.
	recordPending struct{}
)

func newRoundActor(cfg *Config, req roundRequest, id string, codex, registry *actor.PID) actor.Producer {
	return func() actor.Receiver {
		return &roundActor{
			cfg: cfg, req: req, id: id, codex: codex, registry: registry,
			log: cfg.Logger.With("user", userTag(req.User), "thread", store.KeyPrefix(req.Thread),
				"round", req.RoundID),
			mapper: newMapper(),
		}
	}
}

// roundPanicked gives the caller its verdict when the round actor itself
// fails: the guard has contained the panic; the round must still end once.
func roundPanicked(c *actor.Context, v any) {
	if r, ok := c.Receiver().(*roundActor); ok && !r.done {
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
		ctx, cancel := context.WithCancel(context.Background())
		r.cancel = cancel
		r.ctrl, r.ctrlCancel = context.WithCancel(context.Background())
		r.lastProgress = time.Now()
		r.startedAt = r.lastProgress
		r.ticker = c.SendRepeat(c.PID(), stallTick{}, tickInterval(r.cfg.StallTimeout))
		if r.req.replyTo != nil && r.req.replyTo.Address != c.Engine().Address() {
			c.Engine().Subscribe(c.PID()) // to learn when the caller is unreachable
		}
		r.cfg.Metrics.RoundsInFlight.Inc()
		r.log.Info("round started")
		r.wg.Add(1)
		go r.drive(ctx)
	case actor.Stopped:
		r.cancel()
		late := time.AfterFunc(min(controlGrace, r.cfg.CallTimeout), r.ctrlCancel)
		r.wg.Wait()
		late.Stop()
		r.ctrlCancel()
		if !r.done {
			r.finish(messages.StatusInterrupted, "the daemon is stopping", "")
		}
		if !r.concluded { // the registry's answers cannot come any more
			r.conclude()
		}
	case flushOutbox:
		r.flushArmed = false
		r.flush(false)
	case stallTick:
		r.checkStall()
	case actor.RemoteUnreachableEvent:
		if !r.done && !r.callerGone && r.req.replyTo != nil && m.ListenAddr == r.req.replyTo.Address {
			r.log.Warn("the caller is unreachable; interrupting the round")
			r.callerGone = true
			r.pending = nil
			r.stop()
		}
	case approvalAnswered:
		if !r.done {
			r.emit(approvalNotice(m))
		}
	case appServerStarting:
		if !r.done {
			r.emit(messages.RoundEvent{Kind: messages.KindStatus, Text: messages.StatusStartingCodex})
		}
	case clientReady:
		r.client, r.gen = m.client, m.gen
	case threadOpened:
		r.threadID, r.resumed, r.fellBack, r.lostCtx = m.threadID, m.resumed, m.fellBack, m.contextLost
	case threadLookup:
		r.notSaved = append(r.notSaved, m.notSaved...) // earlier rounds' writes, failing still
	case recordPending:
		r.saving++ // the verdict waits for the registry's answer
	case saved:
		r.saving--
		if m.err != nil {
			r.notSaved = append(r.notSaved, m.what+": "+m.err.Error())
		}
		if r.done && r.saving <= 0 && !r.concluded {
			r.conclude()
		}
	case savesLate:
		if !r.concluded {
			r.notSaved = append(r.notSaved, fmt.Sprintf("the registry did not answer within %v", r.cfg.CallTimeout))
			r.conclude()
		}
	case turnStarted:
		r.turnID, r.turnBegun = m.turnID, true
		if r.interrupt {
			r.interrupt = false
			r.interruptTurn(nil)
		}
	case roundNote:
		if r.done {
			return
		}
		if isProgress(m.note) {
			r.lastProgress = time.Now()
		}
		if m.note.Method == codexrpc.NoteTurnStarted {
			r.turnBegun = true // the CLI holds the user's message now
		}
		events, end := r.mapper.note(m.note)
		if r.interrupt && r.mapper.turnID != "" {
			r.interrupt = false // asked before the turn had an id; it has one now
			r.interruptTurn(nil)
		}
		if end != nil && r.mapper.turnID != "" && end.TurnID != "" && end.TurnID != r.mapper.turnID {
			end = nil // another turn of the thread (an earlier round's): not this round's end
		}
		if end != nil {
			r.turnBegun = true // a turn that ended had begun
		}
		for _, ev := range events {
			r.emit(ev)
		}
		if end != nil {
			r.turnEnded(end)
		}
	case questionAsked:
		if !r.done {
			r.emit(messages.RoundEvent{Kind: messages.KindQuestion, Text: m.text})
		}
	case codexLost:
		if !r.done && r.callerGone {
			r.finish(messages.StatusInterrupted, "the caller is unreachable", "")
		} else if !r.done {
			r.finish(messages.StatusFailed, m.err.Error(), "")
		}
	case driverFailed:
		if !r.done {
			r.finish(m.status, m.err.Error(), "")
		}
	case messages.InterruptRound:
		r.onInterrupt(c)
	case messages.SteerRound:
		r.onSteer(c, m)
	}
}

// emit queues an event for the caller. Up to OutboxBurst events go out per
// OutboxWindow as they come; past that the caller is taken to be slow and
// events wait for the next window, adjacent text (and reasoning) deltas of
// one item merged into one event: content and order are kept, the message
// rate is bounded. Hollywood's mailboxes are unbounded, so the bound is
// kept here: past OutboxLimit held events the round is interrupted.
func (r *roundActor) emit(ev messages.RoundEvent) {
	if r.callerGone {
		return
	}
	if ev.Kind == messages.KindText && !r.firstDelta {
		r.firstDelta = true
		r.cfg.Metrics.FirstDelta.Observe(time.Since(r.startedAt).Seconds())
	}
	if n := len(r.pending); n > 0 {
		last := &r.pending[n-1]
		if (ev.Kind == messages.KindText || ev.Kind == messages.KindReasoning) &&
			last.Kind == ev.Kind && last.ItemID == ev.ItemID {
			last.Text += ev.Text
			return
		}
	}
	if r.overflowed {
		r.dropped++ // the round is being interrupted; what it still says is not kept
		return
	}
	r.pending = append(r.pending, ev)
	if len(r.pending) > r.cfg.OutboxLimit {
		r.log.Warn("the caller cannot keep up; interrupting the round", "held", len(r.pending))
		r.overflowed = true
		r.stop()
	}
	r.flush(false)
}

// flush sends what the window allows (everything when all is set) and arms
// a timer for the rest.
func (r *roundActor) flush(all bool) {
	now := time.Now()
	if now.Sub(r.windowStart) >= r.cfg.OutboxWindow {
		r.windowStart, r.sentInWin = now, 0
	}
	n := 0
	for n < len(r.pending) && (all || r.sentInWin < r.cfg.OutboxBurst) {
		ev := r.pending[n]
		r.seq++
		ev.RoundID, ev.Seq = r.req.RoundID, r.seq
		deliver(r.engine, r.req.replyTo, ev, r.log)
		r.sentInWin++
		n++
	}
	r.pending = r.pending[n:]
	if len(r.pending) == 0 {
		r.pending = nil
	} else if !r.flushArmed {
		r.flushArmed = true
		engine, self := r.engine, r.self
		time.AfterFunc(r.cfg.OutboxWindow-now.Sub(r.windowStart), func() { engine.Send(self, flushOutbox{}) })
	}
}

// currentTurn is the round's turn id: from turn/start's answer, or from
// the turn/started notification when that came first (nothing orders the
// two).
func (r *roundActor) currentTurn() string {
	if r.turnID != "" {
		return r.turnID
	}
	return r.mapper.turnID
}

// stop interrupts the turn, or asks for that as soon as it has an id.
func (r *roundActor) stop() {
	if r.currentTurn() == "" {
		r.interrupt = true
		return
	}
	r.interruptTurn(nil)
}

// checkStall interrupts a turn that made no progress for StallTimeout, and
// gives up on it when even the interrupt is not answered.
func (r *roundActor) checkStall() {
	if r.done || r.currentTurn() == "" {
		return
	}
	switch {
	case r.stalledAt.IsZero() && time.Since(r.lastProgress) >= r.cfg.StallTimeout:
		r.log.Warn("the turn made no progress; interrupting it", "for", r.cfg.StallTimeout)
		r.stalledAt = time.Now()
		r.interruptTurn(nil)
	case !r.stalledAt.IsZero() && time.Since(r.stalledAt) >= r.cfg.CallTimeout:
		r.finish(messages.StatusFailed, fmt.Sprintf("the turn made no progress for %v and did not end when interrupted", r.cfg.StallTimeout), "")
	}
}

func (r *roundActor) turnEnded(end *turnEnd) {
	switch {
	case r.callerGone:
		r.finish(messages.StatusInterrupted, "the caller is unreachable", "")
		return
	case r.overflowed:
		r.finish(messages.StatusInterrupted, "", end.CodexErrorInfo)
		return
	case !r.stalledAt.IsZero():
		r.finish(messages.StatusFailed, fmt.Sprintf("the turn made no progress for %v and was interrupted", r.cfg.StallTimeout), end.CodexErrorInfo)
		return
	}
	switch end.Status {
	case codexrpc.TurnCompleted:
		r.finish(messages.StatusCompleted, "", "")
	case codexrpc.TurnInterrupted:
		r.finish(messages.StatusInterrupted, orDefault(end.Error, "the turn was interrupted"), end.CodexErrorInfo)
	default:
		r.finish(messages.StatusFailed, orDefault(end.Error, "the turn failed"), end.CodexErrorInfo)
	}
}

// finish decides the verdict, once: it stops the round's work, hands the
// journal what the turn left, and sends the verdict (conclude) once the
// registry has answered the round's writes, so that the verdict can say
// what was not saved.
func (r *roundActor) finish(status messages.VerdictStatus, errText, info string) {
	if r.done {
		return
	}
	r.done = true
	if r.overflowed && status == messages.StatusInterrupted {
		errText = fmt.Sprintf("the caller could not keep up; the round was interrupted (%d events dropped)", r.dropped)
	}
	r.ticker.Stop()
	r.verdict = &messages.RoundFinished{
		RoundID: r.req.RoundID, Thread: r.req.Thread, Status: status,
		Error: errText, CodexErrorInfo: info,
	}
	if r.turnBegun {
		// The CLI keeps the user's message in the thread whatever the end;
		// the journal keeps what the transcript fallback needs.
		turns := []store.Turn{{Role: store.RoleUser, Text: r.req.Text}}
		if a := r.mapper.Answer(); a != "" {
			turns = append(turns, store.Turn{Role: store.RoleAssistant, Text: a})
		}
		r.saving++
		r.engine.Send(r.registry, appendTurns{key: r.req.Thread, turns: turns, round: r.self})
	}
	if r.saving > 0 {
		engine, self := r.engine, r.self
		time.AfterFunc(r.cfg.CallTimeout, func() { engine.Send(self, savesLate{}) })
		return
	}
	r.conclude()
}

// conclude sends the verdict and winds the round down.
func (r *roundActor) conclude() {
	r.concluded = true
	defer r.req.settle(r.cfg)
	// Winding down happens whatever fails below: the thread must be freed
	// for its next round and the subscription dropped.
	defer func() {
		if r.threadID != "" {
			r.engine.Send(r.codex, unsubscribe{threadID: r.threadID, round: r.self})
		}
		r.engine.Send(r.parent, roundDone{key: r.req.Thread, roundID: r.req.RoundID})
		r.engine.Poison(r.self)
	}()
	v := *r.verdict
	v.CodexThreadID, v.Resumed, v.FellBack, v.ContextLost = r.threadID, r.resumed, r.fellBack, r.lostCtx
	v.NotSaved = strings.Join(r.notSaved, "; ")
	took := time.Since(r.startedAt)
	r.cfg.Metrics.RoundsInFlight.Dec()
	r.cfg.Metrics.Rounds.WithLabelValues(string(v.Status)).Inc()
	r.cfg.Metrics.RoundDuration.Observe(took.Seconds())
	if r.req.replyTo != nil && r.req.replyTo.Address != r.engine.Address() {
		r.engine.Unsubscribe(r.self)
	}
	if !r.callerGone { // nothing more goes to a caller that is gone
		r.flush(true) // every event goes before the verdict
		deliver(r.engine, r.req.replyTo, v, r.log)
	}
	r.log.Info("round finished", "status", v.Status, "duration", took, "resumed", r.resumed, "fell_back", r.fellBack,
		"context_lost", r.lostCtx, "not_saved", v.NotSaved)
}

func (r *roundActor) onInterrupt(c *actor.Context) {
	sender := c.Sender()
	if r.done {
		deliver(r.engine, sender, messages.RoundControlled{RoundID: r.req.RoundID, Error: "the round has already finished"}, r.log)
		return
	}
	if r.currentTurn() == "" {
		r.interrupt = true
		deliver(r.engine, sender, messages.RoundControlled{RoundID: r.req.RoundID, OK: true}, r.log)
		return
	}
	r.interruptTurn(sender)
}

// suspect asks the codex actor for a health call when a call to the
// process of generation gen ran out of time: a hung app-server is replaced
// rather than failing every later round by timeout.
func (r *roundActor) suspect(gen uint64, err error) {
	if errors.Is(err, context.DeadlineExceeded) {
		r.engine.Send(r.codex, checkHealth{gen: gen})
	}
}

// interruptTurn calls turn/interrupt on a goroutine; the verdict comes with
// turn/completed (interrupted).
func (r *roundActor) interruptTurn(reply *actor.PID) {
	client, gen, threadID, turnID := r.client, r.gen, r.threadID, r.currentTurn()
	r.wg.Add(1)
	go func() {
		defer r.wg.Done()
		ctx, cancel := context.WithTimeout(r.ctrl, r.cfg.CallTimeout)
		defer cancel()
		err := client.TurnInterrupt(ctx, threadID, turnID)
		r.suspect(gen, err)
		ans := messages.RoundControlled{RoundID: r.req.RoundID, OK: err == nil}
		if err != nil {
			ans.Error = err.Error()
		}
		deliver(r.engine, reply, ans, r.log)
	}()
}

func (r *roundActor) onSteer(c *actor.Context, m messages.SteerRound) {
	sender := c.Sender()
	if r.done || r.currentTurn() == "" {
		deliver(r.engine, sender, messages.RoundControlled{RoundID: r.req.RoundID, Error: "no running turn to steer yet"}, r.log)
		return
	}
	client, gen, p := r.client, r.gen, codexrpc.TurnSteerParams{
		ThreadID: r.threadID, ExpectedTurnID: r.currentTurn(),
		Input: codexrpc.TextInput(m.Text), ClientUserMessageID: m.ClientMessageID,
	}
	r.wg.Add(1)
	go func() {
		defer r.wg.Done()
		ctx, cancel := context.WithTimeout(r.ctrl, r.cfg.CallTimeout)
		defer cancel()
		_, err := client.TurnSteer(ctx, p)
		r.suspect(gen, err)
		ans := messages.RoundControlled{RoundID: r.req.RoundID, OK: err == nil}
		if err != nil {
			ans.Error = err.Error()
		}
		deliver(r.engine, sender, ans, r.log)
	}()
}

// drive opens the thread and starts the turn. It runs on the round's own
// goroutine and reports back by message; every call has a deadline.
func (r *roundActor) drive(ctx context.Context) {
	defer r.wg.Done()
	fail := func(status messages.VerdictStatus, err error) {
		r.engine.Send(r.self, driverFailed{status: status, err: err})
	}
	// A start may wait out a backoff, then exec and initialize (itself
	// bounded by CallTimeout).
	ready, err := ask(ctx, acquireWait(r.cfg), r.engine, r.codex, func(ch chan clientReady) any {
		return acquireClient{lease: true, reply: ch, secrets: []string{r.req.MCPToken}, starting: r.self}
	})
	if err != nil {
		fail(messages.StatusUnavailable, fmt.Errorf("codex app-server did not become ready: %w", err))
		return
	}
	if ready.err != nil {
		fail(messages.StatusUnavailable, unavailable(ready.err))
		return
	}
	client := ready.client
	r.engine.Send(r.self, clientReady{client: client, gen: ready.gen})
	subscribed := false
	defer func() {
		if !subscribed { // give the lease back: the process may idle again
			r.engine.Send(r.codex, releaseClient{gen: ready.gen})
		}
	}()

	known, err := ask(ctx, r.cfg.CallTimeout, r.engine, r.registry, func(ch chan threadLookup) any { return lookupThread{key: r.req.Thread, reply: ch} })
	if err != nil {
		fail(messages.StatusFailed, fmt.Errorf("reading the thread registry: %w", err))
		return
	}

	if len(known.notSaved) > 0 {
		r.engine.Send(r.self, known)
	}

	call := func() (context.Context, context.CancelFunc) { return context.WithTimeout(ctx, r.cfg.CallTimeout) }
	overlay := r.overlay()
	threadID, resumed, fellBack := known.threadID, false, false
	if threadID != "" {
		// A thread still loaded in the app-server ignores a resume's
		// settings (the MCP overlay and its token among them): unload it
		// first, so this round's settings apply. Not loaded is fine.
		cctx, cancel := call()
		err := client.ThreadUnsubscribe(cctx, threadID)
		r.suspect(ready.gen, err)
		if err != nil && !errors.Is(err, codexrpc.ErrClosed) {
			r.log.Debug("unsubscribing the thread before resuming it", "err", err)
		}
		cancel()
		// What the thread says from here on (its MCP servers' startup) is
		// this round's: the unsubscribe's answer came after anything the
		// thread said before, and the codex actor hears of it in that order.
		r.engine.Send(r.codex, reopenThread{threadID: threadID})
		cctx, cancel = call()
		_, err = client.ThreadResume(cctx, codexrpc.ThreadResumeParams{
			ThreadID: threadID, Cwd: r.cfg.Workspace, Sandbox: r.cfg.Sandbox,
			ApprovalPolicy: r.cfg.ApprovalPolicy, DeveloperInstructions: r.req.DeveloperInstructions,
			Config: overlay, ExcludeTurns: true,
		})
		cancel()
		r.suspect(ready.gen, err)
		switch cls := codexrpc.Classify(err); {
		case err == nil:
			resumed = true
		case cls == codexrpc.ClassNoRollout || cls == codexrpc.ClassInvalidSessionID:
			r.log.Info("codex refused the resume; starting afresh with a transcript", "err", err)
			r.engine.Send(r.registry, forgetThread{key: r.req.Thread})
			threadID, fellBack = "", true
		default:
			fail(messages.StatusFailed, fmt.Errorf("resuming the codex thread: %w", err))
			return
		}
	}
	text, lostCtx := r.req.Text, false
	if threadID == "" {
		cctx, cancel := call()
		started, err := client.ThreadStart(cctx, codexrpc.ThreadStartParams{
			Cwd: r.cfg.Workspace, Sandbox: r.cfg.Sandbox, ApprovalPolicy: r.cfg.ApprovalPolicy,
			DeveloperInstructions: r.req.DeveloperInstructions, Config: overlay,
		})
		cancel()
		r.suspect(ready.gen, err)
		if err != nil {
			fail(messages.StatusFailed, fmt.Errorf("starting a codex thread: %w", err))
			return
		}
		threadID = started.Thread.ID
		text = r.seeded(known.turns)
		// The mesh thread had a history (its record or journal was there,
		// damaged, or its resume was refused) and none of it seeds this one.
		lostCtx = (known.damaged || fellBack) && text == r.req.Text
	}
	// The round learns its thread before any of the thread's notifications
	// can reach it: they are routed only after the subscribe, sent next.
	r.engine.Send(r.self, threadOpened{threadID: threadID, resumed: resumed, fellBack: fellBack, contextLost: lostCtx})
	r.engine.Send(r.codex, subscribe{gen: ready.gen, threadID: threadID, round: r.self, autoApprove: r.req.AutoApprove})
	subscribed = true

	cctx, cancel := call()
	turn, err := client.TurnStart(cctx, codexrpc.TurnStartParams{
		ThreadID: threadID, Input: codexrpc.TextInput(text), Summary: "auto",
		Model: r.req.Model, Effort: r.req.Effort, ClientUserMessageID: r.req.ClientMessageID,
	})
	cancel()
	r.suspect(ready.gen, err)
	if err != nil {
		r.engine.Send(r.codex, unsubscribe{threadID: threadID, round: r.self})
		fail(messages.StatusFailed, fmt.Errorf("starting the turn: %w", err))
		return
	}
	r.engine.Send(r.self, turnStarted{turnID: turn.ID})
	if !resumed {
		// Only now does the thread have a turn, and so a rollout to resume.
		// The write goes to the registry directly: it does not depend on
		// this actor's mailbox (a stopping round still has it written).
		r.engine.Send(r.self, recordPending{})
		r.engine.Send(r.registry, recordThread{key: r.req.Thread, threadID: threadID, round: r.self})
		cctx, cancel := call()
		err := client.ThreadNameSet(cctx, threadID, "mw-"+store.KeyPrefix(r.req.Thread))
		r.suspect(ready.gen, err)
		if err != nil && !errors.Is(err, codexrpc.ErrClosed) {
			r.log.Debug("naming the thread", "err", err)
		}
		cancel()
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

// overlay is the thread's config overlay: the mesh's MCP back-connection,
// in the CLI's own snake_case keys.
func (r *roundActor) overlay() map[string]any {
	if r.req.MCPURL == "" {
		// A thread keeps the overlay it was last loaded with: a round
		// without the back-connection must switch it off explicitly.
		return map[string]any{"mcp_servers": map[string]any{"meshweaver": map[string]any{
			"url": "http://127.0.0.1:9/disabled", "enabled": false,
		}}}
	}
	server := map[string]any{"url": r.req.MCPURL}
	if r.req.MCPToken != "" {
		server["http_headers"] = map[string]string{"Authorization": "Bearer " + r.req.MCPToken}
	}
	return map[string]any{"mcp_servers": map[string]any{"meshweaver": server}}
}

// approvalNotice tells the caller that codex asked an approval and how the
// daemon answered it: a KindNotice "approval: <what>: approved" (or
// "declined"), ItemID the tool call's.
func approvalNotice(m approvalAnswered) messages.RoundEvent {
	var p codexrpc.ApprovalParams
	_ = json.Unmarshal(m.req.Params, &p)
	what := "a file change"
	if m.req.Method == codexrpc.ReqCommandApproval {
		what = "command " + truncateRunes(p.Command, 200)
	}
	answer := "declined (the round has no auto_approve)"
	if m.approved {
		answer = "approved (auto_approve)"
	}
	return messages.RoundEvent{Kind: messages.KindNotice, ItemID: p.ItemID, Text: "approval asked for " + what + ": " + answer}
}

func truncateRunes(s string, n int) string {
	if utf8.RuneCountInString(s) <= n {
		return s
	}
	return string([]rune(s)[:n]) + "…"
}
