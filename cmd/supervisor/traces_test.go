package main

import (
	"context"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"syscall"
	"testing"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	collectortrace "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	tracepb "go.opentelemetry.io/proto/otlp/trace/v1"
	"google.golang.org/grpc"
	"google.golang.org/protobuf/proto"

	"github.com/meshweaver/supervisor/client"
	"github.com/meshweaver/supervisor/demomodel"
	"github.com/meshweaver/supervisor/messages"
)

// otlpReceiver is a loopback OTLP/gRPC trace collector: it keeps every
// span exported to it, with its resource's service.name.
type otlpReceiver struct {
	collectortrace.UnimplementedTraceServiceServer
	addr string

	mu      sync.Mutex
	spans   []*tracepb.Span
	service map[string]bool // service.name of the resources heard
}

func startOTLPReceiver(t *testing.T) *otlpReceiver {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	r := &otlpReceiver{addr: ln.Addr().String(), service: map[string]bool{}}
	srv := grpc.NewServer()
	collectortrace.RegisterTraceServiceServer(srv, r)
	done := make(chan struct{})
	go func() { defer close(done); _ = srv.Serve(ln) }()
	t.Cleanup(func() { srv.Stop(); <-done })
	return r
}

func (r *otlpReceiver) Export(_ context.Context, req *collectortrace.ExportTraceServiceRequest) (*collectortrace.ExportTraceServiceResponse, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, rs := range req.GetResourceSpans() {
		for _, kv := range rs.GetResource().GetAttributes() {
			if kv.GetKey() == "service.name" {
				r.service[kv.GetValue().GetStringValue()] = true
			}
		}
		for _, ss := range rs.GetScopeSpans() {
			r.spans = append(r.spans, ss.GetSpans()...)
		}
	}
	return &collectortrace.ExportTraceServiceResponse{}, nil
}

// TestServeExportsTraces runs the built daemon with --otlp-endpoint set to
// a loopback OTLP receiver, on the real CLI and the mock model: a round
// the Go client starts under a caller's span is exported, by the flush at
// the daemon's stop at the latest, as one span tree under the caller's
// span (round; admission, thread.start, turn with the tool call, verdict),
// from the service meshweaver-supervisor; and codex, exporting its own
// spans to the same receiver, puts its thread/start and turn/start spans
// under the daemon's thread.start and turn: one trace shows caller,
// daemon and codex.
func TestServeExportsTraces(t *testing.T) {
	recv := startOTLPReceiver(t)
	b := newBinaryServe(t)
	t.Cleanup(func() { waitNoCodex(t, b.bin, b.root) })
	b.model.SetResponder(demomodel.ToolThenText(demomodel.ExecCommand("call_otlp", "true"), "exported"))
	// codex exports its own spans to the same receiver (its otel config,
	// as an operator would set it): they join the trace under the
	// daemon's, through the trace field of thread/start and turn/start.
	srv := opsStartServe(t, b.exe, append(b.args, "--otlp-endpoint", "http://"+recv.addr, "--trace-sample-ratio", "1",
		"--codex-override", `otel.trace_exporter={otlp-grpc={endpoint="http://`+recv.addr+`",headers={}}}`)...)
	srv.waitMsg("exporting traces")
	srv.waitMsg("supervisor serving")

	ctx, cancel := context.WithTimeout(t.Context(), opsRoundWait)
	defer cancel()
	tp := sdktrace.NewTracerProvider()
	defer func() { _ = tp.Shutdown(context.Background()) }()
	ctx, caller := tp.Tracer("mesh-caller").Start(ctx, "ask codex")
	c, err := client.Dial(ctx, b.addr)
	if err != nil {
		t.Fatal(err)
	}
	r, err := c.Round(ctx, messages.StartRound{User: "otlp-user", Thread: "otlp/t1", Text: "run true", AutoApprove: true})
	if err != nil {
		t.Fatal(err)
	}
	v, err := r.Wait()
	c.Close()
	caller.End()
	if err != nil || v.Status != messages.StatusCompleted {
		t.Fatalf("Wait = %+v, %v; want completed", v, err)
	}
	if err := srv.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if !srv.wait(opsWait) || srv.err != nil {
		t.Fatalf("the daemon's stop: %v", srv.err)
	}

	recv.mu.Lock()
	defer recv.mu.Unlock()
	if !recv.service["meshweaver-supervisor"] {
		t.Errorf("the resources' service names %v, want meshweaver-supervisor", recv.service)
	}
	want := caller.SpanContext()
	traceID, callerID := want.TraceID(), want.SpanID()
	byName := map[string]*tracepb.Span{} // the daemon's spans, and codex's of the same name (the last)
	var names []string
	for _, s := range recv.spans {
		if string(s.GetTraceId()) != string(traceID[:]) {
			continue
		}
		names = append(names, s.GetName())
		byName[s.GetName()] = s
	}
	if !recv.service["codex-app-server"] {
		t.Errorf("the resources' service names %v: codex exported no span", recv.service)
	}
	for codex, daemon := range map[string]string{"thread/start": "thread.start", "turn/start": "turn"} {
		c, d := byName[codex], byName[daemon]
		if c == nil || d == nil || string(c.GetParentSpanId()) != string(d.GetSpanId()) {
			t.Errorf("codex's %s span is not under the daemon's %s (found %v, %v)", codex, daemon, c != nil, d != nil)
		}
	}
	round := byName["round"]
	if round == nil {
		t.Fatalf("no round span in the caller's trace (spans in it: %v; %d spans received)", names, len(recv.spans))
	}
	if string(round.GetParentSpanId()) != string(callerID[:]) {
		t.Errorf("the round span's parent %x, want the caller's span %x", round.GetParentSpanId(), want.SpanID())
	}
	for _, name := range []string{"admission", "thread.start", "turn", "verdict"} {
		if s := byName[name]; s == nil || string(s.GetParentSpanId()) != string(round.GetSpanId()) {
			t.Errorf("span %q missing or not under the round (spans: %v)", name, names)
		}
	}
	if s, turn := byName["execute_tool shell"], byName["turn"]; s == nil || turn == nil || string(s.GetParentSpanId()) != string(turn.GetSpanId()) {
		t.Errorf("no tool call span under the turn (spans: %v)", names)
	}
	t.Logf("%d spans in the caller's trace, %d received", len(names), len(recv.spans))
}

