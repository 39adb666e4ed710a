package demomodel

import (
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"maps"
	"net/http"
	"strings"
	"time"
)

// Event is one Server-Sent Event of a streamed response. It is written as
// "event: <Type>\ndata: <Data>\n\n". Data is the whole JSON object, including
// its "type" field, because codex dispatches on that field.
type Event struct {
	Type string
	Data json.RawMessage
}

// NewEvent builds an Event of the given type from fields, adding the "type"
// field. Values that cannot be marshalled are replaced by null.
func NewEvent(typ string, fields map[string]any) Event {
	m := maps.Clone(fields)
	if m == nil {
		m = map[string]any{}
	}
	m["type"] = typ
	return Event{Type: typ, Data: mustJSON(m)}
}

// Script is the answer to one model request: either an SSE stream of Events
// (Status 0 or 200) or an HTTP error (any other Status, with Body).
//
// Scripts are values. The With… methods return modified copies, so a Script
// may be reused and served many times.
type Script struct {
	// Status is the HTTP status. 0 means 200 with an SSE stream of Events.
	Status int
	// Header holds extra response headers.
	Header http.Header
	// Body is the response body of a non-200 Script.
	Body []byte
	// Events is the SSE stream of a 200 Script.
	Events []Event
	// Delay is waited before each event. The stream ends early when the
	// client goes away, and is dropped when the Server closes.
	Delay time.Duration
	// CutStream closes the connection after the Events, without the final
	// chunk, so the client sees a transport error.
	CutStream bool
	// HangStream keeps the stream open after the Events until the client goes
	// away or the Server closes.
	HangStream bool
}

// WithDelay returns a copy of s that waits d before each event.
func (s Script) WithDelay(d time.Duration) Script {
	s.Delay = d
	return s
}

// WithHeader returns a copy of s that also sends the response header key.
func (s Script) WithHeader(key, value string) Script {
	h := s.Header.Clone()
	if h == nil {
		h = http.Header{}
	}
	h.Add(key, value)
	s.Header = h
	return s
}

// WithUsage returns a copy of s whose response.completed event carries u.
func (s Script) WithUsage(u Usage) Script {
	return s.mapCompleted(func(id string) (Event, bool) { return completedEvent(id, &u), true })
}

// WithoutUsage returns a copy of s whose response.completed event has no
// usage. Codex then sends no thread/tokenUsage/updated notification.
func (s Script) WithoutUsage() Script {
	return s.mapCompleted(func(id string) (Event, bool) { return completedEvent(id, nil), true })
}

// Cut returns a copy of s without its response.completed event that closes
// the connection abruptly after the remaining events (no final chunk). Codex
// reports "stream disconnected before completion: Transport error ...".
func (s Script) Cut() Script {
	s = s.mapCompleted(func(string) (Event, bool) { return Event{}, false })
	s.CutStream = true
	return s
}

// EOF returns a copy of s without its response.completed event, ending the
// stream cleanly. Codex reports "stream closed before response.completed".
func (s Script) EOF() Script {
	return s.mapCompleted(func(string) (Event, bool) { return Event{}, false })
}

// Hang returns a copy of s without its response.completed event that keeps
// the stream open until the client goes away or the Server closes. Use it
// for turns that must still be running, e.g. to test interrupts.
func (s Script) Hang() Script {
	s = s.mapCompleted(func(string) (Event, bool) { return Event{}, false })
	s.HangStream = true
	return s
}

// mapCompleted rebuilds s.Events with every response.completed event replaced
// by f(response id), or dropped when f says so.
func (s Script) mapCompleted(f func(id string) (Event, bool)) Script {
	events := make([]Event, 0, len(s.Events))
	for _, ev := range s.Events {
		if ev.Type != "response.completed" {
			events = append(events, ev)
			continue
		}
		var v struct {
			Response struct {
				ID string `json:"id"`
			} `json:"response"`
		}
		_ = json.Unmarshal(ev.Data, &v)
		if nev, ok := f(v.Response.ID); ok {
			events = append(events, nev)
		}
	}
	s.Events = events
	return s
}

// Usage is the token usage reported in response.completed. Codex turns it into
// thread/tokenUsage/updated.
type Usage struct {
	InputTokens           int64
	CachedInputTokens     int64
	OutputTokens          int64
	ReasoningOutputTokens int64
	// TotalTokens defaults to InputTokens+OutputTokens when 0.
	TotalTokens int64
}

