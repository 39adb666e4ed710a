package eventmap

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strings"
	"time"

	"github.com/meshweaver/supervisor/actors/internal/textcut"
	"github.com/meshweaver/supervisor/codexproto"
	"github.com/meshweaver/supervisor/codexrpc"
	"github.com/meshweaver/supervisor/messages"
)

// maxToolOutput bounds a tool result's output in one event; the CLI already
// caps a command's aggregated output near 1 MiB.
const maxToolOutput = 256 << 10

// maxDiff bounds one file's diff in a file change event.
const maxDiff = 64 << 10

// TurnEnd is what turn/completed says.
type TurnEnd struct {
	TurnID         string
	Status         string // codexproto.Turn* status
	Error          string
	CodexErrorInfo string
	// ErrorInfo classifies a failed turn's error; nil without one.
	ErrorInfo *messages.ErrorInfo
}

// Mapper turns one round's app-server notifications into round events. It
// is pure apart from its own bookkeeping: which items streamed deltas (so a
// completed item is not repeated), the answer text (for the journal), the
// round's thread and its subagents' threads, the model, the last error.
type Mapper struct {
	streamed map[string]bool
	answer   strings.Builder
	turnID   string // from turn/started: the round's own turn

	// thread is the round's codex thread (SetThread, else turn/started);
	// while it is unknown every notification counts as the round's own.
	thread string
	// children are the subagent threads spawned in the round, by id; their
	// notifications are attributed (RoundEvent.AgentThread), never the
	// round's own turn or usage.
	children    map[string]*childThread
	newChildren []string // not yet handed out by takeNewChildren
	// streamOutput: the round asked for command output deltas.
	streamOutput bool
	// structured: the round has an output schema; lastMessage is the text
	// of the round's last completed agent message.
	structured  bool
	lastMessage string
	// Models: as the thread reported it, as the round asked, as codex
	// rerouted or set it.
	threadModel, askedModel, usedModel string
	// lastDiff is the turn's last aggregated diff (the CLI re-sends it
	// unchanged).
	lastDiff string
	// resetsAt is the latest reset time of an exhausted rate-limit window,
	// from account/rateLimits/updated (Unix seconds).
	resetsAt int64
	// errInfo classifies the round's last final error.
	errInfo *messages.ErrorInfo
	// now and loc date usage-limit resets; tests set them.
	now func() time.Time
	loc *time.Location
}

// childThread is a subagent's thread.
type childThread struct {
	turnID      string // its current turn, for its usage
	announced   bool   // a "started" subagent event was sent
	lastMessage string // its last completed agent message
}

// NewMapper returns a mapper for one round; Configure tells it what the
// round asked for.
func NewMapper() *Mapper {
	return &Mapper{streamed: make(map[string]bool), children: make(map[string]*childThread), now: time.Now, loc: time.Local}
}

// Configure takes what the round asked for: command output deltas, a
// structured answer, a model.
func (m *Mapper) Configure(req messages.StartRound) {
	m.streamOutput = req.StreamCommandOutput
	m.structured = req.OutputSchema != ""
	m.askedModel = req.Model
}

// SetThread names the round's codex thread and the model thread/start or
// thread/resume answered with.
func (m *Mapper) SetThread(threadID, model string) {
	m.thread = threadID
	m.threadModel = model
}

// ChildThreads returns the subagent threads of the round so far. The
// app-server side routes their notifications to the round.
func (m *Mapper) ChildThreads() []string {
	out := make([]string, 0, len(m.children))
	for id := range m.children {
		out = append(out, id)
	}
	return out
}

// takeNewChildren returns the subagent threads found since the last call,
// so that the round asks once per thread to have it routed to itself.
func (m *Mapper) takeNewChildren() []string {
	out := m.newChildren
	m.newChildren = nil
	return out
}

