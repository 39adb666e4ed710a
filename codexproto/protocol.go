package codexproto

import "encoding/json"

// Methods the daemon calls.
const (
	MethodInitialize       = "initialize"
	MethodInitialized      = "initialized" // a notification from the client
	MethodThreadStart      = "thread/start"
	MethodThreadResume     = "thread/resume"
	MethodThreadNameSet    = "thread/name/set"
	MethodThreadRead       = "thread/read"
	MethodThreadUnsub      = "thread/unsubscribe"
	MethodThreadLoadedList = "thread/loaded/list"
	MethodTurnStart        = "turn/start"
	MethodTurnInterrupt    = "turn/interrupt"
	MethodTurnSteer        = "turn/steer"
	MethodModelList        = "model/list"
	MethodAccountRead      = "account/read"
	MethodRateLimitsRead   = "account/rateLimits/read"
	MethodLoginStart       = "account/login/start"
	MethodLoginCancel      = "account/login/cancel"
	MethodLogout           = "account/logout"
	MethodCommandExec      = "command/exec"
	// Passed to authorized callers as they are (messages.CodexRequest).
	MethodMCPStatusList          = "mcpServerStatus/list"
	MethodMCPReload              = "config/mcpServer/reload"
	MethodConfigRead             = "config/read"
	MethodConfigRequirementsRead = "configRequirements/read"
)

// Notifications the daemon reads. Anything else is ignored.
const (
	NoteAgentMessageDelta   = "item/agentMessage/delta"
	NoteReasoningSummary    = "item/reasoning/summaryTextDelta"
	NoteReasoningText       = "item/reasoning/textDelta"
	NoteItemStarted         = "item/started"
	NoteItemCompleted       = "item/completed"
	NoteTokenUsage          = "thread/tokenUsage/updated"
	NoteError               = "error"
	NoteTurnStarted         = "turn/started"
	NoteTurnCompleted       = "turn/completed"
	NoteModelRerouted       = "model/rerouted"
	NoteMCPStartupStatus    = "mcpServer/startupStatus/updated"
	NoteLoginCompleted      = "account/login/completed"
	NoteAccountUpdated      = "account/updated"
	NoteServerRequestSolved = "serverRequest/resolved"
)

// Server-initiated requests the daemon answers.
const (
	ReqCommandApproval    = "item/commandExecution/requestApproval"
	ReqFileChangeApproval = "item/fileChange/requestApproval"
	ReqUserInput          = "item/tool/requestUserInput"
	ReqElicitation        = "mcpServer/elicitation/request"
	ReqPermissions        = "item/permissions/requestApproval"
	ReqToolCall           = "item/tool/call"
)

// ClientInfo names the client in initialize; its Name becomes the originator
// in the answer's userAgent.
type ClientInfo struct {
	Name    string `json:"name"`
	Title   string `json:"title,omitempty"`
	Version string `json:"version"`
}

// InitializeParams opens a session.
type InitializeParams struct {
	ClientInfo   ClientInfo   `json:"clientInfo"`
	Capabilities Capabilities `json:"capabilities"`
}

// Capabilities are the client's opt-ins.
type Capabilities struct {
	ExperimentalAPI bool `json:"experimentalApi"`
}

// InitializeResult is the answer to initialize.
type InitializeResult struct {
	UserAgent      string `json:"userAgent"`
	CodexHome      string `json:"codexHome"`
	PlatformFamily string `json:"platformFamily"`
	PlatformOS     string `json:"platformOs"`
}

// Sandbox modes and approval policies the daemon uses.
const (
	SandboxReadOnly         = "read-only"
	SandboxWorkspaceWrite   = "workspace-write"
	SandboxDangerFullAccess = "danger-full-access"
	ApprovalNever           = "never"
	ApprovalOnRequest       = "on-request"
	ApprovalUntrusted       = "untrusted"
)

// ThreadStartParams starts a thread. Config is a config.toml overlay as
// JSON, snake_case keys (the CLI ignores anything else).
type ThreadStartParams struct {
	Cwd                   string         `json:"cwd"`
	Sandbox               string         `json:"sandbox,omitempty"`
	ApprovalPolicy        string         `json:"approvalPolicy,omitempty"`
	DeveloperInstructions string         `json:"developerInstructions,omitempty"`
	Model                 string         `json:"model,omitempty"`
	Config                map[string]any `json:"config,omitempty"`
	// DynamicTools are tools the thread's model is offered whose calls
	// the CLI hands to its client (item/tool/call); given at the thread's
	// start only.
	DynamicTools []DynamicToolSpec `json:"dynamicTools,omitempty"`
}

