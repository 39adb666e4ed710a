package messages

import "time"

// StartLogin asks the daemon to start a ChatGPT device-code login for
// User's codex. The daemon replies with a [LoginChallenge], then with a
// [LoginFinished] when the login completes, fails, expires or is canceled.
// If the login cannot even start, the [LoginFinished] (Success false) comes
// without a [LoginChallenge]. Because it gets two replies, send it from an actor; do not use it with
// Engine.Request.
type StartLogin struct {
	User string `msgpack:"user,omitempty"`
}

// LoginChallenge tells the user where to complete a login started by
// [StartLogin]: open VerificationURL and enter UserCode before the deadline.
type LoginChallenge struct {
	User            string `msgpack:"user,omitempty"`
	LoginID         string `msgpack:"login_id,omitempty"`
	VerificationURL string `msgpack:"verification_url,omitempty"`
	UserCode        string `msgpack:"user_code,omitempty"`
	// ExpiresAtUnixMilli is the deadline in Unix milliseconds; 0 if codex
	// did not say.
	ExpiresAtUnixMilli int64 `msgpack:"expires_at_unix_milli,omitempty"`
}

// ExpiresAt returns the deadline as a time, or the zero time if it is
// unknown.
func (c LoginChallenge) ExpiresAt() time.Time {
	if c.ExpiresAtUnixMilli == 0 {
		return time.Time{}
	}
	return time.UnixMilli(c.ExpiresAtUnixMilli)
}

// LoginFinished ends a login started by [StartLogin]: Success, or Error says
// why not.
type LoginFinished struct {
	User    string `msgpack:"user,omitempty"`
	LoginID string `msgpack:"login_id,omitempty"`
	Success bool   `msgpack:"success,omitempty"`
	Error   string `msgpack:"error,omitempty"`
}

// CancelLogin cancels User's pending login. It has no reply of its own: the
// pending login ends with a [LoginFinished] whose Success is false; without
// a pending login it does nothing.
type CancelLogin struct {
	User string `msgpack:"user,omitempty"`
}

// SetAPIKey logs User's codex in with an OpenAI API key. The reply is an
// [APIKeyStored], or a [Rejected] if the key was refused.
//
// APIKey is secret; String, GoString and LogValue redact it.
type SetAPIKey struct {
	User   string `msgpack:"user,omitempty"`
	APIKey string `msgpack:"api_key,omitempty"`
}

// APIKeyStored answers a [SetAPIKey] that succeeded.
type APIKeyStored struct {
	User string `msgpack:"user,omitempty"`
}

// Logout removes User's codex credentials. The reply is a [LoggedOut], or
// a [Rejected] if logging out failed.
type Logout struct {
	User string `msgpack:"user,omitempty"`
}

// LoggedOut answers a [Logout] that succeeded.
type LoggedOut struct {
	User string `msgpack:"user,omitempty"`
}

// AccountRequest asks for the account User's codex is logged in with. The
// reply is one [AccountResponse], so it may be used with Engine.Request.
type AccountRequest struct {
	User string `msgpack:"user,omitempty"`
}

// AccountResponse answers an [AccountRequest]. Type is codex's account type
// ("apiKey" or "chatgpt"), empty if not logged in ("apiKey" too when codex
// reports no account but the user has a stored API key); Email and PlanType are
// set for ChatGPT accounts. RequiresOpenAIAuth reports that codex needs an
// OpenAI login before it can run rounds. Error says why the account could
// not be read; the other fields are then empty.
type AccountResponse struct {
	User               string `msgpack:"user,omitempty"`
	Type               string `msgpack:"type,omitempty"`
	Email              string `msgpack:"email,omitempty"`
	PlanType           string `msgpack:"plan_type,omitempty"`
	RequiresOpenAIAuth bool   `msgpack:"requires_openai_auth,omitempty"`
	Error              string `msgpack:"error,omitempty"`
}

// ModelsRequest asks for the models User's codex offers (every page of
// them). The reply is one [ModelsResponse], so it may be used with
// Engine.Request. IncludeHidden adds the models codex hides from its
// picker (marked [Model].Hidden).
type ModelsRequest struct {
	User          string `msgpack:"user,omitempty"`
	IncludeHidden bool   `msgpack:"include_hidden,omitempty"`
}

