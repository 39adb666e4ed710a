package client_test

import (
	"context"
	"testing"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"

	"github.com/meshweaver/supervisor/messages"
)

// A round started with a ctx that carries a span takes that span's W3C
// trace context to the daemon: the daemon's round span is its child. A
// traceparent the request sets itself is kept.
func TestRoundInjectsTraceContext(t *testing.T) {
	tp := sdktrace.NewTracerProvider()
	t.Cleanup(func() { _ = tp.Shutdown(context.Background()) })
	ctx, span := tp.Tracer("mesh-caller").Start(testCtx(t), "ask")
	defer span.End()
	c := dial(t, daemonAddr)

	// parentOf runs req and returns the parent of the daemon's round span.
	parentOf := func(req messages.StartRound) trace.SpanContext {
		t.Helper()
		r, err := c.Round(ctx, req)
		if err != nil {
			t.Fatal(err)
		}
		if v, err := r.Wait(); err != nil || v.Status != messages.StatusCompleted {
			t.Fatalf("Wait = %+v, %v", v, err)
		}
		// The daemon ends the round's span before it sends the verdict.
		for _, s := range daemonSpans.Ended() {
			for _, kv := range s.Attributes() {
				if s.Name() == "round" && kv.Key == "meshweaver.round_id" && kv.Value.AsString() == req.RoundID {
					return s.Parent()
				}
			}
		}
		t.Fatalf("the daemon recorded no span of round %s", req.RoundID)
		return trace.SpanContext{}
	}
	got := parentOf(messages.StartRound{User: "tracer", Thread: "t1", Text: "hi", RoundID: "traced-1"})
	if want := span.SpanContext(); got.TraceID() != want.TraceID() || got.SpanID() != want.SpanID() {
		t.Errorf("the daemon's round span has parent %v/%v, want the caller's span %v/%v", got.TraceID(), got.SpanID(), want.TraceID(), want.SpanID())
	}
	const own = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
	got = parentOf(messages.StartRound{User: "tracer", Thread: "t2", Text: "hi", RoundID: "traced-2", Traceparent: own})
	if got.TraceID().String() != "4bf92f3577b34da6a3ce929d0e0e4736" || got.SpanID().String() != "00f067aa0ba902b7" {
		t.Errorf("the daemon's round span has parent %v/%v, want the request's own traceparent %s", got.TraceID(), got.SpanID(), own)
	}
}
