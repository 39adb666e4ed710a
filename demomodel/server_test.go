package demomodel_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/meshweaver/supervisor/demomodel"
)

func TestURL(t *testing.T) {
	t.Parallel()
	s := startServer(t, demomodel.Options{})
	if u := s.URL(); !strings.HasPrefix(u, "http://127.0.0.1:") || !strings.HasSuffix(u, "/v1") {
		t.Errorf("URL = %q", u)
	}
}

func TestCutStreamGivesReadError(t *testing.T) {
	t.Parallel()
	s := startServer(t, demomodel.Options{})
	s.Enqueue(demomodel.Text("partial ", "answer").Cut())
	ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
	defer cancel()
	resp := post(t, ctx, s, userBody("x"), nil)
	evs, err := parseSSE(t, resp.Body)
	if !errors.Is(err, io.ErrUnexpectedEOF) {
		t.Errorf("read error = %v, want unexpected EOF", err)
	}
	if got, want := types(evs), "created output_item.added output_text.delta output_text.delta output_item.done"; got != want {
		t.Errorf("events before the cut:\n got %s\nwant %s", got, want)
	}
}

func TestEOFStreamEndsCleanly(t *testing.T) {
	t.Parallel()
	s := startServer(t, demomodel.Options{})
	s.Enqueue(demomodel.Text("partial").EOF())
	ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
	defer cancel()
	resp := post(t, ctx, s, userBody("x"), nil)
	evs, err := parseSSE(t, resp.Body)
	if err != nil {
		t.Errorf("read error = %v, want clean end", err)
	}
	if len(evs) != 4 || evs[3].Event != "response.output_item.done" {
		t.Errorf("events = %s", types(evs))
	}
}

// readFirstEvent reads up to the end of the first SSE event.
func readFirstEvent(t *testing.T, r io.Reader) string {
	t.Helper()
	var got []byte
	buf := make([]byte, 1)
	for !bytes.HasSuffix(got, []byte("\n\n")) {
		if _, err := r.Read(buf); err != nil {
			t.Fatalf("reading first event: %v (got %q)", err, got)
		}
		got = append(got, buf[0])
	}
	return string(got)
}

func TestSlowStreamEndsOnClose(t *testing.T) {
	t.Parallel()
	s, err := demomodel.Start(demomodel.Options{Logf: t.Logf})
	if err != nil {
		t.Fatal(err)
	}
	s.Enqueue(demomodel.Text(demomodel.Words("a very slow answer that never finishes")...).WithDelay(time.Hour))
	ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
	defer cancel()
	resp := post(t, ctx, s, userBody("x"), nil)
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("status = %d", resp.StatusCode)
	}
	if _, err := s.WaitRequests(ctx, 1); err != nil {
		t.Fatal(err)
	}

	closed := make(chan struct{})
	go func() {
		defer close(closed)
		s.Close()
	}()
	select {
	case <-closed:
	case <-ctx.Done():
		t.Fatal("Close did not end the slow stream")
	}
	evs, err := parseSSE(t, resp.Body)
	if len(evs) != 0 {
		t.Errorf("got events %s from a stream delayed by an hour", types(evs))
	}
	if err == nil {
		t.Errorf("slow stream ended cleanly after Close, want a read error")
	}
	s.Close() // idempotent
}

func TestSlowStreamDelivers(t *testing.T) {
	t.Parallel()
	s := startServer(t, demomodel.Options{})
	s.Enqueue(demomodel.Text("a", "b").WithDelay(time.Millisecond))
	if got := types(stream(t, s)); got != "created output_item.added output_text.delta output_text.delta output_item.done completed" {
		t.Errorf("events = %s", got)
	}
}

