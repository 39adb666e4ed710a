package actors

import (
	"encoding/json"
	"fmt"
	"strings"

	"github.com/meshweaver/supervisor/codexproto"
	"github.com/meshweaver/supervisor/codexrpc"
	"github.com/meshweaver/supervisor/messages"
)

// maxToolOutput bounds a tool result's output in one event; the CLI already
// caps a command's aggregated output near 1 MiB.
const maxToolOutput = 256 << 10

// turnEnd is what turn/completed says.
type turnEnd struct {
	TurnID         string
	Status         string // codexproto.Turn* status
	Error          string
	CodexErrorInfo string
}

// mapper turns one round's app-server notifications into round events. It
// is pure apart from its own bookkeeping: which items streamed deltas (so a
// completed item is not repeated) and the answer text (for the journal).
type mapper struct {
	streamed map[string]bool
	answer   strings.Builder
	turnID   string // from turn/started: the round's own turn
}

func newMapper() *mapper { return &mapper{streamed: make(map[string]bool)} }

// Answer is the assistant text of the round so far.
func (m *mapper) Answer() string { return m.answer.String() }

// note maps one notification. It returns the events to send and, for
// turn/completed, the end of the turn. Anything it does not know yields
// nothing: no notification may fault a round.
func (m *mapper) note(n *codexrpc.Notification) ([]messages.RoundEvent, *turnEnd) {
	switch n.Method {
	case codexproto.NoteAgentMessageDelta:
		var d codexproto.Delta
		if json.Unmarshal(n.Params, &d) != nil || d.Delta == "" {
			return nil, nil
		}
		m.streamed[d.ItemID] = true
		m.answer.WriteString(d.Delta)
		return one(messages.RoundEvent{Kind: messages.KindText, Text: d.Delta, ItemID: d.ItemID}), nil
	case codexproto.NoteReasoningSummary, codexproto.NoteReasoningText:
		var d codexproto.Delta
		if json.Unmarshal(n.Params, &d) != nil || d.Delta == "" {
			return nil, nil
		}
		m.streamed[d.ItemID] = true
		return one(messages.RoundEvent{Kind: messages.KindReasoning, Text: d.Delta, ItemID: d.ItemID}), nil
	case codexproto.NoteItemStarted:
		var in codexproto.ItemNotification
		if json.Unmarshal(n.Params, &in) != nil {
			return nil, nil
		}
		return m.itemStarted(&in.Item), nil
	case codexproto.NoteItemCompleted:
		var in codexproto.ItemNotification
		if json.Unmarshal(n.Params, &in) != nil {
			return nil, nil
		}
		return m.itemCompleted(&in.Item), nil
	case codexproto.NoteTurnStarted:
		var t codexproto.TurnNotification
		if json.Unmarshal(n.Params, &t) == nil {
			m.turnID = t.Turn.ID
		}
		return nil, nil
	case codexproto.NoteTokenUsage:
		var u codexproto.TokenUsageNotification
		// Only the round's own turn: a resume re-sends the usage of the
		// thread's previous turn, which an earlier round already reported.
		if json.Unmarshal(n.Params, &u) != nil || m.turnID == "" || u.TurnID != m.turnID {
			return nil, nil
		}
		// The last request only: the thread total would count twice.
		l := u.TokenUsage.Last
		return one(messages.RoundEvent{Kind: messages.KindUsage, Usage: &messages.Usage{
			InputTokens: l.InputTokens, CachedInputTokens: l.CachedInputTokens,
			OutputTokens: l.OutputTokens, ReasoningOutputTokens: l.ReasoningOutputTokens,
			TotalTokens: l.TotalTokens,
		}}), nil
	case codexproto.NoteError:
		var e codexproto.ErrorNotification
		if json.Unmarshal(n.Params, &e) != nil {
			return nil, nil
		}
		if e.WillRetry { // not a verdict, but the caller should know
			text := e.Error.Message
			if d := e.Error.AdditionalDetails; d != nil && *d != "" {
				text += ": " + *d
			}
			return one(messages.RoundEvent{Kind: messages.KindRetry, Text: text}), nil
		}
		return one(messages.RoundEvent{Kind: messages.KindError, Text: e.Error.Message}), nil
	case codexproto.NoteModelRerouted:
		var r codexproto.ModelRerouted
		if json.Unmarshal(n.Params, &r) != nil {
			return nil, nil
		}
		return one(messages.RoundEvent{Kind: messages.KindNotice, Text: fmt.Sprintf("model rerouted from %s to %s", r.FromModel, r.ToModel)}), nil
	case codexproto.NoteMCPStartupStatus:
		var s codexproto.MCPStartupStatus
		if json.Unmarshal(n.Params, &s) != nil || s.Status != "failed" {
			return nil, nil
		}
		text := fmt.Sprintf("MCP server %s failed to start; the round runs without it", s.Name)
		if s.Error != nil && *s.Error != "" {
			text += ": " + *s.Error
		}
		return one(messages.RoundEvent{Kind: messages.KindNotice, Text: text}), nil
	case codexproto.NoteTurnCompleted:
		var t codexproto.TurnNotification
		if json.Unmarshal(n.Params, &t) != nil {
			return nil, &turnEnd{Status: codexproto.TurnFailed, Error: "turn/completed could not be read"}
		}
		end := &turnEnd{TurnID: t.Turn.ID, Status: t.Turn.Status}
		if t.Turn.Error != nil {
			end.Error = t.Turn.Error.Message
			if len(t.Turn.Error.CodexErrorInfo) > 0 && string(t.Turn.Error.CodexErrorInfo) != "null" {
				end.CodexErrorInfo = string(t.Turn.Error.CodexErrorInfo)
			}
		}
		return nil, end
	}
	return nil, nil
}

