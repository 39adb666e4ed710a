package main

// The rounds' traces: serve's OTLP export (off by default) and the
// tracer provider the actor tree gets (actors.Deps.TracerProvider).
//
// The settings are serve's flags (--otlp-endpoint, --otlp-protocol,
// --trace-sample-ratio, with their SUPERVISOR_* variables and --config
// keys) and the OpenTelemetry SDK's own variables, which the SDK and the
// OTLP exporters read themselves: OTEL_EXPORTER_OTLP_(TRACES_)ENDPOINT,
// _HEADERS, _TIMEOUT, _CERTIFICATE, _CLIENT_*, _COMPRESSION, _INSECURE,
// OTEL_TRACES_SAMPLER(_ARG), OTEL_BSP_*, OTEL_SERVICE_NAME and
// OTEL_RESOURCE_ATTRIBUTES. A flag wins over its variable.

import (
	"cmp"
	"context"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"net/url"
	"os"
	"strconv"
	"strings"
	"time"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracegrpc"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"
)

// OTLP protocols serve exports with.
const (
	otlpGRPC = "grpc"
	otlpHTTP = "http/protobuf"
)

// traceFlushTimeout bounds the flush of the spans still queued at the
// daemon's stop: a collector that does not answer must not hold it up.
const traceFlushTimeout = 5 * time.Second

// traceOptions are serve's trace export settings.
type traceOptions struct {
	endpoint string
	protocol string
	ratio    ratioFlag
}

func (o *traceOptions) register(fs *flag.FlagSet) {
	fs.StringVar(&o.endpoint, "otlp-endpoint", "", "`URL` of the OTLP collector the rounds' traces are exported to (http:// plaintext, https:// TLS; for http/protobuf the path /v1/traces is added when it has none); empty: OTEL_EXPORTER_OTLP_TRACES_ENDPOINT or OTEL_EXPORTER_OTLP_ENDPOINT, and with neither no traces are exported (the default)")
	fs.StringVar(&o.protocol, "otlp-protocol", "", "OTLP protocol of the export: grpc or http/protobuf (default: OTEL_EXPORTER_OTLP_TRACES_PROTOCOL, OTEL_EXPORTER_OTLP_PROTOCOL, else grpc)")
	fs.Var(&o.ratio, "trace-sample-ratio", "`RATIO` from 0 to 1 of the rounds traced, when the caller's trace context does not decide (parent-based); default: OTEL_TRACES_SAMPLER and OTEL_TRACES_SAMPLER_ARG, else every round")
}

// ratioFlag is a sampling ratio that knows whether it was set.
type ratioFlag struct {
	v   float64
	set bool
}

func (r *ratioFlag) String() string {
	if r == nil || !r.set {
		return ""
	}
	return strconv.FormatFloat(r.v, 'g', -1, 64)
}

func (r *ratioFlag) Set(s string) error {
	v, err := strconv.ParseFloat(s, 64)
	if err != nil || v < 0 || v > 1 {
		return errors.New("want a number from 0 to 1")
	}
	r.v, r.set = v, true
	return nil
}

// exportPlan is what the settings make of the export: off, or where and
// how.
type exportPlan struct {
	on       bool
	endpoint string // the flag's URL; empty: the exporter reads the variables
	protocol string
	why      string // why it is off, for the log
}

// plan reads the settings and the OTEL_* variables (lookup).
func (o *traceOptions) plan(lookup func(string) (string, bool)) (exportPlan, error) {
	env := func(k string) string { v, _ := lookup(k); return strings.TrimSpace(v) }
	p := exportPlan{endpoint: o.endpoint, protocol: o.protocol}
	if p.protocol == "" {
		p.protocol = cmp.Or(env("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL"), env("OTEL_EXPORTER_OTLP_PROTOCOL"), otlpGRPC)
	}
	var errs []error
	switch p.protocol {
	case otlpGRPC, otlpHTTP:
	default:
		errs = append(errs, fmt.Errorf("--otlp-protocol (or OTEL_EXPORTER_OTLP_PROTOCOL) %q: want %s or %s", p.protocol, otlpGRPC, otlpHTTP))
	}
	if p.endpoint != "" {
		u, err := url.Parse(p.endpoint)
		if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			errs = append(errs, fmt.Errorf("--otlp-endpoint %q: want an http:// or https:// URL with a host", redactURL(p.endpoint)))
		}
	}
	exporter := env("OTEL_TRACES_EXPORTER")
	switch exporter {
	case "", "otlp", "none":
	default:
		errs = append(errs, fmt.Errorf("OTEL_TRACES_EXPORTER %q: the daemon exports otlp or none", exporter))
	}
	if err := errors.Join(errs...); err != nil {
		return p, err
	}
	switch {
	case strings.EqualFold(env("OTEL_SDK_DISABLED"), "true"):
		p.why = "OTEL_SDK_DISABLED"
	case exporter == "none":
		p.why = "OTEL_TRACES_EXPORTER none"
	case p.endpoint == "" && env("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT") == "" && env("OTEL_EXPORTER_OTLP_ENDPOINT") == "":
		p.why = "no --otlp-endpoint"
	default:
		p.on = true
	}
	return p, nil
}