func TestHangingStreamEndsWhenClientLeaves(t *testing.T) {
	t.Parallel()
	s := startServer(t, demomodel.Options{})
	s.Enqueue(demomodel.Text("thinking").Hang(), demomodel.Text("next"))
	ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
	defer cancel()
	reqCtx, leave := context.WithCancel(ctx)
	resp := post(t, reqCtx, s, userBody("x"), nil)
	first := readFirstEvent(t, resp.Body)
	if !strings.HasPrefix(first, "event: response.created\n") {
		t.Errorf("first event = %q", first)
	}
	leave()
	_, _ = io.Copy(io.Discard, resp.Body)
	// The handler is gone once a new request is served: the server is not
	// stuck on the hanging one.
	if got := types(stream(t, s)); !strings.HasSuffix(got, "completed") {
		t.Errorf("next stream = %s", got)
	}
}

func TestHangingStreamEndsOnClose(t *testing.T) {
	t.Parallel()
	s, err := demomodel.Start(demomodel.Options{Logf: t.Logf})
	if err != nil {
		t.Fatal(err)
	}
	s.Enqueue(demomodel.Text("thinking").Hang())
	ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
	defer cancel()
	resp := post(t, ctx, s, userBody("x"), nil)
	readFirstEvent(t, resp.Body)
	done := make(chan struct{})
	go func() {
		defer close(done)
		s.Close()
	}()
	select {
	case <-done:
	case <-ctx.Done():
		t.Fatal("Close did not end the hanging stream")
	}
	evs, err := parseSSE(t, resp.Body)
	if err == nil {
		t.Errorf("hanging stream ended cleanly after Close; events %s", types(evs))
	}
}

func TestRecordsRequests(t *testing.T) {
	t.Parallel()
	s := startServer(t, demomodel.Options{})
	body, _ := json.Marshal(map[string]any{
		"model": "mock-model",
		"input": []any{
			map[string]any{"type": "message", "role": "developer", "content": []any{map[string]any{"type": "input_text", "text": "sys"}}},
			map[string]any{"type": "message", "role": "user", "content": []any{map[string]any{"type": "input_text", "text": "<environment_context>"}}},
			map[string]any{"type": "message", "role": "user", "content": []any{
				map[string]any{"type": "input_text", "text": "run "}, map[string]any{"type": "input_text", "text": "it"},
			}},
			map[string]any{"type": "function_call", "call_id": "c1", "name": "exec_command", "arguments": "{}"},
			map[string]any{"type": "function_call_output", "call_id": "c1", "output": "done\n"},
			map[string]any{"type": "custom_tool_call_output", "call_id": "p1", "output": "Success."},
			map[string]any{"type": "function_call_output", "call_id": "m1", "output": []any{
				map[string]any{"type": "input_text", "text": "part1"}, map[string]any{"type": "input_text", "text": "part2"},
			}},
		},
		"tools": []any{
			map[string]any{"type": "function", "name": "exec_command"},
			map[string]any{"type": "custom", "name": "apply_patch"},
			map[string]any{"type": "namespace", "name": "mcp__meshweaver"},
			map[string]any{"type": "web_search"},
		},
	})
	md := `{"session_id":"s","thread_id":"th","turn_id":"tu","request_kind":"compaction"}`
	ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
	defer cancel()
	resp := post(t, ctx, s, string(body), map[string]string{"X-Codex-Turn-Metadata": md, "Originator": "probe"})
	if _, err := io.Copy(io.Discard, resp.Body); err != nil {
		t.Fatal(err)
	}

	reqs, err := s.WaitRequests(ctx, 1)
	if err != nil {
		t.Fatal(err)
	}
	r := reqs[0]
	if r.Seq != 0 || r.Method != "POST" || r.Path != "/v1/responses" || r.Status != 200 || r.Model != "mock-model" {
		t.Errorf("request = seq %d %s %s status %d model %q", r.Seq, r.Method, r.Path, r.Status, r.Model)
	}
	if !bytes.Equal(r.Body, body) {
		t.Errorf("body not recorded verbatim")
	}
	if r.Header.Get("Originator") != "probe" || r.Header.Get("X-Codex-Turn-Metadata") != md {
		t.Errorf("headers = %v", r.Header)
	}
	if got := r.LastUserText(); got != "run it" {
		t.Errorf("LastUserText = %q", got)
	}
	if got := strings.Join(r.UserTexts(), "|"); got != "<environment_context>|run it" {
		t.Errorf("UserTexts = %q", got)
	}
	want := map[string]string{"c1": "done\n", "p1": "Success.", "m1": "part1part2"}
	got := r.FunctionCallOutputs()
	if len(got) != len(want) {
		t.Errorf("FunctionCallOutputs = %q, want %q", got, want)
	}
	for k, v := range want {
		if got[k] != v {
			t.Errorf("FunctionCallOutputs[%q] = %q, want %q", k, got[k], v)
		}
	}
	if out, ok := r.ToolOutput("c1"); !ok || out != "done\n" {
		t.Errorf("ToolOutput(c1) = %q, %v", out, ok)
	}
	if _, ok := r.ToolOutput("nope"); ok {
		t.Errorf("ToolOutput(nope) found")
	}
	if r.LastInputType() != "function_call_output" || !strings.Contains(string(r.LastInput()), `"m1"`) {
		t.Errorf("LastInput = %s", r.LastInput())
	}
	if r.RequestKind() != demomodel.KindCompaction || !r.IsCompaction() {
		t.Errorf("RequestKind = %q", r.RequestKind())
	}
	if m := r.TurnMetadata(); m.ThreadID != "th" || m.TurnID != "tu" || m.SessionID != "s" {
		t.Errorf("TurnMetadata = %+v", m)
	}
	if got := strings.Join(r.ToolNames(), ","); got != "exec_command,apply_patch,mcp__meshweaver,web_search" {
		t.Errorf("ToolNames = %s", got)
	}
	if !r.HasTool("apply_patch") || r.HasTool("nope") {
		t.Errorf("HasTool wrong")
	}
	if len(r.Input) != 7 || len(r.Tools) != 4 {
		t.Errorf("parsed %d inputs, %d tools", len(r.Input), len(r.Tools))
	}

	// Snapshots are copies.
	reqs[0].Header.Set("Originator", "changed")
	reqs[0].Body[0] = 'X'
	if again := s.Requests()[0]; again.Header.Get("Originator") != "probe" || again.Body[0] != '{' {
		t.Errorf("Requests shares memory with the caller")
	}
}

