package codexproto

import (
	"encoding/json"
	"strings"
)

// This file holds the protocol shapes of the wider Codex surface (issue
// 15): richer turn inputs, subagent items, the turn diff, live command
// output, typed errors and the thread calls. It is kept apart from
// protocol.go so that the two move between packages independently. Shapes
// checked against `codex app-server generate-json-schema` of 0.169.0.

// Methods of the thread calls.
const (
	MethodThreadList         = "thread/list"
	MethodThreadArchive      = "thread/archive"
	MethodThreadFork         = "thread/fork"
	MethodThreadCompactStart = "thread/compact/start"
)

// Notifications of the wider surface.
const (
	// NoteTurnDiff is turn/diff/updated: the turn's aggregated unified diff,
	// re-sent whole (0.169.0 repeats it unchanged 2 or 3 times a turn).
	NoteTurnDiff = "turn/diff/updated"
	// NoteCommandOutputDelta is a chunk of a running command's output. Fast
	// commands send none; aggregatedOutput stays the complete output.
	NoteCommandOutputDelta = "item/commandExecution/outputDelta"
	// NoteThreadStarted announces a thread, a spawned subagent's included.
	NoteThreadStarted = "thread/started"
	// NoteRateLimitsUpdated carries the account's rate limits as they change.
	NoteRateLimitsUpdated = "account/rateLimits/updated"
)

// Item types of subagents.
const (
	// ItemCollabAgentToolCall is a collab tool call of a thread's agent:
	// spawnAgent, sendInput, wait, closeAgent, …
	ItemCollabAgentToolCall = "collabAgentToolCall"
	// ItemSubAgentActivity reports a subagent starting, being interacted
	// with, interrupted or completing.
	ItemSubAgentActivity = "subAgentActivity"
)

// ThreadHeader is the threadId every thread-scoped notification carries.
type ThreadHeader struct {
	ThreadID string `json:"threadId"`
	TurnID   string `json:"turnId"`
}

// SurfaceItemNotification is item/started or item/completed decoded for the
// fields Item leaves out: file diffs, subagent calls.
type SurfaceItemNotification struct {
	ThreadID string      `json:"threadId"`
	TurnID   string      `json:"turnId"`
	Item     SurfaceItem `json:"item"`
}

// SurfaceItem is the flat union of the item fields Item does not read,
// every one optional.
type SurfaceItem struct {
	Type string `json:"type"`
	ID   string `json:"id"`
	// fileChange
	Changes []FileChangeDiff `json:"changes"`
	// collabAgentToolCall
	Tool              string                      `json:"tool"`
	Status            string                      `json:"status"`
	SenderThreadID    string                      `json:"senderThreadId"`
	ReceiverThreadIDs []string                    `json:"receiverThreadIds"`
	Prompt            *string                     `json:"prompt"`
	Model             *string                     `json:"model"`
	AgentsStates      map[string]CollabAgentState `json:"agentsStates"`
	// subAgentActivity
	AgentPath     string `json:"agentPath"`
	AgentThreadID string `json:"agentThreadId"`
	Kind          string `json:"kind"` // started | interacted | interrupted | completed
}

// FileChangeDiff is one file of a fileChange item with its diff.
type FileChangeDiff struct {
	Path string `json:"path"`
	Kind struct {
		Type     string  `json:"type"` // add | delete | update
		MovePath *string `json:"move_path"`
	} `json:"kind"`
	Diff string `json:"diff"`
}

// CollabAgentState is a subagent's last known state in a collab call.
type CollabAgentState struct {
	Status  string  `json:"status"` // pendingInit | running | … | completed | errored | shutdown | notFound
	Message *string `json:"message"`
}

// TurnDiff is turn/diff/updated.
type TurnDiff struct {
	ThreadID string `json:"threadId"`
	TurnID   string `json:"turnId"`
	Diff     string `json:"diff"`
}

// ThreadStarted is thread/started.
type ThreadStarted struct {
	Thread struct {
		ID             string  `json:"id"`
		ParentThreadID *string `json:"parentThreadId"`
		Model          *string `json:"model"`
	} `json:"thread"`
}

// RateLimitsUpdated is account/rateLimits/updated.
type RateLimitsUpdated struct {
	RateLimits RateLimitSnapshot `json:"rateLimits"`
}

// --- turn/start inputs ---

// InputItem is one input item of a turn: text, a remote or data-URL image,
// or an image file the CLI reads.
type InputItem struct {
	Type string `json:"type"` // text | image | localImage
	Text string `json:"text,omitempty"`
	URL  string `json:"url,omitempty"`  // image: https: or data: URL
	Path string `json:"path,omitempty"` // localImage: absolute path
}

// Input item types.
const (
	InputText       = "text"
	InputImage      = "image"
	InputLocalImage = "localImage"
)

// Kinds of an additionalContext entry: "application" becomes a developer
// message <key>value</key>, "untrusted" a user message
// <external_key>value</external_key>.
const (
	ContextApplication = "application"
	ContextUntrusted   = "untrusted"
)

// AdditionalContextEntry is one value of turn/start's additionalContext
// map (experimental API, CLI 0.135.0 and later).
type AdditionalContextEntry struct {
	Kind  string `json:"kind"`
	Value string `json:"value"`
}

