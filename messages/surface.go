package messages

import (
	"encoding/base64"
	"encoding/json"
	"fmt"
	"path"
	"strings"
)

// This file holds the wider Codex surface (issue 15): the richer inputs of
// a StartRound, the payloads of the newer RoundEvent kinds and verdict
// fields, and the thread messages. All are compatible additions to the
// v1 names, or new names.

// Kinds of [RoundEvent] of the wider surface. Receivers that do not know
// them skip them.
const (
	// KindSubagent: Subagent says a subagent (collab agent) started, was
	// used, or ended. Its own items arrive as ordinary events with
	// AgentThread set.
	KindSubagent EventKind = "subagent"
	// KindDiff: Text is the turn's aggregated unified diff so far, whole
	// (not a delta); a later diff event replaces an earlier one.
	KindDiff EventKind = "diff"
	// KindCommandOutput: Text is a delta of a running command's output,
	// ItemID the command's call id. Sent only to rounds that set
	// StartRound.StreamCommandOutput; the tool result still carries the
	// whole output.
	KindCommandOutput EventKind = "command_output"
	// KindModelRerouted: Reroute says codex moved the turn to another
	// model; Text says the same for a person.
	KindModelRerouted EventKind = "model_rerouted"
)

// Sandbox modes a round may ask for in StartRound.Sandbox.
const (
	SandboxReadOnly         = "read-only"
	SandboxWorkspaceWrite   = "workspace-write"
	SandboxDangerFullAccess = "danger-full-access"
)

// Approval policies a round may ask for in StartRound.ApprovalPolicy.
const (
	ApprovalNever     = "never"
	ApprovalOnRequest = "on-request"
	ApprovalUntrusted = "untrusted"
)

// Kinds of a [ContextEntry].
const (
	// ContextApplication: the value is the application's own context, given
	// to the model as a developer message <key>value</key>.
	ContextApplication = "application"
	// ContextUntrusted: the value comes from outside (a web page, another
	// user), given as a user message <external_key>value</external_key>.
	ContextUntrusted = "untrusted"
)

// Bounds of the wider surface, in bytes unless they say otherwise.
const (
	// MaxOutputSchemaLen bounds StartRound.OutputSchema.
	MaxOutputSchemaLen = 64 << 10
	// MaxImages bounds the number of StartRound.Images.
	MaxImages = 8
	// MaxImageLen bounds one image: the decoded bytes of a data URL, or
	// the size of a workspace file.
	MaxImageLen = 5 << 20
	// MaxImagesLen bounds the data URLs of a StartRound together, as sent.
	MaxImagesLen = 12 << 20
	// MaxPathLen bounds an image path.
	MaxPathLen = 1024
	// MaxContextEntries bounds the number of StartRound.AdditionalContext
	// entries.
	MaxContextEntries = 16
	// MaxContextKeyLen bounds a context key.
	MaxContextKeyLen = 64
	// MaxContextLen bounds the values of StartRound.AdditionalContext
	// together.
	MaxContextLen = 256 << 10
	// MaxThreadsListed bounds ListThreads.Limit.
	MaxThreadsListed = 500
)

// ImageInput is one image of a [StartRound]: a data URL, or a path inside
// the user's workspace; exactly one is set.
type ImageInput struct {
	// DataURL is "data:image/<png|jpeg|gif|webp>;base64,<data>".
	DataURL string `msgpack:"data_url,omitempty"`
	// Path is relative to the user's workspace and must stay inside it
	// (no "..", no symlink out).
	Path string `msgpack:"path,omitempty"`
}

// ContextEntry is one piece of ambient context of a [StartRound], given to
// codex beside the text: natively when its CLI supports additionalContext,
// else appended to the text as <key>value</key> (or
// <external_key>value</external_key> for untrusted entries).
type ContextEntry struct {
	// Key names the entry; it becomes an XML-like tag, so it is letters,
	// digits, '-' and '_' only. Unique within a StartRound.
	Key string `msgpack:"key,omitempty"`
	// Value is the context text.
	Value string `msgpack:"value,omitempty"`
	// Kind is ContextApplication (the default when empty) or
	// ContextUntrusted.
	Kind string `msgpack:"kind,omitempty"`
}

// Subagent is the payload of a KindSubagent [RoundEvent].
type Subagent struct {
	// Phase is "started", "activity" or "ended".
	Phase string `msgpack:"phase,omitempty"`
	// Thread is the subagent's codex thread id; its own events carry it as
	// RoundEvent.AgentThread.
	Thread string `msgpack:"thread,omitempty"`
	// Tool is the collab tool the parent called (spawnAgent, sendInput,
	// wait, closeAgent, …) or the activity kind (started, interacted,
	// interrupted, completed).
	Tool string `msgpack:"tool,omitempty"`
	// Status is the subagent's state as codex reports it (running,
	// completed, errored, …), if known.
	Status string `msgpack:"status,omitempty"`
	// Prompt is what the parent sent the subagent, if any.
	Prompt string `msgpack:"prompt,omitempty"`
	// Model is the subagent's model, if known.
	Model string `msgpack:"model,omitempty"`
	// Message is the subagent's last message, if any.
	Message string `msgpack:"message,omitempty"`
}