func TestRequestKindTurnAndMissing(t *testing.T) {
	t.Parallel()
	r := demomodel.Request{Header: http.Header{}}
	if r.RequestKind() != "" || r.LastUserText() != "" || r.LastInput() != nil || len(r.FunctionCallOutputs()) != 0 {
		t.Errorf("empty request helpers not empty")
	}
	r.Header.Set(demomodel.TurnMetadataHeader, `{"request_kind":"turn"}`)
	if r.RequestKind() != demomodel.KindTurn {
		t.Errorf("RequestKind = %q", r.RequestKind())
	}
	r.Header.Set(demomodel.TurnMetadataHeader, `not json`)
	if r.RequestKind() != "" {
		t.Errorf("RequestKind of bad header = %q", r.RequestKind())
	}
}

func TestWaitRequests(t *testing.T) {
	t.Parallel()
	s := startServer(t, demomodel.Options{})

	t.Run("deadline", func(t *testing.T) {
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
		defer cancel()
		reqs, err := s.WaitRequests(ctx, 1)
		if !errors.Is(err, context.DeadlineExceeded) || reqs != nil {
			t.Errorf("WaitRequests = %v, %v; want deadline exceeded", reqs, err)
		}
	})

	t.Run("woken by arrivals", func(t *testing.T) {
		ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
		defer cancel()
		got := make(chan []demomodel.Request, 1)
		errc := make(chan error, 1)
		go func() {
			reqs, err := s.WaitRequests(ctx, 3)
			got <- reqs
			errc <- err
		}()
		var wg sync.WaitGroup
		for range 3 {
			wg.Go(func() {
				req, _ := http.NewRequestWithContext(ctx, http.MethodPost, s.URL()+"/responses", strings.NewReader(userBody("x")))
				resp, err := client().Do(req)
				if err != nil {
					errc <- err
					return
				}
				_, _ = io.Copy(io.Discard, resp.Body)
				_ = resp.Body.Close()
			})
		}
		wg.Wait()
		reqs := <-got
		if err := <-errc; err != nil {
			t.Fatal(err)
		}
		if len(reqs) < 3 {
			t.Fatalf("got %d requests", len(reqs))
		}
		for i, r := range reqs {
			if r.Seq != i {
				t.Errorf("reqs[%d].Seq = %d", i, r.Seq)
			}
		}
	})
}

