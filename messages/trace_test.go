package messages

import (
	"errors"
	"strings"
	"testing"
)

const sampleTraceparent = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"

func TestValidTraceparent(t *testing.T) {
	tests := []struct {
		in   string
		want bool
	}{
		{sampleTraceparent, true},
		{"00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-00", true}, // not sampled
		{"01-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01", true}, // a later version
		{"01-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01-what-comes-next", true},
		{"01-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01x", false},
		{"00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01-x", false}, // 00 is exactly 55
		{"ff-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01", false},
		{"00-00000000000000000000000000000000-b7ad6b7169203331-01", false},
		{"00-0af7651916cd43dd8448eb211c80319c-0000000000000000-01", false},
		{"00-0AF7651916CD43DD8448EB211C80319C-B7AD6B7169203331-01", false}, // upper case
		{"00-0af7651916cd43dd8448eb211c80319c-b7ad6b716920333-01", false},  // short span id
		{"00_0af7651916cd43dd8448eb211c80319c_b7ad6b7169203331_01", false},
		{"", false},
		{"garbage", false},
		{strings.Repeat("0", 55), false},
		{"01-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01-" + strings.Repeat("x", MaxTraceparentLen), false},
	}
	for _, tt := range tests {
		if got := ValidTraceparent(tt.in); got != tt.want {
			t.Errorf("ValidTraceparent(%q) = %v, want %v", tt.in, got, tt.want)
		}
	}
}

func TestValidTracestate(t *testing.T) {
	members := func(n int) string {
		var b []string
		for i := range n {
			b = append(b, "k"+strings.Repeat("a", i)+"=v")
		}
		return strings.Join(b, ",")
	}
	tests := []struct {
		in   string
		want bool
	}{
		{"", true},
		{"congo=t61rcWkgMzE", true},
		{"rojo=00f067aa0ba902b7,congo=t61rcWkgMzE", true},
		{" rojo=1 ,\t,congo=2", true}, // spaces and empty members
		{"tenant1@sys=v", true},
		{"1tenant@sys=v", true}, // a tenant may start with a digit
		{"1key=v", false},       // a simple key may not
		{"Key=v", false},
		{"key", false},
		{"key=", false},
		{"key=a,b=c=d", false},
		{"key=caf\u00e9", false},
		{"key=a\x01b", false},
		{"t@=v", false},
		{"@s=v", false},
		{members(32), true},
		{members(33), false},
		{"k=" + strings.Repeat("v", 256), true},
		{"k=" + strings.Repeat("v", 257), false},
	}
	for _, tt := range tests {
		if got := ValidTracestate(tt.in); got != tt.want {
			t.Errorf("ValidTracestate(%q) = %v, want %v", tt.in, got, tt.want)
		}
	}
}

// A malformed trace context is the daemon's to ignore, not a reason to
// refuse the round; one over its bound is refused, naming the field.
func TestStartRoundTraceContext(t *testing.T) {
	base := StartRound{User: "u1", Thread: "t", Text: "hi"}
	tests := []struct {
		name          string
		parent, state string
		wantErr       string
		wantOK        bool
		wantParent    string
		wantState     string
	}{
		{name: "none"},
		{name: "both", parent: sampleTraceparent, state: "mw=1", wantOK: true, wantParent: sampleTraceparent, wantState: "mw=1"},
		{name: "bad state dropped", parent: sampleTraceparent, state: "MW=1", wantOK: true, wantParent: sampleTraceparent},
		{name: "bad parent ignored", parent: "00-zz-zz-01", state: "mw=1"},
		{name: "parent too long", parent: strings.Repeat("0", MaxTraceparentLen+1), wantErr: "traceparent is 257 bytes, max 256"},
		{name: "state too long", parent: sampleTraceparent, state: strings.Repeat("a", MaxTracestateLen+1), wantErr: "tracestate is 4097 bytes, max 4096"},
	}
	for _, tt := range tests {
		m := base
		m.Traceparent, m.Tracestate = tt.parent, tt.state
		err := m.Validate()
		if tt.wantErr == "" && err != nil {
			t.Errorf("%s: Validate = %v, want nil", tt.name, err)
		}
		if tt.wantErr != "" && (err == nil || !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), tt.wantErr)) {
			t.Errorf("%s: Validate = %v, want ErrInvalid naming %q", tt.name, err, tt.wantErr)
		}
		if err != nil {
			continue
		}
		parent, state, ok := m.TraceContext()
		if ok != tt.wantOK || parent != tt.wantParent || state != tt.wantState {
			t.Errorf("%s: TraceContext = %q, %q, %v; want %q, %q, %v", tt.name, parent, state, ok, tt.wantParent, tt.wantState, tt.wantOK)
		}
	}
}

// The fields travel under their msgpack keys.
func TestStartRoundTraceRoundTrip(t *testing.T) {
	in := StartRound{User: "u1", Thread: "t", Text: "hi", Traceparent: sampleTraceparent, Tracestate: "mw=1"}
	b, err := Encode(in)
	if err != nil {
		t.Fatal(err)
	}
	out, err := Decode(b)
	if err != nil {
		t.Fatal(err)
	}
	got, ok := out.(StartRound)
	if !ok {
		t.Fatalf("decoded %T, want StartRound", out)
	}
	if got.Traceparent != in.Traceparent || got.Tracestate != in.Tracestate {
		t.Errorf("decoded %q, %q; want %q, %q", got.Traceparent, got.Tracestate, in.Traceparent, in.Tracestate)
	}
}
