package codexproc

import (
	"github.com/meshweaver/supervisor/codexrpc"
	"strings"
	"testing"
)

func TestRedact(t *testing.T) {
	r := &Redactor{}
	r.Add("supersecrettoken", "abc") // too short to register: ignored
	tests := []struct{ in, leak string }{
		{"Authorization: Bearer eyJhbGciOi.abc.def rest", "eyJhbGciOi"},
		{"key sk-proj-ABCDEF123456 used", "sk-proj-ABCDEF123456"},
		{`{"access_token":"tok-123456","x":1}`, "tok-123456"},
		{`{\"refresh_token\":\"rt-987654\"}`, "rt-987654"},
		{"api_key=plainvalue99 next", "plainvalue99"},
		{"token super\x1b[0msecrettoken here", "supersecrettoken"},
		{"bearer%20abcdefgh", "abcdefgh"},
	}
	for _, tt := range tests {
		got := r.Redact(tt.in)
		if strings.Contains(got, tt.leak) {
			t.Errorf("Redact(%q) = %q: still holds %q", tt.in, got, tt.leak)
		}
		if !strings.Contains(got, codexrpc.Redacted) {
			t.Errorf("Redact(%q) = %q: nothing redacted", tt.in, got)
		}
	}
	if got := r.Redact("an abc plain line"); got != "an abc plain line" {
		t.Errorf("plain text changed: %q", got)
	}
}
