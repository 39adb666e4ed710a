package codexhome_test

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/meshweaver/supervisor/demomodel"
	"github.com/meshweaver/supervisor/testkit/codexhome"
)

// These tests run the real codex CLI against the mock model. They fail, and
// never skip, when the binary is missing: run scripts/install-codex. They
// run one at a time: each CLI process is CPU-hungry at startup, and running
// them in parallel on a small machine made every one slower.

func TestRealCLITextTurn(t *testing.T) {
	e := newEnv(t)
	e.mock.Enqueue(demomodel.Respond(demomodel.Message("Hel", "lo ", "world", "!").WithID("msg-1")))
	a := startAppServer(t, e)
	a.handshake()
	thread := a.startThread(e.work, "read-only")
	msgs := a.runTurn(thread, "say hello")

	if got, want := strings.Join(deltas(t, msgs), "|"), "Hel|lo |world|!"; got != want {
		t.Errorf("deltas = %q, want %q", got, want)
	}
	tc := lastTurn(t, msgs)
	if tc.Turn.Status != "completed" || tc.ThreadID != thread {
		t.Errorf("turn/completed = %+v, want completed in %s", tc, thread)
	}
	if len(tc.Turn.Items) != 1 || !strings.Contains(string(tc.Turn.Items[0]), `"text":"Hello world!"`) {
		t.Errorf("turn items = %s", tc.Turn.Items)
	}
	if w := byMethod(msgs, "warning"); len(w) != 0 {
		t.Errorf("unexpected warning with the catalog: %s", w[0].raw)
	}
	usage := byMethod(msgs, "thread/tokenUsage/updated")
	if len(usage) != 1 || !strings.Contains(usage[0].raw, `"modelContextWindow":190000`) {
		t.Errorf("tokenUsage = %v, want one with modelContextWindow 95%% of %d", usage, codexhome.LargeContextWindow)
	}

	reqs := e.mock.Requests()
	if len(reqs) != 1 {
		t.Fatalf("model got %d requests, want 1", len(reqs))
	}
	r := reqs[0]
	if r.Path != "/v1/responses" || r.Model != codexhome.Model || r.RequestKind() != demomodel.KindTurn {
		t.Errorf("request %s model %q kind %q", r.Path, r.Model, r.RequestKind())
	}
	if got := r.LastUserText(); got != "say hello" {
		t.Errorf("LastUserText = %q", got)
	}
	if md := r.TurnMetadata(); md.ThreadID != thread || md.TurnID != tc.Turn.ID {
		t.Errorf("turn metadata %+v, want thread %s turn %s", md, thread, tc.Turn.ID)
	}
	for _, tool := range []string{"exec_command", "apply_patch"} {
		if !r.HasTool(tool) {
			t.Errorf("tool %s not offered; tools %v", tool, r.ToolNames())
		}
	}
	if h := r.Header.Get("Authorization"); h != "" {
		t.Errorf("Authorization header sent to the mock: %q", h)
	}
}

func TestRealCLIExecThenText(t *testing.T) {
	e := newEnv(t)
	call := demomodel.ExecCommand("call-exec-1", "echo hi-from-$((6*7))")
	e.mock.SetResponder(demomodel.ToolThenText(call, "The ", "command ", "ran."))
	a := startAppServer(t, e)
	a.handshake()
	thread := a.startThread(e.work, "read-only")
	msgs := a.runTurn(thread, "run it")

	type cmdItem struct {
		Item struct {
			Type             string  `json:"type"`
			ID               string  `json:"id"`
			Status           string  `json:"status"`
			ExitCode         *int    `json:"exitCode"`
			AggregatedOutput *string `json:"aggregatedOutput"`
		} `json:"item"`
	}
	var done *cmdItem
	for _, m := range byMethod(msgs, "item/completed") {
		if it := params[cmdItem](t, m); it.Item.Type == "commandExecution" {
			done = &it
		}
	}
	if done == nil {
		t.Fatal("no commandExecution item completed")
	}
	if done.Item.ID != "call-exec-1" || done.Item.Status != "completed" || done.Item.ExitCode == nil || *done.Item.ExitCode != 0 {
		t.Errorf("command item = %+v", done.Item)
	}
	if done.Item.AggregatedOutput == nil || !strings.Contains(*done.Item.AggregatedOutput, "hi-from-42") {
		t.Errorf("aggregatedOutput = %v", done.Item.AggregatedOutput)
	}
	if got := strings.Join(deltas(t, msgs), ""); got != "The command ran." {
		t.Errorf("text = %q", got)
	}
	if tc := lastTurn(t, msgs); tc.Turn.Status != "completed" {
		t.Errorf("turn status = %q", tc.Turn.Status)
	}

	reqs := e.mock.Requests()
	if len(reqs) != 2 {
		t.Fatalf("model got %d requests, want 2", len(reqs))
	}
	out, ok := reqs[1].ToolOutput("call-exec-1")
	if !ok || !strings.Contains(out, "hi-from-42") || !strings.Contains(out, "Process exited with code 0") {
		t.Errorf("tool output sent to the model = %q, %v", out, ok)
	}
	if reqs[1].LastInputType() != "function_call_output" {
		t.Errorf("follow-up last input = %s", reqs[1].LastInput())
	}
}

