package textcut

import (
	"testing"
	"unicode/utf8"
)

func TestBytes(t *testing.T) {
	for _, c := range []struct {
		s    string
		n    int
		want string
	}{
		{"short", 10, "short"},
		{"exactly", 7, "exactly"},
		{"abcdef", 3, "abc…[truncated]"},
		{"héllo", 2, "h…[truncated]"}, // é is two bytes: not split
		{"日本", 4, "日…[truncated]"},
	} {
		got := Bytes(c.s, c.n)
		if got != c.want || !utf8.ValidString(got) {
			t.Errorf("Bytes(%q, %d) = %q, want %q", c.s, c.n, got, c.want)
		}
	}
}

func TestRunes(t *testing.T) {
	for _, c := range []struct {
		s    string
		n    int
		want string
	}{
		{"short", 10, "short"},
		{"日本語です", 3, "日本語…"},
		{"abc", 3, "abc"},
	} {
		if got := Runes(c.s, c.n); got != c.want {
			t.Errorf("Runes(%q, %d) = %q, want %q", c.s, c.n, got, c.want)
		}
	}
}
