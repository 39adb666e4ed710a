package codexrpc

import (
	"regexp"
	"strings"
	"sync"
)

// Redacted replaces every secret the redactor finds.
const Redacted = "[REDACTED]"

var (
	ansiRE   = regexp.MustCompile(`\x1b\[[0-9;?]*[ -/]*[@-~]`)
	bearerRE = regexp.MustCompile(`(?i)(bearer)(\s+|%20|\+)[A-Za-z0-9._~+/=\-]+`)
	skRE     = regexp.MustCompile(`\bsk-[A-Za-z0-9_\-]{6,}`)
	kvRE     = regexp.MustCompile(`(?i)(\\?"?(?:api[_-]?key|access[_-]?token|refresh[_-]?token|id[_-]?token|authorization|password|secret)\\?"?\s*[:=]\s*\\?"?)([^\s",}\\]+)`)
)

// Redactor removes secrets from text: bearer tokens, sk- API keys, values of
// key-like fields, and any value registered with Add. The zero value is
// ready to use and safe for concurrent use.
type Redactor struct {
	mu      sync.RWMutex
	secrets []string
}

// Add registers values to redact wherever they appear. Values shorter than
// four bytes are ignored: they would redact ordinary text.
func (r *Redactor) Add(secrets ...string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, s := range secrets {
		if len(s) >= 4 && !contains(r.secrets, s) {
			r.secrets = append(r.secrets, s)
		}
	}
}

// Redact returns s with ANSI escapes stripped and secrets replaced.
func (r *Redactor) Redact(s string) string {
	// Escapes first: a secret split by a colour code must still match.
	s = ansiRE.ReplaceAllString(s, "")
	if r != nil {
		r.mu.RLock()
		for _, sec := range r.secrets {
			s = strings.ReplaceAll(s, sec, Redacted)
		}
		r.mu.RUnlock()
	}
	return RedactCommon(s)
}

// RedactCommon strips ANSI escapes and redacts the secret shapes every
// caller knows: bearer tokens, sk- keys and values of key-like fields.
func RedactCommon(s string) string {
	s = ansiRE.ReplaceAllString(s, "")
	s = bearerRE.ReplaceAllString(s, "${1} "+Redacted)
	s = skRE.ReplaceAllString(s, "sk-"+Redacted)
	s = kvRE.ReplaceAllString(s, "${1}"+Redacted)
	return s
}