// ModelsResponse answers a [ModelsRequest]. Error says why the models could
// not be listed; Models is then empty.
type ModelsResponse struct {
	User   string  `msgpack:"user,omitempty"`
	Models []Model `msgpack:"models,omitempty"`
	Error  string  `msgpack:"error,omitempty"`
}

// Model is one model of a [ModelsResponse].
type Model struct {
	ID          string `msgpack:"id,omitempty"`
	DisplayName string `msgpack:"display_name,omitempty"`
	Description string `msgpack:"description,omitempty"`
	// Efforts lists the reasoning efforts the model supports.
	Efforts       []string `msgpack:"efforts,omitempty"`
	DefaultEffort string   `msgpack:"default_effort,omitempty"`
	// IsDefault marks codex's default model.
	IsDefault bool `msgpack:"is_default,omitempty"`
	// InputModalities are the kinds of input the model takes: "text",
	// "image", "audio" (codex may add others).
	InputModalities []string `msgpack:"input_modalities,omitempty"`
	// Hidden marks a model codex hides from its picker; only listed with
	// [ModelsRequest].IncludeHidden.
	Hidden bool `msgpack:"hidden,omitempty"`
}

// RateLimitsRequest asks for the rate limits of User's codex account (a
// ChatGPT login's; codex has none to report for an API key). The reply is
// one [RateLimitsResponse], so it may be used with Engine.Request.
type RateLimitsRequest struct {
	User string `msgpack:"user,omitempty"`
}

// RateLimitsResponse answers a [RateLimitsRequest]: one entry per limit
// codex meters (such as "codex"). Error says why they could not be read
// (without a ChatGPT login: "codex account authentication required to read
// rate limits"); Limits is then empty.
type RateLimitsResponse struct {
	User   string      `msgpack:"user,omitempty"`
	Limits []RateLimit `msgpack:"limits,omitempty"`
	Error  string      `msgpack:"error,omitempty"`
}

// RateLimit is one metered limit of a [RateLimitsResponse].
type RateLimit struct {
	LimitID   string `msgpack:"limit_id,omitempty"`
	LimitName string `msgpack:"limit_name,omitempty"`
	PlanType  string `msgpack:"plan_type,omitempty"`
	// Primary and Secondary are the limit's windows (such as 5 hours and a
	// week), when codex reports them.
	Primary   *RateLimitWindow `msgpack:"primary,omitempty"`
	Secondary *RateLimitWindow `msgpack:"secondary,omitempty"`
	// ReachedType says which limit was reached ("rate_limit_reached",
	// "workspace_owner_credits_depleted", …); empty when none is.
	ReachedType string `msgpack:"reached_type,omitempty"`
	// Credits are the account's credits, when codex reports them.
	Credits *Credits `msgpack:"credits,omitempty"`
}

// RateLimitWindow is one window of a [RateLimit].
type RateLimitWindow struct {
	UsedPercent   int32 `msgpack:"used_percent,omitempty"`
	WindowMinutes int64 `msgpack:"window_minutes,omitempty"`
	// ResetsAtUnix is when the window resets, in Unix seconds; 0 if not
	// known.
	ResetsAtUnix int64 `msgpack:"resets_at_unix,omitempty"`
}

// Credits are an account's credits.
type Credits struct {
	HasCredits bool   `msgpack:"has_credits,omitempty"`
	Unlimited  bool   `msgpack:"unlimited,omitempty"`
	Balance    string `msgpack:"balance,omitempty"`
}

// Rejected is the error reply, sent to the sender, to a message that could
// not be decoded (unknown type, malformed body), failed validation, or,
// for the commands whose replies have no error field ([SetAPIKey],
// [Logout]), could not be carried out. A
// [StartRound] that fails validation is answered with a [RoundFinished]
// with StatusRejected instead. Build it with [NewRejected].
type Rejected struct {
	// Type is the wire name of the rejected message, such as
	// "start_login.v1", if known.
	Type string `msgpack:"type,omitempty"`
	// Reason says why, for a human.
	Reason string `msgpack:"reason,omitempty"`
	// Class says whose the refusal is, for a program: empty when the
	// message is at fault (it does not decode, validate or pass the
	// edge), [RefusalUnavailable] when the node cannot take it now (try
	// again later, or another member), [RefusalFailed] when the daemon
	// could not carry it out (a write that failed, codex said no).
	// Added as a compatible change: receivers treat an unknown class as
	// empty.
	Class RefusalClass `msgpack:"class,omitempty"`
}

