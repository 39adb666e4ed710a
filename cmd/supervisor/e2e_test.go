package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/vmihailenco/msgpack/v5"
	"google.golang.org/protobuf/types/known/anypb"

	"github.com/meshweaver/supervisor/demomodel"
	"github.com/meshweaver/supervisor/edge"
	"github.com/meshweaver/supervisor/mcpecho"
	"github.com/meshweaver/supervisor/messages"
	"github.com/meshweaver/supervisor/store"
)

// The end-to-end tests run the daemon (startDaemon: a real hollywood remote
// listener on a free loopback port) and the real codex CLI against the mock
// model; the caller lives in a second engine with its own remote, so every
// message crosses the remote as an envelope. Each test checks, when it ends,
// that no codex process is left and (TestMain) that no goroutine is.

// TestFirstRoundCreatesThenResumes: the first round of a mesh thread starts
// a codex thread, records it in the registry and leaves a rollout behind;
// the second round resumes that thread, and the model sees the first
// message exactly once.
func TestFirstRoundCreatesThenResumes(t *testing.T) {
	e := newEnv(t, nil)
	const user, key = "alice", "mesh/thread-1"

	e.model.Enqueue(demomodel.Text("Hello", " there", "!"))
	r1 := e.round(messages.StartRound{User: user, Thread: key, Text: "first message"}).mustComplete(t)
	if got, want := r1.text(), "Hello there!"; got != want {
		t.Errorf("text = %q, want %q", got, want)
	}
	v1 := r1.verdict
	if v1.Resumed || v1.FellBack || !store.IsUUID(v1.CodexThreadID) || v1.Thread != key {
		t.Errorf("first verdict = %+v, want a fresh codex thread of %q", v1, key)
	}
	if got := e.registryThread(user, key); got != v1.CodexThreadID {
		t.Errorf("registry holds thread %s, want %s", got, v1.CodexThreadID)
	}
	if rs := e.rollouts(user, v1.CodexThreadID); len(rs) != 1 {
		t.Errorf("rollouts of %s: %v, want one", v1.CodexThreadID, rs)
	}

	e.model.Enqueue(demomodel.Text("Second", " answer"))
	r2 := e.round(messages.StartRound{User: user, Thread: key, Text: "second message"}).mustComplete(t)
	if v2 := r2.verdict; !v2.Resumed || v2.FellBack || v2.CodexThreadID != v1.CodexThreadID {
		t.Errorf("second verdict = %+v, want thread %s resumed", v2, v1.CodexThreadID)
	}
	req := e.lastRequest()
	if n := countIn(req.UserTexts(), "first message"); n != 1 {
		t.Errorf("the model's second request holds the first message %d times, want once: %q", n, req.UserTexts())
	}
	if got := req.LastUserText(); got != "second message" {
		t.Errorf("last user text = %q, want the second message", got)
	}
	if got := e.registryThread(user, key); got != v1.CodexThreadID {
		t.Errorf("registry holds thread %s after the resume, want %s", got, v1.CodexThreadID)
	}
}

// TestFallbackWhenRolloutsAreGone: with the rollouts deleted and a fresh
// app-server (a new daemon on the same homes), the next round cannot resume:
// it falls back to a new codex thread seeded with a bounded transcript of
// the earlier turns, from the daemon's journal or, when the caller sends
// it, from StartRound.History; the registry then points at the new thread.
func TestFallbackWhenRolloutsAreGone(t *testing.T) {
	e := newEnv(t, nil)
	const user = "bob"
	const keyJ, keyH = "mesh/journal", "mesh/history"

	e.model.Enqueue(demomodel.Text("The sky", " is blue."), demomodel.Text("Noted."))
	j1 := e.round(messages.StartRound{User: user, Thread: keyJ, Text: "What colour is the sky?"}).mustComplete(t)
	h1 := e.round(messages.StartRound{User: user, Thread: keyH, Text: "journal-only remark"}).mustComplete(t)

	e.restart(func() {
		if err := os.RemoveAll(filepath.Join(e.home(user), "sessions")); err != nil {
			t.Fatal(err)
		}
	})

	t.Run("from the journal", func(t *testing.T) {
		e.model.Enqueue(demomodel.Text("Fresh", " start"))
		j2 := e.round(messages.StartRound{User: user, Thread: keyJ, Text: "And the grass?"}).mustComplete(t)
		v := j2.verdict
		if !v.FellBack || v.Resumed || !store.IsUUID(v.CodexThreadID) || v.CodexThreadID == j1.verdict.CodexThreadID {
			t.Errorf("verdict = %+v, want a fallback to a new thread (old %s)", v, j1.verdict.CodexThreadID)
		}
		transcript := store.Transcript([]store.Turn{
			{Role: store.RoleUser, Text: "What colour is the sky?"},
			{Role: store.RoleAssistant, Text: "The sky is blue."},
		}, 0, 0)
		if !strings.HasPrefix(transcript, store.TranscriptHeader) {
			t.Fatalf("transcript %q lacks the header", transcript)
		}
		req := e.lastRequest()
		if got, want := req.LastUserText(), transcript+"\n\nAnd the grass?"; got != want {
			t.Errorf("the model got\n%q\nwant\n%q", got, want)
		}
		if n := countIn(req.UserTexts(), store.TranscriptHeader); n != 1 {
			t.Errorf("transcript header %d times in the request, want once", n)
		}
		if n := countIn(req.UserTexts(), "What colour is the sky?"); n != 1 {
			t.Errorf("the earlier message %d times in the request, want once (in the transcript)", n)
		}
		if got := e.registryThread(user, keyJ); got != v.CodexThreadID {
			t.Errorf("registry holds %s, want the new thread %s", got, v.CodexThreadID)
		}
		if rs := e.rollouts(user, v.CodexThreadID); len(rs) != 1 {
			t.Errorf("rollouts of the new thread: %v, want one", rs)
		}

		// The rewritten record is the one the next round resumes.
		e.model.Enqueue(demomodel.Text("Green."))
		j3 := e.round(messages.StartRound{User: user, Thread: keyJ, Text: "Sure?"}).mustComplete(t)
		if w := j3.verdict; !w.Resumed || w.FellBack || w.CodexThreadID != v.CodexThreadID {
			t.Errorf("next verdict = %+v, want %s resumed", w, v.CodexThreadID)
		}
	})

	t.Run("from StartRound.History", func(t *testing.T) {
		history := []messages.Turn{
			{Role: messages.RoleUser, Text: "history question from the mesh"},
			{Role: messages.RoleAssistant, Text: "history answer from the mesh"},
		}
		e.model.Enqueue(demomodel.Text("ok"))
		h2 := e.round(messages.StartRound{User: user, Thread: keyH, Text: "continue", History: history}).mustComplete(t)
		v := h2.verdict
		if !v.FellBack || v.Resumed || v.CodexThreadID == h1.verdict.CodexThreadID {
			t.Errorf("verdict = %+v, want a fallback to a new thread", v)
		}
		transcript := store.Transcript([]store.Turn{
			{Role: store.RoleUser, Text: history[0].Text},
			{Role: store.RoleAssistant, Text: history[1].Text},
		}, 0, 0)
		req := e.lastRequest()
		if got, want := req.LastUserText(), transcript+"\n\ncontinue"; got != want {
			t.Errorf("the model got\n%q\nwant\n%q", got, want)
		}
		if n := countIn(req.UserTexts(), "journal-only remark"); n != 0 {
			t.Errorf("the journal leaked into a round that sent its history")
		}
		if got := e.registryThread(user, keyH); got != v.CodexThreadID {
			t.Errorf("registry holds %s, want %s", got, v.CodexThreadID)
		}
	})
}

