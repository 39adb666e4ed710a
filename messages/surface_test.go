package messages

import (
	"encoding/base64"
	"strings"
	"testing"
)

// surfaceSamples are fully populated values of the wider surface: the new
// fields of the round messages and every thread message.
func surfaceSamples() []any {
	return []any{
		StartRound{User: "u1", Thread: "t", Text: "look",
			OutputSchema: `{"type":"object"}`,
			Images:       []ImageInput{{DataURL: "data:image/png;base64,iVBORw0KGgo="}, {Path: "shots/a.png"}},
			AdditionalContext: []ContextEntry{{Key: "moi-context", Value: "ws=1", Kind: ContextApplication},
				{Key: "page", Value: "<p>", Kind: ContextUntrusted}},
			Sandbox: SandboxWorkspaceWrite, ApprovalPolicy: ApprovalOnRequest, StreamCommandOutput: true},
		RoundEvent{RoundID: "r-1", Seq: 6, Kind: KindSubagent, ItemID: "collab-1", AgentThread: "child-1",
			Subagent: &Subagent{Phase: SubagentEnded, Thread: "child-1", Tool: "wait", Status: "completed", Prompt: "p", Model: "m", Message: "done"}},
		RoundEvent{RoundID: "r-1", Seq: 7, Kind: KindModelRerouted, Text: "model rerouted from a to b",
			Reroute: &ModelReroute{From: "a", To: "b", Reason: "highRiskCyberActivity"}},
		RoundEvent{RoundID: "r-1", Seq: 8, Kind: KindError, Text: "limit",
			ErrorInfo: &ErrorInfo{Class: ErrorUsageLimit, ResetsAtUnix: 1900000000, HTTPStatus: 429, Code: "usageLimitExceeded"}},
		RoundEvent{RoundID: "r-1", Seq: 9, Kind: KindToolCall, Tool: &ToolCall{Name: "apply_patch",
			Paths: []FileChange{{Path: "a", Kind: "update", Diff: "@@ -1 +1 @@\n-a\n+b\n", MovePath: "b"}}}},
		RoundEvent{RoundID: "r-1", Seq: 10, Kind: KindToolResult, Result: &ToolResult{Name: "mcp__s__t", Structured: `{"x":1}`}},
		RoundFinished{RoundID: "r-1", Status: StatusFailed, Model: "gpt-5.5", StructuredOutput: `{"a":1}`,
			ErrorInfo: &ErrorInfo{Class: ErrorContextWindow, Code: "contextWindowExceeded"}},
		ListThreads{User: "u1", Limit: 10},
		Threads{User: "u1", Truncated: true, Error: "e", Threads: []ThreadInfo{
			{Thread: "mesh/1", CodexThreadID: "01a236ea-444a-7bc3-a218-be6e30739714", Name: "n", LastActivityUnix: 1796217652}, {Thread: "mesh/2"}}},
		ReadThread{User: "u1", Thread: "mesh/1"},
		ThreadTurns{Thread: "mesh/1", CodexThreadID: "c", Error: "e", Turns: []Turn{{Role: RoleUser, Text: "hi"}}},
		ArchiveThread{User: "u1", Thread: "mesh/1"},
		ThreadArchived{Thread: "mesh/1", OK: true, Error: "e"},
		ForkThread{User: "u1", Thread: "mesh/1", NewThread: "mesh/2"},
		ThreadForked{Thread: "mesh/1", NewThread: "mesh/2", CodexThreadID: "c", Error: "e"},
		CompactThread{User: "u1", Thread: "mesh/1"},
		ThreadCompacted{Thread: "mesh/1", OK: true, Error: "e"},
	}
}

func dataURL(mediaType string, n int) string {
	return "data:" + mediaType + ";base64," + base64.StdEncoding.EncodeToString([]byte(strings.Repeat("x", n)))
}

