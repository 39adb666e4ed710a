package messages

// PID addresses an actor: the fields of a hollywood *actor.PID. It is its
// own type so that this package stays a leaf and msgpack-friendly; the
// actors package converts.
type PID struct {
	Address string `msgpack:"address,omitempty"`
	ID      string `msgpack:"id,omitempty"`
}

// String returns the PID as hollywood prints it, "address/id".
func (p PID) String() string { return p.Address + "/" + p.ID }

// StartRound asks the daemon to run one chat round for User on the mesh
// thread Thread: Text goes to the user's codex app-server and the answer
// streams back as [RoundEvent]s followed by exactly one [RoundFinished].
// Replies go to ReplyTo, or to the sender if ReplyTo is nil.
//
// MCPToken is a bearer token; String, GoString and LogValue redact it and
// report the sizes of Text, DeveloperInstructions and History only.
type StartRound struct {
	// RoundID names the round in every reply. Optional: the daemon mints
	// one if it is empty.
	RoundID string `msgpack:"round_id,omitempty"`
	// User is the mesh user whose codex runs the round. Required.
	User string `msgpack:"user,omitempty"`
	// Thread is the mesh thread key, mapped by the daemon to a codex
	// thread. Required.
	Thread string `msgpack:"thread,omitempty"`
	// Text is the user's message. Required.
	Text string `msgpack:"text,omitempty"`
	// ClientMessageID is the caller's id for Text, for deduplication.
	ClientMessageID string `msgpack:"client_message_id,omitempty"`
	// Model overrides the codex model; empty means the default.
	Model string `msgpack:"model,omitempty"`
	// Effort overrides the reasoning effort; empty means the default.
	Effort string `msgpack:"effort,omitempty"`
	// AutoApprove approves codex's command and patch requests without
	// asking.
	AutoApprove bool `msgpack:"auto_approve,omitempty"`
	// DeveloperInstructions are passed to codex as developer instructions.
	DeveloperInstructions string `msgpack:"developer_instructions,omitempty"`
	// MCPURL is an http(s) MCP server codex may use for this round.
	MCPURL string `msgpack:"mcp_url,omitempty"`
	// MCPToken is the bearer token for MCPURL. Secret.
	MCPToken string `msgpack:"mcp_token,omitempty"`
	// History holds earlier turns of the thread, oldest first, used to seed
	// a fresh codex thread when the old one cannot be resumed.
	History []Turn `msgpack:"history,omitempty"`
	// ReplyTo receives the replies; nil means the sender.
	ReplyTo *PID `msgpack:"reply_to,omitempty"`
	// OnRequest is how the round answers codex's approvals, questions and
	// elicitations; empty keeps AutoApprove's meaning (see RequestPolicy).
	OnRequest RequestPolicy `msgpack:"on_request,omitempty"`
	// AskTimeoutMS is the deadline of each request put to the caller
	// under PolicyAsk, in milliseconds; 0 means DefaultAskTimeoutMS.
	AskTimeoutMS int64 `msgpack:"ask_timeout_ms,omitempty"`
	// RawEvents asks for every notification of the round's thread that no
	// other event carries, as a KindRaw event: its method and its params
	// as codex sent them (cut at MaxRawParams).
	RawEvents bool `msgpack:"raw_events,omitempty"`
	// Tools are tools the round's model may call, each served by a mesh
	// actor (messages/tools.go). They are declared when the mesh thread's
	// codex thread starts: a later round's calls go to the actors its own
	// Tools name.
	Tools []DynamicTool `msgpack:"tools,omitempty"`

	// The wider surface (messages/surface.go).

	// OutputSchema is a JSON Schema (a JSON object, as text) the final
	// answer must follow; the verdict's StructuredOutput carries it.
	OutputSchema string `msgpack:"output_schema,omitempty"`
	// Images are given to codex with Text.
	Images []ImageInput `msgpack:"images,omitempty"`
	// AdditionalContext is ambient context given beside Text.
	AdditionalContext []ContextEntry `msgpack:"additional_context,omitempty"`
	// Sandbox is the round's sandbox mode (Sandbox*), within the bound the
	// operator sets; empty means the daemon's default.
	Sandbox string `msgpack:"sandbox,omitempty"`
	// ApprovalPolicy is the round's approval policy (Approval*), among those
	// the operator allows; empty means the daemon's default.
	ApprovalPolicy string `msgpack:"approval_policy,omitempty"`
	// StreamCommandOutput asks for KindCommandOutput events.
	StreamCommandOutput bool `msgpack:"stream_command_output,omitempty"`

	// Traceparent and Tracestate are the caller's W3C trace context (as
	// the HTTP headers of those names carry it; messages/trace.go): the
	// daemon's spans of the round are its children. Optional; a malformed
	// one is ignored (TraceContext), one over its bound refused.
	Traceparent string `msgpack:"traceparent,omitempty"`
	Tracestate  string `msgpack:"tracestate,omitempty"`
}

