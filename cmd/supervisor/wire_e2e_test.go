package main

import (
	"bytes"
	"slices"
	"testing"

	"github.com/meshweaver/supervisor/demomodel"
	"github.com/meshweaver/supervisor/messages"
)

// TestWireOutputSchemaRealCLI: a round's output schema reaches the model
// through the real CLI, and the verdict carries the final answer as
// structured output, with the model that ran it.
func TestWireOutputSchemaRealCLI(t *testing.T) {
	e := newEnv(t, nil)
	e.model.Enqueue(demomodel.Text(`{"city":`, ` "Paris"}`))
	r := e.round(messages.StartRound{User: "alice", Thread: "mesh/schema", Text: "which city?",
		OutputSchema: `{"type":"object","properties":{"city":{"type":"string"}},"required":["city"],"additionalProperties":false}`}).mustComplete(t)
	if r.verdict.StructuredOutput != `{"city":"Paris"}` {
		t.Errorf("structured output = %q", r.verdict.StructuredOutput)
	}
	if r.verdict.Model == "" {
		t.Errorf("the verdict names no model: %+v", r.verdict)
	}
	if body := e.lastRequest().Body; !bytes.Contains(body, []byte(`"city"`)) || !bytes.Contains(body, []byte(`json_schema`)) {
		t.Errorf("the model's request carries no output schema: %s", body)
	}
}

// TestWireThreadCommandsRealCLI: list, read, fork and archive a user's
// mesh threads against the real CLI: the fork is a new mesh thread whose
// next round resumes the copy with the original's history; the archived
// thread is forgotten.
func TestWireThreadCommandsRealCLI(t *testing.T) {
	e := newEnv(t, nil)
	const user, key, forked = "alice", "mesh/original", "mesh/forked"
	e.model.Enqueue(demomodel.Text("first", " answer"))
	v := e.round(messages.StartRound{User: user, Thread: key, Text: "first message"}).mustComplete(t).verdict

	list := func() []messages.ThreadInfo {
		e.send(messages.ListThreads{User: user})
		return e.awaitOther("threads", func(m any) bool { _, ok := m.(messages.Threads); return ok }).(messages.Threads).Threads
	}
	has := func(ts []messages.ThreadInfo, key, id string) bool {
		return slices.ContainsFunc(ts, func(i messages.ThreadInfo) bool { return i.Thread == key && (id == "" || i.CodexThreadID == id) })
	}
	if ts := list(); !has(ts, key, v.CodexThreadID) {
		t.Fatalf("list = %+v, want %s → %s", ts, key, v.CodexThreadID)
	}

	e.send(messages.ReadThread{User: user, Thread: key})
	read := e.awaitOther("thread turns", func(m any) bool { _, ok := m.(messages.ThreadTurns); return ok }).(messages.ThreadTurns)
	want := []messages.Turn{{Role: messages.RoleUser, Text: "first message"}, {Role: messages.RoleAssistant, Text: "first answer"}}
	if read.Error != "" || read.CodexThreadID != v.CodexThreadID || !slices.Equal(read.Turns, want) {
		t.Fatalf("read = %+v, want %v", read, want)
	}

	e.send(messages.ForkThread{User: user, Thread: key, NewThread: forked})
	fork := e.awaitOther("thread forked", func(m any) bool { _, ok := m.(messages.ThreadForked); return ok }).(messages.ThreadForked)
	if fork.Error != "" || fork.CodexThreadID == "" || fork.CodexThreadID == v.CodexThreadID {
		t.Fatalf("fork = %+v", fork)
	}
	if ts := list(); !has(ts, forked, fork.CodexThreadID) || !has(ts, key, v.CodexThreadID) {
		t.Fatalf("list after the fork = %+v", ts)
	}
	e.model.Enqueue(demomodel.Text("forked answer"))
	fv := e.round(messages.StartRound{User: user, Thread: forked, Text: "second message"}).mustComplete(t).verdict
	if !fv.Resumed || fv.CodexThreadID != fork.CodexThreadID {
		t.Errorf("the fork's round = %+v, want %s resumed", fv, fork.CodexThreadID)
	}
	if req := e.lastRequest(); countIn(req.UserTexts(), "first message") != 1 {
		t.Errorf("the fork's round does not hold the original's message once: %q", req.UserTexts())
	}

	e.send(messages.ForkThread{User: user, Thread: key, NewThread: forked})
	if again := e.awaitOther("thread forked", func(m any) bool { _, ok := m.(messages.ThreadForked); return ok }).(messages.ThreadForked); again.Error == "" {
		t.Errorf("a fork onto an existing mesh thread was accepted: %+v", again)
	}

	e.send(messages.ArchiveThread{User: user, Thread: key})
	if ar := e.awaitOther("thread archived", func(m any) bool { _, ok := m.(messages.ThreadArchived); return ok }).(messages.ThreadArchived); !ar.OK {
		t.Fatalf("archive = %+v", ar)
	}
	if ts := list(); has(ts, key, "") || !has(ts, forked, fork.CodexThreadID) {
		t.Errorf("list after the archive = %+v", ts)
	}
	e.send(messages.ReadThread{User: user, Thread: key})
	if gone := e.awaitOther("thread turns", func(m any) bool { _, ok := m.(messages.ThreadTurns); return ok }).(messages.ThreadTurns); gone.Error == "" {
		t.Errorf("the archived thread was read: %+v", gone)
	}
}

// TestWireCompactThreadRealCLI: a compaction of a mesh thread is answered
// once codex compacted it, and the thread's next round resumes it.
func TestWireCompactThreadRealCLI(t *testing.T) {
	e := newEnv(t, nil)
	const user, key = "alice", "mesh/compact"
	e.model.Enqueue(demomodel.Text("long", " answer"))
	v := e.round(messages.StartRound{User: user, Thread: key, Text: "first message"}).mustComplete(t).verdict
	e.model.Enqueue(demomodel.Text("summary of the thread"))
	e.send(messages.CompactThread{User: user, Thread: key})
	if c := e.awaitOther("thread compacted", func(m any) bool { _, ok := m.(messages.ThreadCompacted); return ok }).(messages.ThreadCompacted); !c.OK {
		t.Fatalf("compact = %+v", c)
	}
	if n := len(e.model.Requests()); n != 2 {
		t.Errorf("the model had %d requests after the compaction, want 2 (the round's, the compaction's)", n)
	}
	e.model.Enqueue(demomodel.Text("after"))
	if nv := e.round(messages.StartRound{User: user, Thread: key, Text: "next"}).mustComplete(t).verdict; nv.CodexThreadID != v.CodexThreadID {
		t.Errorf("after the compaction: %+v, want thread %s", nv, v.CodexThreadID)
	}
}
