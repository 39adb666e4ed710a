package mcpecho_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/meshweaver/supervisor/mcpecho"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

func start(t *testing.T, opts mcpecho.Options) *mcpecho.Server {
	t.Helper()
	if opts.Logf == nil {
		opts.Logf = t.Logf
	}
	s, err := mcpecho.Start(opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.Close)
	return s
}

// client is an HTTP client without keep-alive, so no transport goroutine
// outlives a test.
func client() *http.Client {
	return &http.Client{Transport: &http.Transport{DisableKeepAlives: true}, Timeout: 10 * time.Second}
}

type response struct {
	status int
	header http.Header
	body   []byte
}

func (r response) json(t *testing.T) map[string]any {
	t.Helper()
	var v map[string]any
	if err := json.Unmarshal(r.body, &v); err != nil {
		t.Fatalf("body %q: %v", r.body, err)
	}
	return v
}

func do(t *testing.T, method, url, body string, header map[string]string) response {
	t.Helper()
	req, err := http.NewRequest(method, url, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json, text/event-stream")
	for k, v := range header {
		req.Header.Set(k, v)
	}
	resp, err := client().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return response{status: resp.StatusCode, header: resp.Header, body: b}
}

func TestConversation(t *testing.T) {
	s := start(t, mcpecho.Options{})
	if !strings.HasSuffix(s.URL(), "/mcp") || !strings.HasPrefix(s.URL(), "http://127.0.0.1:") {
		t.Fatalf("URL = %s", s.URL())
	}

	r := do(t, "POST", s.URL(), `{"jsonrpc":"2.0","id":0,"method":"initialize","params":{"protocolVersion":"2025-03-26","capabilities":{},"clientInfo":{"name":"t","version":"1"}}}`, nil)
	if r.status != 200 || r.header.Get("Content-Type") != "application/json" {
		t.Fatalf("initialize: %d %v %s", r.status, r.header, r.body)
	}
	sid := r.header.Get("Mcp-Session-Id")
	if len(sid) != 32 {
		t.Errorf("session id %q", sid)
	}
	res := r.json(t)["result"].(map[string]any)
	if got, want := res["protocolVersion"], "2025-03-26"; got != want {
		t.Errorf("protocolVersion = %v, want %v", got, want)
	}
	if _, ok := res["capabilities"].(map[string]any)["tools"]; !ok {
		t.Errorf("no tools capability: %v", res)
	}

	h := map[string]string{"Mcp-Session-Id": sid, "Authorization": "Bearer abc"}
	if r := do(t, "POST", s.URL(), `{"jsonrpc":"2.0","method":"notifications/initialized"}`, h); r.status != http.StatusAccepted || len(r.body) != 0 {
		t.Errorf("notification: %d %q, want 202 and no body", r.status, r.body)
	}

	r = do(t, "POST", s.URL(), `{"jsonrpc":"2.0","id":"a","method":"tools/list","params":{}}`, h)
	var list struct {
		ID     string `json:"id"`
		Result struct {
			Tools []struct {
				Name        string         `json:"name"`
				InputSchema map[string]any `json:"inputSchema"`
			} `json:"tools"`
		} `json:"result"`
	}
	if err := json.Unmarshal(r.body, &list); err != nil {
		t.Fatal(err)
	}
	if list.ID != "a" || len(list.Result.Tools) != 2 || list.Result.Tools[0].Name != "echo" || list.Result.Tools[1].Name != "fail" {
		t.Errorf("tools/list = %s", r.body)
	}

	r = do(t, "POST", s.URL(), `{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"echo","arguments":{"text":"hi there"},"_meta":{"k":1}}}`, h)
	res = r.json(t)["result"].(map[string]any)
	if got := res["content"].([]any)[0].(map[string]any)["text"]; got != "echo: hi there" {
		t.Errorf("echo content = %v", got)
	}
	if got := res["structuredContent"].(map[string]any)["echoed"]; got != "hi there" || res["isError"] != false {
		t.Errorf("echo result = %v", res)
	}

	r = do(t, "POST", s.URL(), `{"jsonrpc":"2.0","id":3,"method":"tools/call","params":{"name":"fail","arguments":{}}}`, h)
	if res := r.json(t)["result"].(map[string]any); res["isError"] != true {
		t.Errorf("fail result = %v", res)
	}

	r = do(t, "POST", s.URL(), `{"jsonrpc":"2.0","id":4,"method":"nope"}`, h)
	if e := r.json(t)["error"].(map[string]any); e["code"] != float64(-32601) {
		t.Errorf("unknown method: %s", r.body)
	}

	if r := do(t, "GET", s.URL(), "", h); r.status != http.StatusMethodNotAllowed {
		t.Errorf("GET: %d, want 405", r.status)
	}
	if r := do(t, "DELETE", s.URL(), "", h); r.status != http.StatusOK {
		t.Errorf("DELETE: %d, want 200", r.status)
	}

	reqs := s.Requests()
	if len(reqs) != 8 {
		t.Fatalf("%d requests recorded, want 8", len(reqs))
	}
	for i, r := range reqs {
		if r.Seq != i {
			t.Errorf("request %d has Seq %d", i, r.Seq)
		}
	}
	if !reqs[0].HasMethod("initialize") || reqs[0].Authorization() != "" {
		t.Errorf("first request = %+v", reqs[0])
	}
	if !reqs[2].HasMethod("tools/list") || reqs[2].Authorization() != "Bearer abc" || reqs[2].Header.Get("Mcp-Session-Id") != sid {
		t.Errorf("tools/list request = %+v", reqs[2])
	}
	if reqs[6].Method != "GET" || reqs[6].Status != 405 {
		t.Errorf("GET request = %+v", reqs[6])
	}
	calls := s.Calls()
	if len(calls) != 2 || calls[0].Tool != "echo" || string(calls[0].Arguments) != `{"text":"hi there"}` ||
		string(calls[0].Meta) != `{"k":1}` || calls[0].Header.Get("Authorization") != "Bearer abc" || calls[1].Tool != "fail" {
		t.Errorf("calls = %+v", calls)
	}
}

func TestUnknownVersionGetsDefault(t *testing.T) {
	s := start(t, mcpecho.Options{})
	r := do(t, "POST", s.URL(), `{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"1999-01-01"}}`, nil)
	if got := r.json(t)["result"].(map[string]any)["protocolVersion"]; got != mcpecho.ProtocolVersion {
		t.Errorf("protocolVersion = %v, want %s", got, mcpecho.ProtocolVersion)
	}
}

func TestToken(t *testing.T) {
	s := start(t, mcpecho.Options{Token: "s3cret"})
	body := `{"jsonrpc":"2.0","id":1,"method":"ping"}`
	for _, h := range []map[string]string{nil, {"Authorization": "Bearer wrong"}, {"Authorization": "s3cret"}} {
		if r := do(t, "POST", s.URL(), body, h); r.status != http.StatusUnauthorized || r.header.Get("WWW-Authenticate") == "" {
			t.Errorf("with %v: %d, want 401 with WWW-Authenticate", h, r.status)
		}
	}
	if r := do(t, "POST", s.URL(), body, map[string]string{"Authorization": "Bearer s3cret"}); r.status != 200 {
		t.Errorf("with the token: %d %s", r.status, r.body)
	}
	reqs := s.Requests()
	if len(reqs) != 4 || reqs[0].Status != 401 || reqs[3].Status != 200 || !reqs[0].HasMethod("ping") {
		t.Errorf("requests = %+v", reqs)
	}
}

func TestAnnotations(t *testing.T) {
	s := start(t, mcpecho.Options{Annotations: map[string]map[string]any{"echo": {"readOnlyHint": true}}})
	r := do(t, "POST", s.URL(), `{"jsonrpc":"2.0","id":1,"method":"tools/list"}`, nil)
	tools := r.json(t)["result"].(map[string]any)["tools"].([]any)
	if a := tools[0].(map[string]any)["annotations"]; a == nil || a.(map[string]any)["readOnlyHint"] != true {
		t.Errorf("echo annotations = %v", a)
	}
	if _, ok := tools[1].(map[string]any)["annotations"]; ok {
		t.Errorf("fail has annotations")
	}
}

func TestBatchAndErrors(t *testing.T) {
	s := start(t, mcpecho.Options{})
	r := do(t, "POST", s.URL(), `[{"jsonrpc":"2.0","id":1,"method":"ping"},{"jsonrpc":"2.0","method":"notifications/x"},{"jsonrpc":"2.0","id":2,"method":"tools/list"}]`, nil)
	var replies []map[string]any
	if err := json.Unmarshal(r.body, &replies); err != nil || len(replies) != 2 || replies[0]["id"] != float64(1) || replies[1]["id"] != float64(2) {
		t.Errorf("batch reply %s (%v)", r.body, err)
	}
	if r := do(t, "POST", s.URL(), `{not json`, nil); r.status != 400 || !bytes.Contains(r.body, []byte("-32700")) {
		t.Errorf("garbage: %d %s", r.status, r.body)
	}
	// A response from the client needs no answer.
	if r := do(t, "POST", s.URL(), `{"jsonrpc":"2.0","id":7,"result":{}}`, nil); r.status != http.StatusAccepted {
		t.Errorf("client response: %d, want 202", r.status)
	}
	if r := do(t, "POST", strings.TrimSuffix(s.URL(), "/mcp")+"/other", `{}`, nil); r.status != 404 {
		t.Errorf("other path: %d, want 404", r.status)
	}
	if r := do(t, "PUT", s.URL(), `{}`, nil); r.status != http.StatusMethodNotAllowed {
		t.Errorf("PUT: %d, want 405", r.status)
	}
}

func TestWaitAndClose(t *testing.T) {
	s := start(t, mcpecho.Options{})
	done := make(chan []mcpecho.Request, 1)
	go func() {
		rs, _ := s.WaitRequests(context.Background(), 2)
		done <- rs
	}()
	do(t, "POST", s.URL(), `{"jsonrpc":"2.0","id":1,"method":"ping"}`, nil)
	do(t, "POST", s.URL(), `{"jsonrpc":"2.0","id":2,"method":"ping"}`, nil)
	select {
	case rs := <-done:
		if len(rs) != 2 {
			t.Errorf("WaitRequests returned %d", len(rs))
		}
	case <-time.After(10 * time.Second):
		t.Fatal("WaitRequests did not return")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Millisecond)
	defer cancel()
	if _, err := s.WaitRequests(ctx, 3); !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("err = %v, want deadline", err)
	}
	s.Close()
	s.Close()
	if _, err := s.WaitRequests(context.Background(), 3); !errors.Is(err, mcpecho.ErrClosed) {
		t.Errorf("after Close: %v, want ErrClosed", err)
	}
}
