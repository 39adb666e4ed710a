package codexproc

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"flag"
	"image"
	"image/color"
	"image/png"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/meshweaver/supervisor/codexproto"
	"github.com/meshweaver/supervisor/codexrpc"
	"github.com/meshweaver/supervisor/demomodel"
)

// The wider surface (surface.go) against the real, pinned CLI and the mock
// model: subagents, structured output, images, additional context, the
// per-turn sandbox, command output deltas and the turn diff. Every line
// both ways is checked against the pinned schema (startCLI traces them).

var updateSurface = flag.Bool("update-surface", false, "rewrite ../actors/eventmap/testdata/recordings/subagent.jsonl from the real CLI")

// surfaceCLI starts the real CLI with an empty HOME and TMPDIR=/var/tmp.
func surfaceCLI(t *testing.T) *cli {
	t.Helper()
	return startCLI(t, cliOptions{env: []string{"HOME=" + t.TempDir(), "TMPDIR=/var/tmp"}})
}

// surfaceTurn starts a turn with the wider params and waits for its end.
func (c *cli) surfaceTurn(p codexproto.TurnStartSurfaceParams) (codexproto.Turn, codexproto.TurnNotification) {
	c.t.Helper()
	if p.Summary == "" {
		p.Summary = "auto"
	}
	var res codexproto.TurnResult
	if err := c.client.Conn.Call(c.ctx(), codexproto.MethodTurnStart, p, &res); err != nil {
		c.t.Fatalf("turn/start: %v", err)
	}
	done := c.notes.wait(c.t, "turn/completed of "+res.Turn.ID, func(n *codexrpc.Notification) bool {
		return n.Method == codexproto.NoteTurnCompleted && decode[codexproto.TurnNotification](c.t, n.Params).Turn.ID == res.Turn.ID
	})
	return res.Turn, decode[codexproto.TurnNotification](c.t, done.Params)
}

func textTurn(threadID, text string) codexproto.TurnStartSurfaceParams {
	return codexproto.TurnStartSurfaceParams{TurnStartParams: codexproto.TurnStartParams{ThreadID: threadID}, Input: []codexproto.InputItem{{Type: codexproto.InputText, Text: text}}}
}

// namespacedCall is a function call of a namespaced tool, as the model
// sends it (demomodel.MCPCall only makes mcp__ namespaces).
func namespacedCall(callID, namespace, name, args string) demomodel.Item {
	item := func(a string) map[string]any {
		return map[string]any{"type": "function_call", "id": "fc_" + callID, "call_id": callID, "name": name, "namespace": namespace, "arguments": a}
	}
	return demomodel.RawItem(
		demomodel.NewEvent("response.output_item.added", map[string]any{"output_index": 0, "item": item("")}),
		demomodel.NewEvent("response.function_call_arguments.delta", map[string]any{"item_id": "fc_" + callID, "output_index": 0, "delta": args}),
		demomodel.NewEvent("response.output_item.done", map[string]any{"output_index": 0, "item": item(args)}),
	)
}

func TestRealCLISubagent(t *testing.T) {
	c := surfaceCLI(t)
	c.mock.SetResponder(func(r *demomodel.Request) demomodel.Script {
		switch {
		case r.LastUserText() == "find the bug": // the subagent's own turn
			return demomodel.Text("child ", "found it")
		case r.LastUserText() == "delegate":
			if _, ok := r.ToolOutput("spawn-1"); ok {
				return demomodel.Text("parent done")
			}
			return demomodel.Respond(namespacedCall("spawn-1", "multi_agent_v1", "spawn_agent", `{"message":"find the bug"}`))
		}
		return demomodel.Text("unexpected request")
	})
	th := c.thread(codexproto.ApprovalNever, codexproto.SandboxReadOnly)
	parentTurn, done := c.surfaceTurn(textTurn(th, "delegate"))
	if done.Turn.Status != codexproto.TurnCompleted {
		t.Fatalf("parent turn = %+v", done.Turn)
	}
	// The spawn: a collab item of the parent thread naming the child.
	spawned := decode[codexproto.SurfaceItemNotification](t, c.notes.wait(t, "the spawn completed", itemEvent(codexproto.NoteItemCompleted, th, codexproto.ItemCollabAgentToolCall)).Params).Item
	if spawned.Tool != "spawnAgent" || spawned.SenderThreadID != th || len(spawned.ReceiverThreadIDs) != 1 || spawned.Prompt == nil || *spawned.Prompt != "find the bug" {
		t.Fatalf("spawn item = %+v", spawned)
	}
	child := spawned.ReceiverThreadIDs[0]
	// The child's events come on the same connection, under its thread id;
	// its turn's root is the parent's turn.
	childDone := decode[codexproto.TurnNotification](t, c.notes.wait(t, "the child's turn/completed", forThread(codexproto.NoteTurnCompleted, child)).Params)
	if childDone.Turn.Status != codexproto.TurnCompleted {
		t.Errorf("child turn = %+v", childDone.Turn)
	}
	var root struct {
		Turn struct {
			RootTurnID string `json:"rootTurnId"`
		} `json:"turn"`
	}
	if err := json.Unmarshal(c.notes.wait(t, "the child's turn/started", forThread(codexproto.NoteTurnStarted, child)).Params, &root); err != nil || root.Turn.RootTurnID != parentTurn.ID {
		t.Errorf("child turn root = %q, want the parent's turn %s (%v)", root.Turn.RootTurnID, parentTurn.ID, err)
	}
	var text strings.Builder
	for _, n := range c.notes.filter(forThread(codexproto.NoteAgentMessageDelta, child)) {
		text.WriteString(decode[codexproto.Delta](t, n.Params).Delta)
	}
	if text.String() != "child found it" {
		t.Errorf("child text = %q, want %q", text.String(), "child found it")
	}
	if *updateSurface {
		writeRecording(t, filepath.Join("..", "actors", "eventmap", "testdata", "recordings", "subagent.jsonl"), c.notes.snapshot())
	}
}

