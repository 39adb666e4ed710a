package store

import (
	"fmt"
	"strings"
	"testing"
	"unicode/utf8"
)

func TestTranscript(t *testing.T) {
	tests := []struct {
		name               string
		turns              []Turn
		maxTurns, maxBytes int
		want               string
	}{
		{name: "none", want: ""},
		{
			name:  "basic",
			turns: []Turn{{RoleUser, "What is 2+2?"}, {RoleAssistant, " 4. \n"}},
			want:  TranscriptHeader + "\n\nUser: What is 2+2?\n\nAssistant: 4.",
		},
		{
			name:  "skips other roles and blank turns",
			turns: []Turn{{"system", "secret"}, {RoleUser, "a"}, {RoleAssistant, "  \n"}, {"tool", "x"}, {RoleAssistant, "b"}},
			want:  TranscriptHeader + "\n\nUser: a\n\nAssistant: b",
		},
		{
			name:     "turn bound keeps newest",
			turns:    []Turn{{RoleUser, "1"}, {RoleAssistant, "2"}, {RoleUser, "3"}, {RoleAssistant, "4"}},
			maxTurns: 2,
			want:     TranscriptHeader + "\n\nUser: 3\n\nAssistant: 4",
		},
		{
			name:     "byte bound drops the oldest whole turn when little room is left",
			turns:    []Turn{{RoleUser, strings.Repeat("o", 500)}, {RoleUser, "new"}},
			maxBytes: len(TranscriptHeader) + len("\n\nUser: new") + 20,
			want:     TranscriptHeader + "\n\nUser: new",
		},
		{
			name:     "byte bound cuts the oldest kept turn when there is room",
			turns:    []Turn{{RoleUser, "gone"}, {RoleUser, strings.Repeat("o", 500) + "TAIL"}, {RoleAssistant, "new"}},
			maxBytes: len(TranscriptHeader) + len("\n\nAssistant: new") + len("\n\nUser: "+ellipsis) + 100,
			want:     TranscriptHeader + "\n\nUser: " + ellipsis + strings.Repeat("o", 96) + "TAIL\n\nAssistant: new",
		},
		{
			name:     "single over-long turn keeps its end",
			turns:    []Turn{{RoleAssistant, "START" + strings.Repeat("m", 1000) + "END"}},
			maxBytes: len(TranscriptHeader) + len("\n\nAssistant: "+ellipsis) + 10,
			want:     TranscriptHeader + "\n\nAssistant: " + ellipsis + "mmmmmmmEND",
		},
		{
			name:     "multibyte cut on a character boundary",
			turns:    []Turn{{RoleUser, strings.Repeat("日", 100)}},
			maxBytes: len(TranscriptHeader) + len("\n\nUser: "+ellipsis) + 10, // 3⅓ characters
			want:     TranscriptHeader + "\n\nUser: " + ellipsis + "日日日",
		},
		{
			name:     "no room for any text",
			turns:    []Turn{{RoleUser, "hello"}},
			maxBytes: len(TranscriptHeader) + 3,
			want:     "",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := Transcript(tt.turns, tt.maxTurns, tt.maxBytes)
			if got != tt.want {
				t.Errorf("Transcript =\n%q\nwant\n%q", got, tt.want)
			}
		})
	}
}

func TestTranscriptDefaults(t *testing.T) {
	got := Transcript(turnsN(50, 0), 0, 0)
	if n := strings.Count(got, "\n\nUser: ") + strings.Count(got, "\n\nAssistant: "); n != DefaultTranscriptTurns {
		t.Errorf("default transcript has %d turns, want %d", n, DefaultTranscriptTurns)
	}
	if !strings.HasSuffix(got, "turn 49") || strings.Contains(got, "turn 29\n") || !strings.Contains(got, "turn 30\n") {
		t.Errorf("default transcript does not hold the newest %d turns", DefaultTranscriptTurns)
	}
	got = Transcript(turnsN(50, 4<<10), -1, -1)
	if len(got) > DefaultTranscriptBytes || len(got) < DefaultTranscriptBytes-4<<10 {
		t.Errorf("default transcript is %d bytes, want at most %d and close to it", len(got), DefaultTranscriptBytes)
	}
}

func TestTranscriptBounds(t *testing.T) {
	turns := []Turn{
		{RoleUser, strings.Repeat("é", 300)},
		{RoleAssistant, strings.Repeat("a🙂", 77)},
		{RoleUser, "short"},
		{RoleAssistant, strings.Repeat("日本", 150) + "end"},
	}
	for maxBytes := 1; maxBytes < 2000; maxBytes += 7 {
		for maxTurns := 1; maxTurns <= 5; maxTurns++ {
			got := Transcript(turns, maxTurns, maxBytes)
			if len(got) > maxBytes {
				t.Fatalf("Transcript(%d turns, %d bytes) is %d bytes", maxTurns, maxBytes, len(got))
			}
			if !utf8.ValidString(got) {
				t.Fatalf("Transcript(%d, %d) is not valid UTF-8", maxTurns, maxBytes)
			}
			if got != "" && !strings.HasSuffix(got, "end") {
				t.Fatalf("Transcript(%d, %d) lost the end of the newest turn", maxTurns, maxBytes)
			}
			if n := strings.Count(got, "\n\nUser: ") + strings.Count(got, "\n\nAssistant: "); n > maxTurns {
				t.Fatalf("Transcript(%d, %d) has %d turns", maxTurns, maxBytes, n)
			}
		}
	}
}

func ExampleTranscript() {
	turns := []Turn{
		{Role: RoleUser, Text: "Summarize the design doc."},
		{Role: RoleAssistant, Text: "It proposes one app-server per user."},
	}
	fmt.Println(Transcript(turns, DefaultTranscriptTurns, DefaultTranscriptBytes))
	// Output:
	// Earlier conversation in this thread (restored because the previous session could not be resumed), oldest first:
	//
	// User: Summarize the design doc.
	//
	// Assistant: It proposes one app-server per user.
}
