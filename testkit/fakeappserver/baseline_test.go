package fakeappserver_test

import (
	"encoding/json"
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"strings"
	"testing"

	"github.com/meshweaver/supervisor/testkit/fakeappserver"
)

var uuidV7 = regexp.MustCompile(`^[0-9a-f]{8}-[0-9a-f]{4}-7[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$`)

func TestInitialize(t *testing.T) {
	c := serve(t, fakeappserver.Fake{CodexHome: t.TempDir()})

	if e := c.callErr("thread/start", map[string]any{}); e.Code != -32600 || e.Message != "Not initialized" {
		t.Errorf("before initialize: got %d %q, want -32600 \"Not initialized\"", e.Code, e.Message)
	}
	res := c.initialize()
	if got, want := str(res, "userAgent"), "meshweaver/"+fakeappserver.Version+" (Debian 12.0.0; x86_64) xterm (meshweaver; 1.2.3)"; got != want {
		t.Errorf("userAgent = %q, want %q", got, want)
	}
	if str(res, "codexHome") == "" || str(res, "platformFamily") != "unix" || str(res, "platformOs") != "linux" {
		t.Errorf("initialize result = %s", res)
	}
	if e := c.callErr("initialize", map[string]any{"clientInfo": map[string]any{"name": "x", "version": "1"}}); e.Message != "Already initialized" {
		t.Errorf("second initialize: got %q, want \"Already initialized\"", e.Message)
	}
	c.closeStdin()
	if err := c.wait(); err != nil {
		t.Errorf("Serve after stdin EOF = %v, want nil", err)
	}
}

func TestRequestErrors(t *testing.T) {
	c := serve(t, fakeappserver.Fake{})
	c.initialize()

	// Not JSON: no answer, a log line, and the fake keeps serving.
	c.send(`this is not json`)
	c.send(`{"id":"str-id-1","jsonrpc":"2.0","method":"account/read","params":{}}`)
	c.sent[`"str-id-1"`] = "account/read"
	if resp, before := c.await(`"str-id-1"`); resp.Error != nil || len(before) != 0 {
		t.Errorf("after garbage: got %v (after %v), want a plain answer", resp, methods(before))
	}
	if !strings.Contains(c.stderr.String(), "Failed to deserialize JSONRPCMessage") {
		t.Errorf("stderr = %q, want the deserialize complaint", c.stderr)
	}

	c.send(`{"id":77,"method":"model/list"}`)
	if resp, _ := c.await("77"); resp.Error == nil || resp.Error.Message != "Invalid request: missing field `params`" {
		t.Errorf("missing params: got %v", resp)
	}

	c.send(`{"id":78,"method":"does/not/exist","params":{}}`)
	resp, _ := c.await("78")
	if resp.Error == nil || resp.Error.Code != -32600 ||
		!strings.HasPrefix(resp.Error.Message, "Invalid request: unknown variant `does/not/exist`, expected one of `initialize`, `server/diagnostics`, ") ||
		!strings.HasSuffix(resp.Error.Message, "`fuzzyFileSearch/sessionStop`") {
		t.Errorf("unknown method: got %v", resp)
	}
	if n := len(resp.Error.Message); n < 4000 {
		t.Errorf("unknown-method message is %d bytes, want the real ~4.5 KB list", n)
	}

	if e := c.callErr("thread/fork", map[string]any{"threadId": "x"}); e.Code != -32600 || !strings.Contains(e.Message, "not implemented") {
		t.Errorf("unimplemented method: got %d %q", e.Code, e.Message)
	}
}