func (m *mapper) itemStarted(it *codexproto.Item) []messages.RoundEvent {
	call := func(tc messages.ToolCall) []messages.RoundEvent {
		tc.CallID = it.ID
		return one(messages.RoundEvent{Kind: messages.KindToolCall, ItemID: it.ID, Tool: &tc})
	}
	switch it.Type {
	case codexproto.ItemCommandExecution:
		return call(messages.ToolCall{Name: "shell", Args: jsonText(map[string]string{"command": it.Command}), Cwd: it.Cwd})
	case codexproto.ItemMCPToolCall:
		return call(messages.ToolCall{Name: mcpName(it), Args: rawArgs(it.Arguments)})
	case codexproto.ItemFileChange:
		return call(messages.ToolCall{Name: "apply_patch", Paths: changes(it.Changes)})
	case codexproto.ItemWebSearch:
		return call(messages.ToolCall{Name: "web_search", Args: jsonText(map[string]string{"query": it.Query})})
	case codexproto.ItemDynamicToolCall:
		return call(messages.ToolCall{Name: it.Tool, Args: rawArgs(it.Arguments)})
	}
	return nil
}

func (m *mapper) itemCompleted(it *codexproto.Item) []messages.RoundEvent {
	result := func(r messages.ToolResult) []messages.RoundEvent {
		r.CallID = it.ID
		r.Output = clip(r.Output, maxToolOutput)
		return one(messages.RoundEvent{Kind: messages.KindToolResult, ItemID: it.ID, Result: &r})
	}
	switch it.Type {
	case codexproto.ItemAgentMessage:
		if m.streamed[it.ID] || it.Text == "" {
			return nil
		}
		m.answer.WriteString(it.Text)
		return one(messages.RoundEvent{Kind: messages.KindText, Text: it.Text, ItemID: it.ID})
	case codexproto.ItemReasoning:
		if m.streamed[it.ID] {
			return nil
		}
		parts := it.Summary
		if len(parts) == 0 {
			parts = it.ReasoningContent()
		}
		text := strings.Join(parts, "\n\n")
		if text == "" {
			return nil
		}
		return one(messages.RoundEvent{Kind: messages.KindReasoning, Text: text, ItemID: it.ID})
	case codexproto.ItemCommandExecution:
		r := messages.ToolResult{Name: "shell", ExitCode: it.ExitCode}
		if it.AggregatedOutput != nil {
			r.Output = *it.AggregatedOutput
		}
		switch {
		case it.Status == "declined":
			r.Failed, r.Fault = true, "declined"
		case it.ExitCode != nil && *it.ExitCode != 0:
			r.Failed, r.Fault = true, fmt.Sprintf("exit code %d", *it.ExitCode)
		case it.Status == "failed":
			r.Failed, r.Fault = true, "failed"
		}
		return result(r)
	case codexproto.ItemMCPToolCall:
		r := messages.ToolResult{Name: mcpName(it)}
		if it.Result != nil {
			r.Output = contentText(it.Result.Content)
		}
		switch {
		case it.Error != nil:
			r.Failed, r.Fault = true, it.Error.Message
		case it.Status == "failed":
			r.Failed, r.Fault = true, "the tool reported an error"
		}
		return result(r)
	case codexproto.ItemFileChange:
		r := messages.ToolResult{Name: "apply_patch", Output: pathsText(it.Changes)}
		if it.Status != "completed" {
			r.Failed, r.Fault = true, orDefault(it.Status, "failed")
		}
		return result(r)
	case codexproto.ItemWebSearch:
		return result(messages.ToolResult{Name: "web_search", Output: it.Query})
	case codexproto.ItemDynamicToolCall:
		r := messages.ToolResult{Name: it.Tool, Output: contentText(it.ContentItems)}
		if (it.Success != nil && !*it.Success) || it.Status == "failed" {
			r.Failed, r.Fault = true, "the tool reported an error"
		}
		return result(r)
	}
	return nil
}