// DefaultUsage is the usage Respond reports: 100 input and 10 output tokens,
// small enough never to trigger auto-compaction, even with a 4000-token
// context window.
func DefaultUsage() Usage {
	return Usage{InputTokens: 100, OutputTokens: 10, TotalTokens: 110}
}

func (u Usage) wire() map[string]any {
	total := u.TotalTokens
	if total == 0 {
		total = u.InputTokens + u.OutputTokens
	}
	return map[string]any{
		"input_tokens":          u.InputTokens,
		"input_tokens_details":  map[string]any{"cached_tokens": u.CachedInputTokens},
		"output_tokens":         u.OutputTokens,
		"output_tokens_details": map[string]any{"reasoning_tokens": u.ReasoningOutputTokens},
		"total_tokens":          total,
	}
}

func completedEvent(id string, u *Usage) Event {
	resp := map[string]any{"id": id}
	if u != nil {
		resp["usage"] = u.wire()
	}
	return NewEvent("response.completed", map[string]any{"response": resp})
}

// itemKind tells the kinds of output Item apart.
type itemKind int

const (
	kindMessage itemKind = iota
	kindReasoning
	kindFunctionCall
	kindCustomToolCall
	kindRaw
)

// Item is one output item of a streamed response: a message, a reasoning
// item or a tool call. Build it with Message, Reasoning, FunctionCall,
// ExecCommand, MCPCall, ApplyPatch or RawItem, and put it in a Script with
// Respond. An Item with no ID gets a random one when Respond builds the events.
type Item struct {
	kind      itemKind
	id        string
	callID    string
	name      string
	namespace string
	input     string     // function arguments or custom tool input
	deltas    []string   // message text deltas
	summary   [][]string // reasoning summary parts, each as deltas
	raw       []string   // raw reasoning text deltas
	phase     string
	events    []Event // kindRaw
}

// Message is an assistant message streamed as the given text deltas. Codex
// shows each delta as an item/agentMessage/delta. See Words to split a text.
func Message(deltas ...string) Item {
	return Item{kind: kindMessage, deltas: deltas}
}

// Reasoning is a reasoning item with one summary part streamed as the given
// deltas. Add parts with WithSummaryPart and raw reasoning with WithRaw.
func Reasoning(summaryDeltas ...string) Item {
	it := Item{kind: kindReasoning}
	if len(summaryDeltas) > 0 {
		it.summary = [][]string{summaryDeltas}
	}
	return it
}

// FunctionCall is a function_call item that asks codex to run the tool name
// with the JSON arguments args. Its call_id becomes the app-server item id.
func FunctionCall(callID, name, args string) Item {
	return Item{kind: kindFunctionCall, callID: callID, name: name, input: args}
}

// ExecCommand is a call of codex's exec_command shell tool running cmd.
func ExecCommand(callID, cmd string) Item {
	return FunctionCall(callID, "exec_command", string(mustJSON(map[string]any{"cmd": cmd})))
}

// MCPCall is a call of the tool of an MCP server, as codex wants it: a
// function_call with "namespace":"mcp__<server>". args is a JSON object.
func MCPCall(callID, server, tool, args string) Item {
	it := FunctionCall(callID, tool, args)
	it.namespace = "mcp__" + server
	return it
}

// WithNamespace returns a copy of a function call in the tool namespace
// ns (codex's collab tools are in "multi_agent_v1").
func (it Item) WithNamespace(ns string) Item {
	it.namespace = ns
	return it
}

// ApplyPatch is a custom_tool_call of codex's freeform apply_patch tool. The
// tool exists only when the model catalog says apply_patch_tool_type
// "freeform" (codexhome writes such a catalog).
func ApplyPatch(callID, patch string) Item {
	return Item{kind: kindCustomToolCall, callID: callID, name: "apply_patch", input: patch}
}

// RawItem is an item given as ready-made events, streamed as they are.
func RawItem(events ...Event) Item {
	return Item{kind: kindRaw, events: events}
}

// WithID returns a copy of it with the Responses item id. Codex uses a
// message's id as the agentMessage item id.
func (it Item) WithID(id string) Item {
	it.id = id
	return it
}

// WithPhase returns a copy of a message item with the given phase (e.g.
// "final_answer"), passed through to agentMessage.phase.
func (it Item) WithPhase(phase string) Item {
	it.phase = phase
	return it
}

// WithSummaryPart returns a copy of a reasoning item with one more summary
// part, streamed as the given deltas.
func (it Item) WithSummaryPart(deltas ...string) Item {
	it.summary = append(append([][]string(nil), it.summary...), deltas)
	return it
}