func TestThreadLifecycle(t *testing.T) {
	home := t.TempDir()
	c := serve(t, fakeappserver.Fake{CodexHome: home})
	c.initialize()

	res, _ := c.callOK("thread/start", map[string]any{"cwd": "/work/x", "sandbox": "workspace-write", "approvalPolicy": "untrusted"})
	id := str(res, "thread", "id")
	if !uuidV7.MatchString(id) {
		t.Errorf("thread id %q is not a UUIDv7", id)
	}
	if got := str(res, "thread", "sessionId"); got != id {
		t.Errorf("sessionId = %q, want the thread id", got)
	}
	if str(res, "approvalPolicy") != "untrusted" || str(res, "sandbox", "type") != "workspaceWrite" || str(res, "cwd") != "/work/x" {
		t.Errorf("thread/start result = %s", res)
	}
	path := str(res, "thread", "path")
	if !strings.HasPrefix(path, filepath.Join(home, "sessions")+"/") || !strings.HasSuffix(path, "-"+id+".jsonl") {
		t.Errorf("thread path %q is not a rollout under %s", path, home)
	}
	if _, err := os.Stat(path); err != nil {
		t.Errorf("rollout file: %v", err)
	}
	started := c.next()
	if started.Method != "thread/started" || str(started.Params, "thread", "id") != id {
		t.Errorf("after thread/start result: got %v, want thread/started", started)
	}

	_, before := c.callOK("thread/name/set", map[string]any{"threadId": id, "name": "My thread"})
	if len(before) != 0 {
		t.Errorf("before thread/name/set answer: %v", methods(before))
	}
	upd := c.next()
	if upd.Method != "thread/name/updated" || str(upd.Params, "threadName") != "My thread" {
		t.Errorf("after thread/name/set: got %v", upd)
	}
	read, _ := c.callOK("thread/read", map[string]any{"threadId": id})
	if str(read, "thread", "name") != "My thread" {
		t.Errorf("thread/read = %s", read)
	}
	loaded, _ := c.callOK("thread/loaded/list", map[string]any{})
	if got := dig(loaded, "data"); !reflect.DeepEqual(got, []any{id}) {
		t.Errorf("thread/loaded/list data = %v, want [%s]", got, id)
	}

	resumed, _ := c.callOK("thread/resume", map[string]any{"threadId": id})
	if str(resumed, "thread", "id") != id || dig(resumed, "collaborationMode") == nil {
		t.Errorf("thread/resume of a loaded thread = %s", resumed)
	}
	if m := c.next(); m.Method != "thread/status/changed" || str(m.Params, "status", "type") != "idle" {
		t.Errorf("after thread/resume: got %v", m)
	}

	const unknown = "01a236ef-1774-72da-ac31-91afb56498f5"
	tests := []struct {
		method string
		params map[string]any
		want   string
	}{
		{"thread/resume", map[string]any{"threadId": unknown}, "no rollout found for thread id " + unknown},
		{"thread/resume", map[string]any{"threadId": "not-a-uuid"}, "invalid session id: invalid character: expected an optional prefix of `urn:uuid:` followed by [0-9a-fA-F-], found `n` at 1"},
		{"thread/resume", map[string]any{}, "Invalid request: missing field `threadId`"},
		{"thread/name/set", map[string]any{"threadId": unknown, "name": "x"}, "no rollout found for thread id " + unknown},
		{"thread/read", map[string]any{"threadId": unknown}, "thread not loaded: " + unknown},
		{"turn/start", map[string]any{"threadId": unknown, "input": textInput("hi")}, "thread not found: " + unknown},
		{"turn/interrupt", map[string]any{"threadId": id, "turnId": "not-a-turn"}, "no active turn to interrupt"},
		{"turn/steer", map[string]any{"threadId": id, "expectedTurnId": "x", "input": textInput("x")}, "no active turn to steer"},
	}
	for _, tt := range tests {
		c.v = nil // some of these params are deliberately invalid
		e := c.callErr(tt.method, tt.params)
		if e.Code != -32600 || e.Message != tt.want {
			t.Errorf("%s %v: got %d %q, want -32600 %q", tt.method, tt.params, e.Code, e.Message, tt.want)
		}
	}
}