func TestRealCLIApplyPatch(t *testing.T) {
	e := newEnv(t)
	patch := "*** Begin Patch\n*** Add File: new.txt\n+brand new line\n*** End Patch"
	e.mock.SetResponder(demomodel.ToolThenText(demomodel.ApplyPatch("call-p1", patch), "Patched."))
	a := startAppServer(t, e)
	a.handshake()
	thread := a.startThread(e.work, "workspace-write")
	msgs := a.runTurn(thread, "add a file")

	if tc := lastTurn(t, msgs); tc.Turn.Status != "completed" {
		t.Errorf("turn status = %q", tc.Turn.Status)
	}
	found := false
	for _, m := range byMethod(msgs, "item/completed") {
		if strings.Contains(string(m.Params), `"type":"fileChange"`) {
			found = true
			if !strings.Contains(string(m.Params), `"status":"completed"`) || !strings.Contains(string(m.Params), `"id":"call-p1"`) {
				t.Errorf("fileChange item = %s", m.Params)
			}
		}
	}
	if !found {
		t.Error("no fileChange item completed")
	}
	b, err := os.ReadFile(filepath.Join(e.work, "new.txt"))
	if err != nil || string(b) != "brand new line\n" {
		t.Errorf("new.txt = %q, %v", b, err)
	}
	reqs := e.mock.Requests()
	if len(reqs) != 2 {
		t.Fatalf("model got %d requests, want 2", len(reqs))
	}
	if out, ok := reqs[1].ToolOutput("call-p1"); !ok || !strings.Contains(out, "A new.txt") {
		t.Errorf("patch output = %q, %v", out, ok)
	}
}

func TestRealCLIReasoningAndDemo(t *testing.T) {
	e := newEnv(t)
	e.mock.Enqueue(demomodel.Respond(
		demomodel.Reasoning("Think ", "hard").WithID("rs-1").WithRaw("raw ", "thoughts"),
		demomodel.Message("Done.").WithID("msg-r"),
	).WithUsage(demomodel.Usage{InputTokens: 150, CachedInputTokens: 100, OutputTokens: 7, ReasoningOutputTokens: 3}))
	a := startAppServer(t, e)
	a.handshake()
	thread := a.startThread(e.work, "read-only")

	msgs := a.runTurn(thread, "think first")
	var summary, raw []string
	for _, m := range byMethod(msgs, "item/reasoning/summaryTextDelta") {
		summary = append(summary, params[struct{ Delta string }](t, m).Delta)
	}
	for _, m := range byMethod(msgs, "item/reasoning/textDelta") {
		raw = append(raw, params[struct{ Delta string }](t, m).Delta)
	}
	if strings.Join(summary, "|") != "Think |hard" || strings.Join(raw, "|") != "raw |thoughts" {
		t.Errorf("reasoning deltas: summary %q raw %q", summary, raw)
	}
	usage := byMethod(msgs, "thread/tokenUsage/updated")
	if len(usage) != 1 || !strings.Contains(usage[0].raw,
		`"last":{"totalTokens":157,"inputTokens":150,"cachedInputTokens":100,"cacheWriteInputTokens":0,"outputTokens":7,"reasoningOutputTokens":3}`) {
		t.Errorf("token usage = %v", usage)
	}

	// The queue is empty now: DemoResponder answers.
	msgs = a.runTurn(thread, "what is   the plan?")
	want := demomodel.DemoReply(&e.mock.Requests()[1])
	if got := strings.Join(deltas(t, msgs), ""); got != want || !strings.Contains(got, "You said: “what is the plan?”") {
		t.Errorf("demo reply = %q, want %q", got, want)
	}
	if n := len(deltas(t, msgs)); n < 10 {
		t.Errorf("demo reply came in %d deltas, want word by word", n)
	}
	reqs := e.mock.Requests()
	if len(reqs) != 2 {
		t.Fatalf("model got %d requests, want 2", len(reqs))
	}
	if !strings.Contains(string(reqs[1].Body), `"raw thoughts"`) {
		t.Errorf("second request does not carry the reasoning item back")
	}
}