// TestCodexKilledMidRound: a SIGKILL of the app-server's process group while
// the model streams gives a failed verdict that names the death; the next
// round on the thread starts a new app-server and resumes the thread.
func TestCodexKilledMidRound(t *testing.T) {
	e := newEnv(t, nil)
	const user, key = "carol", "mesh/kill"
	e.model.Enqueue(demomodel.Text("first answer"))
	r1 := e.round(messages.StartRound{User: user, Thread: key, Text: "first message"}).mustComplete(t)

	e.model.Enqueue(demomodel.Respond(demomodel.Message("partial ", "answer")).Hang())
	id := e.startRound(messages.StartRound{User: user, Thread: key, Text: "this turn dies"})
	e.waitEvent(id, "a text delta", func(ev messages.RoundEvent) bool { return ev.Kind == messages.KindText })
	victim := e.appServer(user)
	if err := syscall.Kill(-victim.PID, syscall.SIGKILL); err != nil {
		t.Fatalf("killing the app-server's group %d: %v", victim.PID, err)
	}
	r2 := e.await(id)
	if v := r2.verdict; v.Status != messages.StatusFailed || !strings.Contains(v.Error, "killed by signal SIGKILL") {
		t.Errorf("verdict = %+v, want failed naming the SIGKILL", v)
	}

	e.model.Enqueue(demomodel.Text("back again"))
	r3 := e.round(messages.StartRound{User: user, Thread: key, Text: "after the crash"}).mustComplete(t)
	if v := r3.verdict; !v.Resumed || v.FellBack || v.CodexThreadID != r1.verdict.CodexThreadID {
		t.Errorf("verdict after the crash = %+v, want %s resumed", v, r1.verdict.CodexThreadID)
	}
	if p := e.appServer(user); p.PID == victim.PID {
		t.Errorf("the app-server still has the killed pid %d", p.PID)
	}
	req := e.lastRequest()
	for _, s := range []string{"first message", "this turn dies"} {
		if n := countIn(req.UserTexts(), s); n != 1 {
			t.Errorf("%q %d times in the request after the crash, want once", s, n)
		}
	}
}

// TestEventKinds checks each kind of event a round reports, with its
// payload, against what the model scripted.
func TestEventKinds(t *testing.T) {
	e := newEnv(t, func(c *daemonSetup) { c.Sandbox = "workspace-write" })

	t.Run("reasoning, text and usage", func(t *testing.T) {
		u1 := demomodel.Usage{InputTokens: 1200, CachedInputTokens: 300, OutputTokens: 45, ReasoningOutputTokens: 7, TotalTokens: 1245}
		e.model.Enqueue(demomodel.Respond(
			demomodel.Reasoning("Let me ", "think.").WithID("rs-1"),
			demomodel.Message("Hel", "lo ", "world").WithID("msg-1"),
		).WithUsage(u1))
		r := e.round(messages.StartRound{User: "dave", Thread: "kinds/text", Text: "hello"}).mustComplete(t)
		checkDeltas(t, r, messages.KindReasoning, "rs-1", "Let me ", "think.")
		checkDeltas(t, r, messages.KindText, "msg-1", "Hel", "lo ", "world")
		if last, first := lastIndex(r, messages.KindReasoning), firstIndex(r, messages.KindText); last > first {
			t.Errorf("reasoning event #%d after text event #%d", last+1, first+1)
		}
		checkUsage(t, r, u1)

		// A second round on the thread reports its own request, not the
		// thread's running total.
		u2 := demomodel.Usage{InputTokens: 2000, CachedInputTokens: 1500, OutputTokens: 20, TotalTokens: 2020}
		e.model.Enqueue(demomodel.Text("again").WithUsage(u2))
		r2 := e.round(messages.StartRound{User: "dave", Thread: "kinds/text", Text: "again"}).mustComplete(t)
		checkUsage(t, r2, u2)
	})

	t.Run("shell", func(t *testing.T) {
		e.model.Enqueue(
			demomodel.Respond(demomodel.ExecCommand("call-ok", "echo hello-from-shell")),
			demomodel.Respond(demomodel.ExecCommand("call-fail", "echo oops; exit 3")),
			demomodel.Text("done"),
		)
		r := e.round(messages.StartRound{User: "dave", Thread: "kinds/shell", Text: "run things"}).mustComplete(t)
		for _, c := range []struct {
			id, cmd, out string
			exit         int
			fault        string
		}{
			{"call-ok", "echo hello-from-shell", "hello-from-shell", 0, ""},
			{"call-fail", "echo oops; exit 3", "oops", 3, "exit code 3"},
		} {
			call, res := toolPair(t, r, c.id)
			if call == nil || res == nil {
				continue
			}
			var args struct {
				Command string `json:"command"`
			}
			if err := json.Unmarshal([]byte(call.Args), &args); err != nil || !strings.Contains(args.Command, c.cmd) {
				t.Errorf("%s: args %q (%v), want a command running %q", c.id, call.Args, err, c.cmd)
			}
			if call.Name != "shell" || call.Cwd != e.workspace {
				t.Errorf("%s: call %+v, want shell in %s", c.id, *call, e.workspace)
			}
			if res.Name != "shell" || !strings.Contains(res.Output, c.out) || res.ExitCode == nil || *res.ExitCode != c.exit {
				t.Errorf("%s: result %+v, want exit %d with %q", c.id, *res, c.exit, c.out)
			}
			if res.Failed != (c.fault != "") || res.Fault != c.fault {
				t.Errorf("%s: failed=%v fault=%q, want fault %q", c.id, res.Failed, res.Fault, c.fault)
			}
		}
		if got := r.text(); got != "done" {
			t.Errorf("text = %q", got)
		}
	})

	t.Run("apply_patch", func(t *testing.T) {
		if err := os.WriteFile(filepath.Join(e.workspace, "hello.txt"), []byte("old line\n"), 0o600); err != nil {
			t.Fatal(err)
		}
		patch := "*** Begin Patch\n*** Add File: notes/new.txt\n+hello patch\n*** Update File: hello.txt\n@@\n-old line\n+new line\n*** End Patch"
		e.model.Enqueue(demomodel.Respond(demomodel.ApplyPatch("call-p1", patch)), demomodel.Text("patched"))
		r := e.round(messages.StartRound{User: "dave", Thread: "kinds/patch", Text: "patch it"}).mustComplete(t)
		call, res := toolPair(t, r, "call-p1")
		if call == nil || res == nil {
			return
		}
		want := []messages.FileChange{ // with their diffs (issue 15)
			{Path: filepath.Join(e.workspace, "notes", "new.txt"), Kind: "add", Diff: "hello patch\n"},
			{Path: filepath.Join(e.workspace, "hello.txt"), Kind: "update", Diff: "@@ -1 +1 @@\n-old line\n+new line\n"},
		}
		got := slices.Clone(call.Paths)
		slices.SortFunc(got, func(a, b messages.FileChange) int { return strings.Compare(a.Kind, b.Kind) })
		if call.Name != "apply_patch" || !slices.Equal(got, want) {
			t.Errorf("call = %+v, want apply_patch of %+v", *call, want)
		}
		if res.Name != "apply_patch" || res.Failed {
			t.Errorf("result = %+v, want a success", *res)
		}
		if b, err := os.ReadFile(filepath.Join(e.workspace, "notes", "new.txt")); err != nil || string(b) != "hello patch\n" {
			t.Errorf("new file: %q, %v", b, err)
		}
		if b, err := os.ReadFile(filepath.Join(e.workspace, "hello.txt")); err != nil || string(b) != "new line\n" {
			t.Errorf("updated file: %q, %v", b, err)
		}
	})

	t.Run("model fails with HTTP 500", func(t *testing.T) {
		e.model.Enqueue(demomodel.InternalServerError())
		r := e.round(messages.StartRound{User: "dave", Thread: "kinds/fail", Text: "boom"})
		v := r.verdict
		if v.Status != messages.StatusFailed || v.CodexErrorInfo != `"internalServerError"` || v.Error == "" {
			t.Errorf("verdict = %+v, want failed with codexErrorInfo \"internalServerError\"", v)
		}
		errs := r.kind(messages.KindError)
		if len(errs) != 1 || errs[0].Text != v.Error {
			t.Errorf("error events %+v, want one with the verdict's error %q", errs, v.Error)
		}
	})
}