// DynamicToolSpec is a function tool of the client's.
type DynamicToolSpec struct {
	Type        string          `json:"type"` // "function"
	Name        string          `json:"name"`
	Description string          `json:"description"`
	InputSchema json.RawMessage `json:"inputSchema"`
}

// DynamicToolCallParams are item/tool/call's: the model called a dynamic
// tool.
type DynamicToolCallParams struct {
	ThreadID  string          `json:"threadId"`
	TurnID    string          `json:"turnId"`
	CallID    string          `json:"callId"`
	Tool      string          `json:"tool"`
	Namespace *string         `json:"namespace"`
	Arguments json.RawMessage `json:"arguments"`
}

// DynamicToolCallAnswer answers item/tool/call.
type DynamicToolCallAnswer struct {
	ContentItems []DynamicToolContent `json:"contentItems"`
	Success      bool                 `json:"success"`
}

// DynamicToolContent is one item of a dynamic tool's output.
type DynamicToolContent struct {
	Type string `json:"type"` // "inputText"
	Text string `json:"text"`
}

// ThreadResumeParams resumes a thread from its rollout.
type ThreadResumeParams struct {
	ThreadID              string         `json:"threadId"`
	Cwd                   string         `json:"cwd,omitempty"`
	Sandbox               string         `json:"sandbox,omitempty"`
	ApprovalPolicy        string         `json:"approvalPolicy,omitempty"`
	DeveloperInstructions string         `json:"developerInstructions,omitempty"`
	Model                 string         `json:"model,omitempty"`
	Config                map[string]any `json:"config,omitempty"`
	ExcludeTurns          bool           `json:"excludeTurns,omitempty"`
}

// Thread is the part of a thread the daemon reads.
type Thread struct {
	ID   string  `json:"id"`
	Path *string `json:"path"`
	Name *string `json:"name"`
	Cwd  string  `json:"cwd"`
}

// ThreadResult answers thread/start, thread/resume and thread/read.
type ThreadResult struct {
	Thread Thread `json:"thread"`
	Model  string `json:"model"`
}

// ThreadNameSetParams names a thread (cosmetic).
type ThreadNameSetParams struct {
	ThreadID string `json:"threadId"`
	Name     string `json:"name"`
}

// ThreadReadParams reads a thread without resuming it.
type ThreadReadParams struct {
	ThreadID     string `json:"threadId"`
	IncludeTurns bool   `json:"includeTurns,omitempty"`
}

// UserInput is one input item of a turn; the daemon sends text only.
type UserInput struct {
	Type string `json:"type"`
	Text string `json:"text"`
}

// TextInput is a text input item.
func TextInput(text string) []UserInput { return []UserInput{{Type: "text", Text: text}} }

// TurnStartParams starts a turn.
type TurnStartParams struct {
	ThreadID            string      `json:"threadId"`
	Input               []UserInput `json:"input"`
	Summary             string      `json:"summary,omitempty"`
	Model               string      `json:"model,omitempty"`
	Effort              string      `json:"effort,omitempty"`
	ClientUserMessageID string      `json:"clientUserMessageId,omitempty"`
}

// Turn is the part of a turn the daemon reads.
type Turn struct {
	ID     string     `json:"id"`
	Status string     `json:"status"` // inProgress | completed | failed | interrupted
	Error  *TurnError `json:"error"`
}

// Turn statuses.
const (
	TurnInProgress  = "inProgress"
	TurnCompleted   = "completed"
	TurnFailed      = "failed"
	TurnInterrupted = "interrupted"
)

// TurnError is a turn's failure: the message and the typed codexErrorInfo,
// kept raw (a string like "internalServerError" or an object).
type TurnError struct {
	Message           string          `json:"message"`
	CodexErrorInfo    json.RawMessage `json:"codexErrorInfo,omitempty"`
	AdditionalDetails *string         `json:"additionalDetails,omitempty"`
}

// TurnResult answers turn/start.
type TurnResult struct {
	Turn Turn `json:"turn"`
}