func (o *traceOptions) validate() error {
	_, err := o.plan(os.LookupEnv)
	return err
}

// tracing is serve's tracer provider: nil when nothing is exported. Its
// batch processor's goroutine and the exporter's connection are ended by
// shutdown, which flushes what is queued first.
type tracing struct {
	provider *sdktrace.TracerProvider
	log      *slog.Logger
}

// startTracing builds the tracer provider the settings ask for; with
// export off it is nil and costs nothing.
func (o *traceOptions) startTracing(ctx context.Context, version string, log *slog.Logger) (*tracing, error) {
	p, err := o.plan(os.LookupEnv)
	if err != nil {
		return nil, err
	}
	if !p.on {
		log.Debug("traces are not exported", "why", p.why)
		return nil, nil
	}
	var exp sdktrace.SpanExporter
	switch p.protocol {
	case otlpHTTP:
		var opts []otlptracehttp.Option
		if p.endpoint != "" {
			opts = append(opts, otlptracehttp.WithEndpointURL(httpTracesURL(p.endpoint)))
		}
		exp, err = otlptracehttp.New(ctx, opts...)
	default:
		var opts []otlptracegrpc.Option
		if p.endpoint != "" {
			opts = append(opts, otlptracegrpc.WithEndpointURL(p.endpoint))
		}
		exp, err = otlptracegrpc.New(ctx, opts...)
	}
	if err != nil {
		return nil, fmt.Errorf("the OTLP trace exporter: %w", err)
	}
	res, err := resource.New(ctx,
		resource.WithAttributes(attribute.String("service.name", "meshweaver-supervisor"), attribute.String("service.version", version)),
		resource.WithFromEnv(), // OTEL_SERVICE_NAME and OTEL_RESOURCE_ATTRIBUTES win
		resource.WithTelemetrySDK())
	if err != nil {
		log.Warn("the traces' resource is partial", "err", err)
	}
	opts := []sdktrace.TracerProviderOption{sdktrace.WithBatcher(exp), sdktrace.WithResource(res)}
	sampler := "OTEL_TRACES_SAMPLER or parent-based always-on"
	if o.ratio.set {
		opts = append(opts, sdktrace.WithSampler(sdktrace.ParentBased(sdktrace.TraceIDRatioBased(o.ratio.v))))
		sampler = "parent-based ratio " + o.ratio.String()
	}
	// The SDK reports export failures through OpenTelemetry's global
	// error handler, which would otherwise print plain lines into the
	// daemon's log stream.
	otel.SetErrorHandler(otel.ErrorHandlerFunc(func(err error) { log.Warn("exporting traces", "err", err) }))
	where := "from OTEL_EXPORTER_OTLP_*"
	if p.endpoint != "" {
		where = redactURL(p.endpoint)
	}
	log.Info("exporting traces", "endpoint", where, "protocol", p.protocol, "sampler", sampler)
	return &tracing{provider: sdktrace.NewTracerProvider(opts...), log: log}, nil
}

// tracerProvider is what the actor tree gets: nil when nothing is
// exported (the tree then makes no spans).
func (t *tracing) tracerProvider() trace.TracerProvider {
	if t == nil {
		return nil
	}
	return t.provider
}

// shutdown flushes the spans still queued (at most traceFlushTimeout)
// and stops the exporter's goroutines. Call it after the daemon stopped:
// the last rounds' spans end with their verdicts.
func (t *tracing) shutdown() {
	if t == nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), traceFlushTimeout)
	defer cancel()
	if err := t.provider.Shutdown(ctx); err != nil {
		t.log.Warn("flushing the traces at the stop", "err", err)
	}
}

// httpTracesURL is endpoint with the OTLP/HTTP traces path when it has
// no path of its own (as OTEL_EXPORTER_OTLP_ENDPOINT is read).
func httpTracesURL(endpoint string) string {
	u, err := url.Parse(endpoint)
	if err != nil || (u.Path != "" && u.Path != "/") {
		return endpoint
	}
	u.Path = "/v1/traces"
	return u.String()
}

// redactURL is u without its userinfo, query and fragment, which may hold
// secrets.
func redactURL(u string) string {
	if !strings.ContainsAny(u, "@?#") {
		return u
	}
	p, err := url.Parse(u)
	if err != nil {
		return "<invalid URL>"
	}
	return (&url.URL{Scheme: p.Scheme, Host: p.Host, Path: p.Path}).String()
}
