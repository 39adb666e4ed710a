package actors

import (
	"context"
	"strings"
	"testing"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/propagation"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/meshweaver/supervisor/codexproto"
	"github.com/meshweaver/supervisor/codexrpc"
	"github.com/meshweaver/supervisor/demomodel"
	"github.com/meshweaver/supervisor/messages"
	"github.com/meshweaver/supervisor/testkit/fakeappserver"
)

// traceHarness is a harness whose tree records its spans.
func traceHarness(t *testing.T) (*harness, *tracetest.SpanRecorder) {
	t.Helper()
	rec := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec))
	t.Cleanup(func() { _ = tp.Shutdown(context.Background()) })
	return newHarness(t, func(c *tree) { c.TracerProvider = tp }), rec
}

// callerSpan is a mesh caller's span and its W3C trace context.
func callerSpan(t *testing.T) (trace.SpanContext, propagation.MapCarrier) {
	t.Helper()
	tp := sdktrace.NewTracerProvider()
	t.Cleanup(func() { _ = tp.Shutdown(context.Background()) })
	ctx, span := tp.Tracer("mesh-caller").Start(context.Background(), "ask codex")
	t.Cleanup(func() { span.End() })
	c := propagation.MapCarrier{}
	propagation.TraceContext{}.Inject(ctx, c)
	return span.SpanContext(), c
}

// roundSpans are the ended spans of one trace, by name.
func roundSpans(t *testing.T, rec *tracetest.SpanRecorder, id trace.TraceID) map[string][]sdktrace.ReadOnlySpan {
	t.Helper()
	out := map[string][]sdktrace.ReadOnlySpan{}
	for _, s := range rec.Ended() {
		if s.SpanContext().TraceID() == id {
			out[s.Name()] = append(out[s.Name()], s)
		}
	}
	return out
}

func spanAttr(s sdktrace.ReadOnlySpan, key string) (attribute.Value, bool) {
	for _, kv := range s.Attributes() {
		if string(kv.Key) == key {
			return kv.Value, true
		}
	}
	return attribute.Value{}, false
}