// Roles of a [Turn].
const (
	RoleUser      = "user"
	RoleAssistant = "assistant"
)

// Turn is one earlier message of a thread, part of [StartRound.History].
type Turn struct {
	// Role is RoleUser or RoleAssistant.
	Role string `msgpack:"role,omitempty"`
	Text string `msgpack:"text,omitempty"`
}

// EventKind says what a [RoundEvent] carries. Receivers must ignore kinds
// they do not know: new kinds may be added without a new wire name.
type EventKind string

// Kinds of [RoundEvent].
const (
	KindText       EventKind = "text"        // Text is a delta of the answer.
	KindReasoning  EventKind = "reasoning"   // Text is a delta of the reasoning summary.
	KindToolCall   EventKind = "tool_call"   // Tool describes a call codex started.
	KindToolResult EventKind = "tool_result" // Result describes how a call ended.
	KindUsage      EventKind = "usage"       // Usage holds token counts.
	KindNotice     EventKind = "notice"      // Text is an informational notice.
	KindError      EventKind = "error"       // Text is a non-fatal error; the verdict is in RoundFinished.
	KindQuestion   EventKind = "question"    // Text is a question codex asks the user.
	KindRetry      EventKind = "retry"       // Text is an upstream error codex retries ("Reconnecting... 2/5: …"); the round goes on.
	// KindStatus: Text says what the daemon does before the turn runs;
	// "starting codex" while the user's app-server starts (seconds on a
	// first round), so that a caller can say so instead of showing nothing.
	KindStatus EventKind = "status"
	// KindRaw: Raw is a notification of the round's thread that no other
	// event carries, as codex sent it (StartRound.RawEvents).
	KindRaw EventKind = "raw"
)

// MaxRawParams bounds a KindRaw event's params; longer ones are cut and
// marked.
const MaxRawParams = 64 << 10

// RawNote is a notification as codex sent it.
type RawNote struct {
	Method string `msgpack:"method,omitempty"`
	// Params is its params, JSON text; Cut says they were longer than
	// MaxRawParams and are not whole (not valid JSON then).
	Params string `msgpack:"params,omitempty"`
	Cut    bool   `msgpack:"cut,omitempty"`
}

// StatusStartingCodex is the Text of the KindStatus event a round sends
// while its user's codex app-server starts.
const StatusStartingCodex = "starting codex"

// RoundEvent is one step of a running round, sent to the ReplyTo of its
// [StartRound] between the start and the [RoundFinished].
type RoundEvent struct {
	RoundID string `msgpack:"round_id,omitempty"`
	// Seq numbers the events of a round 1, 2, 3, … so that the receiver can
	// check order and loss.
	Seq  uint64    `msgpack:"seq,omitempty"`
	Kind EventKind `msgpack:"kind,omitempty"`
	// Text is the delta, notice, error or question, depending on Kind.
	Text string `msgpack:"text,omitempty"`
	// ItemID is codex's id of the item the event belongs to.
	ItemID string      `msgpack:"item_id,omitempty"`
	Tool   *ToolCall   `msgpack:"tool,omitempty"`
	Result *ToolResult `msgpack:"result,omitempty"`
	Usage  *Usage      `msgpack:"usage,omitempty"`
	// Request is the payload of KindRequest and KindRequestClosed.
	Request *ServerRequest `msgpack:"request,omitempty"`

	// The wider surface (messages/surface.go).

	// AgentThread is the codex thread of the subagent the event comes
	// from; empty for the round's own thread.
	AgentThread string        `msgpack:"agent_thread,omitempty"`
	Subagent    *Subagent     `msgpack:"subagent,omitempty"`
	Reroute     *ModelReroute `msgpack:"reroute,omitempty"`
	// ErrorInfo classifies a KindError or KindRetry event.
	ErrorInfo *ErrorInfo `msgpack:"error_info,omitempty"`
	// Raw is the payload of a KindRaw event.
	Raw *RawNote `msgpack:"raw,omitempty"`
}

