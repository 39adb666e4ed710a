package main

import (
	"bytes"
	"strings"
	"testing"
	"time"

	"github.com/meshweaver/supervisor/messages"
)

// supervisor usage prints the tokens: the spend against the budget, when
// a spent one frees up, per model in the window and since the start.
func TestPrintTokens(t *testing.T) {
	frees := time.Date(2030, 1, 2, 3, 4, 5, 0, time.UTC)
	var b bytes.Buffer
	printUsage(&b, messages.UsageResponse{User: "alice", Tokens: &messages.TokenUsage{
		WindowSeconds: 3600, Budget: 60, Spent: 65, FreesAtUnix: frees.Unix(), SinceUnix: frees.Add(-48 * time.Hour).Unix(),
		Window: []messages.ModelTokens{{Model: "m", Input: 50, CachedInput: 5, Output: 15, Reasoning: 2}},
		Total:  []messages.ModelTokens{{Model: "m", Input: 500, Output: 150}},
	}, RateLimits: []messages.RateLimit{{Primary: &messages.RateLimitWindow{UsedPercent: 42, WindowMinutes: 300, ResetsAtUnix: frees.Unix()}}}})
	out := b.String()
	for _, want := range []string{
		"tokens\t65 of 60 in the last 1h0m0s (spent: the next round may run at 2030-01-02T03:04:05Z)",
		"window\tm\tinput 50 (cached 5), output 15 (reasoning 2)",
		"since 2029-12-31\tm\tinput 500 (cached 0), output 150",
		"no app-server has run",
		"codex rate limit\tcodex primary: 42% used of 300 minutes, resets at 2030-01-02T03:04:05Z",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("usage output lacks %q:\n%s", want, out)
		}
	}
	b.Reset()
	printUsage(&b, messages.UsageResponse{Tokens: &messages.TokenUsage{WindowSeconds: 86400, Spent: 7}})
	if !strings.Contains(b.String(), "tokens\t7 in the last 24h0m0s (no budget)") {
		t.Errorf("without a budget: %s", b.String())
	}
}

// supervisor round --raw-events shows a raw event's method and params on
// the notes' stream, cut.
func TestPrintRawEvent(t *testing.T) {
	var out, notes bytes.Buffer
	p := &printer{w: &out, errw: &notes, roundID: "r", start: time.Now()}
	p.event(messages.RoundEvent{Kind: messages.KindRaw, Raw: &messages.RawNote{Method: "thread/status/changed",
		Params: `{"threadId":"t","status":{"type":"idle"}}` + strings.Repeat(" ", 300)}})
	if s := notes.String(); !strings.Contains(s, `codex thread/status/changed {"threadId":"t","status":{"type":"idle"}}`) || !strings.Contains(s, "…") || out.Len() != 0 {
		t.Errorf("notes %q, text %q", s, out.String())
	}
}