// A round started with a caller's trace context is one span tree under
// the caller's span: the round, and under it its admission, the thread's
// opening, the turn (with a span per tool call) and the verdict with its
// status. No attribute carries the user's id or the mesh thread's key;
// the hashed tags the logs use stand for them.
func TestTraceRoundSpans(t *testing.T) {
	h, rec := traceHarness(t)
	h.model.SetResponder(demomodel.ToolThenText(demomodel.ExecCommand("call_trace", "true"), "traced ", "done"))
	parent, tc := callerSpan(t)
	const user, thread = "trace-user-ann", "trace/mesh-thread-42"
	c := h.caller()
	res := h.round(c, messages.StartRound{User: user, Thread: thread, Text: "run true", RoundID: "tr1", AutoApprove: true,
		Traceparent: tc["traceparent"], Tracestate: "mesh=caller"})
	if res.verdict.Status != messages.StatusCompleted {
		t.Fatalf("verdict %s %q", res.verdict.Status, res.verdict.Error)
	}
	if len(res.kinds(messages.KindToolCall)) == 0 {
		t.Fatal("the round ran no tool call")
	}
	spans := roundSpans(t, rec, parent.TraceID())
	one := func(name string) sdktrace.ReadOnlySpan {
		t.Helper()
		if n := len(spans[name]); n != 1 {
			t.Fatalf("%d spans %q in the caller's trace, want 1 (spans: %v)", n, name, spanNames(spans))
		}
		return spans[name][0]
	}
	round := one("round")
	if got := round.Parent().SpanID(); got != parent.SpanID() || !round.Parent().IsRemote() {
		t.Errorf("the round's parent is %v (remote %v), want the caller's span %v", got, round.Parent().IsRemote(), parent.SpanID())
	}
	if got := round.SpanKind(); got != trace.SpanKindServer {
		t.Errorf("the round span is of kind %v, want server", got)
	}
	if got := round.Parent().TraceState().Get("mesh"); got != "caller" {
		t.Errorf("the caller's tracestate mesh=%q, want caller", got)
	}
	for _, name := range []string{"admission", "thread.start", "turn", "verdict"} {
		if s := one(name); s.Parent().SpanID() != round.SpanContext().SpanID() {
			t.Errorf("span %q is under %v, want the round %v", name, s.Parent().SpanID(), round.SpanContext().SpanID())
		}
	}
	turn := one("turn")
	tool := one("execute_tool shell")
	if tool.Parent().SpanID() != turn.SpanContext().SpanID() {
		t.Errorf("the tool call's span is under %v, want the turn %v", tool.Parent().SpanID(), turn.SpanContext().SpanID())
	}
	if v, _ := spanAttr(tool, "gen_ai.tool.call.id"); v.AsString() != "call_trace" {
		t.Errorf("the tool call's id %q, want call_trace", v.AsString())
	}
	if v, ok := spanAttr(tool, "process.exit.code"); !ok || v.AsInt64() != 0 {
		t.Errorf("the command's exit code %v (set %v), want 0", v.AsInt64(), ok)
	}
	// Each phase in its turn: the thread opened before the turn, the tool ran in it.
	if one("admission").EndTime().After(one("thread.start").StartTime()) || one("thread.start").EndTime().After(turn.StartTime()) ||
		tool.StartTime().Before(turn.StartTime()) || tool.EndTime().After(turn.EndTime()) {
		t.Error("the spans are out of order: admission, thread.start, turn (the tool call inside it)")
	}
	if v, _ := spanAttr(one("thread.start"), "meshweaver.thread.opened"); v.AsString() != "fresh" {
		t.Errorf("thread opened %q, want fresh", v.AsString())
	}
	verdict := one("verdict")
	if v, _ := spanAttr(verdict, "meshweaver.status"); v.AsString() != string(messages.StatusCompleted) {
		t.Errorf("verdict status %q, want completed", v.AsString())
	}
	if v, _ := spanAttr(round, "meshweaver.user_tag"); v.AsString() != userTag(user) {
		t.Errorf("the round's user tag %q, want %q", v.AsString(), userTag(user))
	}
	for _, ss := range spans {
		for _, s := range ss {
			for _, kv := range s.Attributes() {
				if v := kv.Value.String(); strings.Contains(v, user) || strings.Contains(v, thread) || strings.Contains(v, "run true") {
					t.Errorf("span %q attribute %s = %q carries the user id, the thread key or the text", s.Name(), kv.Key, v)
				}
			}
		}
	}

	// The thread's next round resumes it (warm): thread.resume, in a trace
	// of its own when the caller sent none.
	res = h.round(c, messages.StartRound{User: user, Thread: thread, Text: "again", RoundID: "tr2", AutoApprove: true})
	if res.verdict.Status != messages.StatusCompleted {
		t.Fatalf("second verdict %s %q", res.verdict.Status, res.verdict.Error)
	}
	var second sdktrace.ReadOnlySpan
	for _, s := range rec.Ended() {
		if v, _ := spanAttr(s, "meshweaver.round_id"); s.Name() == "round" && v.AsString() == "tr2" {
			second = s
		}
	}
	if second == nil {
		t.Fatal("no round span for the second round")
	}
	if second.Parent().IsValid() || second.SpanContext().TraceID() == parent.TraceID() {
		t.Errorf("the second round (no trace context) has parent %v in trace %v: want a root span", second.Parent().SpanID(), second.SpanContext().TraceID())
	}
	resumed := roundSpans(t, rec, second.SpanContext().TraceID())["thread.resume"]
	if len(resumed) != 1 {
		t.Fatalf("%d thread.resume spans in the second round's trace, want 1", len(resumed))
	}
	if v, _ := spanAttr(resumed[0], "meshweaver.thread.opened"); v.AsString() != "warm" {
		t.Errorf("second thread opened %q, want warm", v.AsString())
	}
}

func spanNames(spans map[string][]sdktrace.ReadOnlySpan) []string {
	var out []string
	for name, ss := range spans {
		for range ss {
			out = append(out, name)
		}
	}
	return out
}

