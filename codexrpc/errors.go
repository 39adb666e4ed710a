package codexrpc

import (
	"errors"
	"fmt"
	"strings"
)

// JSON-RPC error codes the daemon acts on.
const (
	CodeParseError     = -32700
	CodeInvalidRequest = -32600 // the app-server's code for nearly every refusal
	CodeMethodNotFound = -32601
	CodeInvalidParams  = -32602
	CodeInternalError  = -32603
	CodeOverloaded     = -32001 // retryable with backoff
)

// ErrClosed is returned by calls on a connection that was closed on purpose
// (Close, or a Process being stopped). It is the quiet error: nothing failed.
var ErrClosed = errors.New("codexrpc: connection closed")

// WireError is a JSON-RPC error object, as answered by the peer.
type WireError struct {
	Code    int    `json:"code"`
	Message string `json:"message"`
	Data    any    `json:"data,omitempty"`
}

func (e *WireError) Error() string {
	return fmt.Sprintf("codex error %d: %s", e.Code, e.Message)
}

// Class is a kind of error the daemon acts on.
type Class int

// Error classes.
const (
	ClassOther            Class = iota
	ClassNoRollout              // thread/resume of a thread whose rollout is gone
	ClassInvalidSessionID       // thread/resume of an id that is not a UUID
	ClassNotInitialized         // a call before initialize
	ClassOverloaded             // -32001
	ClassThreadNotFound         // turn/start on a thread the process does not know
)

func (c Class) String() string {
	switch c {
	case ClassNoRollout:
		return "no-rollout"
	case ClassInvalidSessionID:
		return "invalid-session-id"
	case ClassNotInitialized:
		return "not-initialized"
	case ClassOverloaded:
		return "overloaded"
	case ClassThreadNotFound:
		return "thread-not-found"
	}
	return "other"
}

// Classify names the class of err, looking through wrapping for a *WireError.
func Classify(err error) Class {
	var we *WireError
	if !errors.As(err, &we) {
		return ClassOther
	}
	msg := we.Message
	switch {
	case we.Code == CodeOverloaded:
		return ClassOverloaded
	case strings.HasPrefix(msg, "no rollout found for thread id"):
		return ClassNoRollout
	case strings.HasPrefix(msg, "invalid session id"):
		return ClassInvalidSessionID
	case msg == "Not initialized":
		return ClassNotInitialized
	case strings.HasPrefix(msg, "thread not found"):
		return ClassThreadNotFound
	}
	return ClassOther
}

// ExitError reports a call that could not complete because the app-server
// process ended unexpectedly. It names the outstanding method, how the
// process ended, and a bounded, redacted tail of its stderr.
type ExitError struct {
	Method string     // the call that was waiting ("" when none)
	Exit   ExitStatus // how the process ended
	Stderr string     // bounded tail, secrets redacted
}

func (e *ExitError) Error() string {
	var b strings.Builder
	b.WriteString("codex app-server ")
	b.WriteString(e.Exit.String())
	if e.Method != "" {
		b.WriteString(" while awaiting ")
		b.WriteString(e.Method)
	}
	if e.Stderr != "" {
		b.WriteString("; stderr tail: ")
		b.WriteString(e.Stderr)
	}
	return b.String()
}

// ExitStatus is how a process ended.
type ExitStatus struct {
	Code   int    // exit code; -1 when killed by a signal or unknown
	Signal string // the signal's name when killed by one, such as "killed"
	Known  bool   // false when the exit was not observed in time
}

func (s ExitStatus) String() string {
	switch {
	case !s.Known:
		return "closed its output"
	case s.Signal != "":
		return "was killed by signal " + s.Signal
	default:
		return fmt.Sprintf("exited with code %d", s.Code)
	}
}