// TestMCPBackConnection runs rounds with StartRound.MCPURL and MCPToken
// pointing at a loopback MCP server. What codex 0.169.0 does with the tool
// call depends on its approval rules, and the daemon reports it as is:
//   - a tool without annotations needs approval: under approval policy
//     "never" codex fails the call itself; under "on-request" it asks with
//     mcpServer/elicitation/request, which the daemon declines by policy,
//     even with AutoApprove; in both cases the server never sees tools/call;
//   - a tool annotated readOnlyHint runs without approval.
//
// In every case the bearer token reaches the server on every request, and
// never the daemon's log.
func TestMCPBackConnection(t *testing.T) {
	const token = "mesh-token-5a1f"
	startMCP := func(t *testing.T, readOnly bool) *mcpecho.Server {
		opts := mcpecho.Options{Token: token}
		if readOnly {
			opts.Annotations = map[string]map[string]any{"echo": {"readOnlyHint": true}}
		}
		s, err := mcpecho.Start(opts)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(s.Close)
		return s
	}
	run := func(t *testing.T, e *env, s *mcpecho.Server, user string) (roundResult, *messages.ToolCall, *messages.ToolResult) {
		t.Helper()
		e.allowMCP(s.URL())
		e.model.Enqueue(
			demomodel.Respond(demomodel.MCPCall("call-mcp", "meshweaver", "echo", `{"text":"hi there"}`)),
			demomodel.Text("done"),
		)
		r := e.round(messages.StartRound{User: user, Thread: "mcp", Text: "use the mesh tool",
			MCPURL: s.URL(), MCPToken: token, AutoApprove: true}).mustComplete(t)
		call, res := toolPair(t, r, "call-mcp")
		if call == nil || res == nil {
			t.FailNow()
		}
		if call.Name != "mcp__meshweaver__echo" || call.Args != `{"text":"hi there"}` || res.Name != call.Name {
			t.Errorf("call %+v, result %+v: want mcp__meshweaver__echo with its arguments", *call, *res)
		}
		checkBearer(t, s, token)
		if strings.Contains(e.logs.String(), token) {
			t.Errorf("the MCP token is in the daemon's log")
		}
		return r, call, res
	}
	modelGot := func(t *testing.T, e *env) string {
		req := e.lastRequest()
		out, ok := req.ToolOutput("call-mcp")
		if !ok {
			t.Errorf("the model got no output of the MCP call")
		}
		return out
	}

	t.Run("approval never", func(t *testing.T) {
		e := newEnv(t, nil)
		t.Run("unannotated tool fails in codex", func(t *testing.T) {
			s := startMCP(t, false)
			_, _, res := run(t, e, s, "erin")
			const want = "MCP tool call requires approval, but approval policy is never"
			if !res.Failed || res.Fault != want {
				t.Errorf("result %+v, want failed with %q", *res, want)
			}
			if calls := s.Calls(); len(calls) != 0 {
				t.Errorf("the server saw tools/call %+v", calls)
			}
			if out := modelGot(t, e); !strings.Contains(out, want) {
				t.Errorf("the model got %q", out)
			}
		})
		t.Run("read-only tool runs", func(t *testing.T) {
			s := startMCP(t, true)
			_, _, res := run(t, e, s, "frank")
			if res.Failed || res.Output != "echo: hi there" {
				t.Errorf("result %+v, want the echo", *res)
			}
			calls := s.Calls()
			if len(calls) != 1 || calls[0].Tool != "echo" || string(calls[0].Arguments) != `{"text":"hi there"}` ||
				calls[0].Header.Get("Authorization") != "Bearer "+token {
				t.Errorf("the server saw %+v, want one echo call with the bearer token", calls)
			}
			if out := modelGot(t, e); !strings.Contains(out, `{"echoed":"hi there"}`) {
				t.Errorf("the model got %q", out)
			}
		})
	})

	t.Run("approval on-request, auto-approved", func(t *testing.T) {
		// Under on-request codex asks before an unannotated MCP tool runs;
		// with AutoApprove the daemon accepts (TestMCPApprovalFollowsAutoApprove
		// has the decline without it).
		e := newEnv(t, func(c *daemonSetup) { c.ApprovalPolicy = "on-request" })
		s := startMCP(t, false)
		_, _, res := run(t, e, s, "gina")
		if res.Failed || res.Output != "echo: hi there" {
			t.Errorf("result %+v, want the echo", *res)
		}
		if calls := s.Calls(); len(calls) != 1 || calls[0].Header.Get("Authorization") != "Bearer "+token {
			t.Errorf("the server saw tools/call %+v, want one with the bearer token", calls)
		}
	})
}

