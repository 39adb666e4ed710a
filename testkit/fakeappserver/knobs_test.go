package fakeappserver_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/meshweaver/supervisor/testkit/fakeappserver"
)

func TestGarbageLines(t *testing.T) {
	c := serve(t, fakeappserver.Fake{GarbageLines: true})
	c.tolerant = true
	c.initialize()
	thread := c.startThread()
	c.callOK("turn/start", map[string]any{"threadId": thread, "input": textInput("hi")})
	done, before := c.until("turn/completed")
	if str(done.Params, "turn", "status") != "completed" {
		t.Errorf("turn with garbage around it: %v", done)
	}
	// One garbage line precedes every message.
	if want := len(before) + 1 + 4; c.garbage != want { // + turn/completed + 2 answers + thread/started + turn/start answer
		t.Errorf("skipped %d garbage lines, want %d", c.garbage, want)
	}
}

// TestJunkLines: JunkLines lines follow the initialize answer, each of
// them one a client must skip or drop (not JSON, not an object, an answer
// to an id never sent, params that are no object), and the fake then
// serves on; with JunkOnMethod (and JunkOnText) they follow that method's
// answer (to params holding the text), once.
func TestJunkLines(t *testing.T) {
	const n = 30
	c := serve(t, fakeappserver.Fake{JunkLines: n})
	c.send(`{"id":1,"method":"initialize","params":{"clientInfo":{"name":"n","version":"1"}}}`)
	raw, ok := c.nextRaw()
	if !ok || str(raw, "result", "platformOs") != "linux" {
		t.Fatalf("initialize answer = %s", raw)
	}
	var forged, badParams, garbage int
	for range n {
		raw, ok := c.nextRaw()
		if !ok {
			t.Fatal("stdout closed")
		}
		var m map[string]json.RawMessage
		switch {
		case json.Unmarshal(raw, &m) != nil || m == nil: // null is no object
			garbage++
		case string(m["id"]) == "987654321":
			forged++
		case string(m["params"]) == `"not an object"`:
			badParams++
		default:
			t.Errorf("junk line %s is a usable message", raw)
		}
	}
	if forged != 3 || badParams != 3 || garbage != n-6 {
		t.Errorf("%d forged answers, %d bad params, %d garbage; want 3, 3, %d", forged, badParams, garbage, n-6)
	}
	c.send(`{"id":2,"method":"model/list","params":{}}`)
	if raw, ok := c.nextRaw(); !ok || !strings.Contains(string(raw), `"id":2`) {
		t.Errorf("after the junk, model/list answered %s", raw)
	}

	// On model/list whose params hold "flood": the second, not the first,
	// and once.
	c = serve(t, fakeappserver.Fake{JunkLines: 2, JunkOnMethod: "model/list", JunkOnText: "flood"})
	c.send(`{"id":1,"method":"initialize","params":{"clientInfo":{"name":"n","version":"1"}}}`)
	for i := 1; i <= 4; i++ {
		switch i {
		case 2:
			c.send(`{"id":2,"method":"model/list","params":{}}`)
		case 3, 4:
			c.send(fmt.Sprintf(`{"id":%d,"method":"model/list","params":{"cursor":"flood"}}`, i))
		}
		if raw, ok := c.nextRaw(); !ok || !strings.Contains(string(raw), fmt.Sprintf(`"id":%d`, i)) { // an answer or a refusal
			t.Fatalf("answer %d = %s", i, raw)
		}
		if i == 3 {
			for j := range 2 {
				if raw, _ := c.nextRaw(); json.Valid(raw) && raw[0] == '{' {
					t.Errorf("junk line %d after model/list = %s", j, raw)
				}
			}
		}
	}
}

func TestGarbageLinesRaw(t *testing.T) {
	c := serve(t, fakeappserver.Fake{GarbageLines: true})
	c.send(`{"id":1,"method":"initialize","params":{"clientInfo":{"name":"n","version":"1"}}}`)
	var nonJSON, nonObject int
	for {
		raw, ok := c.nextRaw()
		if !ok {
			t.Fatal("stdout closed")
		}
		var v any
		if err := json.Unmarshal(raw, &v); err != nil {
			nonJSON++
			continue
		}
		if _, isObj := v.(map[string]any); !isObj {
			nonObject++
			continue
		}
		if str(raw, "result", "platformOs") != "linux" {
			t.Errorf("answer = %s", raw)
		}
		break
	}
	if nonJSON+nonObject != 1 {
		t.Errorf("%d non-JSON and %d non-object lines before the answer, want 1 in all", nonJSON, nonObject)
	}
}