// RefusalClass is a [Rejected]'s class.
type RefusalClass string

// Classes of a [Rejected].
const (
	// RefusalUnavailable: the node cannot take the message now (at its
	// cap of live users, its ownership of the user moved, it is stopping).
	RefusalUnavailable RefusalClass = "unavailable"
	// RefusalFailed: the daemon could not carry the message out.
	RefusalFailed RefusalClass = "failed"
)

// UsageRequest asks what User's app-server and everything it runs use of
// this node now, against the user's limits (package contain). It is an
// operator's question, authorized as control. The reply is a
// [UsageResponse]; use Engine.Request.
type UsageRequest struct {
	User string `msgpack:"user,omitempty"`
}

// UsageResponse answers a [UsageRequest]. Live says the user has a cgroup
// on this node now (an app-server ran since the user actor started); the
// figures are then the cgroup's, and each Max the limit (0: none). Disk is
// set where the user's home is on an image. Error says why nothing could
// be read.
type UsageResponse struct {
	User           string  `msgpack:"user,omitempty"`
	Live           bool    `msgpack:"live,omitempty"`
	MemoryBytes    int64   `msgpack:"memory_bytes,omitempty"`
	MemoryPeak     int64   `msgpack:"memory_peak_bytes,omitempty"`
	MemoryMaxBytes int64   `msgpack:"memory_max_bytes,omitempty"`
	Pids           int64   `msgpack:"pids,omitempty"`
	PidsMax        int64   `msgpack:"pids_max,omitempty"`
	CPUSeconds     float64 `msgpack:"cpu_seconds,omitempty"`
	CPUMax         float64 `msgpack:"cpu_max,omitempty"`
	DiskBytes      int64   `msgpack:"disk_bytes,omitempty"`
	DiskMaxBytes   int64   `msgpack:"disk_max_bytes,omitempty"`
	// Limits counts the limits met since the user's cgroup was made:
	// OOM kills and refused forks.
	OOMKills     int64 `msgpack:"oom_kills,omitempty"`
	PidsRefusals int64 `msgpack:"pids_refusals,omitempty"`
	// Tokens is the user's token ledger and budget; nil when it could not
	// be read.
	Tokens *TokenUsage `msgpack:"tokens,omitempty"`
	// RateLimits are the codex account's own rate-limit windows, as the
	// user's app-server last reported them (account/rateLimits/updated,
	// sent with each model response); none before its first report.
	RateLimits []RateLimit `msgpack:"rate_limits,omitempty"`
	Error      string      `msgpack:"error,omitempty"`
}

// TokenUsage is a user's token spend on this daemon: in the budget's
// window (what counts against the budget, per model), and since the
// ledger began.
type TokenUsage struct {
	// WindowSeconds is the budget's rolling window; Budget the user's
	// budget in it (0: none); Spent what counts against it now, and
	// FreesAtUnix, when Spent is at the budget, when the next round may
	// run. Damaged says the ledger was damaged less than a window ago
	// and counts as the whole budget.
	WindowSeconds int64 `msgpack:"window_seconds,omitempty"`
	Budget        int64 `msgpack:"budget,omitempty"`
	Spent         int64 `msgpack:"spent,omitempty"`
	FreesAtUnix   int64 `msgpack:"frees_at_unix,omitempty"`
	Damaged       bool  `msgpack:"damaged,omitempty"`
	// Window is the spend in the window per model; Total since SinceUnix.
	Window    []ModelTokens `msgpack:"window,omitempty"`
	Total     []ModelTokens `msgpack:"total,omitempty"`
	SinceUnix int64         `msgpack:"since_unix,omitempty"`
}

// ModelTokens are the tokens of one model: Input includes CachedInput,
// Output includes Reasoning, as the API reports them.
type ModelTokens struct {
	Model       string `msgpack:"model,omitempty"`
	Input       int64  `msgpack:"input,omitempty"`
	CachedInput int64  `msgpack:"cached_input,omitempty"`
	Output      int64  `msgpack:"output,omitempty"`
	Reasoning   int64  `msgpack:"reasoning,omitempty"`
}
