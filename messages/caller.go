package messages

// RequestPolicy is how a round answers the requests codex sends while it
// runs: approvals (commands, file changes, MCP tool calls), questions for
// the user (request_user_input) and MCP elicitations. Child agents'
// requests follow their round's policy.
type RequestPolicy string

// Request policies of [StartRound.OnRequest].
const (
	// PolicyDefault (empty) keeps the meaning a StartRound had before the
	// field existed: PolicyAuto when AutoApprove is set, else
	// PolicyDecline.
	PolicyDefault RequestPolicy = ""
	// PolicyAuto accepts approvals, gives questions blank answers and
	// declines real MCP elicitations, without asking anyone.
	PolicyAuto RequestPolicy = "auto"
	// PolicyDecline declines every approval and elicitation and gives
	// questions blank answers.
	PolicyDecline RequestPolicy = "decline"
	// PolicyAsk sends each request to the caller as a KindRequest event
	// with a deadline; the caller answers with [AnswerRequest]. A request
	// not answered by its deadline is declined, and a KindRequestClosed
	// event says so.
	PolicyAsk RequestPolicy = "ask"
)

// Bounds of the ask policy.
const (
	// DefaultAskTimeoutMS is the deadline of an asked request when
	// StartRound.AskTimeoutMS is zero.
	DefaultAskTimeoutMS = 60_000
	// MaxAskTimeoutMS bounds StartRound.AskTimeoutMS.
	MaxAskTimeoutMS = 600_000
	// MaxAnswers bounds the answers of an AnswerRequest.
	MaxAnswers = 64
)

// Kinds of [RoundEvent] for asked requests.
const (
	// KindRequest: Request describes a request codex sent, which the
	// caller answers with AnswerRequest before Request.DeadlineUnixMilli.
	KindRequest EventKind = "request"
	// KindRequestClosed: Request.RequestID is answered, and
	// Request.Outcome says how ("answered: accept", "expired: declined",
	// "canceled: the round ended").
	KindRequestClosed EventKind = "request_closed"
)

// RequestType says what a [ServerRequest] asks.
type RequestType string

// Types of [ServerRequest].
const (
	RequestCommandApproval    RequestType = "command_approval"     // Command, Cwd, Reason
	RequestFileChangeApproval RequestType = "file_change_approval" // Reason
	RequestMCPToolApproval    RequestType = "mcp_tool_approval"    // Message
	RequestUserInput          RequestType = "user_input"           // Questions
	RequestElicitation        RequestType = "elicitation"          // Message, Schema
	RequestPermissions        RequestType = "permissions"          // Permissions, Cwd, Reason
)

// ServerRequest is a request codex sent during a round, put to the caller;
// it is the payload of KindRequest and KindRequestClosed events.
type ServerRequest struct {
	// RequestID names the request in AnswerRequest.
	RequestID string      `msgpack:"request_id,omitempty"`
	Type      RequestType `msgpack:"type,omitempty"`
	// DeadlineUnixMilli is when the request is declined unanswered.
	DeadlineUnixMilli int64 `msgpack:"deadline_unix_milli,omitempty"`
	// ItemID is codex's id of the item (the tool call) it belongs to.
	ItemID string `msgpack:"item_id,omitempty"`
	// ChildThreadID is the codex thread of the child agent that asked;
	// empty when the round's own thread asked.
	ChildThreadID string `msgpack:"child_thread_id,omitempty"`
	// Command and Cwd describe a command to approve.
	Command string `msgpack:"command,omitempty"`
	Cwd     string `msgpack:"cwd,omitempty"`
	// Reason is codex's reason for an approval, if it gave one.
	Reason string `msgpack:"reason,omitempty"`
	// Message is an elicitation's (or an MCP tool approval's) text.
	Message string `msgpack:"message,omitempty"`
	// Schema is an elicitation's requested schema, JSON text.
	Schema string `msgpack:"schema,omitempty"`
	// Questions are a user-input request's questions.
	Questions []Question `msgpack:"questions,omitempty"`
	// Permissions is what a permissions request asks for, and Grantable
	// what of it the daemon would grant on accept (within --max-sandbox).
	Permissions *Permissions `msgpack:"permissions,omitempty"`
	Grantable   *Permissions `msgpack:"grantable,omitempty"`
	// Outcome is, in a KindRequestClosed event, how the request ended.
	Outcome string `msgpack:"outcome,omitempty"`
}

// Permissions are file-system paths to read and write, and network
// access.
type Permissions struct {
	Read    []string `msgpack:"read,omitempty"`
	Write   []string `msgpack:"write,omitempty"`
	Network bool     `msgpack:"network,omitempty"`
}

// Question is one question of a user-input request.
type Question struct {
	ID       string   `msgpack:"id,omitempty"`
	Header   string   `msgpack:"header,omitempty"`
	Question string   `msgpack:"question,omitempty"`
	Options  []string `msgpack:"options,omitempty"`
}

// Decisions of an [AnswerRequest].
const (
	DecisionAccept           = "accept"
	DecisionAcceptForSession = "accept_for_session"
	DecisionDecline          = "decline"
	DecisionCancel           = "cancel"
)

// AnswerRequest answers a request a round with PolicyAsk put to its
// caller. The reply is a [RoundControlled]: OK when the request was still
// open and the answer went to codex.
type AnswerRequest struct {
	User      string `msgpack:"user,omitempty"`
	RoundID   string `msgpack:"round_id,omitempty"`
	RequestID string `msgpack:"request_id,omitempty"`
	// Decision is accept, accept_for_session, decline or cancel; a
	// user-input request needs none (its Answers are the answer).
	Decision string `msgpack:"decision,omitempty"`
	// Answers are a user-input request's answers by question id.
	Answers map[string][]string `msgpack:"answers,omitempty"`
	// Content is an accepted elicitation's content, a JSON object as text.
	Content string `msgpack:"content,omitempty"`
}

// AttachRound asks for a round's events after AfterSeq and then the rest
// of them as they come, and its verdict: a caller that lost its connection
// gets back what it missed. Replies go to ReplyTo, or to the sender. A
// round the daemon does not know (never run, or its retention ended) gets
// a [RoundFinished] with StatusNotFound.
type AttachRound struct {
	User     string `msgpack:"user,omitempty"`
	RoundID  string `msgpack:"round_id,omitempty"`
	AfterSeq uint64 `msgpack:"after_seq,omitempty"`
	ReplyTo  *PID   `msgpack:"reply_to,omitempty"`
}

// DetachRound tells the daemon that the sender, attached to User's round
// RoundID (it started the round or attached to it), no longer listens: the
// round log drops that one caller, and with nobody left the caller grace
// begins, as when a caller's connection is lost. It detaches only the
// sender's own address (no other caller, whatever it names), and only at
// the member that receives it: it is never relayed, and a user this member
// does not run is left alone. A cluster member's relay sends it to the
// owner when its own caller goes, so the owner learns of a departure it
// cannot see. Nothing answers it.
type DetachRound struct {
	User    string `msgpack:"user,omitempty"`
	RoundID string `msgpack:"round_id,omitempty"`
}

// StatusNotFound is the verdict on an AttachRound (or an AnswerRequest's
// round) the daemon does not know.
const StatusNotFound VerdictStatus = "not_found"