// TurnInterruptParams interrupts a running turn.
type TurnInterruptParams struct {
	ThreadID string `json:"threadId"`
	TurnID   string `json:"turnId"`
}

// TurnSteerParams appends input to the running turn.
type TurnSteerParams struct {
	ThreadID            string      `json:"threadId"`
	ExpectedTurnID      string      `json:"expectedTurnId"`
	Input               []UserInput `json:"input"`
	ClientUserMessageID string      `json:"clientUserMessageId,omitempty"`
}

// TurnSteerResult answers turn/steer.
type TurnSteerResult struct {
	TurnID string `json:"turnId"`
}

// ModelListParams are model/list's: a page from Cursor (nil: the first),
// of Limit models (0: the server's choice), with the hidden models when
// IncludeHidden.
type ModelListParams struct {
	Cursor        *string `json:"cursor,omitempty"`
	Limit         uint32  `json:"limit,omitempty"`
	IncludeHidden bool    `json:"includeHidden,omitempty"`
}

// ModelListResult answers model/list.
type ModelListResult struct {
	Data       []ModelInfo `json:"data"`
	NextCursor *string     `json:"nextCursor"`
}

// ModelInfo is one model of model/list.
type ModelInfo struct {
	ID                        string            `json:"id"`
	Model                     string            `json:"model"`
	DisplayName               string            `json:"displayName"`
	Description               string            `json:"description"`
	Hidden                    bool              `json:"hidden"`
	SupportedReasoningEfforts []ReasoningEffort `json:"supportedReasoningEfforts"`
	DefaultReasoningEffort    string            `json:"defaultReasoningEffort"`
	// InputModalities are "text", "image", "audio" (absent: text and
	// image, the schema's default).
	InputModalities []string `json:"inputModalities"`
	IsDefault       bool     `json:"isDefault"`
}

// ReasoningEffort is one supported effort of a model.
type ReasoningEffort struct {
	ReasoningEffort string `json:"reasoningEffort"`
	Description     string `json:"description"`
}

// RateLimitsResult answers account/rateLimits/read: RateLimits, the
// historical single bucket, and ByLimitID, every bucket by its limit id
// (null from servers that send only the one).
type RateLimitsResult struct {
	RateLimits RateLimitSnapshot            `json:"rateLimits"`
	ByLimitID  map[string]RateLimitSnapshot `json:"rateLimitsByLimitId"`
}

// RateLimitSnapshot is one bucket of an account's rate limits.
type RateLimitSnapshot struct {
	LimitID              *string          `json:"limitId"`
	LimitName            *string          `json:"limitName"`
	PlanType             *string          `json:"planType"`
	Primary              *RateLimitWindow `json:"primary"`
	Secondary            *RateLimitWindow `json:"secondary"`
	Credits              *CreditsSnapshot `json:"credits"`
	RateLimitReachedType *string          `json:"rateLimitReachedType"`
}

// RateLimitWindow is a rate-limit window: how much of it is used, how
// long it is, when it resets (Unix seconds).
type RateLimitWindow struct {
	UsedPercent        int32  `json:"usedPercent"`
	WindowDurationMins *int64 `json:"windowDurationMins"`
	ResetsAt           *int64 `json:"resetsAt"`
}

// CreditsSnapshot is an account's credits.
type CreditsSnapshot struct {
	HasCredits bool    `json:"hasCredits"`
	Unlimited  bool    `json:"unlimited"`
	Balance    *string `json:"balance"`
}

// AccountReadResult answers account/read.
type AccountReadResult struct {
	Account            *Account `json:"account"`
	RequiresOpenAIAuth bool     `json:"requiresOpenaiAuth"`
}

// Account is the logged-in account, if any.
type Account struct {
	Type     string `json:"type"` // apiKey | chatgpt
	Email    string `json:"email,omitempty"`
	PlanType string `json:"planType,omitempty"`
}

// Login types for account/login/start.
const (
	LoginAPIKey     = "apiKey"
	LoginDeviceCode = "chatgptDeviceCode"
)

// LoginStartParams starts a login.
type LoginStartParams struct {
	Type   string `json:"type"`
	APIKey string `json:"apiKey,omitempty"`
}

