package messages

import (
	"fmt"
	"net/url"
	"unicode/utf8"
)

// Bounds checked by the Validate methods, in bytes unless they say
// otherwise.
const (
	// MaxUserLen bounds User. The characters allowed in a user id are
	// checked elsewhere; here only its length and the absence of control
	// characters.
	MaxUserLen = 64
	// MaxThreadLen bounds a mesh thread key.
	MaxThreadLen = 1024
	// MaxIDLen bounds RoundID, ClientMessageID, Model and Effort.
	MaxIDLen = 256
	// MaxPIDLen bounds each field of a PID.
	MaxPIDLen = 1024
	// MaxTextLen bounds a message text and DeveloperInstructions.
	MaxTextLen = 1 << 20
	// MaxHistoryTurns bounds the number of turns in StartRound.History.
	MaxHistoryTurns = 200
	// MaxHistoryLen bounds the total text of StartRound.History.
	MaxHistoryLen = 4 << 20
	// MaxURLLen bounds MCPURL.
	MaxURLLen = 2048
	// MaxSecretLen bounds MCPToken and APIKey.
	MaxSecretLen = 4096
)

// Validate checks the fields of a StartRound received from a peer: User,
// Thread and Text are required, every field is within its bound, History
// has at most MaxHistoryTurns turns of known roles and MaxHistoryLen bytes
// of text, MCPURL is an absolute http(s) URL, MCPToken is printable ASCII
// and needs MCPURL, and a ReplyTo has both fields. Errors wrap [ErrInvalid]
// and name fields and sizes, never their contents.
func (m StartRound) Validate() error {
	c := checker{name: "start_round.v1"}
	c.id("round_id", m.RoundID, MaxIDLen, false)
	c.user(m.User)
	c.id("thread", m.Thread, MaxThreadLen, true)
	c.text("text", m.Text, MaxTextLen, true)
	c.id("client_message_id", m.ClientMessageID, MaxIDLen, false)
	c.id("model", m.Model, MaxIDLen, false)
	c.id("effort", m.Effort, MaxIDLen, false)
	c.text("developer_instructions", m.DeveloperInstructions, MaxTextLen, false)
	if m.MCPURL != "" {
		c.mcpURL(m.MCPURL)
	}
	if m.MCPToken != "" {
		if m.MCPURL == "" {
			c.failf("mcp_token is set without mcp_url")
		}
		c.secret("mcp_token", m.MCPToken)
	}
	validateTools(&c, m.Tools)
	if n := len(m.History); n > MaxHistoryTurns {
		c.failf("history has %d turns, max %d", n, MaxHistoryTurns)
	}
	total := 0
	for i, t := range m.History {
		if t.Role != RoleUser && t.Role != RoleAssistant {
			c.failf("history[%d].role is not %q or %q", i, RoleUser, RoleAssistant)
		}
		total += len(t.Text)
	}
	if total > MaxHistoryLen {
		c.failf("history text is %d bytes, max %d", total, MaxHistoryLen)
	}
	c.replyTo(m.ReplyTo)
	switch m.OnRequest {
	case PolicyDefault, PolicyAuto, PolicyDecline, PolicyAsk:
	default:
		c.failf("on_request is not auto, decline or ask")
	}
	if m.AskTimeoutMS < 0 || m.AskTimeoutMS > MaxAskTimeoutMS {
		c.failf("ask_timeout_ms is %d, want 0 to %d", m.AskTimeoutMS, MaxAskTimeoutMS)
	}
	validateSurface(&c, m)
	c.traceContext(m.Traceparent, m.Tracestate)
	return c.err
}

// Validate checks an AttachRound received from a peer: User and RoundID
// are required, and a ReplyTo has both fields.
func (m AttachRound) Validate() error {
	c := checker{name: "attach_round.v1"}
	c.user(m.User)
	c.id("round_id", m.RoundID, MaxIDLen, true)
	c.replyTo(m.ReplyTo)
	return c.err
}

// Validate checks a DetachRound received from a peer: User and RoundID
// are required.
func (m DetachRound) Validate() error {
	c := checker{name: "detach_round.v1"}
	c.user(m.User)
	c.id("round_id", m.RoundID, MaxIDLen, true)
	return c.err
}

// Validate checks an AnswerRequest received from a peer: User, RoundID
// and RequestID are required, Decision is known, at most MaxAnswers
// answers of bounded text, and Content is bounded.
func (m AnswerRequest) Validate() error {
	c := checker{name: "answer_request.v1"}
	c.user(m.User)
	c.id("round_id", m.RoundID, MaxIDLen, true)
	c.id("request_id", m.RequestID, MaxIDLen, true)
	switch m.Decision {
	case "", DecisionAccept, DecisionAcceptForSession, DecisionDecline, DecisionCancel:
	default:
		c.failf("decision is not accept, accept_for_session, decline or cancel")
	}
	if len(m.Answers) > MaxAnswers {
		c.failf("answers has %d entries, max %d", len(m.Answers), MaxAnswers)
	}
	total := 0
	for id, as := range m.Answers {
		c.id("answers key", id, MaxIDLen, true)
		if len(as) > MaxAnswers {
			c.failf("an answer has %d entries, max %d", len(as), MaxAnswers)
		}
		for _, a := range as {
			total += len(a)
		}
	}
	if total > MaxTextLen {
		c.failf("answers text is %d bytes, max %d", total, MaxTextLen)
	}
	c.text("content", m.Content, MaxTextLen, false)
	return c.err
}

