package client

import (
	"context"

	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"

	"github.com/meshweaver/supervisor/messages"
)

// injectTrace sets req's W3C trace context (Traceparent, Tracestate) from
// the span ctx carries, through OpenTelemetry's W3C propagator, so that
// the daemon's spans of the round are that span's children. A ctx without
// a span, or a req whose Traceparent is set already, is left as it is.
func injectTrace(ctx context.Context, req *messages.StartRound) {
	if req.Traceparent != "" || !trace.SpanContextFromContext(ctx).IsValid() {
		return
	}
	c := propagation.MapCarrier{}
	propagation.TraceContext{}.Inject(ctx, c)
	req.Traceparent, req.Tracestate = c.Get("traceparent"), c.Get("tracestate")
}
