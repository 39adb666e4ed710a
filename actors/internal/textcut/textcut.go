// Package textcut bounds texts the daemon shows (a command in a notice, a
// tool's output in an event) without splitting a character.
package textcut

import "unicode/utf8"

// Bytes bounds s to n bytes on a rune boundary, marking the cut.
func Bytes(s string, n int) string {
	if len(s) <= n {
		return s
	}
	i := n
	for i > 0 && (s[i]&0xC0) == 0x80 {
		i--
	}
	return s[:i] + "…[truncated]"
}

// Runes bounds s to n runes, marking the cut.
func Runes(s string, n int) string {
	if utf8.RuneCountInString(s) <= n {
		return s
	}
	return string([]rune(s)[:n]) + "…"
}