// TestMCPSettingsFollowEachRound: the MCP back-connection is a setting of
// the round (StartRound.MCPURL and MCPToken), and a later round on the same
// mesh thread may add it, rotate its token or leave it out. The daemon
// passes it as thread/resume's config overlay, but codex 0.169.0 ignores
// that overlay when the thread is still loaded in the app-server (every
// round after the first on the same process), so the thread keeps the MCP
// settings of the round that loaded it.
func TestMCPSettingsFollowEachRound(t *testing.T) {
	e := newEnv(t, nil)
	s, err := mcpecho.Start(mcpecho.Options{Annotations: map[string]map[string]any{"echo": {"readOnlyHint": true}}})
	if err != nil {
		t.Fatal(err)
	}
	e.allowMCP(s.URL())
	t.Cleanup(s.Close)
	const user = "quinn"
	echo := func(id string) demomodel.Script {
		return demomodel.Respond(demomodel.MCPCall(id, "meshweaver", "echo", `{"text":"`+id+`"}`))
	}

	t.Run("added on a later round", func(t *testing.T) {
		e.model.Enqueue(demomodel.Text("no tools yet"))
		e.round(messages.StartRound{User: user, Thread: "mcp/added", Text: "plain"}).mustComplete(t)
		e.model.Enqueue(echo("call-added"), demomodel.Text("done"))
		r := e.round(messages.StartRound{User: user, Thread: "mcp/added", Text: "now with the mesh",
			MCPURL: s.URL(), MCPToken: "token-added"}).mustComplete(t)
		reqs := e.model.Requests()
		if req := reqs[len(reqs)-2]; !req.HasTool("mcp__meshweaver") {
			t.Errorf("the round's model request offers no mcp__meshweaver tools: %v", req.ToolNames())
		}
		if _, res := toolPair(t, r, "call-added"); res != nil && (res.Failed || res.Output != "echo: call-added") {
			t.Errorf("result %+v, want the echo", *res)
		}
	})

	t.Run("token rotated", func(t *testing.T) {
		e.model.Enqueue(demomodel.Text("first"))
		e.round(messages.StartRound{User: user, Thread: "mcp/rotated", Text: "with token A",
			MCPURL: s.URL(), MCPToken: "token-A"}).mustComplete(t)
		e.model.Enqueue(echo("call-rotated"), demomodel.Text("done"))
		e.round(messages.StartRound{User: user, Thread: "mcp/rotated", Text: "with token B",
			MCPURL: s.URL(), MCPToken: "token-B"}).mustComplete(t)
		var got []string
		for _, c := range s.Calls() {
			if strings.Contains(string(c.Arguments), "call-rotated") {
				got = append(got, c.Header.Get("Authorization"))
			}
		}
		if len(got) != 1 || got[0] != "Bearer token-B" {
			t.Errorf("the tool call reached the server with Authorization %q, want [\"Bearer token-B\"]", got)
		}
	})

	t.Run("left out on a later round", func(t *testing.T) {
		e.model.Enqueue(demomodel.Text("first"))
		e.round(messages.StartRound{User: user, Thread: "mcp/removed", Text: "with the mesh",
			MCPURL: s.URL(), MCPToken: "token-C"}).mustComplete(t)
		e.model.Enqueue(demomodel.Text("second"))
		e.round(messages.StartRound{User: user, Thread: "mcp/removed", Text: "without the mesh"}).mustComplete(t)
		if req := e.lastRequest(); req.HasTool("mcp__meshweaver") {
			t.Errorf("a round without MCPURL still offers the earlier round's MCP tools: %v", req.ToolNames())
		}
	})
}

// TestMCPApprovalFollowsAutoApprove: codex asks before an MCP tool call
// (approval policy on-request) with mcpServer/elicitation/request,
// _meta.codex_approval_kind "mcp_tool_call". That is an approval like a
// command's: AutoApprove should accept it, as it accepts commands and
// patches, and without AutoApprove it is declined. Today the daemon
// declines every elicitation, so with the default policies no tool of the
// mesh's MCP back-connection can run unless the tool is annotated
// readOnlyHint.
func TestMCPApprovalFollowsAutoApprove(t *testing.T) {
	e := newEnv(t, func(c *daemonSetup) { c.ApprovalPolicy = "on-request" })
	s, err := mcpecho.Start(mcpecho.Options{})
	if err != nil {
		t.Fatal(err)
	}
	e.allowMCP(s.URL())
	t.Cleanup(s.Close)
	for _, auto := range []bool{false, true} {
		id := map[bool]string{false: "call-ask", true: "call-auto"}[auto]
		e.model.Enqueue(demomodel.Respond(demomodel.MCPCall(id, "meshweaver", "echo", `{"text":"hi"}`)), demomodel.Text("done"))
		r := e.round(messages.StartRound{User: "rita", Thread: "mcp/approve-" + id, Text: "use the mesh tool",
			MCPURL: s.URL(), MCPToken: "tok", AutoApprove: auto}).mustComplete(t)
		_, res := toolPair(t, r, id)
		if res == nil {
			continue
		}
		if auto && (res.Failed || res.Output != "echo: hi") {
			t.Errorf("AutoApprove: result %+v, want the tool run", *res)
		}
		if !auto && (!res.Failed || res.Fault != "user rejected MCP tool call") {
			t.Errorf("no AutoApprove: result %+v, want declined", *res)
		}
	}
}

// TestApprovals: under approval policy "untrusted" with the workspace-write
// sandbox, codex asks before every command and patch; the daemon approves
// with AutoApprove and declines without it.
func TestApprovals(t *testing.T) {
	e := newEnv(t, func(c *daemonSetup) {
		c.ApprovalPolicy = "untrusted"
		c.Sandbox = "workspace-write"
	})
	for _, auto := range []bool{true, false} {
		name := map[bool]string{true: "approved", false: "declined"}[auto]
		t.Run("command "+name, func(t *testing.T) {
			file := "cmd-" + name + ".txt"
			e.model.Enqueue(demomodel.Respond(demomodel.ExecCommand("call-"+name, "touch "+file)), demomodel.Text("ok"))
			r := e.round(messages.StartRound{User: "hank", Thread: "approve/cmd-" + name, Text: "touch it", AutoApprove: auto}).mustComplete(t)
			_, res := toolPair(t, r, "call-"+name)
			if res == nil {
				return
			}
			_, statErr := os.Stat(filepath.Join(e.workspace, file))
			if auto {
				if res.Failed || res.ExitCode == nil || *res.ExitCode != 0 || statErr != nil {
					t.Errorf("result %+v, file %v: want the command run", *res, statErr)
				}
			} else if !res.Failed || res.Fault != "declined" || !errors.Is(statErr, os.ErrNotExist) {
				t.Errorf("result %+v, file %v: want declined and no file", *res, statErr)
			}
		})
		t.Run("patch "+name, func(t *testing.T) {
			file := "patch-" + name + ".txt"
			patch := "*** Begin Patch\n*** Add File: " + file + "\n+x\n*** End Patch"
			e.model.Enqueue(demomodel.Respond(demomodel.ApplyPatch("call-p-"+name, patch)), demomodel.Text("ok"))
			r := e.round(messages.StartRound{User: "hank", Thread: "approve/patch-" + name, Text: "patch it", AutoApprove: auto}).mustComplete(t)
			_, res := toolPair(t, r, "call-p-"+name)
			if res == nil {
				return
			}
			_, statErr := os.Stat(filepath.Join(e.workspace, file))
			if auto {
				if res.Failed || statErr != nil {
					t.Errorf("result %+v, file %v: want the patch applied", *res, statErr)
				}
			} else if !res.Failed || res.Fault != "declined" || !errors.Is(statErr, os.ErrNotExist) {
				t.Errorf("result %+v, file %v: want declined and no file", *res, statErr)
			}
		})
	}
}

