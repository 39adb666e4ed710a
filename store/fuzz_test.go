package store

import (
	"bytes"
	"errors"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"unicode/utf8"
)

// FuzzRegistryRead checks that the thread record reader never panics, fails
// only with ErrCorrupt, and accepts only what it would write itself.
func FuzzRegistryRead(f *testing.F) {
	f.Add(formatThreadRecord(testKey, testThread))
	f.Add(formatThreadRecord(testKey, strings.ToUpper(testThread)))
	f.Add(formatFields(threadHeaderV1, "key", testKeyHash, "thread", testThread))
	f.Add([]byte("meshweaver-thread v1\nkey \nthread \n"))
	f.Add([]byte("meshweaver-thread v2\nkey \nthread \nmesh \n"))
	f.Add([]byte("meshweaver-thread v1\n"))
	f.Add([]byte(""))
	f.Add([]byte("\n\n\n"))
	f.Add([]byte(testThread))
	f.Fuzz(func(t *testing.T, data []byte) {
		rec, err := parseThreadRecord(data)
		if err != nil {
			if !errors.Is(err, ErrCorrupt) {
				t.Fatalf("error %v is not ErrCorrupt", err)
			}
			return
		}
		if !IsUUID(rec.thread) || !isLowerHex(rec.hash, 64) {
			t.Fatalf("accepted hash %q thread %q", rec.hash, rec.thread)
		}
		again := formatFields(threadHeaderV1, "key", rec.hash, "thread", rec.thread)
		if rec.version == 2 {
			again = formatThreadRecord(rec.key, rec.thread)
		}
		if !bytes.Equal(again, data) {
			t.Fatalf("accepted %q but writes %q", data, again)
		}
	})
}

// FuzzJournalRead checks that the journal reader never panics, fails only
// with ErrCorrupt, and that whatever it accepts reads back the same after
// being written again.
func FuzzJournalRead(f *testing.F) {
	header := journalHeader(testKeyHash)
	f.Add(formatJournal(testKeyHash, []Turn{{RoleUser, "hi"}, {RoleAssistant, "hello\n<b>✓</b>"}}))
	f.Add(header)
	f.Add(append(header, `{"role":"user","text":"x","extra":1}`+"\n"...))
	f.Add(append(header, `{"ROLE":"user","Text":null}`+"\n"...))
	f.Add(append(header, `{"role":"user","text":"\ud800\u2028"}`+"\n"...))
	f.Add(append(header, "null\n"...))
	f.Add([]byte(`{"format":"meshweaver-journal","version":1.0,"key":"` + testKeyHash + `"}` + "\n"))
	f.Add([]byte(""))
	f.Add([]byte("\n"))
	f.Add(append(header, `{"role":"user","te`...))
	f.Fuzz(func(t *testing.T, data []byte) {
		hash, turns, cut, err := parseJournal(data)
		if err != nil {
			if !errors.Is(err, ErrCorrupt) {
				t.Fatalf("error %v is not ErrCorrupt", err)
			}
			return
		}
		for _, tt := range turns {
			if !validRole(tt.Role) || !utf8.ValidString(tt.Text) {
				t.Fatalf("accepted turn %q", tt)
			}
		}
		if cut < 0 || cut >= len(data) || (cut > 0 && bytes.Contains(data[len(data)-cut:], []byte("\n"))) {
			t.Fatalf("cut %d of %q: not the bytes after the last newline", cut, data)
		}
		again := formatJournal(hash, turns)
		hash2, turns2, cut2, err := parseJournal(again)
		if err != nil || hash2 != hash || !reflect.DeepEqual(turns2, turns) || cut2 != 0 {
			t.Fatalf("accepted %q, rewrote %q, read back %q %q %v", data, again, hash2, turns2, err)
		}
	})
}

// FuzzProcRecordRead checks that the process record reader never panics,
// fails only with ErrCorrupt, never yields a PID that would signal every
// process, and accepts only what it would write itself.
func FuzzProcRecordRead(f *testing.F) {
	f.Add(formatProcRecord(ProcRecord{PID: 4242, StartTime: 987654, Exe: "/bin/codex"}))
	f.Add(formatProcRecord(ProcRecord{PID: 2, StartTime: 1}))
	f.Add([]byte("meshweaver-proc v1\npid -1\nstart 1\nexe x\n"))
	f.Add([]byte("meshweaver-proc v1\npid 0x10\nstart 1\nexe x\n"))
	f.Add([]byte("meshweaver-proc v1\npid 99999999999999999999\nstart 1\nexe x\n"))
	f.Add([]byte(""))
	f.Fuzz(func(t *testing.T, data []byte) {
		rec, err := parseProcRecord(data)
		if err != nil {
			if !errors.Is(err, ErrCorrupt) {
				t.Fatalf("error %v is not ErrCorrupt", err)
			}
			return
		}
		if rec.PID <= 1 || rec.StartTime == 0 {
			t.Fatalf("accepted %+v", rec)
		}
		if again := formatProcRecord(rec); !bytes.Equal(again, data) {
			t.Fatalf("accepted %q but writes %q", data, again)
		}
	})
}

// FuzzHomeDir checks that every accepted user id yields a home two levels
// below the root.
func FuzzHomeDir(f *testing.F) {
	for _, id := range hostileUserIDs {
		f.Add(id)
	}
	f.Add("alice")
	f.Add("a..b")
	f.Fuzz(func(t *testing.T, user string) {
		const root = "/srv/homes"
		home, err := HomeDir(root, user)
		if err != nil {
			if !errors.Is(err, ErrInvalidUserID) || len(err.Error()) > 200 {
				t.Fatalf("error %q", err)
			}
			return
		}
		if filepath.Dir(filepath.Dir(home)) != root || filepath.Base(filepath.Dir(home)) != user || filepath.Base(home) != ".codex" {
			t.Fatalf("HomeDir(%q) = %q", user, home)
		}
	})
}

// FuzzTranscript checks the transcript's bounds on arbitrary turns.
func FuzzTranscript(f *testing.F) {
	f.Add("hello", "world ✓ 日本", 3, 200)
	f.Add(strings.Repeat("é", 100), "\xff\xfe", 1, 1)
	f.Fuzz(func(t *testing.T, a, b string, maxTurns, maxBytes int) {
		turns := []Turn{{RoleUser, a}, {RoleAssistant, b}, {RoleUser, b + a}}
		got := Transcript(turns, maxTurns, maxBytes)
		if maxBytes <= 0 {
			maxBytes = DefaultTranscriptBytes
		}
		if len(got) > maxBytes {
			t.Fatalf("%d bytes, bound %d", len(got), maxBytes)
		}
		if utf8.ValidString(a) && utf8.ValidString(b) && !utf8.ValidString(got) {
			t.Fatalf("invalid UTF-8 from valid input: %q", got)
		}
	})
}