func TestHugeLineBytes(t *testing.T) {
	const size = 3 << 20
	// No schema checks: they triple this test's time under -race, and the
	// padded lines have the shapes TestTurn and TestConformance check.
	c := serveWith(t, fakeappserver.Fake{HugeLineBytes: size, ReplyText: "big reply"}, nil)
	c.initialize()
	thread := c.startThread()
	c.callOK("turn/start", map[string]any{"threadId": thread, "input": textInput("hi")})
	delta, _ := c.until("item/agentMessage/delta")
	if len(delta.raw) != size {
		t.Errorf("first delta line is %d bytes, want %d", len(delta.raw), size)
	}
	second, _ := c.until("item/agentMessage/delta")
	if str(second.Params, "delta") != "reply" {
		t.Errorf("second delta = %q", str(second.Params, "delta"))
	}
	done, _ := c.until("turn/completed")
	if n := len(str(done.Params, "turn", "items", "0", "text")); n < size-1000 {
		t.Errorf("turn/completed text is %d bytes, want the padded reply", n)
	}
}

func TestExitAfterMessages(t *testing.T) {
	record := filepath.Join(t.TempDir(), "record.jsonl")
	c := serve(t, fakeappserver.Fake{ExitAfterMessages: 3, ExitCode: 7, RecordPath: record, StderrLines: []string{"bye"}})
	c.initialize() // messages 1 and 2
	id := c.request("thread/start", map[string]any{})
	if code := exitCode(t, c.wait()); code != 7 {
		t.Errorf("exit code %d, want 7", code)
	}
	if rest := c.expectEOF(); len(rest) != 0 {
		t.Errorf("after the 3rd message the fake wrote %v, want nothing (request %s unanswered)", rest, id)
	}
	b, err := os.ReadFile(record)
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSuffix(string(b), "\n"), "\n")
	if len(lines) != 3 || !strings.Contains(lines[2], `"thread/start"`) || lines[1] != `{"method":"initialized"}` {
		t.Errorf("recorded %q, want the three lines received", lines)
	}
	if n := countLines(c.stderr.String(), "bye"); n != 2 {
		t.Errorf("StderrLines written %d times, want 2 (start and exit)", n)
	}
}

func TestExitOnMethod(t *testing.T) {
	c := serve(t, fakeappserver.Fake{ExitOnMethod: "turn/start", ExitCode: 9})
	c.initialize()
	thread := c.startThread()
	c.request("turn/start", map[string]any{"threadId": thread, "input": textInput("hi")})
	if code := exitCode(t, c.wait()); code != 9 {
		t.Errorf("exit code %d, want 9", code)
	}
	if rest := c.expectEOF(); len(rest) != 0 {
		t.Errorf("after turn/start the fake wrote %v, want nothing", methods(rest))
	}
}

func TestHangOnMethod(t *testing.T) {
	c := serve(t, fakeappserver.Fake{HangOnMethod: "model/list"})
	c.initialize()
	hung := c.request("model/list", map[string]any{})
	resp, before := c.call("account/read", map[string]any{})
	if resp.Error != nil || len(before) != 0 {
		t.Errorf("account/read after a hung model/list: %v after %v", resp, methods(before))
	}
	c.closeStdin()
	if err := c.wait(); err != nil {
		t.Fatal(err)
	}
	for _, m := range c.expectEOF() {
		if string(m.ID) == hung {
			t.Errorf("hung request answered: %v", m)
		}
	}
}

func TestStderrLines(t *testing.T) {
	secrets := []string{"Authorization: Bearer abc", "OPENAI_API_KEY=sk-proj-FAKEFAKEFAKE"}
	c := serve(t, fakeappserver.Fake{StderrLines: secrets})
	// Written before any input: the first request's answer implies it.
	c.initialize()
	for _, s := range secrets {
		if n := countLines(c.stderr.String(), s); n != 1 {
			t.Errorf("%q written %d times before exit, want 1", s, n)
		}
	}
	c.closeStdin()
	if err := c.wait(); err != nil {
		t.Fatal(err)
	}
	for _, s := range secrets {
		if n := countLines(c.stderr.String(), s); n != 2 {
			t.Errorf("%q written %d times in all, want 2", s, n)
		}
	}
}

