package codexproc

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/meshweaver/supervisor/codexproto"
	"github.com/meshweaver/supervisor/codexrpc"
	"github.com/meshweaver/supervisor/demomodel"
	"github.com/meshweaver/supervisor/testkit/schema"
)

// The thread commands of actors/threadops.go (thread/read with turns,
// thread/fork, thread/compact/start, thread/archive) against the real,
// pinned CLI and the mock model, with the daemon's methods and param
// structs. Every line both ways is checked against the pinned schema
// (startCLI traces them).

// texts are the user and agent messages of a thread/read answer, as the
// daemon picks them (codexproto.ThreadReadResult.Messages), each prefixed
// with its role.
func texts(r codexproto.ThreadReadResult) []string {
	var out []string
	for _, m := range r.Messages() {
		role := "assistant: "
		if m.User {
			role = "user: "
		}
		out = append(out, role+m.Text)
	}
	return out
}

// call makes one call as the app-server actor does for the thread op
// actor: the params struct as is, the result raw.
func (c *cli) call(method string, params any) (json.RawMessage, error) {
	c.t.Helper()
	var raw json.RawMessage
	err := c.client.Conn.Call(c.ctx(), method, params, &raw)
	return raw, err
}

func (c *cli) readTurns(threadID string) codexproto.ThreadReadResult {
	c.t.Helper()
	raw, err := c.call(codexproto.MethodThreadRead, codexproto.ThreadReadParams{ThreadID: threadID, IncludeTurns: true})
	if err != nil {
		c.t.Fatalf("thread/read %s: %v", threadID, err)
	}
	var res codexproto.ThreadReadResult
	if err := json.Unmarshal(raw, &res); err != nil {
		c.t.Fatalf("thread/read answer %.200s: %v", raw, err)
	}
	return res
}