func TestResumeAcrossProcesses(t *testing.T) {
	home := t.TempDir()
	first := serve(t, fakeappserver.Fake{CodexHome: home})
	first.initialize()
	id := first.startThread()
	first.closeStdin()
	if err := first.wait(); err != nil {
		t.Fatal(err)
	}

	const seeded = "01a236ef-1b5e-73a1-a4f1-f848ca3277e3"
	second := serve(t, fakeappserver.Fake{CodexHome: home, KnownThreads: []string{seeded}})
	second.initialize()
	for _, tid := range []string{id, seeded} {
		res, _ := second.callOK("thread/resume", map[string]any{"threadId": tid})
		if got := str(res, "thread", "id"); got != tid {
			t.Errorf("resumed thread %q, want %q", got, tid)
		}
		if got := str(res, "cwd"); tid == id && got != "/work/x" {
			t.Errorf("resumed cwd %q, want the one from the rollout", got)
		}
		// A resumed thread takes turns.
		_, _ = second.callOK("turn/start", map[string]any{"threadId": tid, "input": textInput("again")})
		if done, _ := second.until("turn/completed"); str(done.Params, "turn", "status") != "completed" {
			t.Errorf("turn on a resumed thread: %v", done)
		}
	}
}

func TestTurn(t *testing.T) {
	c := serve(t, fakeappserver.Fake{ReplyText: "Hello world, again!"})
	c.initialize()
	thread := c.startThread()

	res, before := c.callOK("turn/start", map[string]any{"threadId": thread, "input": textInput("say hello"), "clientUserMessageId": "client-msg-0001"})
	if len(before) != 0 {
		t.Errorf("notifications before the turn/start result: %v", methods(before))
	}
	turnID := str(res, "turn", "id")
	if !uuidV7.MatchString(turnID) || str(res, "turn", "status") != "inProgress" || dig(res, "turn", "startedAt") != nil {
		t.Errorf("turn/start result = %s", res)
	}
	done, got := c.until("turn/completed")
	want := []string{
		"thread/status/changed", "turn/started", "item/started", "item/completed",
		"item/started", "item/agentMessage/delta", "item/agentMessage/delta", "item/agentMessage/delta", "item/completed",
		"thread/tokenUsage/updated", "account/rateLimits/updated", "thread/status/changed",
	}
	if !reflect.DeepEqual(methods(got), want) {
		t.Fatalf("turn notifications:\n got %v\nwant %v", methods(got), want)
	}
	user := got[2].Params
	if str(user, "item", "type") != "userMessage" || str(user, "item", "clientId") != "client-msg-0001" ||
		str(user, "item", "content", "0", "text") != "say hello" || dig(user, "item", "content", "0", "text_elements") == nil {
		t.Errorf("user message item = %s", user)
	}
	var deltas []string
	for _, m := range got[5:8] {
		deltas = append(deltas, str(m.Params, "delta"))
		if str(m.Params, "turnId") != turnID || str(m.Params, "itemId") != "msg-1" {
			t.Errorf("delta = %v", m)
		}
	}
	if want := []string{"Hello ", "world, ", "again!"}; !reflect.DeepEqual(deltas, want) {
		t.Errorf("deltas = %q, want %q", deltas, want)
	}
	if txt := str(got[8].Params, "item", "text"); txt != "Hello world, again!" {
		t.Errorf("completed agent text = %q", txt)
	}
	turn := done.Params
	if str(turn, "turn", "status") != "completed" || str(turn, "turn", "itemsView") != "summary" ||
		str(turn, "turn", "items", "0", "text") != "Hello world, again!" || dig(turn, "turn", "items", "1") != nil {
		t.Errorf("turn/completed = %s", turn)
	}
	if str(got[11].Params, "status", "type") != "idle" {
		t.Errorf("last status = %s, want idle", got[11].Params)
	}

	// Totals add up over the thread.
	c.callOK("turn/start", map[string]any{"threadId": thread, "input": textInput("again")})
	usage, _ := c.until("thread/tokenUsage/updated")
	if got := dig(usage.Params, "tokenUsage", "total", "totalTokens"); got != 24.0 {
		t.Errorf("total tokens after two turns = %v, want 24", got)
	}
	c.until("turn/completed")
	if e := c.callErr("turn/interrupt", map[string]any{"threadId": thread, "turnId": turnID}); e.Message != "no active turn to interrupt" {
		t.Errorf("interrupting a finished turn: %q", e.Message)
	}
}

