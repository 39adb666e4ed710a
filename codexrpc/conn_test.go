package codexrpc

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"
)

// peer is the server end of an in-memory connection, driven line by line
// from the test goroutine.
type peer struct {
	t    testing.TB
	in   *LineReader    // what the client wrote
	out  *io.PipeWriter // what the client reads
	inR  *io.PipeReader
	outR *io.PipeReader
}

func newPair(t testing.TB, opts Options) (*Conn, *peer) {
	t.Helper()
	cr, pw := io.Pipe() // peer → client
	pr, cw := io.Pipe() // client → peer
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.DiscardHandler)
	}
	c := NewConn(cr, cw, opts)
	p := &peer{t: t, in: NewLineReader(pr, 0), out: pw, inR: pr, outR: cr}
	t.Cleanup(func() {
		c.Close()
		pw.Close()
		pr.Close()
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		if err := c.Wait(ctx); err != nil {
			t.Errorf("conn did not finish: %v", err)
		}
	})
	return c, p
}

// recv reads the next message the client sent.
func (p *peer) recv() map[string]any {
	p.t.Helper()
	line, err := p.in.ReadLine()
	if err != nil {
		p.t.Fatalf("peer read: %v", err)
	}
	var m map[string]any
	if err := json.Unmarshal(line, &m); err != nil {
		p.t.Fatalf("peer got non-JSON %q: %v", line, err)
	}
	if _, ok := m["jsonrpc"]; ok {
		p.t.Errorf("client wrote a jsonrpc field: %s", line)
	}
	return m
}

func (p *peer) send(line string) {
	p.t.Helper()
	if _, err := io.WriteString(p.out, line+"\n"); err != nil {
		p.t.Fatalf("peer write: %v", err)
	}
}

type callOutcome struct {
	res json.RawMessage
	err error
}

func goCall(c *Conn, ctx context.Context, method string, params any) <-chan callOutcome {
	ch := make(chan callOutcome, 1)
	go func() {
		var res json.RawMessage
		err := c.Call(ctx, method, params, &res)
		ch <- callOutcome{res, err}
	}()
	return ch
}

func await[T any](t testing.TB, ch <-chan T) T {
	t.Helper()
	select {
	case v := <-ch:
		return v
	case <-time.After(10 * time.Second):
		t.Fatal("timed out waiting")
		panic("unreachable")
	}
}

func TestCallAndResponse(t *testing.T) {
	c, p := newPair(t, Options{})
	done := goCall(c, context.Background(), "thread/start", map[string]string{"cwd": "/w"})
	req := p.recv()
	if req["method"] != "thread/start" {
		t.Fatalf("method = %v", req["method"])
	}
	// Answers may come out of order and with a jsonrpc field.
	p.send(`{"jsonrpc":"2.0","id":999,"result":{}}`)
	p.send(`{"jsonrpc":"2.0","id":` + jsonNum(req["id"]) + `,"result":{"thread":{"id":"t1"}}}`)
	out := await(t, done)
	if out.err != nil {
		t.Fatal(out.err)
	}
	if got, want := string(out.res), `{"thread":{"id":"t1"}}`; got != want {
		t.Errorf("result = %s, want %s", got, want)
	}
}

func jsonNum(v any) string {
	b, _ := json.Marshal(v)
	return string(b)
}

func TestWireErrorAndClass(t *testing.T) {
	c, p := newPair(t, Options{})
	done := goCall(c, context.Background(), "thread/resume", nil)
	req := p.recv()
	p.send(`{"error":{"code":-32600,"message":"no rollout found for thread id 019a"},"id":` + jsonNum(req["id"]) + `}`)
	out := await(t, done)
	var we *WireError
	if !errors.As(out.err, &we) || we.Code != CodeInvalidRequest {
		t.Fatalf("err = %v, want a -32600 WireError", out.err)
	}
	if got := Classify(out.err); got != ClassNoRollout {
		t.Errorf("class = %v, want no-rollout", got)
	}
}