func TestRealCLIErrors(t *testing.T) {
	e := newEnv(t)
	a := startAppServer(t, e)
	a.handshake()
	tests := []struct {
		name    string
		script  demomodel.Script
		info    string // codexErrorInfo as JSON
		message string // part of the error message
	}{
		{"http 500", demomodel.InternalServerError(), `"internalServerError"`, "high demand"},
		{"http 429 rate limit", demomodel.RateLimited(), `{"responseTooManyFailedAttempts":{"httpStatusCode":429}}`, "429 Too Many Requests"},
		{"http 429 quota", demomodel.InsufficientQuota(), `"usageLimitExceeded"`, "Quota exceeded"},
		{"http 401", demomodel.Unauthorized(), `{"httpConnectionFailed":{"httpStatusCode":401}}`, "401 Unauthorized"},
		{"http 400 context", demomodel.ContextLengthExceeded(), `"contextWindowExceeded"`, "context window"},
		{"failed context", demomodel.Failed(demomodel.CodeContextLengthExceeded, "too long"), `"contextWindowExceeded"`, "context window"},
		{"failed quota", demomodel.Failed(demomodel.CodeInsufficientQuota, "no money"), `"usageLimitExceeded"`, "Quota exceeded"},
		{"failed rate limit", demomodel.Failed(demomodel.CodeRateLimitExceeded, "Rate limit reached. Please try again in 0.2s."), `"rateLimitExceeded"`, "rate limit exceeded"},
		{"cut stream", demomodel.Text("partial").Cut(), `"other"`, "stream disconnected before completion"},
		{"eof stream", demomodel.Text("partial").EOF(), `"other"`, "stream closed before response.completed"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			before := len(e.mock.Requests())
			e.mock.Enqueue(tc.script)
			thread := a.startThread(e.work, "read-only")
			msgs := a.runTurn(thread, "fail please")
			turn := lastTurn(t, msgs)
			if turn.Turn.Status != "failed" || turn.Turn.Error == nil {
				t.Fatalf("turn = %+v, want failed with an error", turn.Turn)
			}
			if got := string(turn.Turn.Error.CodexErrorInfo); got != tc.info {
				t.Errorf("codexErrorInfo = %s, want %s", got, tc.info)
			}
			if !strings.Contains(turn.Turn.Error.Message, tc.message) {
				t.Errorf("message = %q, want it to contain %q", turn.Turn.Error.Message, tc.message)
			}
			errs := byMethod(msgs, "error")
			if len(errs) != 1 || !strings.Contains(errs[0].raw, `"willRetry":false`) {
				t.Errorf("error notifications = %v, want one final", errs)
			}
			if n := len(e.mock.Requests()) - before; n != 1 {
				t.Errorf("model got %d requests, want 1 (no retries)", n)
			}
		})
	}
}