// Validate checks a WarmUp received from a peer: User is required; Thread,
// DeveloperInstructions, MCPURL and MCPToken are bounded as in StartRound.
func (m WarmUp) Validate() error {
	c := checker{name: "warm_up.v1"}
	c.user(m.User)
	c.id("thread", m.Thread, MaxThreadLen, false)
	c.text("developer_instructions", m.DeveloperInstructions, MaxTextLen, false)
	if m.MCPURL != "" {
		c.mcpURL(m.MCPURL)
	}
	if m.MCPToken != "" {
		if m.MCPURL == "" {
			c.failf("mcp_token is set without mcp_url")
		}
		c.secret("mcp_token", m.MCPToken)
	}
	return c.err
}

// Validate checks an InterruptRound received from a peer: User and Thread
// are required and every field is within its bound.
func (m InterruptRound) Validate() error {
	c := checker{name: "interrupt_round.v1"}
	c.user(m.User)
	c.id("thread", m.Thread, MaxThreadLen, true)
	c.id("round_id", m.RoundID, MaxIDLen, false)
	return c.err
}

// Validate checks a SteerRound received from a peer: User, Thread and Text
// are required and every field is within its bound.
func (m SteerRound) Validate() error {
	c := checker{name: "steer_round.v1"}
	c.user(m.User)
	c.id("thread", m.Thread, MaxThreadLen, true)
	c.id("round_id", m.RoundID, MaxIDLen, false)
	c.text("text", m.Text, MaxTextLen, true)
	c.id("client_message_id", m.ClientMessageID, MaxIDLen, false)
	return c.err
}

// Validate checks that User is present and within its bound.
func (m StartLogin) Validate() error { return validateUser("start_login.v1", m.User) }

// Validate checks that User is present and within its bound.
func (m CancelLogin) Validate() error { return validateUser("cancel_login.v1", m.User) }

// Validate checks that User is present and within its bound and that
// APIKey is present, at most MaxSecretLen bytes and printable ASCII
// without spaces.
func (m SetAPIKey) Validate() error {
	c := checker{name: "set_api_key.v1"}
	c.user(m.User)
	if m.APIKey == "" {
		c.failf("api_key is empty")
	}
	c.secret("api_key", m.APIKey)
	return c.err
}

// Validate checks that User is present and within its bound.
func (m Logout) Validate() error { return validateUser("logout.v1", m.User) }

// Validate checks that User is present and within its bound.
func (m AccountRequest) Validate() error { return validateUser("account_request.v1", m.User) }

// Validate checks that User is present and within its bound.
func (m ModelsRequest) Validate() error { return validateUser("models_request.v1", m.User) }

// Validate checks that User is present and within its bound.
func (m RateLimitsRequest) Validate() error {
	return validateUser("rate_limits_request.v1", m.User)
}

// Validate checks that User is present and within its bound.
func (m UsageRequest) Validate() error { return validateUser("usage_request.v1", m.User) }

func validateUser(name, user string) error {
	c := checker{name: name}
	c.user(user)
	return c.err
}

// checker keeps the first validation error of a message.
type checker struct {
	name string // wire name
	err  error
}

func (c *checker) failf(format string, args ...any) {
	if c.err == nil {
		c.err = fmt.Errorf("%s: %w: %s", c.name, ErrInvalid, fmt.Sprintf(format, args...))
	}
}

func (c *checker) user(v string) { c.id("user", v, MaxUserLen, true) }

// id checks an identifier: valid UTF-8 without control characters, at
// most max bytes, and present if required.
func (c *checker) id(field, v string, max int, required bool) {
	switch {
	case v == "":
		if required {
			c.failf("%s is empty", field)
		}
	case len(v) > max:
		c.failf("%s is %d bytes, max %d", field, len(v), max)
	case !plain(v):
		c.failf("%s has invalid UTF-8 or control characters", field)
	}
}

// text checks free text: at most max bytes, and present if required.
func (c *checker) text(field, v string, max int, required bool) {
	switch {
	case v == "":
		if required {
			c.failf("%s is empty", field)
		}
	case len(v) > max:
		c.failf("%s is %d bytes, max %d", field, len(v), max)
	}
}

// secret checks a token or key: at most MaxSecretLen bytes of printable
// ASCII without spaces, so that it cannot break a header or a line.
func (c *checker) secret(field, v string) {
	if len(v) > MaxSecretLen {
		c.failf("%s is %d bytes, max %d", field, len(v), MaxSecretLen)
		return
	}
	for i := 0; i < len(v); i++ {
		if v[i] <= ' ' || v[i] > '~' {
			c.failf("%s has a character outside printable ASCII", field)
			return
		}
	}
}

// mcpURL checks that v is an absolute http or https URL with a host. The
// URL is not quoted in the error: it may carry credentials.
func (c *checker) mcpURL(v string) {
	if len(v) > MaxURLLen {
		c.failf("mcp_url is %d bytes, max %d", len(v), MaxURLLen)
		return
	}
	u, err := url.Parse(v)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		c.failf("mcp_url is not an absolute http or https URL")
	}
}

// plain reports whether s is valid UTF-8 without control characters.
func plain(s string) bool {
	if !utf8.ValidString(s) {
		return false
	}
	for _, r := range s {
		if r < 0x20 || (r >= 0x7f && r < 0xa0) {
			return false
		}
	}
	return true
}

// replyTo checks an optional reply_to: when set, both fields.
func (c *checker) replyTo(p *PID) {
	if p != nil {
		c.id("reply_to.address", p.Address, MaxPIDLen, true)
		c.id("reply_to.id", p.ID, MaxPIDLen, true)
	}
}