func TestWaitRequestsAfterClose(t *testing.T) {
	t.Parallel()
	s, err := demomodel.Start(demomodel.Options{})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
	defer cancel()
	errc := make(chan error, 1)
	go func() {
		_, err := s.WaitRequests(ctx, 1)
		errc <- err
	}()
	s.Close()
	if err := <-errc; !errors.Is(err, demomodel.ErrClosed) {
		t.Errorf("WaitRequests after Close = %v, want ErrClosed", err)
	}
	if reqs, err := s.WaitRequests(ctx, 0); err != nil || len(reqs) != 0 {
		t.Errorf("WaitRequests(0) after Close = %v, %v", reqs, err)
	}
}

func TestQueueThenResponder(t *testing.T) {
	t.Parallel()
	s := startServer(t, demomodel.Options{
		Responder: func(r *demomodel.Request) demomodel.Script { return demomodel.Text("responder:" + r.LastUserText()) },
	})
	s.Enqueue(demomodel.Text("first"), demomodel.Text("second"))
	if s.Pending() != 2 {
		t.Errorf("Pending = %d", s.Pending())
	}
	textOf := func(evs []sseEvent) string {
		var b strings.Builder
		for _, e := range evs {
			if e.Event == "response.output_text.delta" {
				b.WriteString(e.Data["delta"].(string))
			}
		}
		return b.String()
	}
	for _, want := range []string{"first", "second", "responder:hi"} {
		if got := textOf(stream(t, s)); got != want {
			t.Errorf("text = %q, want %q", got, want)
		}
	}
	s.SetResponder(func(*demomodel.Request) demomodel.Script { return demomodel.Text("swapped") })
	if got := textOf(stream(t, s)); got != "swapped" {
		t.Errorf("after SetResponder: %q", got)
	}
	s.SetResponder(nil)
	if got := textOf(stream(t, s)); !strings.Contains(got, "demo model") || !strings.Contains(got, "“hi”") {
		t.Errorf("after SetResponder(nil): %q", got)
	}
}

func TestBadRequests(t *testing.T) {
	t.Parallel()
	s := startServer(t, demomodel.Options{
		MaxBodyBytes: 1024,
		Responder: func(*demomodel.Request) demomodel.Script {
			panic("responder bug")
		},
	})
	tests := []struct {
		name, method, path, body string
		status                   int
	}{
		{"unknown path", "POST", "/v1/chat/completions", "{}", 404},
		{"root", "GET", "/", "", 404},
		{"models", "GET", "/v1/models", "", 404},
		{"wrong method", "GET", "/v1/responses", "", 405},
		{"too large", "POST", "/v1/responses", `{"x":"` + strings.Repeat("a", 2048) + `"}`, 413},
		{"not json", "POST", "/v1/responses", "{not json", 400},
		{"json but not an object", "POST", "/v1/responses", `[1,2]`, 400},
		{"panicking responder", "POST", "/v1/responses", `{"input":[{"type":"message","role":"user","content":"x"}]}`, 500},
	}
	base := strings.TrimSuffix(s.URL(), "/v1")
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
			defer cancel()
			req, err := http.NewRequestWithContext(ctx, tc.method, base+tc.path, strings.NewReader(tc.body))
			if err != nil {
				t.Fatal(err)
			}
			resp, err := client().Do(req)
			if err != nil {
				t.Fatal(err)
			}
			defer func() { _ = resp.Body.Close() }()
			body, _ := io.ReadAll(resp.Body)
			if resp.StatusCode != tc.status {
				t.Errorf("status = %d, want %d (%s)", resp.StatusCode, tc.status, body)
			}
			var v struct {
				Error struct {
					Message string `json:"message"`
				} `json:"error"`
			}
			if err := json.Unmarshal(body, &v); err != nil || !strings.Contains(v.Error.Message, "demomodel") {
				t.Errorf("body = %s (%v)", body, err)
			}
		})
	}
	reqs := s.Requests()
	if len(reqs) != len(tests) {
		t.Fatalf("recorded %d requests, want %d", len(reqs), len(tests))
	}
	for i, tc := range tests {
		if reqs[i].Status != tc.status || reqs[i].Path != tc.path {
			t.Errorf("recorded %d: %s %d, want %s %d", i, reqs[i].Path, reqs[i].Status, tc.path, tc.status)
		}
	}
	if reqs[4].Body != nil {
		t.Errorf("too-large body recorded (%d bytes)", len(reqs[4].Body))
	}
	if reqs[5].ParseError == nil {
		t.Errorf("bad JSON has no ParseError")
	}
}