// A malformed traceparent neither fails the round nor panics: the round
// runs, and its spans start a trace of their own. One over its bound is
// refused, naming the field.
func TestTraceMalformedTraceparent(t *testing.T) {
	h, rec := traceHarness(t)
	c := h.caller()
	res := h.round(c, messages.StartRound{User: "bob", Thread: "t1", Text: "hello", RoundID: "bad1",
		Traceparent: "00-not-a-trace-01", Tracestate: "=,,garbage"})
	if res.verdict.Status != messages.StatusCompleted {
		t.Fatalf("verdict %s %q, want completed", res.verdict.Status, res.verdict.Error)
	}
	var round sdktrace.ReadOnlySpan
	for _, s := range rec.Ended() {
		if v, _ := spanAttr(s, "meshweaver.round_id"); s.Name() == "round" && v.AsString() == "bad1" {
			round = s
		}
	}
	if round == nil {
		t.Fatal("no round span")
	}
	if round.Parent().IsValid() {
		t.Errorf("the round span has parent %v: a malformed traceparent must be ignored", round.Parent())
	}
	res = h.round(c, messages.StartRound{User: "bob", Thread: "t1", Text: "hello", RoundID: "bad2",
		Traceparent: strings.Repeat("0", messages.MaxTraceparentLen+1)})
	if v := res.verdict; v.Status != messages.StatusRejected || !strings.Contains(v.Error, "traceparent is 257 bytes") {
		t.Errorf("verdict %s %q, want rejected naming the traceparent's bound", v.Status, v.Error)
	}
}

// The trace context codex is given: the daemon's span (the turn's, the
// thread's) when it makes spans; the caller's as it came when it makes
// none; nothing, and the params untouched, when there is neither.
func TestTraceContextForCodex(t *testing.T) {
	_, tc := callerSpan(t)
	withCaller := messages.StartRound{RoundID: "r", User: "u", Thread: "t", Traceparent: tc["traceparent"], Tracestate: "mesh=1"}

	if tr := newRoundTrace(nil, &messages.StartRound{RoundID: "r", User: "u", Thread: "t"}); tr != nil {
		t.Errorf("no provider and no caller context: trace %+v, want nil", tr)
	}
	var none *roundTrace
	params := map[string]string{"threadId": "x"}
	if got, ok := traced(params, none.turnContext()).(map[string]string); !ok || got["threadId"] != "x" {
		t.Errorf("traced with no context = %#v, want the params as they are", got)
	}

	off := newRoundTrace(nil, &withCaller)
	off.entered(phaseFresh, notOpened) // makes no span
	if got := off.turnContext(); got.Traceparent != tc["traceparent"] || got.Tracestate != "mesh=1" {
		t.Errorf("tracing off: codex gets %+v, want the caller's context %q", got, tc["traceparent"])
	}

	rec := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec))
	defer func() { _ = tp.Shutdown(context.Background()) }()
	on := newRoundTrace(tp, &withCaller)
	on.entered(phaseLookup, notOpened)
	on.entered(phaseFresh, notOpened)
	thread := on.threadContext()
	on.entered(phaseTurnStart, openedFresh)
	turn := on.turnContext()
	p, ok := traced(params, turn).(codexrpc.Traced)
	if !ok || p.Trace != turn {
		t.Fatalf("traced = %#v, want the params with the turn's context", p)
	}
	on.finished(&messages.RoundFinished{Status: messages.StatusFailed, ErrorInfo: &messages.ErrorInfo{Class: messages.ErrorBudget}})
	on.finished(nil) // a second end does nothing
	byName := map[string]sdktrace.ReadOnlySpan{}
	for _, s := range rec.Ended() {
		if _, dup := byName[s.Name()]; dup {
			t.Errorf("span %q ended twice", s.Name())
		}
		byName[s.Name()] = s
	}
	for name, got := range map[string]string{"thread.start": thread.Traceparent, "turn": turn.Traceparent} {
		s := byName[name]
		if s == nil {
			t.Fatalf("no %s span", name)
		}
		want := "00-" + s.SpanContext().TraceID().String() + "-" + s.SpanContext().SpanID().String() + "-01"
		if got != want {
			t.Errorf("codex's context for %s = %q, want the span's %q", name, got, want)
		}
	}
	if v, _ := spanAttr(byName["verdict"], "meshweaver.error_class"); v.AsString() != string(messages.ErrorBudget) {
		t.Errorf("the verdict's error class %q, want budget", v.AsString())
	}
	if got := byName["round"].Status().Code; got != codes.Error {
		t.Errorf("a failed round's span status %v, want Error", got)
	}
}