// What the settings make of the export: off unless an endpoint is set (a
// flag, or the OTEL_* variables the SDK reads), off again by
// OTEL_SDK_DISABLED or OTEL_TRACES_EXPORTER=none; the protocol from the
// flag, else the variables, else grpc; every bad value named.
func TestTracePlan(t *testing.T) {
	tests := []struct {
		name     string
		o        traceOptions
		env      map[string]string
		on       bool
		protocol string
		wantErr  string
	}{
		{name: "default: off", protocol: otlpGRPC},
		{name: "flag", o: traceOptions{endpoint: "http://127.0.0.1:4317"}, on: true, protocol: otlpGRPC},
		{name: "OTEL endpoint", env: map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "http://c:4318", "OTEL_EXPORTER_OTLP_PROTOCOL": "http/protobuf"}, on: true, protocol: otlpHTTP},
		{name: "OTEL traces endpoint", env: map[string]string{"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": "http://c:4317"}, on: true, protocol: otlpGRPC},
		{name: "traces protocol wins", env: map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "http://c", "OTEL_EXPORTER_OTLP_PROTOCOL": "grpc", "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL": "http/protobuf"}, on: true, protocol: otlpHTTP},
		{name: "flag protocol wins", o: traceOptions{endpoint: "http://c", protocol: otlpGRPC}, env: map[string]string{"OTEL_EXPORTER_OTLP_PROTOCOL": "http/protobuf"}, on: true, protocol: otlpGRPC},
		{name: "SDK disabled", o: traceOptions{endpoint: "http://c"}, env: map[string]string{"OTEL_SDK_DISABLED": "true"}, protocol: otlpGRPC},
		{name: "exporter none", o: traceOptions{endpoint: "http://c"}, env: map[string]string{"OTEL_TRACES_EXPORTER": "none"}, protocol: otlpGRPC},
		{name: "exporter otlp", o: traceOptions{endpoint: "http://c"}, env: map[string]string{"OTEL_TRACES_EXPORTER": "otlp"}, on: true, protocol: otlpGRPC},
		{name: "exporter zipkin", env: map[string]string{"OTEL_TRACES_EXPORTER": "zipkin"}, wantErr: `OTEL_TRACES_EXPORTER "zipkin"`},
		{name: "bad protocol", o: traceOptions{protocol: "http/json"}, wantErr: `--otlp-protocol (or OTEL_EXPORTER_OTLP_PROTOCOL) "http/json"`},
		{name: "bad endpoint", o: traceOptions{endpoint: "collector:4317"}, wantErr: `--otlp-endpoint "collector:4317"`},
		{name: "endpoint secrets not echoed", o: traceOptions{endpoint: "ftp://u:hunter2@c/?k=s3cret"}, wantErr: `--otlp-endpoint "ftp://c/"`},
	}
	for _, tt := range tests {
		p, err := tt.o.plan(func(k string) (string, bool) { v, ok := tt.env[k]; return v, ok })
		switch {
		case tt.wantErr != "":
			if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
				t.Errorf("%s: err %v, want one naming %s", tt.name, err, tt.wantErr)
			}
			if err != nil && (strings.Contains(err.Error(), "hunter2") || strings.Contains(err.Error(), "s3cret")) {
				t.Errorf("%s: the error shows the URL's secrets: %v", tt.name, err)
			}
		case err != nil:
			t.Errorf("%s: %v", tt.name, err)
		case p.on != tt.on || p.protocol != tt.protocol:
			t.Errorf("%s: on %v protocol %q (%s), want on %v protocol %q", tt.name, p.on, p.protocol, p.why, tt.on, tt.protocol)
		}
	}
	var r ratioFlag
	for _, bad := range []string{"-0.1", "1.5", "half"} {
		if err := r.Set(bad); err == nil {
			t.Errorf("--trace-sample-ratio %s accepted", bad)
		}
	}
	if err := r.Set("0.25"); err != nil || !r.set || r.String() != "0.25" {
		t.Errorf("--trace-sample-ratio 0.25: %v, %+v", err, r)
	}
}