func TestNotificationsInOrderAndGarbageSkipped(t *testing.T) {
	var mu sync.Mutex
	var got []string
	all := make(chan struct{})
	c, p := newPair(t, Options{OnNotification: func(n *Notification) {
		mu.Lock()
		defer mu.Unlock()
		var d struct{ Delta string }
		_ = json.Unmarshal(n.Params, &d)
		got = append(got, n.Method+":"+d.Delta)
		if len(got) == 4 {
			close(all)
		}
	}})
	_ = c
	p.send(`{"method":"item/agentMessage/delta","params":{"delta":"a"},"emittedAtMs":1}`)
	p.send(`this is not json`)
	p.send(`{"method":"some/new/thing","params":{"x":1}}`)
	p.send(`[1,2,3]`)
	p.send(`{"method":"item/agentMessage/delta","params":{"delta":"b"}}`)
	p.send(`{"method":"item/agentMessage/delta","params":{"delta":"` + strings.Repeat("c", 2<<20) + `"}}`)
	await(t, all)
	mu.Lock()
	defer mu.Unlock()
	want := []string{"item/agentMessage/delta:a", "some/new/thing:", "item/agentMessage/delta:b", "item/agentMessage/delta:" + strings.Repeat("c", 2<<20)}
	for i := range want {
		if got[i] != want[i] {
			t.Errorf("notification %d = %.60q, want %.60q", i, got[i], want[i])
		}
	}
}

func TestServerRequests(t *testing.T) {
	c, p := newPair(t, Options{OnRequest: func(ctx context.Context, r *Request) (any, error) {
		switch r.Method {
		case "item/commandExecution/requestApproval":
			return map[string]string{"decision": "decline"}, nil
		case "boom":
			return nil, &WireError{Code: -32000, Message: "nope"}
		}
		return nil, &WireError{Code: CodeMethodNotFound, Message: "method not found"}
	}})
	_ = c
	p.send(`{"method":"item/commandExecution/requestApproval","id":0,"params":{}}`)
	if m := p.recv(); m["id"] != 0.0 || m["result"].(map[string]any)["decision"] != "decline" {
		t.Errorf("approval answer = %v", m)
	}
	p.send(`{"method":"boom","id":"s1","params":{}}`)
	if m := p.recv(); m["id"] != "s1" || m["error"].(map[string]any)["code"] != -32000.0 {
		t.Errorf("error answer = %v", m)
	}

	// Without a handler every request is method-not-found.
	_, p2 := newPair(t, Options{})
	p2.send(`{"method":"item/tool/call","id":7,"params":{}}`)
	if m := p2.recv(); m["error"].(map[string]any)["code"] != float64(CodeMethodNotFound) {
		t.Errorf("unhandled answer = %v", m)
	}
}

func TestCancelledCallLeavesNoPending(t *testing.T) {
	c, p := newPair(t, Options{})
	ctx, cancel := context.WithCancel(context.Background())
	done := goCall(c, ctx, "turn/start", nil)
	req := p.recv()
	if c.Pending() != 1 {
		t.Fatalf("pending = %d, want 1", c.Pending())
	}
	cancel()
	out := await(t, done)
	if !errors.Is(out.err, context.Canceled) {
		t.Fatalf("err = %v, want context.Canceled", out.err)
	}
	if c.Pending() != 0 {
		t.Errorf("pending = %d after cancel, want 0", c.Pending())
	}
	// A late answer to the cancelled call is dropped quietly.
	p.send(`{"id":` + jsonNum(req["id"]) + `,"result":{}}`)
	done = goCall(c, context.Background(), "model/list", nil)
	req = p.recv()
	p.send(`{"id":` + jsonNum(req["id"]) + `,"result":{"data":[]}}`)
	if out := await(t, done); out.err != nil {
		t.Fatal(out.err)
	}
}

func TestDeadline(t *testing.T) {
	c, p := newPair(t, Options{})
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	done := goCall(c, ctx, "turn/start", nil)
	p.recv() // never answered
	if out := await(t, done); !errors.Is(out.err, context.DeadlineExceeded) {
		t.Fatalf("err = %v, want deadline exceeded", out.err)
	}
}

func TestOverloadedRetried(t *testing.T) {
	c, p := newPair(t, Options{Retry: RetryPolicy{Attempts: 4, Base: time.Millisecond, Max: 4 * time.Millisecond}})
	done := goCall(c, context.Background(), "thread/start", nil)
	for i := 0; i < 2; i++ {
		req := p.recv()
		p.send(`{"id":` + jsonNum(req["id"]) + `,"error":{"code":-32001,"message":"Server overloaded; retry later."}}`)
	}
	req := p.recv()
	p.send(`{"id":` + jsonNum(req["id"]) + `,"result":{"ok":true}}`)
	out := await(t, done)
	if out.err != nil || string(out.res) != `{"ok":true}` {
		t.Fatalf("got %s, %v", out.res, out.err)
	}

	// Bounded: after Attempts refusals the error comes back.
	done = goCall(c, context.Background(), "thread/start", nil)
	for i := 0; i < 4; i++ {
		req := p.recv()
		p.send(`{"id":` + jsonNum(req["id"]) + `,"error":{"code":-32001,"message":"Server overloaded; retry later."}}`)
	}
	if out := await(t, done); Classify(out.err) != ClassOverloaded {
		t.Fatalf("err = %v, want overloaded", out.err)
	}
}

