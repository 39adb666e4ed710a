package codexproc

import (
	"strings"
	"sync"

	"github.com/meshweaver/supervisor/codexrpc"
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
	s = codexrpc.StripANSI(s)
	if r != nil {
		r.mu.RLock()
		for _, sec := range r.secrets {
			s = strings.ReplaceAll(s, sec, codexrpc.Redacted)
		}
		r.mu.RUnlock()
	}
	return codexrpc.RedactCommon(s)
}
