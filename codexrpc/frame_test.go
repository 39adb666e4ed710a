package codexrpc

import (
	"errors"
	"io"
	"strings"
	"testing"
)

func TestLineReader(t *testing.T) {
	big := strings.Repeat("x", 3<<20) // 3 MiB: far over bufio.Scanner's default
	tests := []struct {
		name string
		in   string
		max  int
		want []string // "!" marks an ErrLineTooLong
	}{
		{"empty", "", 0, nil},
		{"one", "a\n", 0, []string{"a"}},
		{"crlf", "a\r\nb\r\n", 0, []string{"a", "b"}},
		{"no final newline", "a\nb", 0, []string{"a", "b"}},
		{"blank lines kept", "\n\na\n", 0, []string{"", "", "a"}},
		{"huge line", big + "\nz\n", 0, []string{big, "z"}},
		{"over cap skipped", "ok\n" + strings.Repeat("y", 100) + "\nafter\n", 10, []string{"ok", "!", "after"}},
		{"over cap at end", "ok\n" + strings.Repeat("y", 100), 10, []string{"ok", "!"}},
		{"just over cap at end", "ok\n" + strings.Repeat("y", 11), 10, []string{"ok", "!"}},
		{"exactly cap", strings.Repeat("y", 10) + "\n", 10, []string{strings.Repeat("y", 10)}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			lr := NewLineReader(strings.NewReader(tt.in), tt.max)
			var got []string
			for {
				line, err := lr.ReadLine()
				if errors.Is(err, io.EOF) {
					break
				}
				if errors.Is(err, ErrLineTooLong) {
					got = append(got, "!")
					continue
				}
				if err != nil {
					t.Fatalf("ReadLine: %v", err)
				}
				got = append(got, string(line))
			}
			if len(got) != len(tt.want) {
				t.Fatalf("got %d lines, want %d", len(got), len(tt.want))
			}
			for i := range got {
				if got[i] != tt.want[i] {
					t.Errorf("line %d: got %.40q, want %.40q", i, got[i], tt.want[i])
				}
			}
		})
	}
}

func FuzzLineReader(f *testing.F) {
	f.Add([]byte("a\nb\r\n"), 4)
	f.Add([]byte(strings.Repeat("z", 100)+"\n"), 8)
	f.Add([]byte("\n\n\r\n"), 0)
	f.Fuzz(func(t *testing.T, in []byte, max int) {
		if max > 1<<20 || max < -1 {
			return
		}
		lr := NewLineReader(strings.NewReader(string(in)), max)
		total := 0
		for i := 0; i <= len(in)+1; i++ {
			line, err := lr.ReadLine()
			if errors.Is(err, io.EOF) {
				return
			}
			if err != nil && !errors.Is(err, ErrLineTooLong) {
				t.Fatalf("unexpected error %v", err)
			}
			if max > 0 && len(line) > max {
				t.Fatalf("line of %d bytes over cap %d", len(line), max)
			}
			total += len(line)
			if total > len(in) {
				t.Fatalf("read %d bytes from %d", total, len(in))
			}
		}
		t.Fatalf("reader did not reach EOF")
	})
}
