package messages

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"log/slog"
	"net/url"
	"strings"
)

// redacted stands in for a secret that is set.
const redacted = "<redacted>"

// String describes m for logs and errors. MCPToken is redacted; Text,
// DeveloperInstructions and History are reported by size only; MCPURL
// loses its user info, query and fragment.
func (m StartRound) String() string {
	var b strings.Builder
	b.WriteString("StartRound{")
	fmt.Fprintf(&b, "RoundID:%q User:%q Thread:%q Text:<%d bytes> ClientMessageID:%q Model:%q Effort:%q AutoApprove:%t",
		m.RoundID, m.User, m.Thread, len(m.Text), m.ClientMessageID, m.Model, m.Effort, m.AutoApprove)
	fmt.Fprintf(&b, " DeveloperInstructions:<%d bytes> MCPURL:%q MCPToken:%q History:<%d turns, %d bytes> ReplyTo:%q",
		len(m.DeveloperInstructions), safeURL(m.MCPURL), secretString(m.MCPToken), len(m.History), historyLen(m.History), replyTo(m.ReplyTo))
	if s := surfaceSizes(m); s != "" {
		b.WriteString(" " + s)
	}
	b.WriteString("}")
	return b.String()
}

// GoString makes %#v print the redacted form of String.
func (m StartRound) GoString() string { return "messages." + m.String() }

// LogValue describes m for slog, with the redactions of String; the user
// is named by its [UserTag], as every log line names users.
func (m StartRound) LogValue() slog.Value {
	attrs := []slog.Attr{
		slog.String("round_id", m.RoundID),
		slog.String("user", UserTag(m.User)),
		slog.String("thread", m.Thread),
		slog.Int("text_bytes", len(m.Text)),
		slog.String("client_message_id", m.ClientMessageID),
		slog.String("model", m.Model),
		slog.String("effort", m.Effort),
		slog.Bool("auto_approve", m.AutoApprove),
		slog.Int("developer_instructions_bytes", len(m.DeveloperInstructions)),
		slog.String("mcp_url", safeURL(m.MCPURL)),
		slog.String("mcp_token", secretString(m.MCPToken)),
		slog.Int("history_turns", len(m.History)),
		slog.Int("history_bytes", historyLen(m.History)),
		slog.String("reply_to", replyTo(m.ReplyTo)),
	}
	if s := surfaceSizes(m); s != "" {
		attrs = append(attrs, slog.String("surface", s))
	}
	return slog.GroupValue(attrs...)
}

// String describes m for logs and errors. MCPToken is redacted,
// DeveloperInstructions reported by size, MCPURL without its user info,
// query and fragment.
func (m WarmUp) String() string {
	return fmt.Sprintf("WarmUp{User:%q Thread:%q DeveloperInstructions:<%d bytes> MCPURL:%q MCPToken:%q}",
		m.User, m.Thread, len(m.DeveloperInstructions), safeURL(m.MCPURL), secretString(m.MCPToken))
}

// GoString makes %#v print the redacted form of String.
func (m WarmUp) GoString() string { return "messages." + m.String() }

// LogValue describes m for slog, with the redactions of String and the
// user's [UserTag].
func (m WarmUp) LogValue() slog.Value {
	return slog.GroupValue(slog.String("user", UserTag(m.User)), slog.String("thread", m.Thread),
		slog.Int("developer_instructions_bytes", len(m.DeveloperInstructions)),
		slog.String("mcp_url", safeURL(m.MCPURL)), slog.String("mcp_token", secretString(m.MCPToken)))
}

// String describes m for logs and errors, with APIKey redacted.
func (m SetAPIKey) String() string {
	return fmt.Sprintf("SetAPIKey{User:%q APIKey:%q}", m.User, secretString(m.APIKey))
}

// GoString makes %#v print the redacted form of String.
func (m SetAPIKey) GoString() string { return "messages." + m.String() }

// LogValue describes m for slog, with APIKey redacted and the user's
// [UserTag].
func (m SetAPIKey) LogValue() slog.Value {
	return slog.GroupValue(slog.String("user", UserTag(m.User)), slog.String("api_key", secretString(m.APIKey)))
}

// UserTag is a stable short hash of a user id, "u-" and the first 4 bytes
// of SHA-256 of "user:"+user in hex: logs name users by it, never by the
// raw id, at every level. (docs/OPERATIONS.md shows how to compute it.)
func UserTag(user string) string {
	sum := sha256.Sum256([]byte("user:" + user))
	return "u-" + hex.EncodeToString(sum[:4])
}

// secretString shows whether a secret is set, never its value.
func secretString(s string) string {
	if s == "" {
		return ""
	}
	return redacted
}

// safeURL keeps the scheme, host and path of u and drops what may carry
// credentials: user info, query and fragment.
func safeURL(u string) string {
	if u == "" {
		return ""
	}
	p, err := url.Parse(u)
	if err != nil {
		return "<invalid URL>"
	}
	return (&url.URL{Scheme: p.Scheme, Host: p.Host, Path: p.Path}).String()
}

func historyLen(h []Turn) int {
	n := 0
	for _, t := range h {
		n += len(t.Text)
	}
	return n
}

func replyTo(p *PID) string {
	if p == nil {
		return "<sender>"
	}
	return p.String()
}