// LoginStartResult answers account/login/start.
type LoginStartResult struct {
	Type            string `json:"type"`
	LoginID         string `json:"loginId,omitempty"`
	VerificationURL string `json:"verificationUrl,omitempty"`
	UserCode        string `json:"userCode,omitempty"`
}

// LoginCancelParams cancels a pending login.
type LoginCancelParams struct {
	LoginID string `json:"loginId"`
}

// LoginCancelResult answers account/login/cancel: "canceled" or "notFound".
type LoginCancelResult struct {
	Status string `json:"status"`
}

// LoginCompleted is the account/login/completed notification.
type LoginCompleted struct {
	LoginID *string `json:"loginId"`
	Success bool    `json:"success"`
	Error   *string `json:"error"`
}

// --- notifications of a turn ---

// Delta is item/agentMessage/delta and the reasoning deltas.
type Delta struct {
	ThreadID string `json:"threadId"`
	TurnID   string `json:"turnId"`
	ItemID   string `json:"itemId"`
	Delta    string `json:"delta"`
}

// ItemNotification is item/started and item/completed.
type ItemNotification struct {
	ThreadID string `json:"threadId"`
	TurnID   string `json:"turnId"`
	Item     Item   `json:"item"`
}

// Item is the flat union of thread items, decoded defensively: only the
// fields the daemon maps, every one optional.
type Item struct {
	Type string `json:"type"`
	ID   string `json:"id"`
	// agentMessage
	Text string `json:"text"`
	// reasoning
	Summary []string `json:"summary"`
	Content any      `json:"content"` // []string for reasoning, objects for userMessage
	// commandExecution
	Command          string  `json:"command"`
	Cwd              string  `json:"cwd"`
	Status           string  `json:"status"`
	AggregatedOutput *string `json:"aggregatedOutput"`
	ExitCode         *int    `json:"exitCode"`
	// mcpToolCall and dynamicToolCall
	Server       string          `json:"server"`
	Tool         string          `json:"tool"`
	Namespace    *string         `json:"namespace"`
	Arguments    json.RawMessage `json:"arguments"`
	Result       *MCPResult      `json:"result"`
	Error        *MCPError       `json:"error"`
	ContentItems []ContentItem   `json:"contentItems"`
	Success      *bool           `json:"success"`
	// fileChange
	Changes []FileChange `json:"changes"`
	// webSearch
	Query string `json:"query"`
}

// Item types.
const (
	ItemUserMessage      = "userMessage"
	ItemAgentMessage     = "agentMessage"
	ItemReasoning        = "reasoning"
	ItemCommandExecution = "commandExecution"
	ItemMCPToolCall      = "mcpToolCall"
	ItemDynamicToolCall  = "dynamicToolCall"
	ItemFileChange       = "fileChange"
	ItemWebSearch        = "webSearch"
)

// ReasoningContent returns a reasoning item's raw content strings.
func (it *Item) ReasoningContent() []string {
	xs, ok := it.Content.([]any)
	if !ok {
		return nil
	}
	var out []string
	for _, x := range xs {
		if s, ok := x.(string); ok {
			out = append(out, s)
		}
	}
	return out
}

// MCPResult is an MCP tool call's result.
type MCPResult struct {
	Content           []ContentItem   `json:"content"`
	StructuredContent json.RawMessage `json:"structuredContent,omitempty"`
}

// MCPError is an MCP tool call's failure.
type MCPError struct {
	Message string `json:"message"`
}

// ContentItem is one content part of a tool result.
type ContentItem struct {
	Type string `json:"type"`
	Text string `json:"text"`
}

// FileChange is one file of a fileChange item.
type FileChange struct {
	Path string `json:"path"`
	Kind struct {
		Type string `json:"type"` // add | delete | update
	} `json:"kind"`
}

// TokenUsageNotification is thread/tokenUsage/updated.
type TokenUsageNotification struct {
	ThreadID   string `json:"threadId"`
	TurnID     string `json:"turnId"`
	TokenUsage struct {
		Total TokenUsage `json:"total"`
		Last  TokenUsage `json:"last"`
	} `json:"tokenUsage"`
}

// TokenUsage is the usage of one model request or of the thread.
type TokenUsage struct {
	TotalTokens           int64 `json:"totalTokens"`
	InputTokens           int64 `json:"inputTokens"`
	CachedInputTokens     int64 `json:"cachedInputTokens"`
	OutputTokens          int64 `json:"outputTokens"`
	ReasoningOutputTokens int64 `json:"reasoningOutputTokens"`
}