// addChild records a subagent thread; it reports whether it is new.
func (m *Mapper) addChild(id string) *childThread {
	if id == "" || id == m.thread {
		return nil
	}
	c := m.children[id]
	if c == nil {
		c = &childThread{}
		m.children[id] = c
		m.newChildren = append(m.newChildren, id)
	}
	return c
}

// Model is the model that ran the round: codex's last word on it
// (model/rerouted, thread/settings/updated), else the round's own
// override, else the thread's model.
func (m *Mapper) Model() string {
	switch {
	case m.usedModel != "":
		return m.usedModel
	case m.askedModel != "":
		return m.askedModel
	}
	return m.threadModel
}

// Decorate adds to a verdict what the mapper knows: the model, the
// structured answer of a completed round with an output schema, and the
// class of its error (end's, else the last final error event's).
func (m *Mapper) Decorate(v *messages.RoundFinished, end *TurnEnd) {
	v.Model = m.Model()
	if m.structured && v.Status == messages.StatusCompleted {
		v.StructuredOutput = structuredOutput(m.lastMessage)
	}
	switch {
	case end != nil && end.ErrorInfo != nil:
		v.ErrorInfo = end.ErrorInfo
	case v.Status != messages.StatusCompleted && m.errInfo != nil:
		v.ErrorInfo = m.errInfo
	}
}

// structuredOutput is the final answer of a round with an output schema:
// the last agent message if it is JSON (compacted), else "".
func structuredOutput(text string) string {
	var b bytes.Buffer
	if json.Compact(&b, []byte(strings.TrimSpace(text))) != nil || b.Len() == 0 {
		return ""
	}
	return b.String()
}

// classify classifies an error with the mapper's clock, preferring the
// reset time of the rate limits for a usage limit.
func (m *Mapper) classify(info json.RawMessage, message string) *messages.ErrorInfo {
	e := classifyError(info, message, m.now(), m.loc)
	if e.Class == messages.ErrorUsageLimit && m.resetsAt > 0 {
		e.ResetsAtUnix = m.resetsAt
	}
	return &e
}

// Coalesces reports whether next may be merged into last for a slow
// caller: deltas of the same kind, item and thread.
func Coalesces(last, next messages.RoundEvent) bool {
	switch next.Kind {
	case messages.KindText, messages.KindReasoning, messages.KindCommandOutput:
		return last.Kind == next.Kind && last.ItemID == next.ItemID && last.AgentThread == next.AgentThread
	}
	return false
}

// Answer is the assistant text of the round so far.
func (m *Mapper) Answer() string { return m.answer.String() }

// TurnID is the round's own turn, from turn/started; "" until then.
func (m *Mapper) TurnID() string { return m.turnID }

var deltaKeys = [4]string{"threadId", "turnId", "itemId", "delta"}

// noteHead reads the members of a notification's params every note needs
// (threadId, turnId) and those of the delta notifications (itemId,
// delta), which are most of a turn's: with one scan of the top-level keys
// (codexrpc.ScanStrings) when it can, else json.Unmarshal, whose error it
// returns with what it could read.
func noteHead(params json.RawMessage) (codexproto.Delta, error) {
	return NoteHeadAfter(params, nil)
}

// NoteHeadAfter is noteHead reusing prev's strings where the members
// repeat them (the previous notification's thread, turn and item ids).
func NoteHeadAfter(params json.RawMessage, prev *codexproto.Delta) (codexproto.Delta, error) {
	var v [4]string
	var p []string
	if prev != nil {
		p = []string{prev.ThreadID, prev.TurnID, prev.ItemID}
	}
	if codexrpc.ScanStringsReusing(params, deltaKeys[:], v[:], p) {
		return codexproto.Delta{ThreadID: v[0], TurnID: v[1], ItemID: v[2], Delta: v[3]}, nil
	}
	var d codexproto.Delta
	err := json.Unmarshal(params, &d)
	return d, err
}