// SandboxPolicy is turn/start's sandboxPolicy (camelCase types, unlike
// thread/start's kebab-case sandbox mode).
type SandboxPolicy struct {
	Type          string `json:"type"` // readOnly | workspaceWrite | dangerFullAccess
	NetworkAccess bool   `json:"networkAccess,omitempty"`
}

// Sandbox policy types of turn/start.
const (
	PolicyReadOnly         = "readOnly"
	PolicyWorkspaceWrite   = "workspaceWrite"
	PolicyDangerFullAccess = "dangerFullAccess"
)

// PolicyOf is the sandboxPolicy of a sandbox mode (read-only,
// workspace-write, danger-full-access); nil for any other word.
func PolicyOf(mode string) *SandboxPolicy {
	switch mode {
	case SandboxReadOnly:
		return &SandboxPolicy{Type: PolicyReadOnly}
	case SandboxWorkspaceWrite:
		return &SandboxPolicy{Type: PolicyWorkspaceWrite}
	case SandboxDangerFullAccess:
		return &SandboxPolicy{Type: PolicyDangerFullAccess}
	}
	return nil
}

// CommandExecParams runs one command outside any thread (command/exec).
type CommandExecParams struct {
	Command       []string       `json:"command"`
	Cwd           string         `json:"cwd,omitempty"`
	SandboxPolicy *SandboxPolicy `json:"sandboxPolicy,omitempty"`
	TimeoutMs     int64          `json:"timeoutMs,omitempty"`
}

// CommandExecResult is a finished command/exec: its exit code and
// captured output.
type CommandExecResult struct {
	ExitCode int    `json:"exitCode"`
	Stdout   string `json:"stdout"`
	Stderr   string `json:"stderr"`
}

// TurnStartSurfaceParams is turn/start with the inputs of the wider
// surface. It embeds TurnStartParams; its Input replaces the text-only one
// (encoding/json takes the shallower field).
type TurnStartSurfaceParams struct {
	TurnStartParams
	Input             []InputItem                       `json:"input"`
	OutputSchema      json.RawMessage                   `json:"outputSchema,omitempty"`
	AdditionalContext map[string]AdditionalContextEntry `json:"additionalContext,omitempty"`
	SandboxPolicy     *SandboxPolicy                    `json:"sandboxPolicy,omitempty"`
	ApprovalPolicy    string                            `json:"approvalPolicy,omitempty"`
}

// --- thread calls ---

// ThreadListParams lists stored threads, newest first.
type ThreadListParams struct {
	Cursor   *string `json:"cursor,omitempty"`
	Limit    uint32  `json:"limit,omitempty"`
	Archived *bool   `json:"archived,omitempty"`
}

// ThreadListResult answers thread/list.
type ThreadListResult struct {
	Data       []ThreadSummary `json:"data"`
	NextCursor *string         `json:"nextCursor"`
}

// ThreadSummary is the part of a listed thread the daemon reads.
type ThreadSummary struct {
	ID        string  `json:"id"`
	Name      *string `json:"name"`
	Preview   string  `json:"preview"`
	CreatedAt int64   `json:"createdAt"`
	UpdatedAt int64   `json:"updatedAt"`
}

// ThreadIDParams is the params of the calls that take a thread id only:
// thread/archive and thread/compact/start.
type ThreadIDParams struct {
	ThreadID string `json:"threadId"`
}

// ThreadForkParams forks a thread into a new one.
type ThreadForkParams struct {
	ThreadID     string `json:"threadId"`
	ExcludeTurns bool   `json:"excludeTurns,omitempty"`
}

// NoteThreadSettings is thread/settings/updated: the thread's settings,
// the model among them, as a turn/start changed them.
const NoteThreadSettings = "thread/settings/updated"

// ThreadSettingsUpdated is thread/settings/updated.
type ThreadSettingsUpdated struct {
	ThreadID       string `json:"threadId"`
	ThreadSettings struct {
		Model string `json:"model"`
	} `json:"threadSettings"`
}

// ThreadReadResult is the part of thread/read's answer (includeTurns)
// the daemon reads: each turn's items, of which Messages keeps the user's
// and the agent's messages.
type ThreadReadResult struct {
	Thread struct {
		Turns []struct {
			Items []struct {
				Type    string `json:"type"`
				Text    string `json:"text"`
				Content []struct {
					Type string `json:"type"`
					Text string `json:"text"`
				} `json:"content"`
			} `json:"items"`
		} `json:"turns"`
	} `json:"thread"`
}

// ThreadMessage is a user or agent message of a thread/read answer.
type ThreadMessage struct {
	User bool // else the agent's
	Text string
}

// Messages are the user and agent messages of the answer, oldest first
// (a user message's text parts joined by newlines); other items (tools,
// reasoning, compaction) are left out.
func (r ThreadReadResult) Messages() []ThreadMessage {
	var out []ThreadMessage
	for _, t := range r.Thread.Turns {
		for _, it := range t.Items {
			switch it.Type {
			case ItemUserMessage:
				var parts []string
				for _, c := range it.Content {
					if c.Type == "text" && c.Text != "" {
						parts = append(parts, c.Text)
					}
				}
				if len(parts) > 0 {
					out = append(out, ThreadMessage{User: true, Text: strings.Join(parts, "\n")})
				}
			case ItemAgentMessage:
				if it.Text != "" {
					out = append(out, ThreadMessage{Text: it.Text})
				}
			}
		}
	}
	return out
}
