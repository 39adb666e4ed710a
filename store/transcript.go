package store

import (
	"strings"
	"unicode/utf8"
)

// Transcript defaults, used when Transcript is given a bound of zero or less.
const (
	// DefaultTranscriptTurns is the most turns a transcript shows.
	DefaultTranscriptTurns = 20
	// DefaultTranscriptBytes bounds a transcript's length in bytes,
	// header included.
	DefaultTranscriptBytes = 32 << 10
)

// TranscriptHeader is the first line of every non-empty transcript.
const TranscriptHeader = "Earlier conversation in this thread (restored because the previous session could not be resumed), oldest first:"

// minTranscriptTail is the least text worth keeping of the oldest turn that
// only partly fits; below it the turn is dropped instead.
const minTranscriptTail = 64

// Transcript renders the user and assistant turns (oldest first) as plain
// text for seeding a fresh Codex thread: [TranscriptHeader], then each turn
// as a blank line and "User: text" or "Assistant: text", oldest first.
//
// It keeps the newest turns: at most maxTurns of them, in at most maxBytes
// bytes in all (zero or less means [DefaultTranscriptTurns] and
// [DefaultTranscriptBytes]). The oldest turns are dropped first; the oldest
// turn that is kept may lose the start of its text, marked with an
// ellipsis, and the newest turn is always kept that way if it alone is too
// long. Cuts fall on UTF-8 character boundaries. Turns with another role or
// with only white space are skipped. The result is "" when no turn fits.
func Transcript(turns []Turn, maxTurns, maxBytes int) string {
	if maxTurns <= 0 {
		maxTurns = DefaultTranscriptTurns
	}
	if maxBytes <= 0 {
		maxBytes = DefaultTranscriptBytes
	}
	budget := maxBytes - len(TranscriptHeader)
	var pieces []string // newest first
	for i := len(turns) - 1; i >= 0 && len(pieces) < maxTurns; i-- {
		label := transcriptLabel(turns[i].Role)
		text := strings.TrimSpace(turns[i].Text)
		if label == "" || text == "" {
			continue
		}
		prefix := "\n\n" + label + ": "
		if len(prefix)+len(text) <= budget {
			pieces = append(pieces, prefix+text)
			budget -= len(prefix) + len(text)
			continue
		}
		room := budget - len(prefix) - len(ellipsis)
		if room >= minTranscriptTail || len(pieces) == 0 && room > 0 {
			if tail := tailUTF8(text, room); tail != "" {
				pieces = append(pieces, prefix+ellipsis+tail)
			}
		}
		break
	}
	if len(pieces) == 0 {
		return ""
	}
	n := len(TranscriptHeader)
	for _, p := range pieces {
		n += len(p)
	}
	var b strings.Builder
	b.Grow(n)
	b.WriteString(TranscriptHeader)
	for i := len(pieces) - 1; i >= 0; i-- {
		b.WriteString(pieces[i])
	}
	return b.String()
}

func transcriptLabel(role string) string {
	switch role {
	case RoleUser:
		return "User"
	case RoleAssistant:
		return "Assistant"
	}
	return ""
}

// tailUTF8 returns the longest suffix of s that has at most n bytes and
// starts on a character boundary.
func tailUTF8(s string, n int) string {
	if n <= 0 {
		return ""
	}
	if n >= len(s) {
		return s
	}
	start := len(s) - n
	for start < len(s) && !utf8.RuneStart(s[start]) {
		start++
	}
	return s[start:]
}