func TestEOFFailsPendingAndLaterCalls(t *testing.T) {
	cause := &ExitError{Exit: ExitStatus{Code: 1, Known: true}, Stderr: "Error: boom"}
	c, p := newPair(t, Options{OnEOF: func() error { return cause }})
	done := goCall(c, context.Background(), "initialize", nil)
	p.recv()
	p.out.Close() // the server's output ends
	out := await(t, done)
	var ee *ExitError
	if !errors.As(out.err, &ee) || ee.Method != "initialize" || ee.Exit.Code != 1 {
		t.Fatalf("err = %v, want an ExitError naming initialize", out.err)
	}
	if !strings.Contains(out.err.Error(), "exited with code 1 while awaiting initialize; stderr tail: Error: boom") {
		t.Errorf("error text = %q", out.err)
	}
	// A call made after the output closed fails the same way, at once.
	<-c.Done()
	err := c.Call(context.Background(), "thread/start", nil, nil)
	if !errors.As(err, &ee) || ee.Method != "thread/start" {
		t.Fatalf("late call err = %v", err)
	}
	if !errors.Is(c.Err(), cause) && c.Err() != cause {
		t.Errorf("Err() = %v", c.Err())
	}
}

func TestCloseIsQuiet(t *testing.T) {
	c, p := newPair(t, Options{OnEOF: func() error { t.Error("OnEOF called after Close"); return nil }})
	done := goCall(c, context.Background(), "turn/start", nil)
	p.recv()
	c.Close()
	if out := await(t, done); !errors.Is(out.err, ErrClosed) {
		t.Fatalf("err = %v, want ErrClosed", out.err)
	}
	p.out.Close()
	<-c.Done()
	if err := c.Call(context.Background(), "x", nil, nil); !errors.Is(err, ErrClosed) {
		t.Fatalf("after close: %v", err)
	}
}

// A Traced request carries its trace context as the request's "trace"
// field (codex's W3cTraceContext), beside params and not in them, over
// Call and Go alike; one without a traceparent has no trace field.
func TestTracedRequestCarriesTrace(t *testing.T) {
	const tp = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"
	c, p := newPair(t, Options{})
	cases := []struct {
		name  string
		trace Trace
		want  any // the trace field as decoded, nil when absent
	}{
		{"traceparent and tracestate", Trace{Traceparent: tp, Tracestate: "mw=1"},
			map[string]any{"traceparent": tp, "tracestate": "mw=1"}},
		{"traceparent only", Trace{Traceparent: tp}, map[string]any{"traceparent": tp}},
		{"none", Trace{Tracestate: "mw=1"}, nil},
	}
	for _, tc := range cases {
		for _, viaGo := range []bool{false, true} {
			params := Traced{Params: map[string]string{"threadId": "t1"}, Trace: tc.trace}
			var done <-chan callOutcome
			var goDone chan error
			if viaGo {
				goDone = make(chan error, 1)
				if _, err := c.Go("turn/start", params, func(_ json.RawMessage, err error) { goDone <- err }); err != nil {
					t.Fatal(err)
				}
			} else {
				done = goCall(c, context.Background(), "turn/start", params)
			}
			req := p.recv()
			got, present := req["trace"]
			if tc.want == nil && present {
				t.Errorf("%s (go %v): trace = %v, want none", tc.name, viaGo, got)
			}
			if tc.want != nil && jsonNum(got) != jsonNum(tc.want) {
				t.Errorf("%s (go %v): trace = %v, want %v", tc.name, viaGo, got, tc.want)
			}
			if got, want := jsonNum(req["params"]), `{"threadId":"t1"}`; got != want {
				t.Errorf("%s (go %v): params = %s, want %s", tc.name, viaGo, got, want)
			}
			p.send(`{"id":` + jsonNum(req["id"]) + `,"result":{}}`)
			if viaGo {
				if err := await(t, goDone); err != nil {
					t.Fatal(err)
				}
			} else if out := await(t, done); out.err != nil {
				t.Fatal(out.err)
			}
		}
	}
}