// WithRaw returns a copy of a reasoning item whose raw reasoning text is
// streamed as the given response.reasoning_text.delta deltas.
func (it Item) WithRaw(deltas ...string) Item {
	it.raw = append(append([]string(nil), it.raw...), deltas...)
	return it
}

// CallID is the call_id of a tool-call item, or "".
func (it Item) CallID() string { return it.callID }

// render returns the SSE events of the item at output index idx.
func (it Item) render(idx int) []Event {
	id := it.id
	if id == "" && it.kind != kindRaw {
		id = randomID(map[itemKind]string{
			kindMessage: "msg_", kindReasoning: "rs_", kindFunctionCall: "fc_", kindCustomToolCall: "ctc_",
		}[it.kind])
	}
	added := func(item map[string]any) Event {
		return NewEvent("response.output_item.added", map[string]any{"output_index": idx, "item": item})
	}
	done := func(item map[string]any) Event {
		return NewEvent("response.output_item.done", map[string]any{"output_index": idx, "item": item})
	}
	var evs []Event
	switch it.kind {
	case kindRaw:
		return append(evs, it.events...)
	case kindMessage:
		item := map[string]any{"type": "message", "role": "assistant", "id": id, "content": []any{}}
		if it.phase != "" {
			item["phase"] = it.phase
		}
		evs = append(evs, added(item))
		for _, d := range it.deltas {
			evs = append(evs, NewEvent("response.output_text.delta", map[string]any{
				"item_id": id, "output_index": idx, "content_index": 0, "delta": d,
			}))
		}
		final := maps.Clone(item)
		final["content"] = []any{map[string]any{"type": "output_text", "text": strings.Join(it.deltas, ""), "annotations": []any{}}}
		return append(evs, done(final))
	case kindReasoning:
		evs = append(evs, added(map[string]any{"type": "reasoning", "id": id, "summary": []any{}}))
		summary := []any{}
		for i, part := range it.summary {
			evs = append(evs, NewEvent("response.reasoning_summary_part.added", map[string]any{
				"item_id": id, "output_index": idx, "summary_index": i,
				"part": map[string]any{"type": "summary_text", "text": ""},
			}))
			for _, d := range part {
				evs = append(evs, NewEvent("response.reasoning_summary_text.delta", map[string]any{
					"item_id": id, "output_index": idx, "summary_index": i, "delta": d,
				}))
			}
			text := strings.Join(part, "")
			evs = append(evs, NewEvent("response.reasoning_summary_text.done", map[string]any{
				"item_id": id, "output_index": idx, "summary_index": i, "text": text,
			}))
			summary = append(summary, map[string]any{"type": "summary_text", "text": text})
		}
		content := []any{}
		for _, d := range it.raw {
			evs = append(evs, NewEvent("response.reasoning_text.delta", map[string]any{
				"item_id": id, "output_index": idx, "content_index": 0, "delta": d,
			}))
		}
		if len(it.raw) > 0 {
			content = append(content, map[string]any{"type": "reasoning_text", "text": strings.Join(it.raw, "")})
		}
		return append(evs, done(map[string]any{
			"type": "reasoning", "id": id, "summary": summary, "content": content, "encrypted_content": nil,
		}))
	case kindFunctionCall:
		item := map[string]any{"type": "function_call", "id": id, "call_id": it.callID, "name": it.name, "arguments": ""}
		if it.namespace != "" {
			item["namespace"] = it.namespace
		}
		evs = append(evs, added(item))
		evs = append(evs, NewEvent("response.function_call_arguments.delta", map[string]any{
			"item_id": id, "output_index": idx, "delta": it.input,
		}))
		final := maps.Clone(item)
		final["arguments"] = it.input
		return append(evs, done(final))
	case kindCustomToolCall:
		item := map[string]any{"type": "custom_tool_call", "id": id, "call_id": it.callID, "name": it.name, "input": ""}
		evs = append(evs, added(item))
		evs = append(evs, NewEvent("response.custom_tool_call_input.delta", map[string]any{
			"item_id": id, "output_index": idx, "delta": it.input,
		}))
		final := maps.Clone(item)
		final["input"] = it.input
		return append(evs, done(final))
	}
	return evs
}

// Respond is a complete streamed response: response.created, the events of
// each item in order, then response.completed with DefaultUsage.
func Respond(items ...Item) Script {
	return RespondID(randomID("resp_"), items...)
}