// Subagent phases.
const (
	SubagentStarted  = "started"
	SubagentActivity = "activity"
	SubagentEnded    = "ended"
)

// ModelReroute is the payload of a KindModelRerouted [RoundEvent].
type ModelReroute struct {
	From string `msgpack:"from,omitempty"`
	To   string `msgpack:"to,omitempty"`
	// Reason is codex's reason, e.g. "highRiskCyberActivity".
	Reason string `msgpack:"reason,omitempty"`
}

// ErrorClass sorts an upstream failure into what a caller can act on.
// Receivers treat a class they do not know as ErrorOther.
type ErrorClass string

// Error classes.
const (
	// ErrorUsageLimit: the account's usage limit or quota is reached;
	// ErrorInfo.ResetsAtUnix says when it resets, if known.
	ErrorUsageLimit ErrorClass = "usage_limit"
	// ErrorContextWindow: the thread no longer fits the model's context
	// window; compact it or start a new thread.
	ErrorContextWindow ErrorClass = "context_window"
	// ErrorUnauthorized: the upstream refused the credentials (401/403).
	ErrorUnauthorized ErrorClass = "unauthorized"
	// ErrorOverloaded: the upstream is overloaded or rate limited; retry
	// later.
	ErrorOverloaded ErrorClass = "overloaded"
	// ErrorResourceLimit: the user's agent met a limit of this node during
	// the round (ErrorInfo.Resource says which): a process of the round
	// was killed for memory, a fork was refused, or the home is full. On
	// a completed round it says what the turn worked around.
	ErrorResourceLimit ErrorClass = "resource_limit"
	// ErrorBudget: the user's token budget on this daemon is spent: a
	// round refused before it reached the model (status rejected), or a
	// turn interrupted once it crossed the budget (status interrupted).
	// ErrorInfo.Spent and Budget are the tokens, ResetsAtUnix when enough
	// of the spend has left the budget's window for the next round.
	ErrorBudget ErrorClass = "budget"
	// ErrorOther: anything else.
	ErrorOther ErrorClass = "other"
)

// ErrorInfo is the typed form of codex's codexErrorInfo, on KindError and
// KindRetry events and on the verdict; the raw JSON stays in
// RoundFinished.CodexErrorInfo.
type ErrorInfo struct {
	Class ErrorClass `msgpack:"class,omitempty"`
	// ResetsAtUnix is when a usage limit resets, Unix seconds; 0 if
	// unknown.
	ResetsAtUnix int64 `msgpack:"resets_at_unix,omitempty"`
	// HTTPStatus is the upstream HTTP status, if codex gave one.
	HTTPStatus int `msgpack:"http_status,omitempty"`
	// Code is codex's own name of the error ("usageLimitExceeded",
	// "httpConnectionFailed", …).
	Code string `msgpack:"code,omitempty"`
	// Resource is the limit met, with ErrorResourceLimit: "memory",
	// "pids" or "disk".
	Resource string `msgpack:"resource,omitempty"`
	// Spent and Budget are the user's tokens in the budget's window and
	// the budget, with ErrorBudget.
	Spent  int64 `msgpack:"spent,omitempty"`
	Budget int64 `msgpack:"budget,omitempty"`
}

// validateSurface checks the StartRound fields of the wider surface.
func validateSurface(c *checker, m StartRound) {
	if m.OutputSchema != "" {
		switch {
		case len(m.OutputSchema) > MaxOutputSchemaLen:
			c.failf("output_schema is %d bytes, max %d", len(m.OutputSchema), MaxOutputSchemaLen)
		case !isJSONObject(m.OutputSchema):
			c.failf("output_schema is not a JSON object")
		}
	}
	if n := len(m.Images); n > MaxImages {
		c.failf("images has %d images, max %d", n, MaxImages)
	}
	total := 0
	for i, im := range m.Images {
		total += len(im.DataURL)
		checkImage(c, fmt.Sprintf("images[%d]", i), im)
	}
	if total > MaxImagesLen {
		c.failf("images are %d bytes together, max %d", total, MaxImagesLen)
	}
	if n := len(m.AdditionalContext); n > MaxContextEntries {
		c.failf("additional_context has %d entries, max %d", n, MaxContextEntries)
	}
	seen := map[string]bool{}
	total = 0
	for i, e := range m.AdditionalContext {
		field := fmt.Sprintf("additional_context[%d]", i)
		switch {
		case e.Key == "":
			c.failf("%s.key is empty", field)
		case len(e.Key) > MaxContextKeyLen:
			c.failf("%s.key is %d bytes, max %d", field, len(e.Key), MaxContextKeyLen)
		case !isContextKey(e.Key):
			c.failf("%s.key has characters other than letters, digits, '-' and '_'", field)
		case seen[e.Key]:
			c.failf("%s.key repeats an earlier key", field)
		}
		seen[e.Key] = true
		if e.Kind != "" && e.Kind != ContextApplication && e.Kind != ContextUntrusted {
			c.failf("%s.kind is not %q or %q", field, ContextApplication, ContextUntrusted)
		}
		total += len(e.Value)
	}
	if total > MaxContextLen {
		c.failf("additional_context values are %d bytes together, max %d", total, MaxContextLen)
	}
	switch m.Sandbox {
	case "", SandboxReadOnly, SandboxWorkspaceWrite, SandboxDangerFullAccess:
	default:
		c.failf("sandbox is not %q, %q or %q", SandboxReadOnly, SandboxWorkspaceWrite, SandboxDangerFullAccess)
	}
	switch m.ApprovalPolicy {
	case "", ApprovalNever, ApprovalOnRequest, ApprovalUntrusted:
	default:
		c.failf("approval_policy is not %q, %q or %q", ApprovalNever, ApprovalOnRequest, ApprovalUntrusted)
	}
}