// BenchmarkRoundTrace is what a round's trace hooks cost: off (no
// provider, no caller context: what a round pays by default), and on,
// recording into a provider that hands its spans to no processor (the
// spans' own cost; an exporter's batching runs on its own goroutine). A
// round of 4 tool calls and 40 other events.
func BenchmarkRoundTrace(b *testing.B) {
	m := messages.StartRound{RoundID: "r1", User: "ann", Thread: "t1", Text: "hi"}
	phases := []roundPhase{phaseLookup, phaseFresh, phaseTurnStart, phaseRunning}
	var events []messages.RoundEvent
	for i := range 4 {
		id := string(rune('a' + i))
		events = append(events, messages.RoundEvent{Kind: messages.KindToolCall, Tool: &messages.ToolCall{CallID: id, Name: "shell"}})
		for range 10 {
			events = append(events, messages.RoundEvent{Kind: messages.KindText, Text: "x"})
		}
		events = append(events, messages.RoundEvent{Kind: messages.KindToolResult, Result: &messages.ToolResult{CallID: id}})
	}
	verdict := &messages.RoundFinished{Status: messages.StatusCompleted}
	params := &codexproto.TurnStartParams{ThreadID: "t"}
	run := func(b *testing.B, tp trace.TracerProvider) {
		b.ReportAllocs()
		for range b.N {
			tr := newRoundTrace(tp, &m)
			for _, p := range phases {
				tr.entered(p, openedFresh)
			}
			_ = traced(params, tr.turnContext())
			for i := range events {
				tr.event(&events[i])
			}
			tr.entered(phaseSaving, openedFresh)
			tr.finished(verdict)
		}
	}
	b.Run("off", func(b *testing.B) { run(b, nil) })
	b.Run("on", func(b *testing.B) {
		tp := sdktrace.NewTracerProvider()
		defer func() { _ = tp.Shutdown(context.Background()) }()
		run(b, tp)
	})
}

// Rounds that never run have their trace ended too: one refused busy (the
// thread's queue is full) gets a verdict span with status busy; a
// repeated StartRound, attached to the round it repeats, ends its own
// round span naming that round.
func TestTraceRefusedRounds(t *testing.T) {
	rec := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec))
	t.Cleanup(func() { _ = tp.Shutdown(context.Background()) })
	h := fakeHarness(t, fakeappserver.Config{ReplyText: "held", HoldTurns: true}, func(c *tree) {
		c.TracerProvider, c.QueueLimit = tp, 1
	})
	c := h.caller()
	start := func(id string) {
		h.engine.SendWithSender(h.root, messages.StartRound{User: "carol", Thread: "t1", Text: "hold", RoundID: id}, c.pid)
	}
	start("run")
	waitText(t, c, "run") // it runs, and holds its turn
	start("queued")
	start("run") // a repeat: attached to the running round
	start("busy")
	if v := c.collect(t, "busy", 30*time.Second).verdict; v.Status != messages.StatusBusy {
		t.Fatalf("verdict %s %q, want busy", v.Status, v.Error)
	}
	var busyRound, attached sdktrace.ReadOnlySpan
	for _, s := range rec.Ended() {
		id, _ := spanAttr(s, "meshweaver.round_id")
		to, _ := spanAttr(s, "meshweaver.attached_to")
		switch {
		case s.Name() == "round" && id.AsString() == "busy":
			busyRound = s
		case s.Name() == "round" && to.AsString() == "run":
			attached = s
		}
	}
	if busyRound == nil {
		t.Fatal("no round span for the busy round")
	}
	if v, _ := spanAttr(busyRound, "meshweaver.status"); v.AsString() != string(messages.StatusBusy) {
		t.Errorf("the busy round's status %q, want busy", v.AsString())
	}
	var verdict sdktrace.ReadOnlySpan
	for _, s := range rec.Ended() {
		if s.Name() == "verdict" && s.Parent().SpanID() == busyRound.SpanContext().SpanID() {
			verdict = s
		}
	}
	if verdict == nil {
		t.Error("the busy round has no verdict span")
	}
	if attached == nil {
		t.Error("no round span of the repeated StartRound naming the round it attached to")
	}
}

// waitText waits for the first text event of round id.
func waitText(t *testing.T, c *caller, id string) {
	t.Helper()
	deadline := time.NewTimer(30 * time.Second)
	defer deadline.Stop()
	for {
		select {
		case m := <-c.ch:
			if ev, ok := m.(messages.RoundEvent); ok && ev.RoundID == id && ev.Kind == messages.KindText {
				return
			}
		case <-deadline.C:
			t.Fatalf("round %s sent no text within 30s", id)
		}
	}
}