// TestHostileAndGarbageInput: invalid user ids get a rejected verdict and
// touch nothing; undecodable envelopes get a Rejected reply; messages with
// no sender are dropped; the daemon stays up throughout.
func TestHostileAndGarbageInput(t *testing.T) {
	e := newEnv(t, nil)

	for _, user := range []string{"../x", "a/b", strings.Repeat("a", 100), "..", ".hidden", "-rf", "a\x00b", "ü"} {
		r := e.round(messages.StartRound{User: user, Thread: "t", Text: "hi"})
		if r.verdict.Status != messages.StatusRejected || r.verdict.Error == "" || len(r.events) != 0 {
			t.Errorf("user %q: %v, want a rejected verdict and no event", user, r)
		}
	}
	for _, key := range []string{"", strings.Repeat("k", messages.MaxThreadLen+1), "bad\nkey"} {
		r := e.round(messages.StartRound{User: "ivan", Thread: key, Text: "hi"})
		if r.verdict.Status != messages.StatusRejected {
			t.Errorf("thread %q: %v, want rejected", key, r)
		}
	}
	if ents, err := os.ReadDir(e.homes); err == nil && len(ents) != 0 || err != nil && !errors.Is(err, os.ErrNotExist) {
		t.Errorf("homes after hostile rounds: %v (err %v), want nothing", ents, err)
	}
	if ps := codexProcs(e.bin, e.root); len(ps) != 0 {
		t.Errorf("hostile rounds started codex: %+v", ps)
	}

	for _, c := range []struct {
		name     string
		msg      *anypb.Any
		wantType string
		wantErr  error
	}{
		{"unknown type", &anypb.Any{TypeUrl: messages.TypeURLPrefix + "no_such.v1", Value: []byte{0x80}}, "no_such.v1", messages.ErrUnknownType},
		{"foreign type url", &anypb.Any{TypeUrl: "type.googleapis.com/google.protobuf.StringValue", Value: []byte("x")}, "", messages.ErrUnknownType},
		{"known type, garbage body", &anypb.Any{TypeUrl: messages.TypeURLPrefix + "start_round.v1", Value: []byte("\xc1 garbage")}, "start_round.v1", messages.ErrMalformed},
		{"known type, wrong shape", mustEncodeAs(t, "start_round.v1", map[string]any{"user": 42}), "start_round.v1", messages.ErrMalformed},
		{"a reply type", mustEncode(t, messages.RoundEvent{RoundID: "x", Seq: 1}), "round_event.v1", messages.ErrUnknownType},
		{"invalid interrupt", mustEncode(t, messages.InterruptRound{Thread: "t"}), "interrupt_round.v1", messages.ErrInvalid},
	} {
		e.sendRaw(c.msg)
		m := e.awaitOther("Rejected for "+c.name, func(m any) bool { _, ok := m.(messages.Rejected); return ok })
		rej := m.(messages.Rejected)
		if c.wantType != "" && rej.Type != c.wantType || !strings.Contains(rej.Reason, c.wantErr.Error()) {
			t.Errorf("%s: %+v, want type %q and a reason naming %q", c.name, rej, c.wantType, c.wantErr)
		}
	}

	// No sender: nobody to answer; the daemon logs and drops. They are sent
	// from a third engine that sends nothing else: hollywood's remote gives
	// a nil-sender message the first sender of its batch, so sent by the
	// caller next to its other messages they would get the caller as
	// sender (HOLLYWOOD.md §6).
	anon, err := newRemoteClient(e.addr, "")
	if err != nil {
		t.Fatal(err)
	}
	defer anon.close()
	anon.engine.Send(anon.target, &anypb.Any{TypeUrl: "meshweaver/garbage", Value: []byte{1, 2, 3}})
	anon.engine.Send(anon.target, mustEncode(t, messages.StartRound{User: "ivan", Thread: "t", Text: "nobody listens"}))
	// The edge refuses both before decoding: nobody to answer.
	e.waitCount("refusals for want of a sender", e.cfg.Metrics.RemoteRejected.WithLabelValues(edge.ReasonNoSender), 2)
	select {
	case m := <-anon.inbox:
		t.Errorf("a message without sender was answered: %#v", m)
	default:
	}

	e.model.Enqueue(demomodel.Text("still here"))
	r := e.round(messages.StartRound{User: "ivan", Thread: "after-garbage", Text: "are you up?"}).mustComplete(t)
	if got := r.text(); got != "still here" {
		t.Errorf("text = %q", got)
	}
	if n := len(e.model.Requests()); n != 1 {
		t.Errorf("%d model requests, want 1 (only the valid round)", n)
	}
	if len(e.other) != 0 {
		t.Errorf("unexpected replies: %#v", e.other)
	}
	ents, _ := os.ReadDir(e.homes)
	if len(ents) != 1 || ents[0].Name() != "ivan" {
		t.Errorf("homes holds %v, want only ivan", ents)
	}
}

// TestSameThreadQueues: two rounds on one mesh thread sent back to back both
// complete, in order; the second runs only after the first (its request
// carries the first answer, and the first request does not carry its text).
func TestSameThreadQueues(t *testing.T) {
	e := newEnv(t, nil)
	e.model.Enqueue(demomodel.Text("one ", "two ", "three").WithDelay(40*time.Millisecond), demomodel.Text("second answer"))
	id1 := e.startRound(messages.StartRound{User: "judy", Thread: "q", Text: "first in line"})
	id2 := e.startRound(messages.StartRound{User: "judy", Thread: "q", Text: "second in line"})
	r1 := e.await(id1).mustComplete(t)
	r2 := e.await(id2).mustComplete(t)
	if !r1.at.Before(r2.at) {
		t.Errorf("verdicts out of order: %v then %v", r1.at, r2.at)
	}
	if v := r2.verdict; !v.Resumed || v.CodexThreadID != r1.verdict.CodexThreadID {
		t.Errorf("second verdict %+v, want the first's thread resumed", v)
	}
	reqs := e.model.Requests()
	if len(reqs) != 2 {
		t.Fatalf("%d model requests, want 2", len(reqs))
	}
	if n := countIn(reqs[0].UserTexts(), "second in line"); n != 0 {
		t.Errorf("the second round's text reached the first turn")
	}
	if got := reqs[1].LastUserText(); got != "second in line" {
		t.Errorf("second request's last text %q", got)
	}
	if !strings.Contains(string(reqs[1].Body), "one two three") {
		t.Errorf("the second request lacks the first answer")
	}
}

