package actors

// A round's OpenTelemetry spans: one tree per round, under the caller's
// span when its StartRound carried a W3C trace context.
//
//	round                      admission to verdict (server kind)
//	├── admission              the root's admission, the user's queue, the registry's budget check
//	├── thread.resume | thread.start   opening the codex thread (a refused resume, then thread.start)
//	├── turn                   turn/start to the verdict's decision
//	│   └── execute_tool NAME  one per tool call: item/started to item/completed
//	└── verdict                the verdict decided to sent (the journal's writes): status, error class
//
// The spans' contexts go on to codex as the trace field of thread/start,
// thread/resume (the thread span's) and turn/start (the turn's), so that
// codex's own spans, when it exports them, hang under the daemon's.
//
// A roundTrace has one owner at a time, the holder of its roundRequest:
// the root builds it at admission; the user actor, the round log and the
// round actor take it in turn with the request (a message or a spawn
// between each), and only the last one touches it. Every method is a
// no-op on nil, which is what a round gets when the daemon makes no spans
// and the caller sent no trace context: tracing off costs a round one nil
// check per hook.
//
// Attributes name the round by its id, its user by the hashed tag the
// logs use (userTag) and its mesh thread by its key's hash prefix
// (store.KeyPrefix); no text, command, argument or error text of the
// round goes into a span.

import (
	"context"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"

	"github.com/meshweaver/supervisor/codexrpc"
	"github.com/meshweaver/supervisor/messages"
	"github.com/meshweaver/supervisor/store"
)

// tracerName is the instrumentation scope of the round's spans.
const tracerName = "github.com/meshweaver/supervisor/actors"

// roundTrace is a round's span tree while it is being made.
type roundTrace struct {
	tracer trace.Tracer   // nil: no spans, only the caller's context passed on
	caller codexrpc.Trace // the caller's context, when it sent a well-formed one

	ctx       context.Context // the round span's
	round     trace.Span
	admission trace.Span
	thread    trace.Span
	turn      trace.Span
	turnCtx   context.Context
	verdict   trace.Span
	tools     map[string]trace.Span // open tool calls, by call id
	ended     bool
}

// newRoundTrace starts the spans of round m at its admission: the round's
// and the admission's. It is nil when tp is nil and m carries no
// well-formed trace context.
func newRoundTrace(tp trace.TracerProvider, m *messages.StartRound) *roundTrace {
	if tp == nil && m.Traceparent == "" {
		return nil
	}
	parent, state, ok := m.TraceContext()
	if tp == nil && !ok {
		return nil
	}
	t := &roundTrace{}
	if ok {
		t.caller = codexrpc.Trace{Traceparent: parent, Tracestate: state}
	}
	if tp == nil {
		return t
	}
	t.tracer = tp.Tracer(tracerName)
	ctx := context.Background()
	if ok {
		ctx = propagation.TraceContext{}.Extract(ctx, propagation.MapCarrier{"traceparent": parent, "tracestate": state})
	}
	t.ctx, t.round = t.tracer.Start(ctx, "round", trace.WithSpanKind(trace.SpanKindServer), trace.WithAttributes(
		attribute.String("meshweaver.round_id", m.RoundID),
		attribute.String("meshweaver.user_tag", userTag(m.User)),
		attribute.String("meshweaver.thread_tag", store.KeyPrefix(m.Thread)),
	))
	_, t.admission = t.tracer.Start(t.ctx, "admission")
	return t
}

// spans says whether t makes spans.
func (t *roundTrace) spans() bool { return t != nil && t.tracer != nil && !t.ended }

// entered follows the round into phase to; by is how its thread was had.
// (Small enough to inline: off, it costs a round a nil check.)
func (t *roundTrace) entered(to roundPhase, by openedBy) {
	if t.spans() {
		t.enteredPhase(to, by)
	}
}

func (t *roundTrace) enteredPhase(to roundPhase, by openedBy) {
	switch to {
	case phaseLookup:
		t.admission.AddEvent("round started")
	case phaseResume:
		endSpan(&t.admission)
		_, t.thread = t.tracer.Start(t.ctx, "thread.resume")
	case phaseFallBack:
		t.thread.SetStatus(codes.Error, "codex refused the resume")
		endSpan(&t.thread)
	case phaseFresh:
		endSpan(&t.admission)
		_, t.thread = t.tracer.Start(t.ctx, "thread.start")
	case phaseTurnStart:
		if t.thread != nil {
			t.thread.SetAttributes(attribute.String("meshweaver.thread.opened", by.traceName()))
		}
		endSpan(&t.thread)
		t.turnCtx, t.turn = t.tracer.Start(t.ctx, "turn")
	case phaseInterrupting:
		if t.turn != nil {
			t.turn.AddEvent("interrupt asked")
		}
	case phaseSaving:
		t.endWork()
		_, t.verdict = t.tracer.Start(t.ctx, "verdict")
	}
}

// endWork ends the spans of the round's work still open: the decision
// was made wherever the round was.
func (t *roundTrace) endWork() {
	for id, s := range t.tools {
		s.SetAttributes(attribute.Bool("meshweaver.tool.unfinished", true))
		s.End()
		delete(t.tools, id)
	}
	endSpan(&t.admission)
	endSpan(&t.thread)
	endSpan(&t.turn)
}