// ToolCall describes a tool call (a command, a patch, an MCP tool) codex
// started; it is the payload of a KindToolCall [RoundEvent].
type ToolCall struct {
	CallID string `msgpack:"call_id,omitempty"`
	Name   string `msgpack:"name,omitempty"`
	// Args is the call's arguments as JSON text.
	Args string `msgpack:"args,omitempty"`
	// Cwd is the working directory of a command.
	Cwd string `msgpack:"cwd,omitempty"`
	// Paths lists the files a patch changes.
	Paths []FileChange `msgpack:"paths,omitempty"`
}

// FileChange is one file of a patch.
type FileChange struct {
	Path string `msgpack:"path,omitempty"`
	// Kind is codex's change kind: "add", "delete" or "update".
	Kind string `msgpack:"kind,omitempty"`
	// Diff is the change as a unified diff hunk (possibly truncated); for
	// an added file, its content.
	Diff string `msgpack:"diff,omitempty"`
	// MovePath is where an update moves the file, if it does.
	MovePath string `msgpack:"move_path,omitempty"`
}

// ToolResult describes how a tool call ended; it is the payload of a
// KindToolResult [RoundEvent].
type ToolResult struct {
	CallID string `msgpack:"call_id,omitempty"`
	Name   string `msgpack:"name,omitempty"`
	// Output is the call's (possibly truncated) output.
	Output string `msgpack:"output,omitempty"`
	// ExitCode is a command's exit code, nil if there is none.
	ExitCode *int `msgpack:"exit_code,omitempty"`
	// Failed reports that the call failed; Fault says why.
	Failed bool   `msgpack:"failed,omitempty"`
	Fault  string `msgpack:"fault,omitempty"`
	// Structured is an MCP tool's structuredContent, as JSON text.
	Structured string `msgpack:"structured,omitempty"`
}

// Usage holds the token counts codex reported; it is the payload of a
// KindUsage [RoundEvent].
type Usage struct {
	InputTokens           int64 `msgpack:"input_tokens,omitempty"`
	CachedInputTokens     int64 `msgpack:"cached_input_tokens,omitempty"`
	OutputTokens          int64 `msgpack:"output_tokens,omitempty"`
	ReasoningOutputTokens int64 `msgpack:"reasoning_output_tokens,omitempty"`
	TotalTokens           int64 `msgpack:"total_tokens,omitempty"`
}

// VerdictStatus is how a round ended. Receivers should treat a status they
// do not know as StatusFailed.
type VerdictStatus string

// Statuses of [RoundFinished].
const (
	StatusCompleted   VerdictStatus = "completed"   // codex finished the turn.
	StatusFailed      VerdictStatus = "failed"      // codex or the daemon failed; see Error.
	StatusInterrupted VerdictStatus = "interrupted" // an InterruptRound stopped the turn.
	StatusBusy        VerdictStatus = "busy"        // another round runs on the thread.
	StatusUnavailable VerdictStatus = "unavailable" // the user's codex cannot run now (not logged in, not started, overloaded).
	StatusRejected    VerdictStatus = "rejected"    // the StartRound failed validation, or was refused (ErrorInfo says why: budget).
)

