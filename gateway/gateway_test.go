package gateway

import (
	"bufio"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strconv"
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/meshweaver/supervisor/edge"
	"github.com/meshweaver/supervisor/messages"
	"github.com/meshweaver/supervisor/third_party/hollywood/actor"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// stubRoot stands in for the daemon's root: a StartRound gets three
// events and a verdict (text "hold": nothing, until the stream ends); an
// AttachRound gets the events after its seq and the verdict; an
// InterruptRound is answered OK.
func stubRoot(c *actor.Context) {
	events := func(id string) []messages.RoundEvent {
		return []messages.RoundEvent{
			{RoundID: id, Seq: 1, Kind: messages.KindText, Text: "Hel"},
			{RoundID: id, Seq: 2, Kind: messages.KindText, Text: "lo"},
			{RoundID: id, Seq: 3, Kind: messages.KindUsage, Usage: &messages.Usage{TotalTokens: 7}},
		}
	}
	switch m := c.Message().(type) {
	case messages.StartRound:
		switch m.Text {
		case "hold":
			return
		case "busy", "drain", "late-refusal":
			st, why := messages.StatusBusy, "the thread has a round running and 4 waiting"
			if m.Text != "busy" {
				st, why = messages.StatusUnavailable, "the daemon is shutting down"
			}
			if m.Text == "late-refusal" { // an event first: the stream is open
				c.Engine().Send(c.Sender(), messages.RoundEvent{RoundID: m.RoundID, Seq: 1, Kind: messages.KindText, Text: "x"})
			}
			c.Engine().Send(c.Sender(), messages.RoundFinished{RoundID: m.RoundID, Thread: m.Thread, Status: st, Error: why})
			return
		case "invalid":
			c.Engine().Send(c.Sender(), messages.RoundFinished{RoundID: m.RoundID, Status: messages.StatusRejected, Error: "thread is too long"})
			return
		case "budget":
			c.Engine().Send(c.Sender(), messages.RoundFinished{RoundID: m.RoundID, Status: messages.StatusRejected,
				Error:     "the user's token budget is spent: 65 of 60 tokens in the window",
				ErrorInfo: &messages.ErrorInfo{Class: messages.ErrorBudget, Spent: 65, Budget: 60, ResetsAtUnix: time.Now().Add(2 * time.Minute).Unix()}})
			return
		case "echo-trace": // the trace context it was given, as its text
			c.Engine().Send(c.Sender(), messages.RoundEvent{RoundID: m.RoundID, Seq: 1, Kind: messages.KindText, Text: m.Traceparent + "|" + m.Tracestate})
			c.Engine().Send(c.Sender(), messages.RoundFinished{RoundID: m.RoundID, Thread: m.Thread, Status: messages.StatusCompleted})
			return
		case "capped":
			c.Engine().Send(c.Sender(), messages.RoundFinished{RoundID: m.RoundID, Status: messages.StatusUnavailable, Error: "the node is at its cap of 2 live users"})
			return
		}
		for _, ev := range events(m.RoundID) {
			c.Engine().Send(c.Sender(), ev)
		}
		c.Engine().Send(c.Sender(), messages.RoundFinished{RoundID: m.RoundID, Thread: m.Thread, Status: messages.StatusCompleted})
	case messages.AttachRound:
		if m.RoundID == "unknown" {
			c.Engine().Send(c.Sender(), messages.RoundFinished{RoundID: m.RoundID, Status: messages.StatusNotFound, Error: "no such round"})
			return
		}
		for _, ev := range events(m.RoundID) {
			if ev.Seq > m.AfterSeq {
				c.Engine().Send(c.Sender(), ev)
			}
		}
		c.Engine().Send(c.Sender(), messages.RoundFinished{RoundID: m.RoundID, Status: messages.StatusCompleted})
	case messages.InterruptRound:
		if m.RoundID == "gone" {
			c.Engine().Send(c.Sender(), messages.RoundControlled{RoundID: m.RoundID, Error: "no round is running on this thread"})
			return
		}
		c.Engine().Send(c.Sender(), messages.RoundControlled{RoundID: m.RoundID, OK: true})
	case messages.WarmUp:
		c.Engine().Send(c.Sender(), messages.WarmedUp{User: m.User})
	case messages.AnswerRequest:
		c.Engine().Send(c.Sender(), messages.RoundControlled{RoundID: m.RoundID, Error: "no such round", NotFound: true})
	case messages.SetAPIKey: // the disk is full
		c.Engine().Send(c.Sender(), messages.Rejected{Type: "set_api_key.v1", Reason: "writing the key: no space left on device", Class: messages.RefusalFailed})
	case messages.ModelsRequest: // at the user cap
		c.Engine().Send(c.Sender(), messages.Rejected{Type: "models_request.v1", Reason: "the node is at its cap of 2 live users", Class: messages.RefusalUnavailable})
	case messages.AccountRequest:
		if m.User == "down" {
			c.Engine().Send(c.Sender(), messages.AccountResponse{User: m.User, Error: "codex app-server unavailable"})
			return
		}
		c.Engine().Send(c.Sender(), messages.AccountResponse{User: m.User})
	}
}

// serve starts a gateway on a stub root and returns its base URL.
func serve(t *testing.T, policy *edge.Policy, edit func(*Config)) string {
	base, _ := serveGW(t, policy, edit)
	return base
}

func serveGW(t *testing.T, policy *edge.Policy, edit func(*Config)) (string, *Gateway) {
	t.Helper()
	e, err := actor.NewEngine(actor.NewEngineConfig())
	if err != nil {
		t.Fatal(err)
	}
	root := e.SpawnFunc(stubRoot, "root")
	gate := edge.New(edge.Config{Self: "local", Root: root, Policy: policy, PeerRate: 1000, PeerBurst: 1000})
	cfg := Config{Engine: e, Root: root, Gate: gate, ReadHeaderTimeout: 300 * time.Millisecond, MaxBody: 4096, MaxStreams: 2}
	if edit != nil {
		edit(&cfg)
	}
	gw := New(cfg)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- gw.Serve(ln) }()
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		if err := gw.Shutdown(ctx); err != nil {
			t.Errorf("Shutdown: %v", err)
		}
		if err := <-done; !errors.Is(err, http.ErrServerClosed) {
			t.Errorf("Serve: %v", err)
		}
		<-e.Poison(root).Done()
	})
	return "http://" + ln.Addr().String(), gw
}

