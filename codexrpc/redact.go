package codexrpc

import "regexp"

// Redacted replaces every secret a redaction finds.
const Redacted = "[REDACTED]"

var (
	ansiRE   = regexp.MustCompile(`\x1b\[[0-9;?]*[ -/]*[@-~]`)
	bearerRE = regexp.MustCompile(`(?i)(bearer)(\s+|%20|\+)[A-Za-z0-9._~+/=\-]+`)
	skRE     = regexp.MustCompile(`\bsk-[A-Za-z0-9_\-]{6,}`)
	kvRE     = regexp.MustCompile(`(?i)(\\?"?(?:api[_-]?key|access[_-]?token|refresh[_-]?token|id[_-]?token|authorization|password|secret)\\?"?\s*[:=]\s*\\?"?)([^\s",}\\]+)`)
)

// StripANSI removes terminal escape sequences.
func StripANSI(s string) string { return ansiRE.ReplaceAllString(s, "") }

// RedactCommon strips ANSI escapes and redacts the secret shapes every
// caller knows: bearer tokens, sk- keys and values of key-like fields. The
// Conn uses it for the heads of lines it logs; codexproc.Redactor adds the
// secrets registered with it.
func RedactCommon(s string) string {
	s = StripANSI(s)
	s = bearerRE.ReplaceAllString(s, "${1} "+Redacted)
	s = skRE.ReplaceAllString(s, "sk-"+Redacted)
	s = kvRE.ReplaceAllString(s, "${1}"+Redacted)
	return s
}