// RoundFinished is the verdict on a round: exactly one is sent for every
// [StartRound], after its last [RoundEvent].
type RoundFinished struct {
	RoundID string        `msgpack:"round_id,omitempty"`
	Thread  string        `msgpack:"thread,omitempty"`
	Status  VerdictStatus `msgpack:"status,omitempty"`
	// Error says why a round did not complete.
	Error string `msgpack:"error,omitempty"`
	// CodexErrorInfo is the app-server's codexErrorInfo, as raw JSON text.
	CodexErrorInfo string `msgpack:"codex_error_info,omitempty"`
	// CodexThreadID is the codex thread that ran the round.
	CodexThreadID string `msgpack:"codex_thread_id,omitempty"`
	// Resumed reports that an existing codex thread was resumed.
	Resumed bool `msgpack:"resumed,omitempty"`
	// FellBack reports that the codex thread could not be resumed and a
	// fresh one was seeded with a transcript of StartRound.History.
	FellBack bool `msgpack:"fell_back,omitempty"`
	// NotSaved names what the daemon could not write for this round (its
	// thread record, its journal entry), with the error; the write is
	// retried on the thread's next round. Until it succeeds a restarted
	// daemon would not know the round.
	NotSaved string `msgpack:"not_saved,omitempty"`
	// ContextLost reports that the round ran on a fresh codex thread
	// without the mesh thread's earlier turns: its record or journal was
	// damaged or unreadable, or the resume was refused, and no transcript
	// (journal or StartRound.History) was there to seed the thread with.
	ContextLost bool `msgpack:"context_lost,omitempty"`
	// Retryable reports that the round did not run to its end for a
	// reason that sending the same StartRound again may not meet: in a
	// cluster, the member that owned the user died or was fenced while a
	// forwarding member relayed the round. The codex thread resumes on the
	// next round, wherever it runs. Only set with StatusFailed or
	// StatusUnavailable.
	Retryable bool `msgpack:"retryable,omitempty"`

	// The wider surface (messages/surface.go).

	// Model is the model that ran the turn, after any reroute.
	Model string `msgpack:"model,omitempty"`
	// StructuredOutput is the final answer of a round with an OutputSchema,
	// as JSON text.
	StructuredOutput string `msgpack:"structured_output,omitempty"`
	// ErrorInfo classifies the failure; CodexErrorInfo stays the raw form.
	ErrorInfo *ErrorInfo `msgpack:"error_info,omitempty"`
}

// InterruptRound asks the daemon to interrupt the running round of User on
// Thread. If RoundID is set, only that round is interrupted. The reply is a
// [RoundControlled]; the round itself then ends with a [RoundFinished].
type InterruptRound struct {
	User    string `msgpack:"user,omitempty"`
	Thread  string `msgpack:"thread,omitempty"`
	RoundID string `msgpack:"round_id,omitempty"`
}

// SteerRound adds Text to the running round of User on Thread, without
// waiting for it to finish. If RoundID is set, only that round is steered.
// The reply is a [RoundControlled].
type SteerRound struct {
	User            string `msgpack:"user,omitempty"`
	Thread          string `msgpack:"thread,omitempty"`
	RoundID         string `msgpack:"round_id,omitempty"`
	Text            string `msgpack:"text,omitempty"`
	ClientMessageID string `msgpack:"client_message_id,omitempty"`
}

// RoundControlled answers an [InterruptRound] or a [SteerRound]: OK if the
// round was found and codex accepted the request, otherwise Error says why.
type RoundControlled struct {
	RoundID string `msgpack:"round_id,omitempty"`
	OK      bool   `msgpack:"ok,omitempty"`
	Error   string `msgpack:"error,omitempty"`
	// NotFound reports that the round named (an AnswerRequest's) is not
	// one the user's actor knows, rather than one that refused.
	NotFound bool `msgpack:"not_found,omitempty"`
}

// WarmUp asks the daemon to start User's codex app-server ahead of a round
// and, given Thread (a mesh thread that ran before on this node), to load
// its codex thread with the settings of the next round
// (DeveloperInstructions, MCPURL, MCPToken, as that round will send them),
// so that the round runs warm: no start, no resume. The reply is one
// [WarmedUp], so it may be used with Engine.Request.
type WarmUp struct {
	User                  string `msgpack:"user,omitempty"`
	Thread                string `msgpack:"thread,omitempty"`
	DeveloperInstructions string `msgpack:"developer_instructions,omitempty"`
	MCPURL                string `msgpack:"mcp_url,omitempty"`
	// MCPToken is the bearer token for MCPURL. Secret.
	MCPToken string `msgpack:"mcp_token,omitempty"`
}

// WarmedUp answers a [WarmUp]: Error says why the app-server or the thread
// could not be made ready (empty when it is).
type WarmedUp struct {
	User  string `msgpack:"user,omitempty"`
	Error string `msgpack:"error,omitempty"`
}