func TestStartRoundValidateSurface(t *testing.T) {
	ctx := func(n int) []ContextEntry {
		out := make([]ContextEntry, n)
		for i := range out {
			out[i] = ContextEntry{Key: "k" + strings.Repeat("x", i), Value: "v"}
		}
		return out
	}
	tests := []struct {
		name    string
		edit    func(*StartRound)
		wantErr string
	}{
		{"full", func(m *StartRound) { *m = surfaceSamples()[0].(StartRound) }, ""},
		{"schema", func(m *StartRound) { m.OutputSchema = `{"type":"object","properties":{"a":{"type":"string"}}}` }, ""},
		{"schema not JSON", func(m *StartRound) { m.OutputSchema = `{"type":` }, "output_schema is not a JSON object"},
		{"schema an array", func(m *StartRound) { m.OutputSchema = `[1]` }, "output_schema is not a JSON object"},
		{"schema null", func(m *StartRound) { m.OutputSchema = `null` }, "output_schema is not a JSON object"},
		{"schema too big", func(m *StartRound) {
			m.OutputSchema = `{"d":"` + strings.Repeat("x", MaxOutputSchemaLen) + `"}`
		}, "output_schema is 65544 bytes, max 65536"},
		{"image data URL", func(m *StartRound) { m.Images = []ImageInput{{DataURL: dataURL("image/jpeg", 10)}} }, ""},
		{"image at its bound", func(m *StartRound) { m.Images = []ImageInput{{DataURL: dataURL("image/png", MaxImageLen)}} }, ""},
		{"image too big", func(m *StartRound) { m.Images = []ImageInput{{DataURL: dataURL("image/png", MaxImageLen+3)}} }, "images[0].data_url: image is about"},
		{"image not an image", func(m *StartRound) { m.Images = []ImageInput{{DataURL: dataURL("text/html", 10)}} }, "images[0].data_url: media type is not"},
		{"image not base64", func(m *StartRound) { m.Images = []ImageInput{{DataURL: "data:image/png,rawbytes"}} }, "images[0].data_url: not base64"},
		{"image bad base64", func(m *StartRound) { m.Images = []ImageInput{{DataURL: "data:image/png;base64,@@@@"}} }, "images[0].data_url: bad base64 at byte 0"},
		{"image empty", func(m *StartRound) { m.Images = []ImageInput{{DataURL: "data:image/png;base64,"}} }, "images[0].data_url: image is empty"},
		{"image https", func(m *StartRound) { m.Images = []ImageInput{{DataURL: "https://x/y.png"}} }, "images[0].data_url: not a data: URL"},
		{"image both", func(m *StartRound) { m.Images = []ImageInput{{DataURL: dataURL("image/png", 1), Path: "a.png"}} }, "images[0] needs exactly one of data_url and path"},
		{"image neither", func(m *StartRound) { m.Images = []ImageInput{{}} }, "images[0] needs exactly one"},
		{"image path", func(m *StartRound) { m.Images = []ImageInput{{Path: "dir/a b.png"}} }, ""},
		{"image absolute path", func(m *StartRound) { m.Images = []ImageInput{{Path: "/etc/passwd"}} }, "images[0].path is not relative"},
		{"image path escapes", func(m *StartRound) { m.Images = []ImageInput{{Path: "a/../../b.png"}} }, "images[0].path leaves the workspace"},
		{"image path is ..", func(m *StartRound) { m.Images = []ImageInput{{Path: ".."}} }, "images[0].path leaves the workspace"},
		{"image path inner .. stays", func(m *StartRound) { m.Images = []ImageInput{{Path: "a/../b.png"}} }, ""},
		{"image path backslash", func(m *StartRound) { m.Images = []ImageInput{{Path: `..\b.png`}} }, "images[0].path is not relative"},
		{"image path control", func(m *StartRound) { m.Images = []ImageInput{{Path: "a\n.png"}} }, "images[0].path has invalid UTF-8"},
		{"too many images", func(m *StartRound) { m.Images = make([]ImageInput, MaxImages+1) }, "images has 9 images, max 8"},
		{"images too big together", func(m *StartRound) {
			big := ImageInput{DataURL: dataURL("image/png", 4<<20)}
			m.Images = []ImageInput{big, big, big}
		}, "images are 16777290 bytes together, max 12582912"},
		{"context", func(m *StartRound) { m.AdditionalContext = ctx(MaxContextEntries) }, ""},
		{"too much context", func(m *StartRound) { m.AdditionalContext = ctx(MaxContextEntries + 1) }, "additional_context has 17 entries, max 16"},
		{"context without key", func(m *StartRound) { m.AdditionalContext = []ContextEntry{{Value: "v"}} }, "additional_context[0].key is empty"},
		{"context key with a tag", func(m *StartRound) { m.AdditionalContext = []ContextEntry{{Key: "a><b", Value: "v"}} }, "additional_context[0].key has characters"},
		{"context key too long", func(m *StartRound) {
			m.AdditionalContext = []ContextEntry{{Key: strings.Repeat("k", MaxContextKeyLen+1)}}
		}, "additional_context[0].key is 65 bytes, max 64"},
		{"context key twice", func(m *StartRound) { m.AdditionalContext = []ContextEntry{{Key: "a"}, {Key: "a"}} }, "additional_context[1].key repeats"},
		{"context kind unknown", func(m *StartRound) { m.AdditionalContext = []ContextEntry{{Key: "a", Kind: "system"}} }, `additional_context[0].kind is not "application" or "untrusted"`},
		{"context too big", func(m *StartRound) {
			m.AdditionalContext = []ContextEntry{{Key: "a", Value: strings.Repeat("v", MaxContextLen)}, {Key: "b", Value: "v"}}
		}, "additional_context values are 262145 bytes together"},
		{"sandbox", func(m *StartRound) { m.Sandbox = SandboxReadOnly }, ""},
		{"sandbox unknown", func(m *StartRound) { m.Sandbox = "chroot" }, "sandbox is not"},
		{"approval unknown", func(m *StartRound) { m.ApprovalPolicy = "always" }, "approval_policy is not"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			m := validRound()
			tt.edit(&m)
			checkValidate(t, m.Validate(), tt.wantErr, "start_round.v1")
		})
	}
}