// note maps one notification. It returns the events to send and, for
// turn/completed, the end of the turn. Anything it does not know yields
// nothing: no notification may fault a round.
func (m *Mapper) note(n *codexrpc.Notification) ([]messages.RoundEvent, *TurnEnd) {
	return m.Headed(n, ReadHead(n))
}

// Header is a notification's noteHead, read once by the app-server actor
// as it routes the notification and handed to the round with it.
type Header struct {
	Delta codexproto.Delta
	Err   error
}

// ReadHead reads n's header.
func ReadHead(n *codexrpc.Notification) Header {
	d, err := noteHead(n.Params)
	return Header{Delta: d, Err: err}
}

// Headed is note with the notification's header already read.
func (m *Mapper) Headed(n *codexrpc.Notification, hd Header) ([]messages.RoundEvent, *TurnEnd) {
	d, derr := hd.Delta, hd.Err
	h := codexproto.ThreadHeader{ThreadID: d.ThreadID, TurnID: d.TurnID} // absent or unreadable: the round's own
	if m.thread != "" && h.ThreadID != "" && h.ThreadID != m.thread {
		if c := m.children[h.ThreadID]; c != nil {
			return m.childNote(n, h, c), nil
		}
		return nil, nil // not the round's: never its turn's end
	}
	if evs, ok := m.surfaceNote(n); ok {
		return evs, nil
	}
	switch n.Method {
	case codexproto.NoteAgentMessageDelta:
		if derr != nil || d.Delta == "" {
			return nil, nil
		}
		m.streamed[d.ItemID] = true
		m.answer.WriteString(d.Delta)
		return one(messages.RoundEvent{Kind: messages.KindText, Text: d.Delta, ItemID: d.ItemID}), nil
	case codexproto.NoteReasoningSummary, codexproto.NoteReasoningText:
		if derr != nil || d.Delta == "" {
			return nil, nil
		}
		m.streamed[d.ItemID] = true
		return one(messages.RoundEvent{Kind: messages.KindReasoning, Text: d.Delta, ItemID: d.ItemID}), nil
	case codexproto.NoteItemStarted, codexproto.NoteItemCompleted:
		return m.item(n, true), nil
	case codexproto.NoteTurnStarted:
		var t codexproto.TurnNotification
		if json.Unmarshal(n.Params, &t) == nil {
			m.turnID = t.Turn.ID
			if m.thread == "" {
				m.thread = t.ThreadID
			}
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
		return one(m.errorEvent(&e, true)), nil
	case codexproto.NoteModelRerouted:
		var r codexproto.ModelRerouted
		if json.Unmarshal(n.Params, &r) != nil {
			return nil, nil
		}
		if r.ToModel != "" {
			m.usedModel = r.ToModel
		}
		reason, _ := r.Reason.(string)
		return one(messages.RoundEvent{Kind: messages.KindModelRerouted,
			Text:    fmt.Sprintf("model rerouted from %s to %s", r.FromModel, r.ToModel),
			Reroute: &messages.ModelReroute{From: r.FromModel, To: r.ToModel, Reason: reason}}), nil
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
			return nil, &TurnEnd{Status: codexproto.TurnFailed, Error: "turn/completed could not be read"}
		}
		end := &TurnEnd{TurnID: t.Turn.ID, Status: t.Turn.Status}
		if t.Turn.Error != nil {
			end.Error = t.Turn.Error.Message
			if len(t.Turn.Error.CodexErrorInfo) > 0 && string(t.Turn.Error.CodexErrorInfo) != "null" {
				end.CodexErrorInfo = string(t.Turn.Error.CodexErrorInfo)
			}
			if t.Turn.Status == codexproto.TurnFailed {
				end.ErrorInfo = m.classify(t.Turn.Error.CodexErrorInfo, t.Turn.Error.Message)
			}
		}
		return nil, end
	}
	return nil, nil
}

