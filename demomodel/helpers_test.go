package demomodel_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/meshweaver/supervisor/demomodel"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// testTimeout bounds every wait in these tests.
const testTimeout = 10 * time.Second

// startServer starts a Server that is closed when the test ends.
func startServer(t *testing.T, opts demomodel.Options) *demomodel.Server {
	t.Helper()
	if opts.Logf == nil {
		opts.Logf = t.Logf
	}
	s, err := demomodel.Start(opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.Close)
	return s
}

// client is an HTTP client without keep-alive, so no transport goroutine
// outlives a test.
func client() *http.Client {
	return &http.Client{Transport: &http.Transport{DisableKeepAlives: true}}
}

// sseEvent is one parsed SSE event.
type sseEvent struct {
	Event string
	Data  map[string]any
	Raw   string
}

// parseSSE reads an SSE body to its end. It returns the events before the
// end and the read error, if any (nil on a clean end).
func parseSSE(t *testing.T, r io.Reader) ([]sseEvent, error) {
	t.Helper()
	br := bufio.NewReader(r)
	var out []sseEvent
	var cur sseEvent
	for {
		line, err := br.ReadString('\n')
		if err != nil {
			if err == io.EOF && line == "" {
				err = nil
			}
			return out, err
		}
		line = strings.TrimRight(line, "\n")
		switch {
		case line == "":
			if cur.Raw != "" {
				out = append(out, cur)
			}
			cur = sseEvent{}
		case strings.HasPrefix(line, "event: "):
			cur.Event = strings.TrimPrefix(line, "event: ")
		case strings.HasPrefix(line, "data: "):
			cur.Raw = strings.TrimPrefix(line, "data: ")
			if err := json.Unmarshal([]byte(cur.Raw), &cur.Data); err != nil {
				t.Fatalf("bad data line %q: %v", line, err)
			}
			if cur.Data["type"] != cur.Event {
				t.Errorf("event %q has data type %v", cur.Event, cur.Data["type"])
			}
		default:
			t.Fatalf("unexpected SSE line %q", line)
		}
	}
}

// post sends a Responses request with the body and returns the response.
func post(t *testing.T, ctx context.Context, s *demomodel.Server, body string, hdr map[string]string) *http.Response {
	t.Helper()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, s.URL()+"/responses", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "text/event-stream")
	for k, v := range hdr {
		req.Header.Set(k, v)
	}
	resp, err := client().Do(req)
	if err != nil {
		t.Fatalf("POST: %v", err)
	}
	t.Cleanup(func() { _ = resp.Body.Close() })
	return resp
}

// stream posts a trivial request and parses the SSE answer, which must be
// complete.
func stream(t *testing.T, s *demomodel.Server) []sseEvent {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
	defer cancel()
	resp := post(t, ctx, s, userBody("hi"), nil)
	if resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(resp.Body)
		t.Fatalf("status %d: %s", resp.StatusCode, b)
	}
	if ct := resp.Header.Get("Content-Type"); ct != "text/event-stream" {
		t.Errorf("Content-Type = %q", ct)
	}
	evs, err := parseSSE(t, resp.Body)
	if err != nil {
		t.Fatalf("reading stream: %v", err)
	}
	return evs
}

// userBody is a minimal Responses body with one user message.
func userBody(text string) string {
	b, _ := json.Marshal(map[string]any{
		"model":  "mock-model",
		"stream": true,
		"input": []any{
			map[string]any{"type": "message", "role": "user", "content": []any{
				map[string]any{"type": "input_text", "text": text},
			}},
		},
	})
	return string(b)
}

func types(evs []sseEvent) string {
	var ts []string
	for _, e := range evs {
		ts = append(ts, strings.TrimPrefix(e.Event, "response."))
	}
	return strings.Join(ts, " ")
}

// field walks a path of map keys and list indexes in decoded JSON.
func field(v any, path ...any) any {
	for _, p := range path {
		switch k := p.(type) {
		case string:
			m, _ := v.(map[string]any)
			v = m[k]
		case int:
			l, _ := v.([]any)
			if k >= len(l) {
				return nil
			}
			v = l[k]
		}
	}
	return v
}

func compactJSON(t *testing.T, b []byte) string {
	t.Helper()
	var buf bytes.Buffer
	if err := json.Compact(&buf, b); err != nil {
		t.Fatalf("bad JSON %q: %v", b, err)
	}
	return buf.String()
}