// sseEvent is one parsed Server-Sent Event.
type sseEvent struct {
	id, event, data string
}

// readSSE parses a stream until it ends.
func readSSE(t *testing.T, r io.Reader) []sseEvent {
	t.Helper()
	var out []sseEvent
	var cur sseEvent
	sc := bufio.NewScanner(r)
	for sc.Scan() {
		line := sc.Text()
		switch {
		case line == "":
			if cur.event != "" {
				out = append(out, cur)
			}
			cur = sseEvent{}
		case strings.HasPrefix(line, "id: "):
			cur.id = line[4:]
		case strings.HasPrefix(line, "event: "):
			cur.event = line[7:]
		case strings.HasPrefix(line, "data: "):
			cur.data = line[6:]
		}
	}
	return out
}

func post(t *testing.T, url, body string, header ...string) *http.Response {
	t.Helper()
	req, err := http.NewRequestWithContext(t.Context(), http.MethodPost, url, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i+1 < len(header); i += 2 {
		req.Header.Set(header[i], header[i+1])
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { resp.Body.Close() })
	return resp
}

// A round over HTTP: an SSE stream of round_event (id: the seq) and one
// round_finished, in the wire names; an attach with Last-Event-ID gets
// only what follows; a JSON call gets its JSON answer.
func TestRoundStreamAndAttach(t *testing.T) {
	base := serve(t, nil, nil)
	resp := post(t, base+"/v1/rounds", `{"user":"ann","thread":"t1","text":"hi","round_id":"r-1"}`)
	if resp.StatusCode != 200 || resp.Header.Get("Content-Type") != "text/event-stream" || resp.Header.Get("X-Round-Id") != "r-1" {
		t.Fatalf("status %d, headers %v", resp.StatusCode, resp.Header)
	}
	evs := readSSE(t, resp.Body)
	if len(evs) != 4 || evs[0].id != "1" || evs[2].id != "3" || evs[3].event != "round_finished" || evs[3].id != "" {
		t.Fatalf("events %+v", evs)
	}
	var first map[string]any
	if err := json.Unmarshal([]byte(evs[0].data), &first); err != nil || first["round_id"] != "r-1" || first["kind"] != "text" || first["text"] != "Hel" {
		t.Errorf("first event %s (%v): want the wire names", evs[0].data, err)
	}
	if !strings.Contains(evs[2].data, `"usage":{"total_tokens":7}`) || !strings.Contains(evs[3].data, `"status":"completed"`) {
		t.Errorf("usage %s, verdict %s", evs[2].data, evs[3].data)
	}

	req, _ := http.NewRequestWithContext(t.Context(), http.MethodGet, base+"/v1/rounds/r-1/events?user=ann", nil)
	req.Header.Set("Last-Event-ID", "2")
	got, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer got.Body.Close()
	evs = readSSE(t, got.Body)
	if len(evs) != 2 || evs[0].id != "3" || evs[1].event != "round_finished" {
		t.Errorf("attach after 2: %+v", evs)
	}
	evs = readSSE(t, post(t, base+"/v1/attach", `{"user":"ann","round_id":"r-1","after_seq":1}`).Body)
	if len(evs) != 3 || evs[0].id != "2" {
		t.Errorf("attach (POST) after 1: %+v", evs)
	}

	resp = post(t, base+"/v1/interrupt", `{"user":"ann","thread":"t1","round_id":"r-1"}`)
	b, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != 200 || strings.TrimSpace(string(b)) != `{"ok":true,"round_id":"r-1"}` {
		t.Errorf("interrupt: %d %s", resp.StatusCode, b)
	}
	// A refused interrupt is 409, not 200 with an error inside.
	resp = post(t, base+"/v1/interrupt", `{"user":"ann","thread":"t1","round_id":"gone"}`)
	b, _ = io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusConflict || !strings.Contains(string(b), `"error":"no round is running on this thread"`) {
		t.Errorf("a refused interrupt: %d %s, want 409 with the error", resp.StatusCode, b)
	}
	resp = post(t, base+"/v1/warm_up", `{"user":"ann","thread":"t1","mcp_url":"https://mesh.example/mcp","mcp_token":"tok"}`)
	b, _ = io.ReadAll(resp.Body)
	if resp.StatusCode != 200 || strings.TrimSpace(string(b)) != `{"user":"ann"}` {
		t.Errorf("warm_up: %d %s", resp.StatusCode, b)
	}
}

// Hostile input gets a clear answer and costs nothing: unknown fields,
// a body too large, invalid messages, a type mismatch, trailing data,
// reply_to, an unauthorized identity, a bad Last-Event-ID.
func TestHostileRequests(t *testing.T) {
	base := serve(t, nil, nil)
	for _, tt := range []struct {
		name, path, body string
		status           int
		want             string
	}{
		{"unknown field", "/v1/rounds", `{"user":"a","thread":"t","text":"x","sneaky":1}`, 400, "unknown field"},
		{"too large", "/v1/rounds", `{"user":"a","thread":"t","text":"` + strings.Repeat("x", 5000) + `"}`, 413, "over 4096 bytes"},
		{"invalid", "/v1/rounds", `{"user":"a","thread":"t"}`, 400, "text is empty"},
		{"bad user", "/v1/interrupt", `{"user":"../x","thread":"t"}`, 400, "user"},
		{"type mismatch", "/v1/rounds", `{"user":"a","thread":"t","text":42}`, 400, "does not fit"},
		{"not an object", "/v1/rounds", `[1,2]`, 400, "not a JSON object"},
		{"trailing", "/v1/rounds", `{"user":"a","thread":"t","text":"x"} {}`, 400, "data after"},
		// A key twice: encoding/json kept the last, a proxy may read the
		// first; refused at every depth, an escape spelling the same key.
		{"duplicate key", "/v1/rounds", `{"user":"a","thread":"t","text":"x","user":"b"}`, 400, `the key \"user\" appears twice in the body's object`},
		{"duplicate key, escaped", "/v1/rounds", `{"user":"a","thread":"t","text":"x","\u0074ext":"y"}`, 400, `the key \"text\" appears twice`},
		{"duplicate key, nested", "/v1/rounds", `{"user":"a","thread":"t","text":"x","history":[{"role":"user","text":"hi"},{"role":"assistant","text":"a","role":"user"}]}`, 400, `the key \"role\" appears twice in the object at history[1]`},
		{"duplicate key, deeper", "/v1/rounds", `{"user":"a","thread":"t","text":"x","sneaky":{"a b":[{"k":1,"k":2}]}}`, 400, `the key \"k\" appears twice in the object at sneaky.\"a b\"[0]`},
		{"same key in two objects", "/v1/rounds", `{"user":"a","thread":"t","text":"x","history":[{"role":"user","text":"hi"},{"role":"assistant","text":"a"}]}`, 200, "round_finished"},
		{"reply_to", "/v1/rounds", `{"user":"a","thread":"t","text":"x","reply_to":{"address":"h:1","id":"x"}}`, 400, "reply_to"},
		{"policy out of range", "/v1/rounds", `{"user":"a","thread":"t","text":"x","on_request":"always"}`, 400, "on_request"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			resp := post(t, base+tt.path, tt.body)
			b, _ := io.ReadAll(resp.Body)
			if resp.StatusCode != tt.status || !strings.Contains(string(b), tt.want) {
				t.Errorf("%d %s; want %d naming %q", resp.StatusCode, b, tt.status, tt.want)
			}
		})
	}
	req, _ := http.NewRequestWithContext(t.Context(), http.MethodGet, base+"/v1/rounds/r/events?user=a", nil)
	req.Header.Set("Last-Event-ID", "-1")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 400 {
		t.Errorf("bad Last-Event-ID: %d, want 400", resp.StatusCode)
	}

	// With a policy that grants the plaintext identity nothing: 403.
	p, err := edge.ParsePolicy([]byte(`{"version":1,"grants":[{"identities":["spiffe://x"],"users":["*"],"kinds":["rounds"]}]}`))
	if err != nil {
		t.Fatal(err)
	}
	locked := serve(t, p, nil)
	resp = post(t, locked+"/v1/rounds", `{"user":"a","thread":"t","text":"x"}`)
	if b, _ := io.ReadAll(resp.Body); resp.StatusCode != 403 || !strings.Contains(string(b), "unauthorized") {
		t.Errorf("unauthorized: %d %s", resp.StatusCode, b)
	}
}