// ErrorNotification is the error notification.
type ErrorNotification struct {
	ThreadID  string    `json:"threadId"`
	TurnID    string    `json:"turnId"`
	WillRetry bool      `json:"willRetry"`
	Error     TurnError `json:"error"`
}

// TurnNotification is turn/started and turn/completed.
type TurnNotification struct {
	ThreadID string `json:"threadId"`
	Turn     Turn   `json:"turn"`
}

// ModelRerouted is model/rerouted.
type ModelRerouted struct {
	ThreadID  string `json:"threadId"`
	TurnID    string `json:"turnId"`
	FromModel string `json:"fromModel"`
	ToModel   string `json:"toModel"`
	Reason    any    `json:"reason"`
}

// MCPStartupStatus is mcpServer/startupStatus/updated.
type MCPStartupStatus struct {
	ThreadID string  `json:"threadId"`
	Name     string  `json:"name"`
	Status   string  `json:"status"` // starting | ready | failed | …
	Error    *string `json:"error"`
}

// --- server requests and their answers ---

// ApprovalParams are the parts of an approval request the daemon reads.
type ApprovalParams struct {
	ThreadID string  `json:"threadId"`
	TurnID   string  `json:"turnId"`
	ItemID   string  `json:"itemId"`
	Command  string  `json:"command"`
	Cwd      string  `json:"cwd"`
	Reason   *string `json:"reason"`
}

// PermissionsParams are item/permissions/requestApproval's: the tool
// request_permissions asks for more file-system or network access.
type PermissionsParams struct {
	ThreadID    string            `json:"threadId"`
	TurnID      string            `json:"turnId"`
	ItemID      string            `json:"itemId"`
	Cwd         string            `json:"cwd"`
	Reason      *string           `json:"reason"`
	Permissions PermissionProfile `json:"permissions"`
}

// PermissionProfile is permissions asked for, or granted.
type PermissionProfile struct {
	FileSystem *FileSystemPermissions `json:"fileSystem"`
	Network    *NetworkPermissions    `json:"network"`
}

// FileSystemPermissions are paths to read and to write.
type FileSystemPermissions struct {
	Read  []string `json:"read,omitempty"`
	Write []string `json:"write,omitempty"`
}

// NetworkPermissions is network access.
type NetworkPermissions struct {
	Enabled *bool `json:"enabled"`
}

// PermissionsAnswer answers item/permissions/requestApproval: what is
// granted (nothing: declined), for the turn or the session.
type PermissionsAnswer struct {
	Permissions PermissionProfile `json:"permissions"`
	Scope       string            `json:"scope"`
}

// Approval decisions.
const (
	DecisionAccept  = "accept"
	DecisionDecline = "decline"
)

// ApprovalAnswer answers an approval request.
type ApprovalAnswer struct {
	Decision string `json:"decision"`
}

// UserInputParams is item/tool/requestUserInput.
type UserInputParams struct {
	ThreadID  string          `json:"threadId"`
	TurnID    string          `json:"turnId"`
	ItemID    string          `json:"itemId"`
	Questions []UserQuestion  `json:"questions"`
	Extra     json.RawMessage `json:"-"`
}

// UserQuestion is one question asked of the user.
type UserQuestion struct {
	ID       string `json:"id"`
	Header   string `json:"header"`
	Question string `json:"question"`
	Options  []struct {
		Label       string `json:"label"`
		Description string `json:"description"`
	} `json:"options"`
}

// UserInputAnswer answers item/tool/requestUserInput.
type UserInputAnswer struct {
	Answers map[string]UserAnswer `json:"answers"`
}

// UserAnswer is the answer to one question.
type UserAnswer struct {
	Answers []string `json:"answers"`
}

// ElicitationParams is mcpServer/elicitation/request.
type ElicitationParams struct {
	ThreadID   string `json:"threadId"`
	TurnID     string `json:"turnId"`
	ServerName string `json:"serverName"`
	Message    string `json:"message"`
}

// ElicitationAnswer answers mcpServer/elicitation/request.
type ElicitationAnswer struct {
	Action  string          `json:"action"` // accept | decline | cancel
	Content json.RawMessage `json:"content,omitempty"`
}