func TestOverloaded(t *testing.T) {
	t.Run("one method", func(t *testing.T) {
		c := serve(t, fakeappserver.Fake{OverloadedTimes: 2, OverloadedMethod: "thread/start"})
		c.initialize()
		for i := 0; i < 2; i++ {
			if e := c.callErr("thread/start", map[string]any{}); e.Code != -32001 || e.Message != "Server overloaded; retry later." {
				t.Errorf("attempt %d: got %d %q, want -32001", i+1, e.Code, e.Message)
			}
		}
		c.callOK("thread/start", map[string]any{})
	})
	t.Run("every method", func(t *testing.T) {
		c := serve(t, fakeappserver.Fake{OverloadedTimes: 1})
		if e := c.callErr("initialize", map[string]any{"clientInfo": map[string]any{"name": "n", "version": "1"}}); e.Code != -32001 {
			t.Errorf("first initialize: %d %q, want -32001", e.Code, e.Message)
		}
		c.initialize()
		if e := c.callErr("account/read", map[string]any{}); e.Code != -32001 {
			t.Errorf("first account/read: %d %q, want -32001", e.Code, e.Message)
		}
		c.callOK("account/read", map[string]any{})
	})
}

func TestUnknownNotifications(t *testing.T) {
	unknown := []string{"codex/futureThing", "item/somethingNew/delta"}
	c := serve(t, fakeappserver.Fake{UnknownNotifications: unknown})
	c.initialize()
	thread := c.startThread()
	res, _ := c.callOK("turn/start", map[string]any{"threadId": thread, "input": textInput("hi")})
	_, got := c.until("turn/completed")
	ms := methods(got)
	i := 4 // after status, turn/started, user item started/completed
	if !reflect.DeepEqual(ms[i:i+2], unknown) || ms[i+2] != "item/started" {
		t.Fatalf("turn notifications %v, want %v after the user message", ms, unknown)
	}
	if err := c.v.ValidateServerNotification(got[i].raw); err == nil {
		t.Errorf("%s validates, want the schema to reject it", got[i].Method)
	}
	if str(got[i].Params, "turnId") != str(res, "turn", "id") {
		t.Errorf("unknown notification params = %s", got[i].Params)
	}
}

// approvalTurn starts a turn that sends one server request and returns it
// with the turn id.
func approvalTurn(t *testing.T, c *conn, thread string) (req msg, turnID string) {
	t.Helper()
	res, _ := c.callOK("turn/start", map[string]any{"threadId": thread, "input": textInput("needs approval")})
	turnID = str(res, "turn", "id")
	for {
		m := c.next()
		if m.isServerRequest() {
			return m, turnID
		}
	}
}

func TestServerRequestCommandApproval(t *testing.T) {
	tests := []struct {
		answer     string // a result, or "" for an error answer
		itemStatus string
		turnStatus string
	}{
		{`{"decision":"accept"}`, "completed", "completed"},
		{`{"decision":"decline"}`, "declined", "completed"},
		{`{"decision":"cancel"}`, "declined", "interrupted"},
		{``, "failed", "completed"},
	}
	for _, tt := range tests {
		t.Run(tt.itemStatus+"/"+tt.turnStatus, func(t *testing.T) {
			c := serve(t, fakeappserver.Fake{ServerRequests: []fakeappserver.ServerRequestSpec{{Method: "item/commandExecution/requestApproval"}}})
			c.initialize()
			thread := c.startThread()
			req, turnID := approvalTurn(t, c, thread)
			if string(req.ID) != "0" || req.Method != "item/commandExecution/requestApproval" ||
				str(req.Params, "threadId") != thread || str(req.Params, "turnId") != turnID || str(req.Params, "kind") != "command" {
				t.Fatalf("server request = %v", req)
			}
			if tt.answer == "" {
				c.send(`{"id":0,"error":{"code":-32000,"message":"client refused to answer"}}`)
			} else {
				c.answer(req, json.RawMessage(tt.answer))
			}
			done, got := c.until("turn/completed")
			if got[0].Method != "serverRequest/resolved" || dig(got[0].Params, "requestId") != 0.0 {
				t.Errorf("first after the answer: %v, want serverRequest/resolved", got[0])
			}
			echo := got[1]
			if echo.Method != "fake/answer" || str(echo.Params, "method") != req.Method || dig(echo.Params, "stale") != false {
				t.Errorf("second after the answer: %v, want fake/answer", echo)
			}
			if tt.answer == "" {
				if dig(echo.Params, "error", "code") != -32000.0 {
					t.Errorf("fake/answer error = %s", echo.Params)
				}
			} else if got := string(marshalT(t, dig(echo.Params, "result"))); got != tt.answer {
				t.Errorf("fake/answer result = %s, want %s", got, tt.answer)
			}
			var item msg
			for _, m := range got {
				if m.Method == "item/completed" && str(m.Params, "item", "type") == "commandExecution" {
					item = m
				}
			}
			if s := str(item.Params, "item", "status"); s != tt.itemStatus {
				t.Errorf("command item status %q, want %q", s, tt.itemStatus)
			}
			if s := str(done.Params, "turn", "status"); s != tt.turnStatus {
				t.Errorf("turn status %q, want %q", s, tt.turnStatus)
			}
		})
	}
}