func TestRequestAfterCloseIsRefused(t *testing.T) {
	t.Parallel()
	s, err := demomodel.Start(demomodel.Options{})
	if err != nil {
		t.Fatal(err)
	}
	url := s.URL()
	s.Close()
	ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, http.MethodPost, url+"/responses", strings.NewReader("{}"))
	if resp, err := client().Do(req); err == nil {
		_ = resp.Body.Close()
		t.Errorf("request after Close got status %d", resp.StatusCode)
	}
}

func TestRequestRecordedBeforeResponderAnswers(t *testing.T) {
	t.Parallel()
	release := make(chan struct{})
	seen := make(chan int, 1)
	s := startServer(t, demomodel.Options{Responder: func(r *demomodel.Request) demomodel.Script {
		seen <- r.Seq
		<-release
		return demomodel.Text("late")
	}})
	ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
	defer cancel()
	done := make(chan []sseEvent, 1)
	go func() {
		req, _ := http.NewRequestWithContext(ctx, http.MethodPost, s.URL()+"/responses", strings.NewReader(userBody("x")))
		resp, err := client().Do(req)
		if err != nil {
			done <- nil
			return
		}
		defer func() { _ = resp.Body.Close() }()
		b, _ := io.ReadAll(resp.Body)
		done <- []sseEvent{{Raw: string(b)}}
	}()
	reqs, err := s.WaitRequests(ctx, 1)
	if err != nil {
		t.Fatal(err)
	}
	if reqs[0].Status != 0 {
		t.Errorf("Status while the responder runs = %d, want 0", reqs[0].Status)
	}
	if seq := <-seen; seq != 0 {
		t.Errorf("responder saw Seq %d", seq)
	}
	s.SetResponder(nil) // swapping while a request is in flight is safe
	close(release)
	if got := <-done; got == nil || !strings.Contains(got[0].Raw, `"delta":"late"`) {
		t.Errorf("answer = %v", got)
	}
	if r := s.Requests()[0]; r.Status != http.StatusOK {
		t.Errorf("Status after answering = %d", r.Status)
	}
}

// TestKeepRequests: with KeepRequests, Requests holds only the latest
// ones, still numbered among all, and WaitRequests counts every request.
func TestKeepRequests(t *testing.T) {
	t.Parallel()
	s := startServer(t, demomodel.Options{KeepRequests: 3})
	ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
	defer cancel()
	for i := range 10 {
		body := fmt.Sprintf(`{"model":"mock-model","input":[{"type":"message","role":"user","content":[{"type":"input_text","text":"r%d"}]}]}`, i)
		resp := post(t, ctx, s, body, nil)
		if _, err := io.Copy(io.Discard, resp.Body); err != nil {
			t.Fatal(err)
		}
	}
	reqs, err := s.WaitRequests(ctx, 10)
	if err != nil {
		t.Fatalf("WaitRequests(10) with 3 kept: %v", err)
	}
	var got []string
	for _, r := range reqs {
		got = append(got, fmt.Sprintf("%d:%s", r.Seq, r.LastUserText()))
	}
	if want := []string{"7:r7", "8:r8", "9:r9"}; !slices.Equal(got, want) {
		t.Errorf("kept requests %v, want %v", got, want)
	}
}