// event follows the round's events: a tool call starts a span under the
// turn, its result ends it.
func (t *roundTrace) event(ev *messages.RoundEvent) {
	if t != nil && t.turn != nil { // an open turn span: spans are made, and not ended
		t.toolEvent(ev)
	}
}

func (t *roundTrace) toolEvent(ev *messages.RoundEvent) {
	switch {
	case ev.Kind == messages.KindToolCall && ev.Tool != nil:
		id := ev.Tool.CallID
		if _, open := t.tools[id]; open || id == "" {
			return
		}
		_, s := t.tracer.Start(t.turnCtx, "execute_tool "+ev.Tool.Name, trace.WithAttributes(
			attribute.String("gen_ai.operation.name", "execute_tool"),
			attribute.String("gen_ai.tool.name", ev.Tool.Name),
			attribute.String("gen_ai.tool.call.id", id),
		))
		if ev.AgentThread != "" {
			s.SetAttributes(attribute.Bool("meshweaver.tool.subagent", true))
		}
		if t.tools == nil {
			t.tools = make(map[string]trace.Span)
		}
		t.tools[id] = s
	case ev.Kind == messages.KindToolResult && ev.Result != nil:
		s, open := t.tools[ev.Result.CallID]
		if !open {
			return
		}
		delete(t.tools, ev.Result.CallID)
		if ev.Result.ExitCode != nil {
			s.SetAttributes(attribute.Int("process.exit.code", *ev.Result.ExitCode))
		}
		if ev.Result.Failed {
			s.SetStatus(codes.Error, "the tool call failed")
		}
		s.End()
	}
}

// finished ends the round's spans with its verdict v (nil when the
// verdict is not known here: the span then says only that the round
// ended). Later calls do nothing.
func (t *roundTrace) finished(v *messages.RoundFinished) {
	if !t.spans() {
		return
	}
	t.endWork()
	if t.verdict == nil {
		_, t.verdict = t.tracer.Start(t.ctx, "verdict")
	}
	if v != nil {
		attrs := []attribute.KeyValue{
			attribute.String("meshweaver.status", string(v.Status)),
			attribute.Bool("meshweaver.resumed", v.Resumed),
			attribute.Bool("meshweaver.fell_back", v.FellBack),
			attribute.Bool("meshweaver.not_saved", v.NotSaved != ""),
		}
		if v.ErrorInfo != nil && v.ErrorInfo.Class != "" {
			attrs = append(attrs, attribute.String("meshweaver.error_class", string(v.ErrorInfo.Class)))
		}
		t.verdict.SetAttributes(attrs...)
		t.round.SetAttributes(attrs...)
		if v.Status != messages.StatusCompleted {
			t.verdict.SetStatus(codes.Error, string(v.Status))
			t.round.SetStatus(codes.Error, string(v.Status))
		}
	}
	endSpan(&t.verdict)
	t.round.End()
	t.ended = true
}

// attached ends the spans of a repeated StartRound: it runs no round of
// its own, and its caller follows the round id named.
func (t *roundTrace) attached(roundID string) {
	if !t.spans() {
		return
	}
	t.admission.SetAttributes(attribute.String("meshweaver.attached_to", roundID))
	endSpan(&t.admission)
	t.round.SetAttributes(attribute.String("meshweaver.attached_to", roundID))
	t.round.End()
	t.ended = true
}

// threadContext is the trace context for the thread's opening calls: the
// thread span's, else the caller's as it came.
func (t *roundTrace) threadContext() codexrpc.Trace {
	if t == nil {
		return codexrpc.Trace{}
	}
	return t.codex(t.thread)
}

// turnContext is the trace context for turn/start: the turn span's, else
// the caller's as it came.
func (t *roundTrace) turnContext() codexrpc.Trace {
	if t == nil {
		return codexrpc.Trace{}
	}
	return t.codex(t.turn)
}

// codex is span s's context as codex takes it; the caller's without s.
func (t *roundTrace) codex(s trace.Span) codexrpc.Trace {
	if s == nil || !s.SpanContext().IsValid() {
		return t.caller
	}
	c := propagation.MapCarrier{}
	propagation.TraceContext{}.Inject(trace.ContextWithSpan(context.Background(), s), c)
	return codexrpc.Trace{Traceparent: c["traceparent"], Tracestate: c["tracestate"]}
}

// traced is params with trace context tr as the request's trace field;
// params as they are without one.
func traced(params any, tr codexrpc.Trace) any {
	if tr.Traceparent == "" {
		return params
	}
	return codexrpc.Traced{Params: params, Trace: tr}
}

// endSpan ends *s if it is open and forgets it.
func endSpan(s *trace.Span) {
	if *s != nil {
		(*s).End()
		*s = nil
	}
}

// traceName names b in a span's attribute.
func (b openedBy) traceName() string {
	switch b {
	case openedFresh:
		return "fresh"
	case openedResumed:
		return "resumed"
	case openedWarm:
		return "warm"
	case openedFellBack:
		return "fell_back"
	}
	return "not_opened"
}