// item maps item/started and item/completed, of the round's thread (own)
// or of a subagent's.
func (m *Mapper) item(n *codexrpc.Notification, own bool) []messages.RoundEvent {
	var in codexproto.ItemNotification
	if json.Unmarshal(n.Params, &in) != nil {
		return nil
	}
	var sx codexproto.SurfaceItem
	switch in.Item.Type {
	case codexproto.ItemFileChange, codexproto.ItemCollabAgentToolCall, codexproto.ItemSubAgentActivity:
		var s codexproto.SurfaceItemNotification
		if json.Unmarshal(n.Params, &s) != nil {
			return nil
		}
		sx = s.Item
	}
	switch in.Item.Type {
	case codexproto.ItemCollabAgentToolCall:
		return m.collab(&sx, n.Method == codexproto.NoteItemCompleted)
	case codexproto.ItemSubAgentActivity:
		return m.subAgentActivity(&sx)
	}
	if n.Method == codexproto.NoteItemStarted {
		return m.itemStarted(&in.Item, &sx)
	}
	return m.itemCompleted(&in.Item, own)
}

func (m *Mapper) itemStarted(it *codexproto.Item, sx *codexproto.SurfaceItem) []messages.RoundEvent {
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
		return call(messages.ToolCall{Name: "apply_patch", Paths: diffChanges(sx.Changes)})
	case codexproto.ItemWebSearch:
		return call(messages.ToolCall{Name: "web_search", Args: jsonText(map[string]string{"query": it.Query})})
	case codexproto.ItemDynamicToolCall:
		return call(messages.ToolCall{Name: it.Tool, Args: rawArgs(it.Arguments)})
	}
	return nil
}