func marshalT(t *testing.T, v any) []byte {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func TestServerRequestsInOrder(t *testing.T) {
	c := serve(t, fakeappserver.Fake{ServerRequests: []fakeappserver.ServerRequestSpec{
		{Method: "item/fileChange/requestApproval"},
		{Method: "mcpServer/elicitation/request"},
		{Method: "item/tool/requestUserInput"},
		{Method: "item/unknown/request"},
		{Method: "custom/params", Params: json.RawMessage(`{"thread":"${threadId}","turn":"${turnId}","n":1}`), OnTurn: 2},
	}})
	c.initialize()
	thread := c.startThread()
	answers := map[string]any{
		"item/fileChange/requestApproval": map[string]any{"decision": "accept"},
		"mcpServer/elicitation/request":   map[string]any{"action": "accept", "content": map[string]any{}, "_meta": nil},
		"item/tool/requestUserInput":      map[string]any{"answers": map[string]any{"db_choice": map[string]any{"answers": []any{"SQLite"}}}},
	}
	for turn := 1; turn <= 2; turn++ {
		res, _ := c.callOK("turn/start", map[string]any{"threadId": thread, "input": textInput("go")})
		turnID := str(res, "turn", "id")
		var seen []string
		for {
			m := c.next()
			if m.Method == "turn/completed" {
				if str(m.Params, "turn", "status") != "completed" {
					t.Errorf("turn %d: %v", turn, m)
				}
				break
			}
			if !m.isServerRequest() {
				continue
			}
			seen = append(seen, m.Method)
			switch m.Method {
			case "item/unknown/request":
				if str(m.Params, "turnId") != turnID {
					t.Errorf("unknown request params = %s", m.Params)
				}
				c.send(`{"id":` + string(m.ID) + `,"error":{"code":-32601,"message":"unknown method"}}`)
			case "custom/params":
				if str(m.Params, "thread") != thread || str(m.Params, "turn") != turnID || dig(m.Params, "n") != 1.0 {
					t.Errorf("custom params = %s", m.Params)
				}
				c.answer(m, map[string]any{"ok": true})
			default:
				c.answer(m, answers[m.Method])
			}
			echo, _ := c.until("fake/answer")
			if str(echo.Params, "method") != m.Method || string(marshalT(t, dig(echo.Params, "requestId"))) != string(m.ID) {
				t.Errorf("fake/answer %s for %v", echo.Params, m)
			}
		}
		want := []string{"item/fileChange/requestApproval", "mcpServer/elicitation/request", "item/tool/requestUserInput", "item/unknown/request"}
		if turn == 2 {
			want = append(want, "custom/params")
		}
		if !reflect.DeepEqual(seen, want) {
			t.Errorf("turn %d server requests %v, want %v", turn, seen, want)
		}
	}
}

func TestServerRequestInterrupted(t *testing.T) {
	c := serve(t, fakeappserver.Fake{ServerRequests: []fakeappserver.ServerRequestSpec{{Method: "item/commandExecution/requestApproval"}}})
	c.initialize()
	thread := c.startThread()
	req, turnID := approvalTurn(t, c, thread)
	c.callOK("turn/interrupt", map[string]any{"threadId": thread, "turnId": turnID})
	done, _ := c.until("turn/completed")
	if str(done.Params, "turn", "status") != "interrupted" {
		t.Errorf("turn/completed = %s", done.Params)
	}
	if m := c.next(); m.Method != "serverRequest/resolved" || dig(m.Params, "requestId") != 0.0 {
		t.Errorf("after turn/completed: %v, want serverRequest/resolved", m)
	}
	c.answer(req, map[string]any{"decision": "accept"})
	echo := c.next()
	if echo.Method != "fake/answer" || dig(echo.Params, "stale") != true {
		t.Errorf("late answer: %v, want fake/answer with stale true", echo)
	}
	// Nothing else happens: the next request is answered straight away.
	if _, before := c.callOK("account/read", map[string]any{}); len(before) != 0 {
		t.Errorf("after a stale answer: %v", methods(before))
	}
}

func TestIgnoreStdinEOF(t *testing.T) {
	c := serve(t, fakeappserver.Fake{IgnoreStdinEOF: true})
	c.initialize()
	c.closeStdin()
	// The fake logs once it has seen EOF and decided to stay.
	waitFor(t, func() bool { return strings.Contains(c.stderr.String(), "ignoring EOF") }, c)
	select {
	case err := <-c.done:
		c.served, c.serveErr = true, err
		t.Fatalf("Serve returned %v after EOF, want it to keep running", err)
	default:
	}
	c.cancel()
	if err := c.wait(); !errors.Is(err, context.Canceled) {
		t.Errorf("Serve after cancel = %v, want context.Canceled", err)
	}
}

// waitFor waits until cond holds, re-checking it whenever the fake writes to
// stderr (the fake logs before it blocks), so it never sleeps.
func waitFor(t *testing.T, cond func() bool, c *conn) {
	t.Helper()
	deadline := time.NewTimer(timeout)
	defer deadline.Stop()
	for {
		changed := c.stderr.changed()
		if cond() {
			return
		}
		select {
		case <-deadline.C:
			t.Fatalf("condition not met within %v; stderr:\n%s", timeout, c.stderr)
		case <-changed:
		}
	}
}

func TestUpstreamRetryMs(t *testing.T) {
	c := serve(t, fakeappserver.Fake{UpstreamRetryMs: 5})
	c.initialize()
	thread := c.startThread()
	res, _ := c.callOK("turn/start", map[string]any{"threadId": thread, "input": textInput("hi")})
	turnID := str(res, "turn", "id")
	for i := 1; i <= 6; i++ {
		e, before := c.until("error")
		for _, m := range before {
			if strings.HasPrefix(m.Method, "item/agentMessage") {
				t.Fatalf("a retrying turn streamed an answer: %v", m)
			}
		}
		if got, want := str(e.Params, "error", "message"), fmt.Sprintf("Reconnecting... %d/5", (i-1)%5+1); got != want {
			t.Errorf("retry %d: message %q, want %q", i, got, want)
		}
		if dig(e.Params, "willRetry") != true || str(e.Params, "turnId") != turnID {
			t.Errorf("retry %d: %v, want willRetry for turn %s", i, e, turnID)
		}
	}
	c.callOK("turn/interrupt", map[string]any{"threadId": thread, "turnId": turnID})
	done, _ := c.until("turn/completed")
	if str(done.Params, "turn", "status") != "interrupted" {
		t.Errorf("turn/completed after the interrupt: %v", done)
	}
}

// MCPStartup reports each enabled overlay server's startup after
// thread/start and thread/resume; MCPStartupOn holds the final status back
// until a request of that method arrives.
func TestMCPStartup(t *testing.T) {
	overlay := map[string]any{"mcp_servers": map[string]any{
		"meshweaver": map[string]any{"url": "http://127.0.0.1:1/mcp"},
		"off":        map[string]any{"url": "http://127.0.0.1:9/disabled", "enabled": false},
	}}
	statuses := func(ms []msg) (out []string) {
		for _, m := range ms {
			if m.Method == "mcpServer/startupStatus/updated" {
				out = append(out, str(m.Params, "name")+":"+str(m.Params, "status"))
			}
		}
		return out
	}

	c := serve(t, fakeappserver.Fake{MCPStartup: "failed", MCPStartupOn: "account/read"})
	c.initialize()
	res, _ := c.callOK("thread/start", map[string]any{"cwd": "/work/x", "config": overlay})
	thread := str(res, "thread", "id")
	_, before := c.callOK("account/read", map[string]any{})
	if got := statuses(before); fmt.Sprint(got) != "[meshweaver:starting meshweaver:failed]" {
		t.Fatalf("statuses before account/read's answer = %v, want starting, then failed (held until account/read)", got)
	}
	last := before[len(before)-1]
	if str(last.Params, "threadId") != thread || !strings.Contains(str(last.Params, "error"), "http://127.0.0.1:1/mcp") {
		t.Errorf("failed status = %s, want thread %s and an error naming the URL", last.raw, thread)
	}
	// Held statuses are sent once; a start without servers reports none.
	c.callOK("thread/start", map[string]any{"cwd": "/work/x"})
	if _, before := c.callOK("account/read", map[string]any{}); len(statuses(before)) != 0 {
		t.Errorf("statuses %v, want none", statuses(before))
	}

	c = serve(t, fakeappserver.Fake{MCPStartup: "ready"})
	c.initialize()
	c.callOK("thread/start", map[string]any{"cwd": "/work/x", "config": overlay})
	if _, before := c.callOK("account/read", map[string]any{}); fmt.Sprint(statuses(before)) != "[meshweaver:starting meshweaver:ready]" {
		t.Errorf("statuses = %v, want starting, ready", statuses(before))
	}
}

// model/list: hidden models only with includeHidden, pages by limit (or
// ModelPageSize) with the next offset as cursor, the real errors for a bad
// cursor.
func TestModelListPages(t *testing.T) {
	ids := func(res json.RawMessage) (out []string) {
		var r struct {
			Data []struct {
				ID string `json:"id"`
			} `json:"data"`
		}
		if err := json.Unmarshal(res, &r); err != nil {
			t.Fatal(err)
		}
		for _, m := range r.Data {
			out = append(out, m.ID)
		}
		return out
	}
	c := serve(t, fakeappserver.Fake{ModelPageSize: 4})
	c.initialize()
	var visible, all []string
	for _, hidden := range []bool{false, true} {
		var got []string
		cursor := any(nil)
		for pages := 0; ; pages++ {
			if pages > 10 {
				t.Fatal("model/list never ends")
			}
			res, _ := c.callOK("model/list", map[string]any{"cursor": cursor, "includeHidden": hidden})
			page := ids(res)
			if len(page) > 4 {
				t.Errorf("page of %d models, want at most 4", len(page))
			}
			got = append(got, page...)
			if cursor = dig(res, "nextCursor"); cursor == nil {
				break
			}
		}
		if hidden {
			all = got
		} else {
			visible = got
		}
	}
	if len(visible) != 9 || len(all) != 12 || !strings.Contains(fmt.Sprint(all), "codex-auto-review") || strings.Contains(fmt.Sprint(visible), "codex-auto-review") {
		t.Errorf("visible %v (want 9), with hidden %v (want 12, codex-auto-review among them)", visible, all)
	}
	if res, _ := c.callOK("model/list", map[string]any{"cursor": "8", "limit": 2}); fmt.Sprint(ids(res)) != "[gpt-5.5]" || dig(res, "nextCursor") != nil {
		t.Errorf("the last page = %s", res)
	}
	if e := c.callErr("model/list", map[string]any{"cursor": "abc"}); e.Message != "invalid cursor: abc" {
		t.Errorf("bad cursor: %q", e.Message)
	}
	if e := c.callErr("model/list", map[string]any{"cursor": "99"}); e.Message != "cursor 99 exceeds total models 9" {
		t.Errorf("cursor past the end: %q", e.Message)
	}
}

// account/rateLimits/read: the real server's error without a ChatGPT login,
// RateLimits when set.
func TestRateLimits(t *testing.T) {
	c := serve(t, fakeappserver.Fake{})
	c.initialize()
	if e := c.callErr("account/rateLimits/read", nil); e.Code != -32600 || e.Message != "codex account authentication required to read rate limits" {
		t.Errorf("without RateLimits: %d %q", e.Code, e.Message)
	}
	want := `{"rateLimits":{"limitId":"codex","primary":null,"secondary":null}}`
	c = serve(t, fakeappserver.Fake{RateLimits: json.RawMessage(want)})
	c.initialize()
	if res, _ := c.callOK("account/rateLimits/read", nil); str(res, "rateLimits", "limitId") != "codex" {
		t.Errorf("with RateLimits: %s", res)
	}
}