// TestQueueLimit: with QueueLimit 1, a round behind one waiting round gets a
// busy verdict at once; the waiting one runs when the first ends.
func TestQueueLimit(t *testing.T) {
	e := newEnv(t, func(c *daemonSetup) { c.QueueLimit = 1 })
	e.model.Enqueue(demomodel.Respond(demomodel.Message("working")).Hang(), demomodel.Text("queued answer"))
	id1 := e.startRound(messages.StartRound{User: "kim", Thread: "q", Text: "hang"})
	e.waitEvent(id1, "a text delta", func(ev messages.RoundEvent) bool { return ev.Kind == messages.KindText })
	id2 := e.startRound(messages.StartRound{User: "kim", Thread: "q", Text: "wait"})
	r3 := e.round(messages.StartRound{User: "kim", Thread: "q", Text: "too many"})
	if r3.verdict.Status != messages.StatusBusy || len(r3.events) != 0 {
		t.Errorf("third round %v, want busy", r3)
	}
	e.send(messages.InterruptRound{User: "kim", Thread: "q", RoundID: id1})
	e.awaitOther("RoundControlled", isControlled)
	if r1 := e.await(id1); r1.verdict.Status != messages.StatusInterrupted {
		t.Errorf("first round %v, want interrupted", r1)
	}
	if r2 := e.await(id2).mustComplete(t); r2.text() != "queued answer" {
		t.Errorf("queued round text %q", r2.text())
	}
}

// TestThreadsRunConcurrently: a round on one mesh thread does not wait for
// a round of the same user on another thread: the second completes while
// the first one's model request is still held back.
func TestThreadsRunConcurrently(t *testing.T) {
	e := newEnv(t, nil)
	gate := make(chan struct{})
	var once sync.Once
	open := func() { once.Do(func() { close(gate) }) }
	t.Cleanup(open) // before the model closes: it waits for its handlers
	e.model.SetResponder(func(req *demomodel.Request) demomodel.Script {
		if req.LastUserText() == "slow" {
			select {
			case <-gate:
			case <-time.After(waitTimeout):
			}
			return demomodel.Text("slow answer")
		}
		return demomodel.Text("fast answer")
	})
	slow := e.startRound(messages.StartRound{User: "lee", Thread: "a", Text: "slow"})
	e.waitModelRequests(1)
	fast := e.round(messages.StartRound{User: "lee", Thread: "b", Text: "fast"}).mustComplete(t)
	if fast.text() != "fast answer" {
		t.Errorf("fast text %q", fast.text())
	}
	open()
	r := e.await(slow).mustComplete(t)
	if r.text() != "slow answer" || !fast.at.Before(r.at) {
		t.Errorf("slow round %v", r)
	}
	if r.verdict.CodexThreadID == fast.verdict.CodexThreadID {
		t.Errorf("two mesh threads share codex thread %s", r.verdict.CodexThreadID)
	}
}

// TestInterruptAndSteer: InterruptRound while the model stream hangs gets
// RoundControlled OK and the round ends interrupted; SteerRound adds text to
// a running round, which then completes. Both cross the remote.
func TestInterruptAndSteer(t *testing.T) {
	e := newEnv(t, nil)
	const user, key = "mia", "ctl"

	e.model.Enqueue(demomodel.Respond(demomodel.Message("partial ")).Hang())
	id := e.startRound(messages.StartRound{User: user, Thread: key, Text: "start and hang"})
	e.waitEvent(id, "a text delta", func(ev messages.RoundEvent) bool { return ev.Kind == messages.KindText })
	e.send(messages.InterruptRound{User: user, Thread: key, RoundID: id})
	rc := e.awaitOther("RoundControlled", isControlled).(messages.RoundControlled)
	if !rc.OK || rc.RoundID != id || rc.Error != "" {
		t.Errorf("RoundControlled = %+v, want OK for %s", rc, id)
	}
	r := e.await(id)
	if r.verdict.Status != messages.StatusInterrupted {
		t.Errorf("verdict %+v, want interrupted", r.verdict)
	}

	// Nothing runs now: a second interrupt is refused.
	e.send(messages.InterruptRound{User: user, Thread: key})
	if rc := e.awaitOther("RoundControlled", isControlled).(messages.RoundControlled); rc.OK || rc.Error == "" {
		t.Errorf("interrupt with nothing running: %+v, want refused", rc)
	}

	e.model.Enqueue(demomodel.Respond(demomodel.Message("thinking ")).Hang(), demomodel.Text("steered answer"))
	id = e.startRound(messages.StartRound{User: user, Thread: key, Text: "start and wait"})
	e.waitEvent(id, "a text delta", func(ev messages.RoundEvent) bool { return ev.Kind == messages.KindText })
	e.send(messages.SteerRound{User: user, Thread: key, RoundID: id, Text: "also consider this"})
	rc = e.awaitOther("RoundControlled", isControlled).(messages.RoundControlled)
	if !rc.OK || rc.RoundID != id {
		t.Errorf("steer RoundControlled = %+v, want OK", rc)
	}
	r = e.await(id).mustComplete(t)
	if !strings.HasSuffix(r.text(), "steered answer") || !r.verdict.Resumed {
		t.Errorf("steered round %v", r)
	}
	if last := e.lastRequest(); last.LastUserText() != "also consider this" {
		got := last.LastUserText()
		t.Errorf("the model's last user text %q, want the steer", got)
	}
}

// TestDaemonStopMidRound: stopping the daemon while a round runs (its model
// stream hangs, so the drain cannot wait it out) still gives the caller
// that round's verdict, interrupted, and stops codex.
func TestDaemonStopMidRound(t *testing.T) {
	e := newEnv(t, nil)
	e.model.Enqueue(demomodel.Respond(demomodel.Message("partial ")).Hang())
	id := e.startRound(messages.StartRound{User: "nina", Thread: "stop", Text: "hang"})
	e.waitEvent(id, "a text delta", func(ev messages.RoundEvent) bool { return ev.Kind == messages.KindText })
	// The drain waits two thirds of the timeout for the hanging round,
	// then the poison interrupts it.
	start := time.Now()
	if err := e.d.stop(6 * time.Second); err != nil {
		t.Fatalf("stop: %v", err)
	}
	e.d = nil
	if d := time.Since(start); d > 15*time.Second {
		t.Errorf("stop took %v", d)
	}
	r := e.await(id)
	if r.verdict.Status != messages.StatusInterrupted {
		t.Errorf("verdict %+v, want interrupted", r.verdict)
	}
	waitNoCodex(t, e.bin, e.root)
}

