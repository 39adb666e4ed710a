package gateway

import (
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"testing"
)

// The W3C trace context headers of POST /v1/rounds become the round's
// traceparent and tracestate (several tracestate headers joined, as the
// recommendation combines them); a traceparent in the body wins; one
// over its bound is refused, 400, naming it.
func TestRoundTraceHeaders(t *testing.T) {
	base := serve(t, nil, func(c *Config) { c.MaxBody = 1 << 16 })
	const tp = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"
	const own = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
	echoed := func(body string, header ...string) string {
		t.Helper()
		req, err := http.NewRequestWithContext(t.Context(), http.MethodPost, base+"/v1/rounds", strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		for i := 0; i+1 < len(header); i += 2 {
			req.Header.Add(header[i], header[i+1])
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			b, _ := io.ReadAll(resp.Body)
			t.Fatalf("status %d: %s", resp.StatusCode, b)
		}
		evs := readSSE(t, resp.Body)
		if len(evs) == 0 {
			t.Fatal("no events")
		}
		var ev struct{ Text string }
		if err := json.Unmarshal([]byte(evs[0].data), &ev); err != nil {
			t.Fatal(err)
		}
		return ev.Text
	}
	round := `{"user":"ann","thread":"t1","text":"echo-trace"}`
	if got, want := echoed(round, "traceparent", tp, "tracestate", "a=1", "tracestate", "b=2"), tp+"|a=1,b=2"; got != want {
		t.Errorf("with the headers the round had %q, want %q", got, want)
	}
	if got, want := echoed(round), "|"; got != want {
		t.Errorf("without them %q, want %q", got, want)
	}
	withOwn := `{"user":"ann","thread":"t1","text":"echo-trace","traceparent":"` + own + `","tracestate":"mine=1"}`
	if got, want := echoed(withOwn, "traceparent", tp, "tracestate", "a=1"), own+"|mine=1"; got != want {
		t.Errorf("with its own in the body %q, want %q", got, want)
	}
	resp := post(t, base+"/v1/rounds", round, "traceparent", strings.Repeat("0", 300))
	b, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusBadRequest || !strings.Contains(string(b), "traceparent is 300 bytes") {
		t.Errorf("an over-long traceparent: %d %s, want 400 naming it", resp.StatusCode, b)
	}
}