func TestHoldTurnsInterrupt(t *testing.T) {
	c := serve(t, fakeappserver.Fake{HoldTurns: true})
	c.initialize()
	thread := c.startThread()
	res, _ := c.callOK("turn/start", map[string]any{"threadId": thread, "input": textInput("long answer please")})
	turnID := str(res, "turn", "id")
	c.until("item/agentMessage/delta")

	// A concurrent turn/start joins the running turn.
	again, _ := c.callOK("turn/start", map[string]any{"threadId": thread, "input": textInput("concurrent")})
	if got := str(again, "turn", "id"); got != turnID {
		t.Errorf("concurrent turn/start returned turn %q, want the running %q", got, turnID)
	}
	if m, _ := c.until("item/completed"); str(m.Params, "item", "content", "0", "text") != "concurrent" {
		t.Errorf("concurrent input: %v", m)
	}

	_, before := c.callOK("turn/interrupt", map[string]any{"threadId": thread, "turnId": turnID})
	if len(before) != 0 {
		t.Errorf("before the turn/interrupt answer: %v", methods(before))
	}
	done, between := c.until("turn/completed")
	if got := methods(between); !reflect.DeepEqual(got, []string{"thread/status/changed"}) {
		t.Errorf("between interrupt and turn/completed: %v", got)
	}
	if str(done.Params, "turn", "status") != "interrupted" || str(done.Params, "turn", "itemsView") != "notLoaded" ||
		dig(done.Params, "turn", "items", "0") != nil {
		t.Errorf("turn/completed = %s", done.Params)
	}
	if e := c.callErr("turn/interrupt", map[string]any{"threadId": thread, "turnId": turnID}); e.Message != "no active turn to interrupt" {
		t.Errorf("second interrupt: %q", e.Message)
	}
}

func TestHoldTurnsSteer(t *testing.T) {
	c := serve(t, fakeappserver.Fake{HoldTurns: true, ReplyText: "I saw your steer."})
	c.initialize()
	thread := c.startThread()
	res, _ := c.callOK("turn/start", map[string]any{"threadId": thread, "input": textInput("write slowly")})
	turnID := str(res, "turn", "id")
	c.until("item/agentMessage/delta")

	e := c.callErr("turn/steer", map[string]any{"threadId": thread, "expectedTurnId": "wrong-id", "input": textInput("x")})
	if want := "expected active turn id `wrong-id` but found `" + turnID + "`"; e.Message != want {
		t.Errorf("steer with a wrong id: %q, want %q", e.Message, want)
	}
	steer, _ := c.callOK("turn/steer", map[string]any{"threadId": thread, "expectedTurnId": turnID, "input": textInput("be brief"), "clientUserMessageId": "client-steer-1"})
	if got := str(steer, "turnId"); got != turnID {
		t.Errorf("steer result turnId = %q, want %q", got, turnID)
	}
	done, got := c.until("turn/completed")
	if got[1].Method != "item/completed" || str(got[1].Params, "item", "clientId") != "client-steer-1" {
		t.Errorf("steer user message: %v", got[:2])
	}
	if str(done.Params, "turn", "status") != "completed" || str(done.Params, "turn", "items", "0", "text") != "I saw your steer." {
		t.Errorf("turn/completed after steer = %s", done.Params)
	}
}

