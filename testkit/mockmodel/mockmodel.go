package mockmodel

import "github.com/meshweaver/supervisor/demomodel"

// Types of demomodel.
type (
	APIError     = demomodel.APIError
	Event        = demomodel.Event
	Item         = demomodel.Item
	Options      = demomodel.Options
	Request      = demomodel.Request
	Responder    = demomodel.Responder
	Script       = demomodel.Script
	Server       = demomodel.Server
	TurnMetadata = demomodel.TurnMetadata
	Usage        = demomodel.Usage
)

// Constants of demomodel.
const (
	KindTurn                  = demomodel.KindTurn
	KindCompaction            = demomodel.KindCompaction
	TurnMetadataHeader        = demomodel.TurnMetadataHeader
	DefaultMaxBodyBytes       = demomodel.DefaultMaxBodyBytes
	CodeContextLengthExceeded = demomodel.CodeContextLengthExceeded
	CodeInsufficientQuota     = demomodel.CodeInsufficientQuota
	CodeRateLimitExceeded     = demomodel.CodeRateLimitExceeded
	CodeServerError           = demomodel.CodeServerError
	CodeInvalidAPIKey         = demomodel.CodeInvalidAPIKey
	ShowcaseListCall          = demomodel.ShowcaseListCall
	ShowcaseNoteCall          = demomodel.ShowcaseNoteCall
	ShowcaseNote              = demomodel.ShowcaseNote
	ShowcaseNoteCommand       = demomodel.ShowcaseNoteCommand
	ShowcaseDelay             = demomodel.ShowcaseDelay
)

// ErrClosed is demomodel.ErrClosed (the same error value).
var ErrClosed = demomodel.ErrClosed

// Start is demomodel.Start.
func Start(opts Options) (*Server, error) { return demomodel.Start(opts) }

// NewEvent is demomodel.NewEvent.
func NewEvent(typ string, fields map[string]any) Event { return demomodel.NewEvent(typ, fields) }

// Words is demomodel.Words.
func Words(s string) []string { return demomodel.Words(s) }

// DefaultUsage is demomodel.DefaultUsage.
func DefaultUsage() Usage { return demomodel.DefaultUsage() }

// Items.

// Message is demomodel.Message.
func Message(deltas ...string) Item { return demomodel.Message(deltas...) }

// Reasoning is demomodel.Reasoning.
func Reasoning(summaryDeltas ...string) Item { return demomodel.Reasoning(summaryDeltas...) }

// FunctionCall is demomodel.FunctionCall.
func FunctionCall(callID, name, args string) Item { return demomodel.FunctionCall(callID, name, args) }

// ExecCommand is demomodel.ExecCommand.
func ExecCommand(callID, cmd string) Item { return demomodel.ExecCommand(callID, cmd) }

// MCPCall is demomodel.MCPCall.
func MCPCall(callID, server, tool, args string) Item {
	return demomodel.MCPCall(callID, server, tool, args)
}

// ApplyPatch is demomodel.ApplyPatch.
func ApplyPatch(callID, patch string) Item { return demomodel.ApplyPatch(callID, patch) }

// RawItem is demomodel.RawItem.
func RawItem(events ...Event) Item { return demomodel.RawItem(events...) }

// Scripts.

// Respond is demomodel.Respond.
func Respond(items ...Item) Script { return demomodel.Respond(items...) }

// RespondID is demomodel.RespondID.
func RespondID(responseID string, items ...Item) Script {
	return demomodel.RespondID(responseID, items...)
}

// Text is demomodel.Text.
func Text(deltas ...string) Script { return demomodel.Text(deltas...) }

// HTTPError is demomodel.HTTPError.
func HTTPError(status int, e APIError) Script { return demomodel.HTTPError(status, e) }

// InternalServerError is demomodel.InternalServerError.
func InternalServerError() Script { return demomodel.InternalServerError() }

// RateLimited is demomodel.RateLimited.
func RateLimited() Script { return demomodel.RateLimited() }

// InsufficientQuota is demomodel.InsufficientQuota.
func InsufficientQuota() Script { return demomodel.InsufficientQuota() }

// Unauthorized is demomodel.Unauthorized.
func Unauthorized() Script { return demomodel.Unauthorized() }

// ContextLengthExceeded is demomodel.ContextLengthExceeded.
func ContextLengthExceeded() Script { return demomodel.ContextLengthExceeded() }

// Failed is demomodel.Failed.
func Failed(code, message string) Script { return demomodel.Failed(code, message) }

// Responders.

// DemoResponder is demomodel.DemoResponder.
func DemoResponder(req *Request) Script { return demomodel.DemoResponder(req) }

// DemoReply is demomodel.DemoReply.
func DemoReply(req *Request) string { return demomodel.DemoReply(req) }

// ShowcaseResponder is demomodel.ShowcaseResponder.
func ShowcaseResponder(req *Request) Script { return demomodel.ShowcaseResponder(req) }

// ToolThenText is demomodel.ToolThenText.
func ToolThenText(call Item, deltas ...string) Responder {
	return demomodel.ToolThenText(call, deltas...)
}