// A client that sends its headers too slowly (slowloris) is cut off at
// ReadHeaderTimeout.
func TestSlowHeadersCutOff(t *testing.T) {
	base := serve(t, nil, nil)
	conn, err := net.Dial("tcp", strings.TrimPrefix(base, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	if _, err := conn.Write([]byte("POST /v1/rounds HTTP/1.1\r\nHost: x\r\n")); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	_ = conn.SetReadDeadline(time.Now().Add(10 * time.Second))
	b, err := io.ReadAll(conn) // the server closes the connection
	if err != nil {
		t.Fatalf("the slow client was not cut off: %v", err)
	}
	if took := time.Since(start); took > 5*time.Second || strings.Contains(string(b), "200 OK") {
		t.Errorf("cut off after %v with %q; want about the 300ms ReadHeaderTimeout and no answer", took, b)
	}
}

// A peer may hold at most MaxStreams event streams; one more gets 429,
// and a stream that ends makes room.
func TestStreamsPerPeerCapped(t *testing.T) {
	base, gw := serveGW(t, nil, func(c *Config) { c.FirstReplyWait = 50 * time.Millisecond })
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	open := func(c context.Context) *http.Response {
		req, _ := http.NewRequestWithContext(c, http.MethodPost, base+"/v1/rounds", strings.NewReader(`{"user":"a","thread":"t","text":"hold"}`))
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		return resp
	}
	held := []*http.Response{open(ctx), open(ctx)}
	for _, r := range held {
		if r.StatusCode != 200 {
			t.Fatalf("stream: %d", r.StatusCode)
		}
	}
	third := open(t.Context())
	b, _ := io.ReadAll(third.Body)
	third.Body.Close()
	if third.StatusCode != 429 || !strings.Contains(string(b), "2 event streams are open") {
		t.Errorf("third stream: %d %s; want 429", third.StatusCode, b)
	}
	cancel()
	for _, r := range held {
		r.Body.Close()
	}
	deadline := time.Now().Add(10 * time.Second)
	tick := time.NewTicker(5 * time.Millisecond)
	defer tick.Stop()
	for gw.Streams() != 0 { // the server notices the closed streams on its own
		if time.Now().After(deadline) {
			t.Fatalf("%d streams still counted after their clients left", gw.Streams())
		}
		<-tick.C
	}
	r := open(t.Context())
	r.Body.Close()
	if r.StatusCode != 200 {
		t.Errorf("no room after the streams ended: %d", r.StatusCode)
	}
}

// A body trickled a byte at a time is cut off at BodyTimeout: the client
// gets its 400 and the connection is closed then, not when the trickle
// ends (the deadline was cleared after the error, and the server's drain
// of the rest of the body then read the trickle to its end).
func TestTrickledBodyCutOff(t *testing.T) {
	base := serve(t, nil, func(c *Config) { c.BodyTimeout = 300 * time.Millisecond })
	conn, err := net.Dial("tcp", strings.TrimPrefix(base, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	if _, err := conn.Write([]byte("POST /v1/rounds HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: 4000\r\n\r\n{")); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	stop := make(chan struct{})
	trickled := make(chan struct{})
	go func() { // a byte every 50ms for 10s, unless the server closed first
		defer close(trickled)
		for range 200 {
			select {
			case <-stop:
				return
			case <-time.After(50 * time.Millisecond): // the attacker's pace
			}
			if _, err := conn.Write([]byte(" ")); err != nil {
				return
			}
		}
	}()
	defer func() { close(stop); <-trickled }()
	_ = conn.SetReadDeadline(time.Now().Add(15 * time.Second))
	b, _ := io.ReadAll(conn) // until the server closes
	took := time.Since(start)
	if !strings.Contains(string(b), "400 Bad Request") {
		t.Errorf("the trickled body got %q, want a 400", b)
	}
	if took > 5*time.Second {
		t.Errorf("the connection was closed %v after the body began, want about the 300ms BodyTimeout", took)
	}
}

// A declared Content-Length over MaxBody is answered 413 at once, before
// any of the body is read, and the connection closed: without that the
// server waited for a body that never came until BodyTimeout (30 s by
// default, a minute here). Just over the limit (where net/http would
// drain up to 256 KiB after the answer) and far over it alike.
func TestDeclaredLengthOverLimit(t *testing.T) {
	base := serve(t, nil, func(c *Config) { c.BodyTimeout = time.Minute })
	const wait = 10 * time.Second // well under BodyTimeout
	for _, tc := range []struct {
		name, head, body string
	}{
		{"just over", "Content-Length: 4097\r\n", ""},
		{"far over", "Content-Length: 1099511627776\r\n", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			conn, err := net.Dial("tcp", strings.TrimPrefix(base, "http://"))
			if err != nil {
				t.Fatal(err)
			}
			defer conn.Close()
			start := time.Now()
			if _, err := conn.Write([]byte("POST /v1/rounds HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n" + tc.head + "\r\n" + tc.body)); err != nil {
				t.Fatal(err)
			}
			_ = conn.SetReadDeadline(time.Now().Add(wait))
			br := bufio.NewReader(conn)
			resp, err := http.ReadResponse(br, nil)
			if err != nil {
				t.Fatalf("no answer within %v: %v", wait, err)
			}
			b, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if resp.StatusCode != http.StatusRequestEntityTooLarge || !strings.Contains(string(b), "over 4096 bytes") {
				t.Errorf("%d %s; want 413 naming the limit", resp.StatusCode, b)
			}
			// The server ends the connection: it does not hold it for the
			// body it refused.
			if _, err := io.ReadAll(br); err != nil {
				t.Errorf("the connection was not closed after the answer: %v", err)
			}
			t.Logf("413 and the close after %v", time.Since(start))
		})
	}
}

// A chunked body (no declared length) over MaxBody is answered 413 when
// the limit is read, and the connection closed then: it was held, the
// handler's goroutine with it, until BodyTimeout while net/http drained
// the rest of a body that was never sent.
func TestChunkedOverLimitClosed(t *testing.T) {
	base := serve(t, nil, func(c *Config) { c.BodyTimeout = time.Minute })
	conn, err := net.Dial("tcp", strings.TrimPrefix(base, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	chunk := strings.Repeat("x", 5000)
	if _, err := conn.Write([]byte("POST /v1/rounds HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n1388\r\n" + chunk + "\r\n")); err != nil {
		t.Fatal(err)
	}
	const wait = 10 * time.Second // well under BodyTimeout
	_ = conn.SetReadDeadline(time.Now().Add(wait))
	br := bufio.NewReader(conn)
	resp, err := http.ReadResponse(br, nil)
	if err != nil {
		t.Fatalf("no answer within %v: %v", wait, err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusRequestEntityTooLarge || !strings.Contains(string(b), "over 4096 bytes") {
		t.Errorf("%d %s; want 413 naming the limit", resp.StatusCode, b)
	}
	if _, err := io.ReadAll(br); err != nil {
		t.Errorf("the connection was not closed after the answer: %v", err)
	}
}

// Every refusal has its HTTP status, and the body is the JSON error body
// ({"error", "reason"}) or the reply's own JSON with its error field: the
// edge's (400, 403, 413, 429), the daemon's answers to calls (404, 409,
// 500, 503), and a stream refused at once (400, 404, 409, 503); a stream
// refused after an event keeps 200 and ends with the refusal.
func TestRefusalStatuses(t *testing.T) {
	p, err := edge.ParsePolicy([]byte(`{"version":1,"grants":[{"identities":["*"],"users":["a","down"],"kinds":["rounds","control","login","account"]}]}`))
	if err != nil {
		t.Fatal(err)
	}
	base := serve(t, p, nil)
	rated := serve(t, nil, func(c *Config) {
		c.Gate = edge.New(edge.Config{Self: "local", Root: c.Root, PeerRate: 0.001, PeerBurst: 1})
	})
	for _, tt := range []struct {
		name, method, url, body string
		status                  int
		want                    string // in the JSON body's "error"
	}{
		{"malformed", "POST", "/v1/models", `{"user":`, 400, "not a JSON object"},
		{"invalid", "POST", "/v1/interrupt", `{"user":"a"}`, 400, "thread"},
		{"invalid round", "POST", "/v1/rounds", `{"user":"a","thread":"t","text":"invalid"}`, 400, "thread is too long"},
		{"not granted", "POST", "/v1/models", `{"user":"bob"}`, 403, `may not send account for user \"bob\"`},
		{"unknown round, attach", "GET", "/v1/rounds/unknown/events?user=a", "", 404, "no such round"},
		{"unknown round, attach POST", "POST", "/v1/attach", `{"user":"a","round_id":"unknown"}`, 404, "no such round"},
		{"unknown round, answer", "POST", "/v1/answer", `{"user":"a","round_id":"r9","request_id":"q","decision":"accept"}`, 404, "no such round"},
		{"busy", "POST", "/v1/rounds", `{"user":"a","thread":"t","text":"busy"}`, 409, "a round running"},
		{"budget spent", "POST", "/v1/rounds", `{"user":"a","thread":"t","text":"budget"}`, 429, "token budget is spent"},
		{"no running round", "POST", "/v1/interrupt", `{"user":"a","thread":"t","round_id":"gone"}`, 409, "no round is running"},
		{"too large", "POST", "/v1/rounds", `{"user":"a","thread":"t","text":"` + strings.Repeat("x", 5000) + `"}`, 413, "over 4096 bytes"},
		{"disk full", "POST", "/v1/api_key", `{"user":"a","api_key":"sk-x"}`, 500, "no space left"},
		{"draining", "POST", "/v1/rounds", `{"user":"a","thread":"t","text":"drain"}`, 503, "shutting down"},
		{"user cap, round", "POST", "/v1/rounds", `{"user":"a","thread":"t","text":"capped"}`, 503, "cap of 2 live users"},
		{"user cap, call", "POST", "/v1/models", `{"user":"a"}`, 503, "cap of 2 live users"},
		{"codex cannot answer", "POST", "/v1/account", `{"user":"down"}`, 503, "unavailable"},
		{"no route", "POST", "/v1/nope", `{}`, 404, "no route"},
		{"wrong method", "GET", "/v1/models", "", 404, "no route"},
		{"dot segment", "GET", "/v1/rounds/./events?user=a", "", 404, "no route"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			req, _ := http.NewRequestWithContext(t.Context(), tt.method, base+tt.url, strings.NewReader(tt.body))
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			defer resp.Body.Close()
			b, _ := io.ReadAll(resp.Body)
			var body struct {
				Error string `json:"error"`
			}
			if resp.StatusCode != tt.status || resp.Header.Get("Content-Type") != "application/json" {
				t.Errorf("%d %q %s; want %d, JSON", resp.StatusCode, resp.Header.Get("Content-Type"), b, tt.status)
			}
			if err := json.Unmarshal(b, &body); err != nil || !strings.Contains(body.Error, strings.ReplaceAll(tt.want, `\"`, `"`)) {
				t.Errorf("body %s (%v): want a JSON error naming %q", b, err, tt.want)
			}
		})
	}
	t.Run("rate", func(t *testing.T) {
		for i, want := range []int{200, 429} {
			resp := post(t, rated+"/v1/account", `{"user":"a"}`)
			b, _ := io.ReadAll(resp.Body)
			if resp.StatusCode != want || (want == 429 && !strings.Contains(string(b), `"reason":"rate"`)) {
				t.Errorf("request %d: %d %s, want %d", i, resp.StatusCode, b, want)
			}
		}
	})
	t.Run("budget's Retry-After", func(t *testing.T) {
		resp := post(t, base+"/v1/rounds", `{"user":"a","thread":"t","text":"budget"}`)
		b, _ := io.ReadAll(resp.Body)
		ra, err := strconv.Atoi(resp.Header.Get("Retry-After"))
		if resp.StatusCode != 429 || err != nil || ra < 110 || ra > 120 || !strings.Contains(string(b), `"class":"budget"`) {
			t.Errorf("%d, Retry-After %q, %s: want 429, about 120 s, the budget's class", resp.StatusCode, resp.Header.Get("Retry-After"), b)
		}
	})
	t.Run("refused after an event", func(t *testing.T) {
		resp := post(t, base+"/v1/rounds", `{"user":"a","thread":"t","text":"late-refusal"}`)
		evs := readSSE(t, resp.Body)
		if resp.StatusCode != 200 || len(evs) != 2 || evs[1].event != "round_finished" || !strings.Contains(evs[1].data, `"status":"unavailable"`) {
			t.Errorf("%d %+v; want 200, an event, then the verdict", resp.StatusCode, evs)
		}
	})
}

// TestTwoURISANsForbidden: a caller whose certificate carries two URI SANs
// is refused with 403 naming them, even when the first is granted and the
// TLS config let it through; the same caller with one of them is served.
func TestTwoURISANsForbidden(t *testing.T) {
	p, err := edge.ParsePolicy([]byte(`{"version":1,"grants":[{"identities":["spiffe://mesh/alice"],"users":["alice"],"kinds":["control"]}]}`))
	if err != nil {
		t.Fatal(err)
	}
	_, gw := serveGW(t, p, nil)
	alice, _ := url.Parse("spiffe://mesh/alice")
	bob, _ := url.Parse("spiffe://mesh/bob")
	do := func(uris ...*url.URL) (int, string) {
		r := httptest.NewRequestWithContext(t.Context(), http.MethodPost, "/v1/interrupt", strings.NewReader(`{"user":"alice","thread":"t"}`))
		r.TLS = &tls.ConnectionState{PeerCertificates: []*x509.Certificate{{URIs: uris}}}
		w := httptest.NewRecorder()
		gw.Handler().ServeHTTP(w, r)
		return w.Code, w.Body.String()
	}
	if code, body := do(alice, bob); code != http.StatusForbidden || !strings.Contains(body, "2 URI SANs") {
		t.Errorf("two URI SANs, the first granted: %d %s; want 403 naming them", code, body)
	}
	if code, body := do(alice); code != http.StatusOK {
		t.Errorf("one granted URI SAN: %d %s; want 200", code, body)
	}
}