// Over OTLP/HTTP the daemon's provider posts the spans to /v1/traces of
// the endpoint at its shutdown (the flush at the stop), and with export
// off there is no provider at all.
func TestTracingHTTPExport(t *testing.T) {
	log := slog.New(slog.DiscardHandler)
	for _, k := range []string{"OTEL_EXPORTER_OTLP_ENDPOINT", "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "OTEL_SDK_DISABLED", "OTEL_TRACES_EXPORTER",
		"OTEL_EXPORTER_OTLP_PROTOCOL", "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL"} {
		t.Setenv(k, "")
	}
	off := &traceOptions{}
	tr, err := off.startTracing(t.Context(), "test", log)
	if err != nil || tr != nil || tr.tracerProvider() != nil {
		t.Fatalf("export off: %v, %v; want no provider", tr, err)
	}
	tr.shutdown() // a no-op on nil

	got := make(chan *collectortrace.ExportTraceServiceRequest, 4)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		req := &collectortrace.ExportTraceServiceRequest{}
		if r.URL.Path != "/v1/traces" || proto.Unmarshal(body, req) != nil {
			http.Error(w, "not an OTLP/HTTP traces export", http.StatusBadRequest)
			return
		}
		got <- req
		w.Header().Set("Content-Type", "application/x-protobuf")
		b, _ := proto.Marshal(&collectortrace.ExportTraceServiceResponse{})
		_, _ = w.Write(b)
	}))
	defer srv.Close()
	on := &traceOptions{endpoint: srv.URL, protocol: otlpHTTP}
	tr, err = on.startTracing(t.Context(), "test", log)
	if err != nil || tr == nil {
		t.Fatalf("startTracing: %v, %v", tr, err)
	}
	_, span := tr.tracerProvider().Tracer("test").Start(t.Context(), "a round")
	span.End()
	tr.shutdown()
	select {
	case req := <-got:
		rs := req.GetResourceSpans()
		if len(rs) == 0 || len(rs[0].GetScopeSpans()) == 0 || rs[0].GetScopeSpans()[0].GetSpans()[0].GetName() != "a round" {
			t.Errorf("exported %v, want the span", req)
		}
	default:
		t.Fatal("the shutdown flushed nothing to the endpoint")
	}
}