// TestResumedRoundReportsOnlyItsOwnUsage: after a daemon restart, resuming
// a thread makes codex re-send the thread's restored token usage
// (thread/tokenUsage/updated for the previous turn). That is not usage of
// the new round, and must not be reported as its usage event: a caller
// adding up usage would count the previous request twice.
func TestResumedRoundReportsOnlyItsOwnUsage(t *testing.T) {
	e := newEnv(t, nil)
	u1 := demomodel.Usage{InputTokens: 111, OutputTokens: 11}
	u2 := demomodel.Usage{InputTokens: 222, OutputTokens: 22}
	e.model.Enqueue(demomodel.Text("one").WithUsage(u1))
	e.round(messages.StartRound{User: "omar", Thread: "usage", Text: "first"}).mustComplete(t)
	e.restart(nil)
	e.model.Enqueue(demomodel.Text("two").WithUsage(u2))
	r := e.round(messages.StartRound{User: "omar", Thread: "usage", Text: "second"}).mustComplete(t)
	if !r.verdict.Resumed {
		t.Fatalf("verdict %+v, want resumed", r.verdict)
	}
	checkUsage(t, r, u2)
}

// TestUnreachableReplyToDoesNotStallOthers: StartRound.ReplyTo comes from
// the peer, and may name an address nobody listens on (a hostile peer, or a
// caller that crashed). hollywood v1.0.5 dials a remote address inside its
// one stream router, retrying three times with 0, 1 and 2 s sleeps, so one
// reply to such an address holds up every reply the daemon sends, to every
// caller, for at least 3 s (with a blackholed address, each dial waits for
// the kernel's connect timeout instead). Other users' rounds must not wait
// for that.
func TestUnreachableReplyToDoesNotStallOthers(t *testing.T) {
	e := newEnv(t, nil)
	// Warm both users' app-servers, so the measured round is a warm one.
	e.model.Enqueue(demomodel.Text("warm"), demomodel.Text("warm"))
	e.round(messages.StartRound{User: "victim", Thread: "t", Text: "warm up"}).mustComplete(t)
	e.round(messages.StartRound{User: "mallory", Thread: "t", Text: "warm up"}).mustComplete(t)
	start := time.Now()
	e.model.Enqueue(demomodel.Text("baseline"))
	e.round(messages.StartRound{User: "victim", Thread: "t", Text: "baseline"}).mustComplete(t)
	baseline := time.Since(start)

	dead, err := freeLoopbackAddr() // nothing listens there
	if err != nil {
		t.Fatal(err)
	}
	e.send(messages.StartRound{RoundID: "to-nowhere", User: "mallory", Thread: "t", Text: "reply elsewhere",
		ReplyTo: &messages.PID{Address: dead, ID: "mesh/nobody"}})
	// The daemon refuses to reply to another node than the sender's: the
	// round's verdict, to the sender.
	if v := e.await("to-nowhere").verdict; v.Status != messages.StatusRejected || !strings.Contains(v.Error, "reply_to") {
		t.Errorf("verdict = %+v, want rejected naming reply_to", v)
	}
	start = time.Now()
	e.model.Enqueue(demomodel.Text("on time"))
	e.round(messages.StartRound{User: "victim", Thread: "t", Text: "am I delayed?"}).mustComplete(t)
	if took := time.Since(start); took > 2*time.Second {
		t.Errorf("a round of another user took %v (%v without the unreachable reply_to)", took.Round(time.Millisecond), baseline.Round(time.Millisecond))
	}
}

// --- helpers of these tests ---

func isControlled(m any) bool { _, ok := m.(messages.RoundControlled); return ok }

func countIn(texts []string, s string) int {
	n := 0
	for _, t := range texts {
		n += strings.Count(t, s)
	}
	return n
}

func firstIndex(r roundResult, k messages.EventKind) int {
	return slices.IndexFunc(r.events, func(ev messages.RoundEvent) bool { return ev.Kind == k })
}

func lastIndex(r roundResult, k messages.EventKind) int {
	for i := len(r.events) - 1; i >= 0; i-- {
		if r.events[i].Kind == k {
			return i
		}
	}
	return -1
}

// checkDeltas checks that the events of kind k are exactly deltas, in
// order, all of item itemID.
func checkDeltas(t *testing.T, r roundResult, k messages.EventKind, itemID string, deltas ...string) {
	t.Helper()
	evs := r.kind(k)
	var got []string
	for _, ev := range evs {
		got = append(got, ev.Text)
		if ev.ItemID != itemID {
			t.Errorf("%s event %d has item %q, want %q", k, ev.Seq, ev.ItemID, itemID)
		}
	}
	if !slices.Equal(got, deltas) {
		t.Errorf("%s deltas %q, want %q", k, got, deltas)
	}
}

// checkUsage checks that the round reported exactly one usage event, with
// the numbers of u (one model request).
func checkUsage(t *testing.T, r roundResult, u demomodel.Usage) {
	t.Helper()
	total := u.TotalTokens
	if total == 0 {
		total = u.InputTokens + u.OutputTokens
	}
	want := messages.Usage{InputTokens: u.InputTokens, CachedInputTokens: u.CachedInputTokens, OutputTokens: u.OutputTokens,
		ReasoningOutputTokens: u.ReasoningOutputTokens, TotalTokens: total}
	evs := r.kind(messages.KindUsage)
	var got []messages.Usage
	for _, ev := range evs {
		if ev.Usage == nil {
			t.Errorf("usage event %d without usage", ev.Seq)
			continue
		}
		got = append(got, *ev.Usage)
	}
	if len(got) != 1 || got[0] != want {
		t.Errorf("usage events %+v, want exactly %+v", got, want)
	}
}

// toolPair finds the tool call and the tool result of callID, the call
// first.
func toolPair(t *testing.T, r roundResult, callID string) (*messages.ToolCall, *messages.ToolResult) {
	t.Helper()
	ci := slices.IndexFunc(r.events, func(ev messages.RoundEvent) bool {
		return ev.Kind == messages.KindToolCall && ev.Tool != nil && ev.Tool.CallID == callID
	})
	ri := slices.IndexFunc(r.events, func(ev messages.RoundEvent) bool {
		return ev.Kind == messages.KindToolResult && ev.Result != nil && ev.Result.CallID == callID
	})
	if ci < 0 || ri < 0 || ri < ci {
		t.Errorf("tool call %s: call at %d, result at %d; %v", callID, ci, ri, r)
		return nil, nil
	}
	if r.events[ci].ItemID != callID || r.events[ri].ItemID != callID {
		t.Errorf("tool call %s: item ids %q and %q", callID, r.events[ci].ItemID, r.events[ri].ItemID)
	}
	return r.events[ci].Tool, r.events[ri].Result
}

// checkBearer checks that every request the MCP server got carried the
// bearer token, and that the handshake (initialize, tools/list) happened.
func checkBearer(t *testing.T, s *mcpecho.Server, token string) {
	t.Helper()
	reqs := s.Requests()
	var methods []string
	for _, r := range reqs {
		methods = append(methods, r.RPCMethods...)
		if r.Authorization() != "Bearer "+token || r.Status == 401 {
			t.Errorf("MCP request %d (%s %v) has Authorization %q, status %d", r.Seq, r.Method, r.RPCMethods, r.Authorization(), r.Status)
		}
	}
	for _, m := range []string{"initialize", "notifications/initialized", "tools/list"} {
		if !slices.Contains(methods, m) {
			t.Errorf("the MCP server never got %s (got %v)", m, methods)
		}
	}
}

