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
	line = bytes.TrimSpace(line)
	if len(line) == 0 || line[0] != '{' {
		return nil, fmt.Errorf("%w: not a JSON object", ErrMalformed)
	}
	var w wireMessage
	if err := json.Unmarshal(line, &w); err != nil {
		return nil, fmt.Errorf("%w: %v", ErrMalformed, err)
	}
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