// RespondID is Respond with the given response id.
func RespondID(responseID string, items ...Item) Script {
	evs := []Event{NewEvent("response.created", map[string]any{"response": map[string]any{"id": responseID}})}
	for i, it := range items {
		evs = append(evs, it.render(i)...)
	}
	u := DefaultUsage()
	evs = append(evs, completedEvent(responseID, &u))
	return Script{Events: evs}
}

// Text is a response made of one message streamed as the given deltas.
func Text(deltas ...string) Script {
	return Respond(Message(deltas...))
}

// Words splits s into deltas of one word each, keeping the spaces, so that
// strings.Join(Words(s), "") == s.
func Words(s string) []string {
	var out []string
	start := 0
	inSpace := false
	for i, r := range s {
		sp := r == ' ' || r == '\n' || r == '\t'
		if i > start && !sp && inSpace {
			out = append(out, s[start:i])
			start = i
		}
		inSpace = sp
	}
	if start < len(s) {
		out = append(out, s[start:])
	}
	return out
}

// Error codes that codex maps to specific codexErrorInfo values.
const (
	CodeContextLengthExceeded = "context_length_exceeded" // contextWindowExceeded
	CodeInsufficientQuota     = "insufficient_quota"      // usageLimitExceeded
	CodeRateLimitExceeded     = "rate_limit_exceeded"     // rateLimitExceeded / responseTooManyFailedAttempts
	CodeServerError           = "server_error"
	CodeInvalidAPIKey         = "invalid_api_key"
)

// APIError is the OpenAI error object, sent as {"error":{...}}.
type APIError struct {
	Message string  `json:"message"`
	Type    string  `json:"type"`
	Param   *string `json:"param"`
	Code    string  `json:"code,omitempty"`
}

// HTTPError is a plain HTTP error response with the JSON body
// {"error":{"message","type","param","code"}}.
func HTTPError(status int, e APIError) Script {
	return Script{
		Status: status,
		Header: http.Header{"Content-Type": {"application/json"}},
		Body:   mustJSON(map[string]any{"error": e}),
	}
}

// InternalServerError is an HTTP 500. Codex reports codexErrorInfo
// "internalServerError".
func InternalServerError() Script {
	return HTTPError(http.StatusInternalServerError, APIError{
		Message: "The server had an error while processing your request.", Type: "server_error", Code: CodeServerError,
	})
}

// RateLimited is an HTTP 429 with code rate_limit_exceeded. With no retries
// codex reports {"responseTooManyFailedAttempts":{"httpStatusCode":429}}.
func RateLimited() Script {
	return HTTPError(http.StatusTooManyRequests, APIError{
		Message: "Rate limit reached. Please try again in 0.2s.", Type: "requests", Code: CodeRateLimitExceeded,
	})
}

// InsufficientQuota is an HTTP 429 with code insufficient_quota. Codex
// reports "usageLimitExceeded".
func InsufficientQuota() Script {
	return HTTPError(http.StatusTooManyRequests, APIError{
		Message: "You exceeded your current quota, please check your plan and billing details.",
		Type:    CodeInsufficientQuota, Code: CodeInsufficientQuota,
	})
}

// Unauthorized is an HTTP 401. Codex reports
// {"httpConnectionFailed":{"httpStatusCode":401}}.
func Unauthorized() Script {
	return HTTPError(http.StatusUnauthorized, APIError{
		Message: "Incorrect API key provided.", Type: "invalid_request_error", Code: CodeInvalidAPIKey,
	})
}

// ContextLengthExceeded is an HTTP 400 with code context_length_exceeded.
// Codex reports "contextWindowExceeded".
func ContextLengthExceeded() Script {
	return HTTPError(http.StatusBadRequest, APIError{
		Message: "Your input exceeds the context window of this model.", Type: "invalid_request_error",
		Code: CodeContextLengthExceeded,
	})
}

// Failed is a 200 stream that ends in response.failed with the given error
// code and message, after response.created.
func Failed(code, message string) Script {
	id := randomID("resp_")
	return Script{Events: []Event{
		NewEvent("response.created", map[string]any{"response": map[string]any{"id": id}}),
		NewEvent("response.failed", map[string]any{"response": map[string]any{
			"id": id, "error": map[string]any{"code": code, "message": message},
		}}),
	}}
}

func randomID(prefix string) string {
	var b [8]byte
	_, _ = rand.Read(b[:])
	return prefix + hex.EncodeToString(b[:])
}

// mustJSON marshals v, which is built by this package from JSON-safe values.
func mustJSON(v any) json.RawMessage {
	b, err := json.Marshal(v)
	if err != nil {
		return json.RawMessage("null")
	}
	return b
}