func TestRealCLIThreadOps(t *testing.T) {
	// The trace validates an answer only where the schema has its result:
	// these must have one, or their answers would go unchecked.
	v := schema.ForTest(t)
	for _, m := range []string{codexproto.MethodThreadRead, codexproto.MethodThreadFork, codexproto.MethodThreadCompactStart, codexproto.MethodThreadArchive} {
		if !v.HasResultSchema(schema.ClientRequest, m) {
			t.Errorf("the pinned schema has no result schema for %s", m)
		}
	}
	c := surfaceCLI(t)
	c.mock.SetResponder(func(r *demomodel.Request) demomodel.Script {
		if r.IsCompaction() {
			return demomodel.Text("the summary")
		}
		return demomodel.Text("hello ", "back")
	})
	th := c.thread(codexproto.ApprovalNever, codexproto.SandboxReadOnly)
	first, done := c.turn(th, "say hello")
	if done.Turn.Status != codexproto.TurnCompleted {
		t.Fatalf("turn = %+v", done.Turn)
	}

	// thread/read with turns: the user's and the assistant's text.
	want := []string{"user: say hello", "assistant: hello back"}
	if got := texts(c.readTurns(th)); strings.Join(got, "|") != strings.Join(want, "|") {
		t.Errorf("thread/read turns = %q, want %q", got, want)
	}

	// thread/fork: a new thread, resumable.
	raw, err := c.call(codexproto.MethodThreadFork, codexproto.ThreadForkParams{ThreadID: th, ExcludeTurns: true})
	if err != nil {
		t.Fatalf("thread/fork: %v", err)
	}
	var forked codexproto.ThreadResult
	if err := json.Unmarshal(raw, &forked); err != nil || forked.Thread.ID == "" || forked.Thread.ID == th {
		t.Fatalf("thread/fork answered %.300s (%v), want a new thread id", raw, err)
	}
	var from struct {
		Thread struct {
			ForkedFromID *string `json:"forkedFromId"`
		} `json:"thread"`
	}
	if err := json.Unmarshal(raw, &from); err != nil || from.Thread.ForkedFromID == nil || *from.Thread.ForkedFromID != th {
		t.Errorf("thread/fork answered forkedFromId %v (%v), want %s", from.Thread.ForkedFromID, err, th)
	}
	// The fork has the history (excludeTurns only leaves it out of the answer).
	if got := texts(c.readTurns(forked.Thread.ID)); strings.Join(got, "|") != strings.Join(want, "|") {
		t.Errorf("the fork's turns = %q, want %q", got, want)
	}
	res, err := c.client.ThreadResume(c.ctx(), codexproto.ThreadResumeParams{ThreadID: forked.Thread.ID})
	if err != nil || res.Thread.ID != forked.Thread.ID {
		t.Fatalf("resume of the fork %s: %+v, %v", forked.Thread.ID, res.Thread, err)
	}
	if _, done := c.turn(forked.Thread.ID, "and again"); done.Turn.Status != codexproto.TurnCompleted {
		t.Fatalf("turn on the fork = %+v", done.Turn)
	}
	wantFork := append(append([]string{}, want...), "user: and again", "assistant: hello back")
	if got := texts(c.readTurns(forked.Thread.ID)); strings.Join(got, "|") != strings.Join(wantFork, "|") {
		t.Errorf("the fork's turns after its own = %q, want %q", got, wantFork)
	}

	// thread/compact/start: it runs as a turn; the daemon answers at its
	// turn/completed.
	raw, err = c.call(codexproto.MethodThreadCompactStart, codexproto.ThreadIDParams{ThreadID: th})
	if err != nil {
		t.Fatalf("thread/compact/start: %v", err)
	}
	if compactJSON(t, raw) != "{}" {
		t.Errorf("thread/compact/start answered %s, want {}", raw)
	}
	end := c.notes.wait(t, "the compaction's turn/completed", func(n *codexrpc.Notification) bool {
		return n.Method == codexproto.NoteTurnCompleted && decode[codexproto.TurnNotification](t, n.Params).ThreadID == th &&
			decode[codexproto.TurnNotification](t, n.Params).Turn.ID != first.ID
	})
	compacted := decode[codexproto.TurnNotification](t, end.Params)
	if compacted.Turn.Status != codexproto.TurnCompleted {
		t.Errorf("compaction turn = %+v", compacted.Turn)
	}
	var kinds []string
	for _, r := range c.mock.Requests() {
		kinds = append(kinds, r.RequestKind())
	}
	if got := strings.Join(kinds, ","); got != "turn,turn,compaction" {
		t.Errorf("model request kinds = %s, want turn,turn,compaction", got)
	}
	// The compaction leaves the turns thread/read shows as they were.
	if got := texts(c.readTurns(th)); strings.Join(got, "|") != strings.Join(want, "|") {
		t.Errorf("thread/read turns after the compaction = %q, want %q", got, want)
	}

	// thread/archive answers ok.
	raw, err = c.call(codexproto.MethodThreadArchive, codexproto.ThreadIDParams{ThreadID: th})
	if err != nil {
		t.Fatalf("thread/archive: %v", err)
	}
	if compactJSON(t, raw) != "{}" {
		t.Errorf("thread/archive answered %s, want {}", raw)
	}
	// A read after the archive still answers, from the archived rollout:
	// the thread is no longer loaded, its messages are all there.
	raw, err = c.call(codexproto.MethodThreadRead, codexproto.ThreadReadParams{ThreadID: th, IncludeTurns: true})
	if err != nil {
		t.Fatalf("thread/read after the archive: %v", err)
	}
	var archived struct {
		Thread struct {
			ID     string  `json:"id"`
			Path   *string `json:"path"`
			Status struct {
				Type string `json:"type"`
			} `json:"status"`
		} `json:"thread"`
	}
	if err := json.Unmarshal(raw, &archived); err != nil || archived.Thread.ID != th || archived.Thread.Status.Type != "notLoaded" {
		t.Errorf("thread/read after the archive = %+v (%v), want %s notLoaded", archived.Thread, err, th)
	}
	if archived.Thread.Path == nil || !strings.Contains(*archived.Thread.Path, "/archived_sessions/") {
		t.Errorf("thread/read after the archive: path %v, want one under archived_sessions", archived.Thread.Path)
	}
	var after codexproto.ThreadReadResult
	if err := json.Unmarshal(raw, &after); err != nil {
		t.Fatal(err)
	}
	if got := texts(after); strings.Join(got, "|") != strings.Join(want, "|") {
		t.Errorf("thread/read turns after the archive = %q, want %q", got, want)
	}
}