func TestThreadMessagesValidate(t *testing.T) {
	tests := []struct {
		name    string
		msg     interface{ Validate() error }
		wantErr string
	}{
		{"list", ListThreads{User: "u"}, ""},
		{"list no user", ListThreads{}, "list_threads.v1: invalid message: user is empty"},
		{"list limit", ListThreads{User: "u", Limit: MaxThreadsListed}, ""},
		{"list limit too big", ListThreads{User: "u", Limit: MaxThreadsListed + 1}, "limit is 501, want 0 to 500"},
		{"list limit negative", ListThreads{User: "u", Limit: -1}, "limit is -1"},
		{"read", ReadThread{User: "u", Thread: "t"}, ""},
		{"read no thread", ReadThread{User: "u"}, "read_thread.v1: invalid message: thread is empty"},
		{"archive", ArchiveThread{User: "u", Thread: "t"}, ""},
		{"archive no user", ArchiveThread{Thread: "t"}, "archive_thread.v1: invalid message: user is empty"},
		{"compact", CompactThread{User: "u", Thread: "t"}, ""},
		{"compact bad thread", CompactThread{User: "u", Thread: "t\x00"}, "thread has invalid UTF-8"},
		{"fork", ForkThread{User: "u", Thread: "t", NewThread: "t2"}, ""},
		{"fork no new thread", ForkThread{User: "u", Thread: "t"}, "new_thread is empty"},
		{"fork onto itself", ForkThread{User: "u", Thread: "t", NewThread: "t"}, "new_thread is the same as thread"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			wire, _ := Name(tt.msg)
			checkValidate(t, tt.msg.Validate(), tt.wantErr, wire)
		})
	}
}

func TestStartRoundStringHidesSurface(t *testing.T) {
	m := surfaceSamples()[0].(StartRound)
	m.AdditionalContext[0].Value = "PRIVATE-CONTEXT"
	for _, s := range []string{m.String(), m.GoString(), m.LogValue().String()} {
		for _, secret := range []string{"PRIVATE-CONTEXT", "iVBORw0KGgo", "shots/a.png", `"type":"object"`} {
			if strings.Contains(s, secret) {
				t.Errorf("%q shows %q", s, secret)
			}
		}
		if !strings.Contains(s, "AdditionalContext:<2 entries") {
			t.Errorf("%q does not give the context's size", s)
		}
	}
}