func TestAccountAndModels(t *testing.T) {
	c := serve(t, fakeappserver.Fake{})
	c.initialize()

	if res, _ := c.callOK("account/read", map[string]any{}); dig(res, "requiresOpenaiAuth") != false || dig(res, "account") != nil {
		t.Errorf("account/read = %s", res)
	}
	models, _ := c.callOK("model/list", map[string]any{})
	if str(models, "data", "0", "id") != "gpt-6.1-sol" {
		t.Errorf("model/list = %.200s", models)
	}

	res, _ := c.callOK("account/login/start", map[string]any{"type": "apiKey", "apiKey": "sk-test-FAKE"})
	if str(res, "type") != "apiKey" {
		t.Errorf("apiKey login = %s", res)
	}
	if m := c.next(); m.Method != "account/login/completed" || dig(m.Params, "success") != true {
		t.Errorf("after apiKey login: %v", m)
	}
	if m := c.next(); m.Method != "account/updated" || str(m.Params, "authMode") != "apikey" {
		t.Errorf("after apiKey login: %v", m)
	}

	res, _ = c.callOK("account/login/start", map[string]any{"type": "chatgptDeviceCode"})
	loginID := str(res, "loginId")
	if loginID == "" || str(res, "userCode") == "" || str(res, "verificationUrl") == "" {
		t.Errorf("device-code login = %s", res)
	}
	if res, _ := c.callOK("account/login/cancel", map[string]any{"loginId": loginID}); str(res, "status") != "canceled" {
		t.Errorf("cancel = %s", res)
	}
	if m := c.next(); m.Method != "account/login/completed" || dig(m.Params, "success") != false || str(m.Params, "error") != "Login was not completed" {
		t.Errorf("after cancel: %v", m)
	}
	if res, _ := c.callOK("account/login/cancel", map[string]any{"loginId": loginID}); str(res, "status") != "notFound" {
		t.Errorf("second cancel = %s", res)
	}
	if res, _ := c.callOK("account/login/start", map[string]any{"type": "chatgpt"}); !strings.Contains(str(res, "authUrl"), "redirect_uri=") {
		t.Errorf("browser login = %s", res)
	}

	c.send(`{"id":99,"method":"account/logout"}`)
	c.sent["99"] = "account/logout"
	if resp, _ := c.await("99"); resp.Error != nil || string(resp.Result) != "{}" {
		t.Errorf("logout = %v", resp)
	}
	if m := c.next(); m.Method != "account/updated" || dig(m.Params, "authMode") != nil {
		t.Errorf("after logout: %v", m)
	}
	if res, _ := c.callOK("mcpServerStatus/list", map[string]any{}); string(res) != `{"data":[],"nextCursor":null}` {
		t.Errorf("mcpServerStatus/list = %s", res)
	}
}

func TestCodexHomeMissing(t *testing.T) {
	missing := filepath.Join(t.TempDir(), "nope")
	c := serve(t, fakeappserver.Fake{CodexHome: missing})
	if code := exitCode(t, c.wait()); code != 1 {
		t.Errorf("exit code %d, want 1", code)
	}
	if want := `Error: CODEX_HOME points to "` + missing + `", but that path does not exist`; !strings.Contains(c.stderr.String(), want) {
		t.Errorf("stderr = %q, want %q", c.stderr, want)
	}
	if rest := c.expectEOF(); len(rest) != 0 {
		t.Errorf("stdout = %v, want nothing", rest)
	}
}

func TestEnvRoundTrip(t *testing.T) {
	cfg := fakeappserver.Config{
		GarbageLines: true, HugeLineBytes: 3 << 20, ExitAfterMessages: 4, ExitCode: 3,
		StderrLines:    []string{"Authorization: Bearer abc"},
		ServerRequests: []fakeappserver.ServerRequestSpec{{Method: "item/tool/requestUserInput", OnTurn: 2}},
	}
	env := fakeappserver.Env(cfg)
	name, value, ok := strings.Cut(env, "=")
	if !ok || name != fakeappserver.EnvVar {
		t.Fatalf("Env = %q", env)
	}
	var back fakeappserver.Config
	if err := json.Unmarshal([]byte(value), &back); err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(back, cfg) {
		t.Errorf("round trip:\n got %+v\nwant %+v", back, cfg)
	}
	if strings.Contains(value, "replyText") {
		t.Errorf("zero knobs are not omitted: %s", value)
	}
}