func TestRealCLIInterruptHangingStream(t *testing.T) {
	e := newEnv(t)
	e.mock.Enqueue(demomodel.Text("still ", "typing").Hang())
	a := startAppServer(t, e)
	a.handshake()
	thread := a.startThread(e.work, "read-only")
	res := a.call("turn/start", map[string]any{
		"threadId": thread,
		"input":    []any{map[string]any{"type": "text", "text": "long answer"}},
	})
	var started struct {
		Turn struct {
			ID string `json:"id"`
		} `json:"turn"`
	}
	if err := json.Unmarshal(res, &started); err != nil {
		t.Fatal(err)
	}
	a.collect("item/agentMessage/delta") // the turn is streaming
	a.call("turn/interrupt", map[string]any{"threadId": thread, "turnId": started.Turn.ID})
	msgs := a.collect("turn/completed")
	if tc := lastTurn(t, msgs); tc.Turn.Status != "interrupted" {
		t.Errorf("turn status = %q, want interrupted", tc.Turn.Status)
	}
	// The mock is free again: the next turn is answered.
	ctx, cancel := context.WithTimeout(context.Background(), waitTimeout)
	defer cancel()
	msgs = a.runTurn(thread, "again")
	if tc := lastTurn(t, msgs); tc.Turn.Status != "completed" {
		t.Errorf("next turn status = %q", tc.Turn.Status)
	}
	reqs, err := e.mock.WaitRequests(ctx, 2)
	if err != nil {
		t.Fatal(err)
	}
	if got := reqs[1].LastUserText(); got != "again" {
		t.Errorf("LastUserText after an interrupt = %q, want the new message", got)
	}
	if !strings.Contains(strings.Join(reqs[1].UserTexts(), "\n"), "<turn_aborted>") {
		t.Errorf("second request lacks the <turn_aborted> marker: %q", reqs[1].UserTexts())
	}
}

func TestRealCLIOverridesOnly(t *testing.T) {
	e := newEnv(t)
	e.home = t.TempDir() // an empty home: the provider comes from -c alone
	e.mock.Enqueue(demomodel.Text("via ", "flags"))
	a := startAppServer(t, e, codexhome.OverrideArgs(e.mock.URL())...)
	a.handshake()
	thread := a.startThread(e.work, "read-only")
	msgs := a.runTurn(thread, "hi")
	if got, want := strings.Join(deltas(t, msgs), ""), "via flags"; got != want {
		t.Errorf("text = %q, want %q", got, want)
	}
	// Without a catalog codex does not know mock-model.
	if w := byMethod(msgs, "warning"); len(w) != 1 || !strings.Contains(w[0].raw, "Model metadata for `mock-model` not found") {
		t.Errorf("warnings = %v", w)
	}
	if reqs := e.mock.Requests(); len(reqs) != 1 || reqs[0].HasTool("apply_patch") {
		t.Errorf("requests = %d; apply_patch offered without a catalog", len(reqs))
	}
}

func TestRealCLIAutoCompactionWithSmallContext(t *testing.T) {
	e := newEnv(t, codexhome.WithSmallContext())
	// Turn 1 reports more tokens than the auto-compaction limit.
	e.mock.Enqueue(demomodel.Text("big").WithUsage(demomodel.Usage{InputTokens: 3500, OutputTokens: 100}))
	a := startAppServer(t, e)
	a.handshake()
	thread := a.startThread(e.work, "read-only")
	if tc := lastTurn(t, a.runTurn(thread, "first")); tc.Turn.Status != "completed" {
		t.Fatalf("turn 1 status = %q", tc.Turn.Status)
	}

	// Turn 2 compacts first; DemoResponder writes the summary, then answers.
	msgs := a.runTurn(thread, "second")
	if tc := lastTurn(t, msgs); tc.Turn.Status != "completed" {
		t.Errorf("turn 2 status = %q", tc.Turn.Status)
	}
	compacted := false
	for _, m := range byMethod(msgs, "item/completed") {
		compacted = compacted || strings.Contains(string(m.Params), `"type":"contextCompaction"`)
	}
	if !compacted {
		t.Error("no contextCompaction item in turn 2")
	}
	reqs := e.mock.Requests()
	var kinds []string
	for _, r := range reqs {
		kinds = append(kinds, r.RequestKind())
	}
	if got := strings.Join(kinds, ","); got != "turn,compaction,turn" {
		t.Fatalf("request kinds = %s, want turn,compaction,turn", got)
	}
	if !strings.Contains(reqs[1].LastUserText(), "CONTEXT CHECKPOINT COMPACTION") {
		t.Errorf("compaction prompt = %.80q", reqs[1].LastUserText())
	}
	if got := reqs[2].LastUserText(); got != "second" {
		t.Errorf("turn 2 LastUserText = %q", got)
	}
	if !strings.Contains(string(reqs[2].Body), "Summary (demo model)") {
		t.Errorf("turn 2 request does not carry the demo summary")
	}
}
