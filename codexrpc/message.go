package codexrpc

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
)

// Message is one JSON-RPC message: a *Request, a *Notification or a
// *Response. The set is sealed.
type Message interface {
	isMessage()
}

// Request is a call that expects an answer. From the server it is a
// server-initiated request, such as an approval.
type Request struct {
	ID     json.RawMessage // the id exactly as sent, echoed back in the answer
	Method string
	Params json.RawMessage
}

// Notification is a one-way message.
type Notification struct {
	Method string
	Params json.RawMessage
}

// Response answers a Request: exactly one of Result and Error is set.
type Response struct {
	ID     json.RawMessage
	Result json.RawMessage
	Error  *WireError
}

func (*Request) isMessage()      {}
func (*Notification) isMessage() {}
func (*Response) isMessage()     {}

// ErrMalformed reports a line that is not a JSON-RPC message.
var ErrMalformed = errors.New("codexrpc: malformed message")

// wireMessage is the union of every shape on the wire. The "jsonrpc" field is
// accepted and ignored; "emittedAtMs" on notifications likewise.
type wireMessage struct {
	ID     json.RawMessage `json:"id,omitempty"`
	Method string          `json:"method,omitempty"`
	Params json.RawMessage `json:"params,omitempty"`
	Result json.RawMessage `json:"result,omitempty"`
	Error  *WireError      `json:"error,omitempty"`
}

// DecodeMessage parses one line. The returned message does not alias line.
func DecodeMessage(line []byte) (Message, error) {
	var d decoder
	return d.decode(line)
}

// decoder decodes lines, keeping the method names it has seen so that a
// known method costs no allocation. The zero value is usable; it is not
// safe for concurrent use (a Conn's read goroutine owns one).
type decoder struct {
	methods map[string]string // interned method names, up to maxInterned
}

// maxInterned bounds the interned method names (the CLI has about a hundred
// methods); a peer inventing names past it gets fresh strings.
const (
	maxInterned       = 512
	maxInternedLength = 128
)

func (d *decoder) decode(line []byte) (Message, error) {
	line = bytes.TrimSpace(line)
	if len(line) == 0 || line[0] != '{' {
		return nil, fmt.Errorf("%w: not a JSON object", ErrMalformed)
	}
	if w, ok := d.fast(line); ok {
		return w.message()
	}
	return decodeJSON(line)
}

// decodeJSON decodes a trimmed line with encoding/json: the reference the
// fast path agrees with, and its fallback.
func decodeJSON(line []byte) (Message, error) {
	var w wireMessage
	if err := json.Unmarshal(line, &w); err != nil {
		return nil, fmt.Errorf("%w: %v", ErrMalformed, err)
	}
	return w.message()
}

// fast decodes the lines the CLI writes (see scanLine) without
// encoding/json; ok is false when the line is for encoding/json.
func (d *decoder) fast(line []byte) (w wireMessage, ok bool) {
	if line[len(line)-1] != '}' {
		return w, false
	}
	s, ok := scanLine(line)
	if !ok {
		return w, false
	}
	if s.method.end > 0 {
		w.Method = d.intern(line[s.method.start:s.method.end])
	}
	// One copy holds the raw values kept: the message must not alias line,
	// which the LineReader reuses.
	lo, hi := len(line), 0
	for _, v := range [...]span{s.id, s.params, s.result} {
		if v.end > 0 {
			lo, hi = min(lo, v.start), max(hi, v.end)
		}
	}
	if hi == 0 {
		return w, true
	}
	buf := bytes.Clone(line[lo:hi])
	raw := func(v span) json.RawMessage {
		if v.end == 0 {
			return nil
		}
		return buf[v.start-lo : v.end-lo : v.end-lo]
	}
	w.ID, w.Params, w.Result = raw(s.id), raw(s.params), raw(s.result)
	return w, true
}

// intern returns b as a string, shared with earlier equal names.
func (d *decoder) intern(b []byte) string {
	if s, ok := d.methods[string(b)]; ok {
		return s
	}
	s := string(b)
	if len(d.methods) < maxInterned && len(b) <= maxInternedLength {
		if d.methods == nil {
			d.methods = make(map[string]string)
		}
		d.methods[s] = s
	}
	return s
}

// message classifies a decoded union.
func (w *wireMessage) message() (Message, error) {
	hasID := len(w.ID) > 0 && !bytes.Equal(w.ID, []byte("null"))
	if hasID && !validID(w.ID) {
		return nil, fmt.Errorf("%w: id must be a number or a string", ErrMalformed)
	}
	switch {
	case w.Method != "" && hasID:
		return &Request{ID: w.ID, Method: w.Method, Params: w.Params}, nil
	case w.Method != "":
		return &Notification{Method: w.Method, Params: w.Params}, nil
	case w.Error != nil:
		// An error answer may carry a null id (the peer could not parse our request).
		return &Response{ID: w.ID, Error: w.Error}, nil
	case hasID:
		if len(w.Result) == 0 {
			w.Result = json.RawMessage("null")
		}
		return &Response{ID: w.ID, Result: w.Result}, nil
	default:
		return nil, fmt.Errorf("%w: neither method nor id", ErrMalformed)
	}
}

func validID(id json.RawMessage) bool {
	switch id[0] {
	case '"':
		return true
	case '-', '0', '1', '2', '3', '4', '5', '6', '7', '8', '9':
		return true
	}
	return false
}

// The encoders below write no "jsonrpc" field: codex app-server neither
// sends nor needs it.

type outRequest struct {
	ID     int64  `json:"id"`
	Method string `json:"method"`
	Params any    `json:"params"`
	Trace  *Trace `json:"trace,omitempty"`
}

// Trace is a W3C trace context (traceparent and tracestate, as their HTTP
// headers would carry them): a request's optional "trace" field, codex's
// W3cTraceContext (JSONRPCRequest.trace in generate-json-schema), which
// the CLI takes as the parent of the spans it makes for the request.
type Trace struct {
	Traceparent string `json:"traceparent,omitempty"`
	Tracestate  string `json:"tracestate,omitempty"`
}

// Traced is the params of a request that carries a trace context: Go and
// Call send Params as the request's params and Trace, when its
// Traceparent is set, as its "trace" field.
type Traced struct {
	Params any
	Trace  Trace
}

// unwrapTrace splits Traced params into the params and the trace field.
func unwrapTrace(params any) (any, *Trace) {
	t, ok := params.(Traced)
	if !ok {
		return params, nil
	}
	if t.Trace.Traceparent == "" {
		return t.Params, nil
	}
	return t.Params, &t.Trace
}

type outNotification struct {
	Method string `json:"method"`
	Params any    `json:"params,omitempty"`
}

type outResult struct {
	ID     json.RawMessage `json:"id"`
	Result any             `json:"result"`
}

type outError struct {
	ID    json.RawMessage `json:"id"`
	Error *WireError      `json:"error"`
}