// writeRecording writes notifications in the recordings' format.
func writeRecording(t *testing.T, path string, notes []*codexrpc.Notification) {
	t.Helper()
	var b strings.Builder
	for _, n := range notes {
		line, err := json.Marshal(map[string]any{"dir": "out", "msg": map[string]any{"method": n.Method, "params": n.Params}})
		if err != nil {
			t.Fatal(err)
		}
		b.Write(line)
		b.WriteByte('\n')
	}
	if err := os.WriteFile(path, []byte(b.String()), 0o644); err != nil {
		t.Fatal(err)
	}
}

func TestRealCLIOutputSchema(t *testing.T) {
	c := surfaceCLI(t)
	answer := `{"answer":"42","confidence":0.9}`
	c.mock.Enqueue(demomodel.Text(answer[:10], answer[10:]))
	th := c.thread(codexproto.ApprovalNever, codexproto.SandboxReadOnly)
	p := textTurn(th, "answer in JSON")
	p.OutputSchema = json.RawMessage(`{"type":"object","properties":{"answer":{"type":"string"},"confidence":{"type":"number"}},"required":["answer","confidence"],"additionalProperties":false}`)
	_, done := c.surfaceTurn(p)
	if done.Turn.Status != codexproto.TurnCompleted {
		t.Fatalf("turn = %+v", done.Turn)
	}
	// The schema reaches the model as the response format.
	reqs := c.mock.Requests()
	if len(reqs) != 1 {
		t.Fatalf("%d model requests, want 1", len(reqs))
	}
	var body struct {
		Text struct {
			Format struct {
				Type   string          `json:"type"`
				Schema json.RawMessage `json:"schema"`
			} `json:"format"`
		} `json:"text"`
	}
	if err := json.Unmarshal(reqs[0].Body, &body); err != nil {
		t.Fatal(err)
	}
	if body.Text.Format.Type != "json_schema" || !strings.Contains(string(body.Text.Format.Schema), `"confidence"`) {
		t.Errorf("model request text.format = %+v, want our schema", body.Text.Format)
	}
	item := decode[codexproto.ItemNotification](t, c.notes.wait(t, "the answer", itemEvent(codexproto.NoteItemCompleted, th, codexproto.ItemAgentMessage)).Params).Item
	if item.Text != answer {
		t.Errorf("final message = %q, want %q", item.Text, answer)
	}
}