func (m *Mapper) itemCompleted(it *codexproto.Item, own bool) []messages.RoundEvent {
	result := func(r messages.ToolResult) []messages.RoundEvent {
		r.CallID = it.ID
		r.Output = textcut.Bytes(r.Output, maxToolOutput)
		return one(messages.RoundEvent{Kind: messages.KindToolResult, ItemID: it.ID, Result: &r})
	}
	switch it.Type {
	case codexproto.ItemAgentMessage:
		if own {
			m.lastMessage = it.Text
		}
		if m.streamed[it.ID] || it.Text == "" {
			return nil
		}
		if own {
			m.answer.WriteString(it.Text)
		}
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
			r.Structured = structuredContent(it.Result.StructuredContent)
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

// diffChanges lists a patch's files with their diffs, each bounded.
func diffChanges(cs []codexproto.FileChangeDiff) []messages.FileChange {
	out := make([]messages.FileChange, 0, len(cs))
	for _, c := range cs {
		fc := messages.FileChange{Path: c.Path, Kind: c.Kind.Type, Diff: textcut.Bytes(c.Diff, maxDiff)}
		if c.Kind.MovePath != nil {
			fc.MovePath = *c.Kind.MovePath
		}
		out = append(out, fc)
	}
	return out
}

// structuredContent is an MCP result's structuredContent as compact JSON
// text; "" when there is none, or more than maxToolOutput of it (cut JSON
// would be no JSON).
func structuredContent(raw json.RawMessage) string {
	if len(raw) == 0 || string(raw) == "null" {
		return ""
	}
	var b bytes.Buffer
	if json.Compact(&b, raw) != nil || b.Len() > maxToolOutput {
		return ""
	}
	return b.String()
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

// IsProgress reports whether a notification shows the turn moving. An
// upstream error the CLI retries does not: a model that never answers
// would otherwise hold its round past the stall deadline for ever.
func IsProgress(n *codexrpc.Notification) bool {
	if n.Method != codexproto.NoteError {
		return true
	}
	var e codexproto.ErrorNotification
	return json.Unmarshal(n.Params, &e) != nil || !e.WillRetry
}

// rateLimit is one rate-limit bucket as the mesh sees it.
func RateLimit(s codexproto.RateLimitSnapshot) messages.RateLimit {
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

// surfaceNote maps the round's own notifications of the wider surface;
// ok is false for the others.
func (m *Mapper) surfaceNote(n *codexrpc.Notification) (evs []messages.RoundEvent, ok bool) {
	switch n.Method {
	case codexproto.NoteTurnDiff:
		var d codexproto.TurnDiff
		if json.Unmarshal(n.Params, &d) != nil || d.Diff == "" || d.Diff == m.lastDiff {
			return nil, true // the CLI repeats the same diff 2 or 3 times a turn
		}
		m.lastDiff = d.Diff
		return one(messages.RoundEvent{Kind: messages.KindDiff, Text: textcut.Bytes(d.Diff, maxToolOutput)}), true
	case codexproto.NoteCommandOutputDelta:
		return m.outputDelta(n, ""), true
	case codexproto.NoteThreadSettings:
		var s codexproto.ThreadSettingsUpdated
		if json.Unmarshal(n.Params, &s) == nil && s.ThreadSettings.Model != "" {
			m.usedModel = s.ThreadSettings.Model
		}
		return nil, true
	case codexproto.NoteThreadStarted:
		var s codexproto.ThreadStarted
		if json.Unmarshal(n.Params, &s) == nil && s.Thread.ParentThreadID != nil &&
			*s.Thread.ParentThreadID != "" && (m.thread == "" || *s.Thread.ParentThreadID == m.thread) {
			m.addChild(s.Thread.ID)
		}
		return nil, true
	case codexproto.NoteRateLimitsUpdated:
		var r codexproto.RateLimitsUpdated
		if json.Unmarshal(n.Params, &r) == nil {
			m.noteRateLimits(r.RateLimits)
		}
		return nil, true
	}
	return nil, false
}

// noteRateLimits keeps the reset time of an exhausted window.
func (m *Mapper) noteRateLimits(s codexproto.RateLimitSnapshot) {
	for _, w := range []*codexproto.RateLimitWindow{s.Primary, s.Secondary} {
		if w != nil && w.ResetsAt != nil && w.UsedPercent >= 100 && *w.ResetsAt > m.resetsAt {
			m.resetsAt = *w.ResetsAt
		}
	}
}

// outputDelta maps a command output delta, for rounds that asked for them.
func (m *Mapper) outputDelta(n *codexrpc.Notification, agent string) []messages.RoundEvent {
	if !m.streamOutput {
		return nil
	}
	d, err := noteHead(n.Params)
	if err != nil || d.Delta == "" {
		return nil
	}
	return one(messages.RoundEvent{Kind: messages.KindCommandOutput, Text: d.Delta, ItemID: d.ItemID, AgentThread: agent})
}

// errorEvent maps an error notification; a final error of the round's own
// thread is kept for the verdict.
func (m *Mapper) errorEvent(e *codexproto.ErrorNotification, own bool) messages.RoundEvent {
	info := m.classify(e.Error.CodexErrorInfo, e.Error.Message)
	if e.WillRetry { // not a verdict, but the caller should know
		text := e.Error.Message
		if d := e.Error.AdditionalDetails; d != nil && *d != "" {
			text += ": " + *d
		}
		return messages.RoundEvent{Kind: messages.KindRetry, Text: text, ErrorInfo: info}
	}
	if own {
		m.errInfo = info
	}
	return messages.RoundEvent{Kind: messages.KindError, Text: e.Error.Message, ErrorInfo: info}
}

// childNote maps a notification of a subagent's thread: its text,
// reasoning, tools, output, usage and errors, attributed to it. Its turns
// never end the round.
func (m *Mapper) childNote(n *codexrpc.Notification, h codexproto.ThreadHeader, c *childThread) []messages.RoundEvent {
	var evs []messages.RoundEvent
	switch n.Method {
	case codexproto.NoteAgentMessageDelta, codexproto.NoteReasoningSummary, codexproto.NoteReasoningText:
		d, err := noteHead(n.Params)
		if err != nil || d.Delta == "" {
			return nil
		}
		m.streamed[d.ItemID] = true
		kind := messages.KindReasoning
		if n.Method == codexproto.NoteAgentMessageDelta {
			kind = messages.KindText
		}
		evs = one(messages.RoundEvent{Kind: kind, Text: d.Delta, ItemID: d.ItemID})
	case codexproto.NoteItemStarted, codexproto.NoteItemCompleted:
		evs = m.item(n, false)
		if n.Method == codexproto.NoteItemCompleted {
			var in codexproto.ItemNotification
			if json.Unmarshal(n.Params, &in) == nil && in.Item.Type == codexproto.ItemAgentMessage {
				c.lastMessage = in.Item.Text
			}
		}
	case codexproto.NoteCommandOutputDelta:
		evs = m.outputDelta(n, "")
	case codexproto.NoteTurnDiff:
		var d codexproto.TurnDiff
		if json.Unmarshal(n.Params, &d) != nil || d.Diff == "" {
			return nil
		}
		evs = one(messages.RoundEvent{Kind: messages.KindDiff, Text: textcut.Bytes(d.Diff, maxToolOutput)})
	case codexproto.NoteTurnStarted:
		var t codexproto.TurnNotification
		if json.Unmarshal(n.Params, &t) != nil {
			return nil
		}
		c.turnID = t.Turn.ID
		sub := messages.Subagent{Phase: messages.SubagentActivity, Thread: h.ThreadID, Tool: "turnStarted", Status: t.Turn.Status}
		if !c.announced {
			c.announced, sub.Phase = true, messages.SubagentStarted
		}
		evs = one(messages.RoundEvent{Kind: messages.KindSubagent, Subagent: &sub})
	case codexproto.NoteTurnCompleted:
		// The subagent's work is done (until it is sent more): its
		// answer goes to the caller; the round's own turn goes on.
		var t codexproto.TurnNotification
		if json.Unmarshal(n.Params, &t) != nil {
			return nil
		}
		sub := messages.Subagent{Phase: messages.SubagentEnded, Thread: h.ThreadID, Tool: "turnCompleted", Status: t.Turn.Status,
			Message: textcut.Bytes(c.lastMessage, maxToolOutput)}
		if t.Turn.Error != nil && sub.Message == "" {
			sub.Message = t.Turn.Error.Message
		}
		evs = one(messages.RoundEvent{Kind: messages.KindSubagent, Subagent: &sub})
	case codexproto.NoteTokenUsage:
		var u codexproto.TokenUsageNotification
		if json.Unmarshal(n.Params, &u) != nil || c.turnID == "" || u.TurnID != c.turnID {
			return nil
		}
		l := u.TokenUsage.Last
		evs = one(messages.RoundEvent{Kind: messages.KindUsage, Usage: &messages.Usage{
			InputTokens: l.InputTokens, CachedInputTokens: l.CachedInputTokens,
			OutputTokens: l.OutputTokens, ReasoningOutputTokens: l.ReasoningOutputTokens,
			TotalTokens: l.TotalTokens,
		}})
	case codexproto.NoteError:
		var e codexproto.ErrorNotification
		if json.Unmarshal(n.Params, &e) != nil {
			return nil
		}
		evs = one(m.errorEvent(&e, false))
	}
	for i := range evs {
		if evs[i].AgentThread == "" {
			evs[i].AgentThread = h.ThreadID
		}
	}
	return evs
}

// collab maps a collab tool call of an agent: a spawn announces its new
// threads, a call whose targets reached a final state ends them, anything
// else is activity.
func (m *Mapper) collab(sx *codexproto.SurfaceItem, completed bool) []messages.RoundEvent {
	var evs []messages.RoundEvent
	for _, id := range sx.ReceiverThreadIDs {
		c := m.addChild(id)
		if c == nil {
			continue
		}
		sub := messages.Subagent{Phase: messages.SubagentActivity, Thread: id, Tool: sx.Tool, Status: sx.Status}
		if sx.Prompt != nil {
			sub.Prompt = *sx.Prompt
		}
		if sx.Model != nil {
			sub.Model = *sx.Model
		}
		if st, ok := sx.AgentsStates[id]; ok {
			sub.Status = st.Status
			if st.Message != nil {
				sub.Message = textcut.Bytes(*st.Message, maxToolOutput)
			}
		}
		switch {
		case !c.announced:
			c.announced = true
			sub.Phase = messages.SubagentStarted
		case completed && (sx.Tool == "closeAgent" || finalAgentStatus(sx.AgentsStates[id].Status)):
			sub.Phase = messages.SubagentEnded
		}
		evs = append(evs, messages.RoundEvent{Kind: messages.KindSubagent, ItemID: sx.ID, Subagent: &sub})
	}
	return evs
}

// subAgentActivity maps a subAgentActivity item.
func (m *Mapper) subAgentActivity(sx *codexproto.SurfaceItem) []messages.RoundEvent {
	c := m.addChild(sx.AgentThreadID)
	if c == nil || m.streamed[sx.ID] {
		return nil
	}
	m.streamed[sx.ID] = true // started and completed carry the same activity
	sub := messages.Subagent{Phase: messages.SubagentActivity, Thread: sx.AgentThreadID, Tool: sx.Kind}
	if sx.Model != nil {
		sub.Model = *sx.Model
	}
	switch {
	case sx.Kind == "completed" || sx.Kind == "interrupted":
		sub.Phase, sub.Status = messages.SubagentEnded, sx.Kind
		c.announced = true
	case !c.announced:
		c.announced = true
		sub.Phase = messages.SubagentStarted
	}
	return one(messages.RoundEvent{Kind: messages.KindSubagent, ItemID: sx.ID, Subagent: &sub})
}

// finalAgentStatus reports whether a subagent's status is an end.
func finalAgentStatus(s string) bool {
	switch s {
	case "completed", "errored", "shutdown", "notFound", "interrupted":
		return true
	}
	return false
}

// spawnedThreads tells the router which threads a notification shows
// spawned as subagents of parent: the receivers of a collab tool call,
// the thread of a subagent activity, a thread/started with a parent. The
// router routes each child thread to the round of parent (and on, for
// grandchildren) before it routes the child's own notifications, which
// follow at once on the same connection. Cheap for every other
// notification.
func spawnedThreads(n *codexrpc.Notification) (parent string, children []string) {
	switch n.Method {
	case codexproto.NoteItemStarted, codexproto.NoteItemCompleted:
		if !bytes.Contains(n.Params, []byte(codexproto.ItemCollabAgentToolCall)) && !bytes.Contains(n.Params, []byte(codexproto.ItemSubAgentActivity)) {
			return "", nil
		}
		var in codexproto.SurfaceItemNotification
		if json.Unmarshal(n.Params, &in) != nil {
			return "", nil
		}
		switch in.Item.Type {
		case codexproto.ItemCollabAgentToolCall:
			for _, id := range in.Item.ReceiverThreadIDs {
				if id != "" && id != in.ThreadID {
					children = append(children, id)
				}
			}
		case codexproto.ItemSubAgentActivity:
			if id := in.Item.AgentThreadID; id != "" && id != in.ThreadID {
				children = append(children, id)
			}
		}
		if len(children) == 0 {
			return "", nil
		}
		return in.ThreadID, children
	case codexproto.NoteThreadStarted:
		var s codexproto.ThreadStarted
		if json.Unmarshal(n.Params, &s) != nil || s.Thread.ParentThreadID == nil || *s.Thread.ParentThreadID == "" || s.Thread.ID == "" {
			return "", nil
		}
		return *s.Thread.ParentThreadID, []string{s.Thread.ID}
	}
	return "", nil
}