func one(e messages.RoundEvent) []messages.RoundEvent { return []messages.RoundEvent{e} }

// mcpName names an MCP call as the mesh does for every harness.
func mcpName(it *codexproto.Item) string { return "mcp__" + it.Server + "__" + it.Tool }

func rawArgs(raw json.RawMessage) string {
	if len(raw) == 0 || string(raw) == "null" {
		return "{}"
	}
	return string(raw)
}

func jsonText(v any) string {
	b, err := json.Marshal(v)
	if err != nil {
		return "{}"
	}
	return string(b)
}

func changes(cs []codexproto.FileChange) []messages.FileChange {
	out := make([]messages.FileChange, 0, len(cs))
	for _, c := range cs {
		out = append(out, messages.FileChange{Path: c.Path, Kind: c.Kind.Type})
	}
	return out
}

func pathsText(cs []codexproto.FileChange) string {
	var b strings.Builder
	for _, c := range cs {
		fmt.Fprintf(&b, "%s %s\n", c.Kind.Type, c.Path)
	}
	return b.String()
}

func contentText(items []codexproto.ContentItem) string {
	var parts []string
	for _, c := range items {
		if c.Text != "" {
			parts = append(parts, c.Text)
		}
	}
	return strings.Join(parts, "\n")
}

func orDefault(s, d string) string {
	if s == "" {
		return d
	}
	return s
}

// clip bounds s to n bytes on a rune boundary, marking the cut.
func clip(s string, n int) string {
	if len(s) <= n {
		return s
	}
	i := n
	for i > 0 && (s[i]&0xC0) == 0x80 {
		i--
	}
	return s[:i] + "…[truncated]"
}

// isProgress reports whether a notification shows the turn moving. An
// upstream error the CLI retries does not: a model that never answers
// would otherwise hold its round past the stall deadline for ever.
func isProgress(n *codexrpc.Notification) bool {
	if n.Method != codexproto.NoteError {
		return true
	}
	var e codexproto.ErrorNotification
	return json.Unmarshal(n.Params, &e) != nil || !e.WillRetry
}

// rateLimit is one rate-limit bucket as the mesh sees it.
func rateLimit(s codexproto.RateLimitSnapshot) messages.RateLimit {
	str := func(p *string) string {
		if p == nil {
			return ""
		}
		return *p
	}
	window := func(w *codexproto.RateLimitWindow) *messages.RateLimitWindow {
		if w == nil {
			return nil
		}
		out := &messages.RateLimitWindow{UsedPercent: w.UsedPercent}
		if w.WindowDurationMins != nil {
			out.WindowMinutes = *w.WindowDurationMins
		}
		if w.ResetsAt != nil {
			out.ResetsAtUnix = *w.ResetsAt
		}
		return out
	}
	l := messages.RateLimit{LimitID: str(s.LimitID), LimitName: str(s.LimitName), PlanType: str(s.PlanType),
		Primary: window(s.Primary), Secondary: window(s.Secondary), ReachedType: str(s.RateLimitReachedType)}
	if c := s.Credits; c != nil {
		l.Credits = &messages.Credits{HasCredits: c.HasCredits, Unlimited: c.Unlimited, Balance: str(c.Balance)}
	}
	return l
}