func mustEncode(t *testing.T, v any) *anypb.Any {
	t.Helper()
	a, err := messages.Encode(v)
	if err != nil {
		t.Fatal(err)
	}
	return a
}

// mustEncodeAs builds an envelope of the given wire name around a msgpack
// map of the wrong shape.
func mustEncodeAs(t *testing.T, name string, body map[string]any) *anypb.Any {
	t.Helper()
	b, err := msgpack.Marshal(body)
	if err != nil {
		t.Fatal(err)
	}
	return &anypb.Any{TypeUrl: messages.TypeURLPrefix + name, Value: b}
}

// TestBinaryServeAndRound builds the supervisor binary and drives it as an
// operator would: `supervisor serve` as a background process, then
// `supervisor round --json` (a new thread, then the same thread resumed, then
// a failing model), `supervisor interrupt` against a hanging round, and
// finally SIGTERM to the serve process by its PID: it must exit 0 and leave
// no codex process behind.
func TestBinaryServeAndRound(t *testing.T) {
	b := newBinaryServe(t)
	bin, root, exe, model, addr := b.bin, b.root, b.exe, b.model, b.addr
	args := b.args
	logs := &markBuffer{mark: "supervisor serving", seen: make(chan struct{})}
	serve := exec.Command(exe, args...)
	serve.Stderr = logs
	if err := serve.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() { exited <- serve.Wait() }()
	t.Cleanup(func() {
		select {
		case <-exited:
		default:
			_ = serve.Process.Kill()
			<-exited
		}
		waitNoCodex(t, bin, root)
		if t.Failed() {
			t.Logf("serve log:\n%s", logs.String())
		}
	})
	select {
	case <-logs.seen:
	case err := <-exited:
		exited <- err
		t.Fatalf("serve exited early: %v\n%s", err, logs.String())
	case <-time.After(waitTimeout):
		t.Fatalf("serve did not log %q:\n%s", logs.mark, logs.String())
	}

	roundCmd := func(thread, text string) *exec.Cmd {
		return exec.Command(exe, "round", "--addr", addr, "--user", "pat", "--thread", thread, "--json", "--timeout", "60s", text)
	}
	parse := func(out []byte) (events []map[string]any, done map[string]any) {
		t.Helper()
		for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
			var m map[string]any
			if err := json.Unmarshal([]byte(line), &m); err != nil {
				t.Fatalf("round printed %q: %v", line, err)
			}
			if m["type"] == "done" {
				done = m
			} else {
				events = append(events, m)
				if seq := m["seq"].(float64); int(seq) != len(events) {
					t.Errorf("event seq %v, want %d", seq, len(events))
				}
			}
		}
		if done == nil {
			t.Fatalf("no done line in %q", out)
		}
		return events, done
	}
	text := func(events []map[string]any) string {
		var b strings.Builder
		for _, ev := range events {
			if ev["type"] == "text" {
				b.WriteString(ev["text"].(string))
			}
		}
		return b.String()
	}

	model.Enqueue(demomodel.Text("Hello ", "from ", "the binary"))
	out, err := roundCmd("bin/t1", "hello binary").Output()
	if err != nil {
		t.Fatalf("round: %v\n%s", err, out)
	}
	ev1, done1 := parse(out)
	if got := text(ev1); got != "Hello from the binary" {
		t.Errorf("text %q", got)
	}
	thread, _ := done1["codex_thread_id"].(string)
	if done1["status"] != "completed" || done1["resumed"] != false || !store.IsUUID(thread) {
		t.Errorf("first done %v", done1)
	}

	model.Enqueue(demomodel.Text("again"))
	out, err = roundCmd("bin/t1", "again please").Output()
	if err != nil {
		t.Fatalf("second round: %v\n%s", err, out)
	}
	if _, done := parse(out); done["status"] != "completed" || done["resumed"] != true || done["codex_thread_id"] != thread {
		t.Errorf("second done %v, want thread %s resumed", done, thread)
	}

	model.Enqueue(demomodel.InternalServerError())
	out, err = roundCmd("bin/t2", "fail please").Output()
	var ee *exec.ExitError
	if !errors.As(err, &ee) || ee.ExitCode() != 1 {
		t.Errorf("failing round: err %v, want exit code 1", err)
	}
	if _, done := parse(out); done["status"] != "failed" || done["codex_error_info"] != `"internalServerError"` {
		t.Errorf("failing round done %v", done)
	}

	// interrupt: a round hangs until `supervisor interrupt` stops it.
	model.Enqueue(demomodel.Respond(demomodel.Message("partial")).Hang())
	var hangOut bytes.Buffer
	hang := roundCmd("bin/t3", "hang please")
	hang.Stdout = &hangOut
	if err := hang.Start(); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), waitTimeout)
	defer cancel()
	if _, err := model.WaitRequests(ctx, 4); err != nil {
		_ = hang.Process.Kill()
		_ = hang.Wait()
		t.Fatal(err)
	}
	intr, err := exec.Command(exe, "interrupt", "--addr", addr, "--user", "pat", "--thread", "bin/t3").CombinedOutput()
	if err != nil || !strings.Contains(string(intr), "interrupt accepted") {
		t.Errorf("interrupt: %v\n%s", err, intr)
	}
	err = hang.Wait()
	if !errors.As(err, &ee) || ee.ExitCode() != exitInterrupted {
		t.Errorf("interrupted round: err %v, want exit code %d", err, exitInterrupted)
	}
	if _, done := parse(hangOut.Bytes()); done["status"] != "interrupted" {
		t.Errorf("interrupted round done %v", done)
	}

	// Stop the daemon by its PID, the way a service manager does.
	if len(codexProcs(bin, root)) == 0 {
		t.Errorf("no codex process before the stop: the check below would prove nothing")
	}
	if err := serve.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-exited:
		exited <- err
		if err != nil {
			t.Errorf("serve after SIGTERM: %v, want exit code 0", err)
		}
	case <-time.After(waitTimeout):
		t.Fatalf("serve did not stop within %v after SIGTERM", waitTimeout)
	}
	if !strings.Contains(logs.String(), `"msg":"stopped"`) {
		t.Errorf("serve did not log its stop:\n%s", logs.String())
	}
	waitNoCodex(t, bin, root)
}

// markBuffer collects a process's output and closes seen once mark shows.
type markBuffer struct {
	syncBuffer
	mark string
	once sync.Once
	seen chan struct{}
}

func (b *markBuffer) Write(p []byte) (int, error) {
	n, err := b.syncBuffer.Write(p)
	if strings.Contains(b.String(), b.mark) {
		b.once.Do(func() { close(b.seen) })
	}
	return n, err
}
