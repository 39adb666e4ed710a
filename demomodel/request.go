package demomodel

import (
	"encoding/json"
	"net/http"
	"strings"
	"time"
)

// Request kinds, from the request_kind field of x-codex-turn-metadata.
const (
	KindTurn       = "turn"
	KindCompaction = "compaction"
)

// TurnMetadataHeader is the header in which codex describes the turn a model
// request belongs to, as JSON.
const TurnMetadataHeader = "X-Codex-Turn-Metadata"

// Request is one HTTP request the Server received, with a parsed view of a
// Responses API body. Requests are snapshots: nothing changes them later.
type Request struct {
	// Seq numbers the requests of a Server from 0 in arrival order.
	Seq      int
	Received time.Time
	Method   string
	// Path is the URL path, e.g. "/v1/responses".
	Path   string
	Header http.Header
	// Body is the raw request body (empty if it was too large).
	Body []byte
	// Status is the HTTP status the Server answered with (200 for streams),
	// or 0 while the Script is still being chosen.
	Status int

	// Model is the body's "model".
	Model string
	// Input is the body's "input" list, one raw JSON item each.
	Input []json.RawMessage
	// Tools is the body's "tools" list.
	Tools []json.RawMessage
	// ParseError is set when Body is not a JSON object.
	ParseError error
}

// parseBody fills the parsed view of r from r.Body.
func (r *Request) parseBody() {
	if len(r.Body) == 0 {
		return
	}
	var v struct {
		Model string            `json:"model"`
		Input []json.RawMessage `json:"input"`
		Tools []json.RawMessage `json:"tools"`
	}
	if err := json.Unmarshal(r.Body, &v); err != nil {
		r.ParseError = err
		return
	}
	r.Model, r.Input, r.Tools = v.Model, v.Input, v.Tools
}

// inputItem is the union of the input item fields the helpers read.
type inputItem struct {
	Type    string          `json:"type"`
	Role    string          `json:"role"`
	Content json.RawMessage `json:"content"`
	CallID  string          `json:"call_id"`
	Name    string          `json:"name"`
	Output  json.RawMessage `json:"output"`
}

func parseItem(raw json.RawMessage) inputItem {
	var it inputItem
	_ = json.Unmarshal(raw, &it)
	return it
}

// contentText joins the text of content, which is either a string or a list
// of parts with a "text" field (input_text, output_text, ...).
func contentText(content json.RawMessage) string {
	var s string
	if json.Unmarshal(content, &s) == nil {
		return s
	}
	var parts []struct {
		Text string `json:"text"`
	}
	if json.Unmarshal(content, &parts) != nil {
		return ""
	}
	var b strings.Builder
	for _, p := range parts {
		b.WriteString(p.Text)
	}
	return b.String()
}

// LastInput is the last input item, or nil. After a tool call it is the
// function_call_output (or custom_tool_call_output) codex sends back.
func (r *Request) LastInput() json.RawMessage {
	if len(r.Input) == 0 {
		return nil
	}
	return r.Input[len(r.Input)-1]
}

// LastInputType is the "type" of the last input item, e.g. "message" or
// "function_call_output", or "".
func (r *Request) LastInputType() string {
	return parseItem(r.LastInput()).Type
}

// UserTexts is the text of every user message in the input, in order. It
// includes the messages codex adds itself, such as <environment_context>.
func (r *Request) UserTexts() []string {
	var out []string
	for _, raw := range r.Input {
		it := parseItem(raw)
		if it.Role == "user" && (it.Type == "message" || it.Type == "") {
			out = append(out, contentText(it.Content))
		}
	}
	return out
}

// LastUserText is the text of the last user message in the input, or "". For
// a normal turn it is what the user typed; for a compaction request it is
// codex's compaction prompt.
func (r *Request) LastUserText() string {
	texts := r.UserTexts()
	if len(texts) == 0 {
		return ""
	}
	return texts[len(texts)-1]
}

// FunctionCallOutputs maps the call_id of every function_call_output and
// custom_tool_call_output in the input to its output text. Outputs given as
// a list of content parts are joined.
func (r *Request) FunctionCallOutputs() map[string]string {
	out := map[string]string{}
	for _, raw := range r.Input {
		it := parseItem(raw)
		if it.Type == "function_call_output" || it.Type == "custom_tool_call_output" {
			out[it.CallID] = contentText(it.Output)
		}
	}
	return out
}

// ToolOutput is the output sent back for callID and whether there was one.
func (r *Request) ToolOutput(callID string) (string, bool) {
	s, ok := r.FunctionCallOutputs()[callID]
	return s, ok
}

// ToolNames is the name of every tool offered to the model. Namespaces (one
// per MCP server, "mcp__<server>") are listed by their own name.
func (r *Request) ToolNames() []string {
	var out []string
	for _, raw := range r.Tools {
		var t struct {
			Name string `json:"name"`
			Type string `json:"type"`
		}
		_ = json.Unmarshal(raw, &t)
		if t.Name == "" {
			t.Name = t.Type
		}
		out = append(out, t.Name)
	}
	return out
}

// HasTool reports whether a tool or namespace with the name is offered.
func (r *Request) HasTool(name string) bool {
	for _, n := range r.ToolNames() {
		if n == name {
			return true
		}
	}
	return false
}

// TurnMetadata is the parsed x-codex-turn-metadata header.
type TurnMetadata struct {
	SessionID   string `json:"session_id"`
	ThreadID    string `json:"thread_id"`
	TurnID      string `json:"turn_id"`
	RequestKind string `json:"request_kind"`
}

// TurnMetadata parses the x-codex-turn-metadata header. Missing or bad
// headers give the zero value.
func (r *Request) TurnMetadata() TurnMetadata {
	var md TurnMetadata
	_ = json.Unmarshal([]byte(r.Header.Get(TurnMetadataHeader)), &md)
	return md
}

// RequestKind is KindTurn or KindCompaction, from x-codex-turn-metadata, or
// "" when the header is missing.
func (r *Request) RequestKind() string {
	return r.TurnMetadata().RequestKind
}

// IsCompaction reports whether codex asks for a context compaction summary.
func (r *Request) IsCompaction() bool {
	return r.RequestKind() == KindCompaction
}

// clone returns a deep copy of r, safe to hand out.
func (r *Request) clone() Request {
	c := *r
	c.Header = r.Header.Clone()
	c.Body = append([]byte(nil), r.Body...)
	c.Input = cloneRaw(r.Input)
	c.Tools = cloneRaw(r.Tools)
	return c
}

func cloneRaw(in []json.RawMessage) []json.RawMessage {
	if in == nil {
		return nil
	}
	out := make([]json.RawMessage, len(in))
	for i, m := range in {
		out[i] = append(json.RawMessage(nil), m...)
	}
	return out
}