// imageTypes are the media types a data URL may carry.
var imageTypes = map[string]bool{"image/png": true, "image/jpeg": true, "image/gif": true, "image/webp": true}

func checkImage(c *checker, field string, im ImageInput) {
	switch {
	case (im.DataURL == "") == (im.Path == ""):
		c.failf("%s needs exactly one of data_url and path", field)
	case im.DataURL != "":
		_, err := DecodeDataURL(im.DataURL)
		if err != nil {
			c.failf("%s.data_url: %v", field, err)
		}
	default:
		switch {
		case len(im.Path) > MaxPathLen:
			c.failf("%s.path is %d bytes, max %d", field, len(im.Path), MaxPathLen)
		case !plain(im.Path):
			c.failf("%s.path has invalid UTF-8 or control characters", field)
		case strings.HasPrefix(im.Path, "/") || strings.Contains(im.Path, `\`):
			c.failf("%s.path is not relative to the workspace", field)
		case path.Clean(im.Path) == ".." || strings.HasPrefix(path.Clean(im.Path), "../"):
			c.failf("%s.path leaves the workspace", field)
		}
	}
}

// DecodeDataURL returns the bytes of an image data URL,
// "data:image/<png|jpeg|gif|webp>;base64,<data>", checking its media type
// and that it decodes to at most MaxImageLen bytes. Errors never quote the
// data.
func DecodeDataURL(u string) ([]byte, error) {
	rest, ok := strings.CutPrefix(u, "data:")
	if !ok {
		return nil, fmt.Errorf("not a data: URL")
	}
	meta, data, ok := strings.Cut(rest, ",")
	if !ok {
		return nil, fmt.Errorf("no ',' after the media type")
	}
	mediaType, ok := strings.CutSuffix(strings.ToLower(meta), ";base64")
	if !ok {
		return nil, fmt.Errorf("not base64")
	}
	if !imageTypes[mediaType] {
		return nil, fmt.Errorf("media type is not image/png, image/jpeg, image/gif or image/webp")
	}
	if n := base64.StdEncoding.DecodedLen(len(data)); n > MaxImageLen+2 {
		return nil, fmt.Errorf("image is about %d bytes, max %d", n, MaxImageLen)
	}
	b, err := base64.StdEncoding.DecodeString(data)
	if err != nil {
		return nil, fmt.Errorf("bad base64 at byte %d", base64Offset(err))
	}
	if len(b) > MaxImageLen {
		return nil, fmt.Errorf("image is %d bytes, max %d", len(b), MaxImageLen)
	}
	if len(b) == 0 {
		return nil, fmt.Errorf("image is empty")
	}
	return b, nil
}

func base64Offset(err error) int64 {
	if e, ok := err.(base64.CorruptInputError); ok {
		return int64(e)
	}
	return -1
}

func isJSONObject(s string) bool {
	var v map[string]json.RawMessage
	return json.Unmarshal([]byte(s), &v) == nil && v != nil
}

func isContextKey(k string) bool {
	for i := 0; i < len(k); i++ {
		c := k[i]
		if !('a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || c == '-' || c == '_') {
			return false
		}
	}
	return true
}

// surfaceSizes describes the wider-surface fields of a StartRound by size
// only, for String and LogValue: a context value or an image may be
// private. It is "" when none is set.
func surfaceSizes(m StartRound) string {
	if m.OutputSchema == "" && len(m.Images) == 0 && len(m.AdditionalContext) == 0 &&
		m.Sandbox == "" && m.ApprovalPolicy == "" && !m.StreamCommandOutput {
		return ""
	}
	images := 0
	for _, im := range m.Images {
		images += len(im.DataURL) + len(im.Path)
	}
	ctx := 0
	for _, e := range m.AdditionalContext {
		ctx += len(e.Value)
	}
	return fmt.Sprintf("OutputSchema:<%d bytes> Images:<%d, %d bytes> AdditionalContext:<%d entries, %d bytes> Sandbox:%q ApprovalPolicy:%q StreamCommandOutput:%t",
		len(m.OutputSchema), len(m.Images), images, len(m.AdditionalContext), ctx, m.Sandbox, m.ApprovalPolicy, m.StreamCommandOutput)
}