func TestRealCLIImagesAndContext(t *testing.T) {
	c := surfaceCLI(t)
	c.mock.Enqueue(demomodel.Text("seen"))
	var buf bytes.Buffer
	img := image.NewRGBA(image.Rect(0, 0, 2, 2))
	img.Set(0, 0, color.RGBA{R: 255, A: 255})
	if err := png.Encode(&buf, img); err != nil {
		t.Fatal(err)
	}
	pngData := buf.Bytes()
	file := filepath.Join(c.work, "shot.png")
	if err := os.WriteFile(file, pngData, 0o644); err != nil {
		t.Fatal(err)
	}
	th := c.thread(codexproto.ApprovalNever, codexproto.SandboxReadOnly)
	p := textTurn(th, "what is in these?")
	p.Input = append(p.Input,
		codexproto.InputItem{Type: codexproto.InputImage, URL: "data:image/png;base64," + base64.StdEncoding.EncodeToString(pngData)},
		codexproto.InputItem{Type: codexproto.InputLocalImage, Path: file})
	p.AdditionalContext = map[string]codexproto.AdditionalContextEntry{
		"moi-context": {Kind: codexproto.ContextApplication, Value: "workspace demo"},
		"page":        {Kind: codexproto.ContextUntrusted, Value: "a web page"},
	}
	if _, done := c.surfaceTurn(p); done.Turn.Status != codexproto.TurnCompleted {
		t.Fatalf("turn = %+v", done.Turn)
	}
	reqs := c.mock.Requests()
	if len(reqs) != 1 {
		t.Fatalf("%d model requests, want 1", len(reqs))
	}
	body := string(reqs[0].Body)
	if n := strings.Count(body, `"type":"input_image"`); n != 2 || strings.Contains(body, "could not be processed") {
		t.Errorf("model request has %d input_image parts, want 2 that the CLI could read", n)
	}
	// 0.169.0 injects application context as a tagged message and untrusted
	// context as a tool output labelled with its key, never as user text.
	if !strings.Contains(body, "<moi-context>workspace demo</moi-context>") {
		t.Error("model request lacks the application context")
	}
	var untrusted bool
	for _, raw := range reqs[0].Input {
		var it struct{ Type, Name, Output string }
		if json.Unmarshal(raw, &it) == nil && it.Type == "function_call_output" && it.Name == "page" && it.Output == "a web page" {
			untrusted = true
		}
	}
	if !untrusted {
		t.Error("model request lacks the untrusted context as a tool output")
	}
	if got := reqs[0].LastUserText(); strings.Contains(got, "workspace demo") {
		t.Errorf("the context leaked into the user's text: %q", got)
	}
}

func TestRealCLITurnPolicyOutputAndDiff(t *testing.T) {
	c := surfaceCLI(t)
	patch := "*** Begin Patch\n*** Add File: new.txt\n+brand new line\n*** End Patch"
	c.mock.Enqueue(
		demomodel.Respond(execCall("call-slow", "for i in 1 2 3 4; do echo tick $i; sleep 0.3; done")),
		demomodel.Respond(demomodel.ApplyPatch("call-p1", patch)),
		demomodel.Text("done"),
	)
	// A read-only thread; the turn itself asks for full access (no
	// sandbox: a sandboxed command costs seconds on hosts without
	// bubblewrap).
	th := c.thread(codexproto.ApprovalUntrusted, codexproto.SandboxReadOnly)
	p := textTurn(th, "tick and patch")
	p.SandboxPolicy = &codexproto.SandboxPolicy{Type: codexproto.PolicyDangerFullAccess}
	p.ApprovalPolicy = codexproto.ApprovalNever
	if _, done := c.surfaceTurn(p); done.Turn.Status != codexproto.TurnCompleted {
		t.Fatalf("turn = %+v", done.Turn)
	}
	// The turn's policy held: the patch applied without an approval.
	if b, err := os.ReadFile(filepath.Join(c.work, "new.txt")); err != nil || string(b) != "brand new line\n" {
		t.Errorf("new.txt = %q, %v", b, err)
	}
	settings := c.notes.filter(forThread(codexproto.NoteThreadSettings, th))
	if len(settings) == 0 || !strings.Contains(string(settings[len(settings)-1].Params), `"sandboxPolicy":{"type":"dangerFullAccess"}`) {
		t.Errorf("thread/settings/updated does not show the turn's sandbox")
	}
	// Live output of the slow command.
	var out strings.Builder
	for _, n := range c.notes.filter(forThread(codexproto.NoteCommandOutputDelta, th)) {
		d := decode[codexproto.Delta](t, n.Params)
		if d.ItemID != "call-slow" {
			t.Errorf("output delta of item %q", d.ItemID)
		}
		out.WriteString(d.Delta)
	}
	if !strings.Contains(out.String(), "tick 4") {
		t.Errorf("output deltas = %q, want the later ticks", out.String())
	}
	// The file change carries its diff, and the turn its aggregated diff.
	fc := decode[codexproto.SurfaceItemNotification](t, c.notes.wait(t, "the file change", itemEvent(codexproto.NoteItemStarted, th, codexproto.ItemFileChange)).Params).Item
	if len(fc.Changes) != 1 || fc.Changes[0].Kind.Type != "add" || fc.Changes[0].Diff != "brand new line\n" {
		t.Errorf("file change = %+v", fc.Changes)
	}
	diff := decode[codexproto.TurnDiff](t, c.notes.wait(t, "turn/diff/updated", forThread(codexproto.NoteTurnDiff, th)).Params)
	if !strings.HasPrefix(diff.Diff, "diff --git a/new.txt b/new.txt") || !strings.Contains(diff.Diff, "+brand new line") {
		t.Errorf("turn diff = %q", diff.Diff)
	}
}
