package store

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"syscall"
	"testing"
	"unicode/utf8"
)

func turnsN(n int, size int) []Turn {
	turns := make([]Turn, n)
	for i := range turns {
		role := RoleUser
		if i%2 == 1 {
			role = RoleAssistant
		}
		text := fmt.Sprintf("turn %d", i)
		if pad := size - len(text); pad > 0 {
			text = strings.Repeat("x", pad) + text
		}
		turns[i] = Turn{Role: role, Text: text}
	}
	return turns
}

func TestJournalRoundTrip(t *testing.T) {
	j := NewJournal(t.TempDir())
	if got, err := j.Turns(testKey); got != nil || err != nil {
		t.Fatalf("Turns before Append = %v, %v; want nil, nil", got, err)
	}
	first := []Turn{{RoleUser, "hello <b>&</b>\nsecond line"}, {RoleAssistant, "hi ✓"}}
	if err := j.Append(testKey, first...); err != nil {
		t.Fatal(err)
	}
	if err := j.Append(testKey, Turn{RoleUser, "again"}); err != nil {
		t.Fatal(err)
	}
	want := append(first, Turn{RoleUser, "again"})
	got, err := j.Turns(testKey)
	if err != nil || !reflect.DeepEqual(got, want) {
		t.Fatalf("Turns = %q, %v; want %q", got, err, want)
	}
	path := j.Path(testKey)
	if !strings.HasSuffix(path, "/meshweaver/journal/"+testKeyHash[:16]+".jsonl") {
		t.Errorf("Path = %q", path)
	}
	data, _ := os.ReadFile(path)
	wantFile := `{"format":"meshweaver-journal","version":1,"key":"` + testKeyHash + `"}
{"role":"user","text":"hello <b>&</b>\nsecond line"}
{"role":"assistant","text":"hi ✓"}
{"role":"user","text":"again"}
`
	if string(data) != wantFile {
		t.Errorf("file =\n%s\nwant\n%s", data, wantFile)
	}
	assertMode(t, path, 0o600)
	assertNoTemp(t, j.dir)

	if err := j.Append(testKey); err != nil {
		t.Errorf("Append of nothing: %v", err)
	}
	if got, _ := j.Turns("other"); got != nil {
		t.Errorf("Turns(other) = %v", got)
	}
	for i := 0; i < 2; i++ {
		if err := j.Forget(testKey); err != nil {
			t.Fatalf("Forget #%d: %v", i, err)
		}
	}
	if got, err := j.Turns(testKey); got != nil || err != nil {
		t.Errorf("Turns after Forget = %v, %v", got, err)
	}
}

func TestJournalRejects(t *testing.T) {
	j := NewJournal(t.TempDir())
	for _, role := range []string{"", "system", "User", "tool"} {
		if err := j.Append(testKey, Turn{Role: role, Text: "x"}); err == nil {
			t.Errorf("Append with role %q succeeded", role)
		}
	}
	if err := j.Append("", Turn{RoleUser, "x"}); !errors.Is(err, ErrInvalidKey) {
		t.Errorf("Append with empty key = %v", err)
	}
	if _, err := os.Stat(j.Path(testKey)); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("rejected Append wrote a file: %v", err)
	}
	// Invalid UTF-8 is replaced, so what is stored round-trips.
	if err := j.Append(testKey, Turn{RoleUser, "a\xffb"}); err != nil {
		t.Fatal(err)
	}
	got, err := j.Turns(testKey)
	if err != nil || len(got) != 1 || got[0].Text != "a\uFFFDb" {
		t.Errorf("Turns = %q, %v", got, err)
	}
}

func TestJournalBounds(t *testing.T) {
	tests := []struct {
		name               string
		maxTurns, maxBytes int
		appends            [][]Turn
		wantTexts          []string // of the kept turns, or nil to check bounds only
	}{
		{
			name:      "turns",
			maxTurns:  3,
			appends:   [][]Turn{turnsN(5, 0)},
			wantTexts: []string{"turn 2", "turn 3", "turn 4"},
		},
		{
			name:      "turns across appends",
			maxTurns:  2,
			appends:   [][]Turn{{{RoleUser, "a"}}, {{RoleAssistant, "b"}}, {{RoleUser, "c"}}},
			wantTexts: []string{"b", "c"},
		},
		{
			name:     "bytes",
			maxBytes: 1000,
			appends:  [][]Turn{turnsN(10, 200), turnsN(3, 200)},
		},
		{
			name:     "default turns",
			appends:  [][]Turn{turnsN(DefaultJournalTurns+5, 0)},
			maxTurns: 0,
		},
		{
			name:     "default bytes",
			appends:  [][]Turn{turnsN(30, 20<<10)},
			maxTurns: 100,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			j := NewJournal(t.TempDir())
			j.MaxTurns, j.MaxBytes = tt.maxTurns, tt.maxBytes
			var all []Turn
			for _, a := range tt.appends {
				if err := j.Append(testKey, a...); err != nil {
					t.Fatal(err)
				}
				all = append(all, a...)
			}
			got, err := j.Turns(testKey)
			if err != nil {
				t.Fatal(err)
			}
			if tt.wantTexts != nil {
				var texts []string
				for _, g := range got {
					texts = append(texts, g.Text)
				}
				if !reflect.DeepEqual(texts, tt.wantTexts) {
					t.Errorf("kept %q, want %q", texts, tt.wantTexts)
				}
			}
			maxTurns, maxBytes := j.maxTurns(), j.maxBytes()
			if len(got) > maxTurns || len(got) == 0 {
				t.Errorf("kept %d turns, want 1..%d", len(got), maxTurns)
			}
			fi, _ := os.Stat(j.Path(testKey))
			if fi.Size() > 2*int64(maxBytes) {
				t.Errorf("file is %d bytes, more than twice %d", fi.Size(), maxBytes)
			}
			// The kept turns are the newest, in order.
			if !reflect.DeepEqual(got, all[len(all)-len(got):]) {
				t.Errorf("kept turns are not the newest %d", len(got))
			}
			// A fuller journal would not have fit.
			if len(got) < len(all) && len(got) < maxTurns {
				more := formatJournal(testKeyHash, all[len(all)-len(got)-1:])
				if len(more) <= maxBytes {
					t.Errorf("dropped a turn although %d bytes fit in %d", len(more), maxBytes)
				}
			}
		})
	}
}

func TestJournalCutsOversizedNewestTurn(t *testing.T) {
	tests := []struct {
		name string
		text string
	}{
		{"ascii", strings.Repeat("abcdefghij", 1000) + "THE END"},
		{"multibyte", strings.Repeat("é日🙂", 1000) + "THE END"},
		{"escapes", strings.Repeat("\x01\"\\", 1000) + "THE END"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			j := NewJournal(t.TempDir())
			j.MaxBytes = 1000
			if err := j.Append(testKey, Turn{RoleUser, "older"}, Turn{RoleAssistant, tt.text}); err != nil {
				t.Fatal(err)
			}
			got, err := j.Turns(testKey)
			if err != nil || len(got) != 1 {
				t.Fatalf("Turns = %d turns, %v; want 1", len(got), err)
			}
			text := got[0].Text
			if got[0].Role != RoleAssistant || !strings.HasPrefix(text, ellipsis) || !strings.HasSuffix(text, "THE END") {
				t.Errorf("kept %s %q…, want the end of the newest turn after an ellipsis", got[0].Role, text[:min(20, len(text))])
			}
			if !utf8.ValidString(text) || !strings.HasSuffix(tt.text, strings.TrimPrefix(text, ellipsis)) {
				t.Errorf("cut text is not a valid suffix of the original")
			}
			fi, _ := os.Stat(j.Path(testKey))
			if fi.Size() > 1000 || fi.Size() < 900 {
				t.Errorf("file is %d bytes, want a little under 1000", fi.Size())
			}
			// Appended to a journal that has turns, the same is kept.
			if err := j.Append(testKey, Turn{RoleUser, "older"}, Turn{RoleAssistant, tt.text}); err != nil {
				t.Fatal(err)
			}
			if again, err := j.Turns(testKey); err != nil || !reflect.DeepEqual(again, got) {
				t.Errorf("appended again: Turns = %d turns, %v; want the same cut turn", len(again), err)
			}
			if fi, _ := os.Stat(j.Path(testKey)); fi.Size() > 2000 {
				t.Errorf("file is %d bytes, more than twice 1000", fi.Size())
			}
		})
	}
	// A budget too small for even the header leaves no turns.
	j := NewJournal(t.TempDir())
	j.MaxBytes = 10
	if err := j.Append(testKey, Turn{RoleUser, "x"}); err != nil {
		t.Fatal(err)
	}
	if got, err := j.Turns(testKey); got != nil || err != nil {
		t.Errorf("Turns = %v, %v; want none", got, err)
	}
}

func TestJournalCorrupt(t *testing.T) {
	header := `{"format":"meshweaver-journal","version":1,"key":"` + testKeyHash + `"}` + "\n"
	turn := `{"role":"user","text":"hi"}` + "\n"
	tests := []struct{ name, content string }{
		{"empty", ""},
		{"garbage", "\x00\xffnot json\n"},
		{"truncated header", header[:20]},
		{"wrong key", strings.Replace(header, testKeyHash, strings.Repeat("0", 64), 1) + turn},
		{"future version", strings.Replace(header, `"version":1`, `"version":2`, 1) + turn},
		{"other format", strings.Replace(header, "meshweaver-journal", "x", 1) + turn},
		{"unknown field", header + `{"role":"user","text":"hi","extra":1}` + "\n"},
		{"bad role", header + `{"role":"system","text":"hi"}` + "\n"},
		{"null turn", header + "null\n"},
		{"array turn", header + "[]\n"},
		{"blank line", header + "\n" + turn},
		{"two objects", header + strings.TrimSuffix(turn, "\n") + turn},
		{"wrong type", header + `{"role":"user","text":3}` + "\n"},
		{"valid prefix then garbage", header + turn + turn + "garbage\n"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			j := NewJournal(t.TempDir())
			path := j.Path(testKey)
			writeRaw(t, path, []byte(tt.content))
			got, err := j.Turns(testKey)
			if !errors.Is(err, ErrCorrupt) || got != nil {
				t.Fatalf("Turns = %v, %v; want nil, ErrCorrupt", got, err)
			}
			if !strings.Contains(err.Error(), path) {
				t.Errorf("error %q does not name %s", err, path)
			}
			if err := j.Append(testKey, Turn{RoleUser, "fresh"}); err != nil {
				t.Fatalf("Append over a corrupt journal: %v", err)
			}
			if got, err := j.Turns(testKey); err != nil || !reflect.DeepEqual(got, []Turn{{RoleUser, "fresh"}}) {
				t.Errorf("Turns after Append = %v, %v", got, err)
			}
		})
	}
}

func TestJournalHeaderOnly(t *testing.T) {
	j := NewJournal(t.TempDir())
	writeRaw(t, j.Path(testKey), journalHeader(testKeyHash))
	if got, err := j.Turns(testKey); got != nil || err != nil {
		t.Errorf("Turns = %v, %v; want nil, nil", got, err)
	}
}

// inode is the file's inode number: the same after an append, a new one
// after a rewrite (a rename over it).
func inode(t *testing.T, path string) uint64 {
	t.Helper()
	fi, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	return fi.Sys().(*syscall.Stat_t).Ino
}

// An Append to a journal it has seen writes the new lines at the end of
// the same file; past twice the bounds the file is compacted to them.
func TestJournalAppendsInPlace(t *testing.T) {
	j := NewJournal(t.TempDir())
	j.MaxTurns = 3
	path := j.Path(testKey)
	if err := j.Append(testKey, Turn{RoleUser, "t0"}); err != nil {
		t.Fatal(err)
	}
	ino := inode(t, path)
	var want []Turn
	want = append(want, Turn{RoleUser, "t0"})
	for i := 1; i < 6; i++ { // 6 turns: twice MaxTurns, no compaction yet
		tu := Turn{RoleAssistant, fmt.Sprintf("t%d", i)}
		if err := j.Append(testKey, tu); err != nil {
			t.Fatal(err)
		}
		want = append(want, tu)
	}
	if got := inode(t, path); got != ino {
		t.Errorf("the file was replaced (inode %d → %d), want appends in place", ino, got)
	}
	data, _ := os.ReadFile(path)
	if wantFile := formatJournal(testKeyHash, want); string(data) != string(wantFile) {
		t.Errorf("file =\n%s\nwant\n%s", data, wantFile)
	}
	if got, err := j.Turns(testKey); err != nil || !reflect.DeepEqual(got, want[3:]) {
		t.Errorf("Turns = %q, %v; want the newest 3 %q", got, err, want[3:])
	}
	// The 7th turn passes twice MaxTurns: the file is rewritten with the
	// newest 3.
	if err := j.Append(testKey, Turn{RoleUser, "t6"}); err != nil {
		t.Fatal(err)
	}
	want = append(want, Turn{RoleUser, "t6"})
	if got := inode(t, path); got == ino {
		t.Error("the file was not rewritten past twice its bounds")
	}
	data, _ = os.ReadFile(path)
	if wantFile := formatJournal(testKeyHash, want[4:]); string(data) != string(wantFile) {
		t.Errorf("compacted file =\n%s\nwant\n%s", data, wantFile)
	}
	assertMode(t, path, 0o600)
	assertNoTemp(t, j.dir)
	// A new Journal (a restarted daemon) appends to the same file too.
	j2 := NewJournal(filepath.Dir(filepath.Dir(j.dir)))
	j2.MaxTurns = 3
	ino = inode(t, path)
	if err := j2.Append(testKey, Turn{RoleAssistant, "t7"}); err != nil {
		t.Fatal(err)
	}
	if got := inode(t, path); got != ino {
		t.Error("a new Journal rewrote a clean file instead of appending")
	}
	if got, err := j2.Turns(testKey); err != nil || !reflect.DeepEqual(got, append(want[5:], Turn{RoleAssistant, "t7"})) {
		t.Errorf("Turns = %q, %v", got, err)
	}
}

// A process killed in an Append leaves the file with any prefix of the
// appended bytes: every such file reads as the earlier turns and the
// appended lines that are whole, never as damage, and the next Append
// rewrites it without the cut line.
func TestJournalKilledMidAppend(t *testing.T) {
	before := []Turn{{RoleUser, "hello"}, {RoleAssistant, "hi ✓"}}
	added := []Turn{{RoleUser, "how are you?"}, {RoleAssistant, "fine, thanks"}}
	old := formatJournal(testKeyHash, before)
	full := formatJournal(testKeyHash, append(append([]Turn(nil), before...), added...))
	tail := full[len(old):]
	for n := 0; n <= len(tail); n++ {
		j := NewJournal(t.TempDir())
		path := j.Path(testKey)
		writeRaw(t, path, full[:len(old)+n])
		want := append([]Turn(nil), before...)
		if n >= len(encodeTurn(added[0])) {
			want = append(want, added[0])
		}
		if n == len(tail) {
			want = append(want, added[1])
		}
		got, err := j.Turns(testKey)
		if err != nil || !reflect.DeepEqual(got, want) {
			t.Fatalf("cut after %d of %d appended bytes: Turns = %q, %v; want %q", n, len(tail), got, err, want)
		}
		next := Turn{RoleUser, "next"}
		if err := j.Append(testKey, next); err != nil {
			t.Fatal(err)
		}
		data, _ := os.ReadFile(path)
		if wantFile := formatJournal(testKeyHash, append(want, next)); string(data) != string(wantFile) {
			t.Fatalf("cut after %d bytes, then Append: file =\n%s\nwant\n%s", n, data, wantFile)
		}
	}
}

// A journal whose file changed since this Journal saw it (another writer,
// a removal) is read again rather than appended to blindly.
func TestJournalChangedUnderneath(t *testing.T) {
	dir := t.TempDir()
	a, b := NewJournal(dir), NewJournal(dir)
	if err := a.Append(testKey, Turn{RoleUser, "a1"}); err != nil {
		t.Fatal(err)
	}
	if err := b.Append(testKey, Turn{RoleAssistant, "b1"}); err != nil {
		t.Fatal(err)
	}
	if err := a.Append(testKey, Turn{RoleUser, "a2"}); err != nil {
		t.Fatal(err)
	}
	want := []Turn{{RoleUser, "a1"}, {RoleAssistant, "b1"}, {RoleUser, "a2"}}
	if got, err := b.Turns(testKey); err != nil || !reflect.DeepEqual(got, want) {
		t.Errorf("Turns = %q, %v; want %q", got, err, want)
	}
	if err := os.Remove(a.Path(testKey)); err != nil {
		t.Fatal(err)
	}
	if err := a.Append(testKey, Turn{RoleAssistant, "a3"}); err != nil {
		t.Fatal(err)
	}
	if got, err := b.Turns(testKey); err != nil || !reflect.DeepEqual(got, []Turn{{RoleAssistant, "a3"}}) {
		t.Errorf("after a removal: Turns = %q, %v", got, err)
	}
}

// An append that cannot be synced (a full or failing disk) is an error,
// and the file is cut back to what it was: the retry writes the turns
// once.
func TestJournalFailedAppendLeavesFile(t *testing.T) {
	j := NewJournal(t.TempDir())
	path := j.Path(testKey)
	if err := j.Append(testKey, Turn{RoleUser, "one"}); err != nil {
		t.Fatal(err)
	}
	before, _ := os.ReadFile(path)
	syncData = func(*os.File) error { return syscall.ENOSPC }
	err := j.Append(testKey, Turn{RoleAssistant, "two"})
	syncData = fdatasync
	if !errors.Is(err, syscall.ENOSPC) || !strings.Contains(err.Error(), path) {
		t.Fatalf("Append with a failing sync = %v; want ENOSPC naming %s", err, path)
	}
	if after, _ := os.ReadFile(path); string(after) != string(before) {
		t.Errorf("file after a failed append =\n%s\nwant it as before:\n%s", after, before)
	}
	if err := j.Append(testKey, Turn{RoleAssistant, "two"}); err != nil {
		t.Fatal(err)
	}
	if got, err := j.Turns(testKey); err != nil || !reflect.DeepEqual(got, []Turn{{RoleUser, "one"}, {RoleAssistant, "two"}}) {
		t.Errorf("Turns after the retry = %q, %v", got, err)
	}
}

// Write's turns are in the file at once (a killed process loses nothing);
// Sync puts them on disk, and a Sync that fails cuts the file back to what
// was synced, every Write since included.
func TestJournalWriteThenSync(t *testing.T) {
	j := NewJournal(t.TempDir())
	path := j.Path(testKey)
	one := Turn{RoleUser, "one"}
	if err := j.Append(testKey, one); err != nil {
		t.Fatal(err)
	}
	synced, _ := os.ReadFile(path)
	two, three := Turn{RoleAssistant, "two"}, Turn{RoleUser, "three"}
	for _, tu := range []Turn{two, three} {
		if err := j.Write(testKey, tu); err != nil {
			t.Fatal(err)
		}
	}
	// Another reader (a restarted daemon) sees them before any sync.
	if got, err := NewJournal(filepath.Dir(filepath.Dir(j.dir))).Turns(testKey); err != nil || !reflect.DeepEqual(got, []Turn{one, two, three}) {
		t.Fatalf("Turns after Write = %q, %v", got, err)
	}
	syncData = func(*os.File) error { return syscall.EIO }
	err := j.Sync(testKey)
	syncData = fdatasync
	if !errors.Is(err, syscall.EIO) || !strings.Contains(err.Error(), path) {
		t.Fatalf("Sync = %v; want EIO naming %s", err, path)
	}
	if after, _ := os.ReadFile(path); string(after) != string(synced) {
		t.Errorf("file after a failed sync =\n%s\nwant what was synced:\n%s", after, synced)
	}
	if err := j.Sync(testKey); err != nil {
		t.Errorf("a second Sync with nothing written: %v", err)
	}
	if err := j.Write(testKey, two, three); err != nil {
		t.Fatal(err)
	}
	if err := j.Sync(testKey); err != nil {
		t.Fatal(err)
	}
	if got, err := j.Turns(testKey); err != nil || !reflect.DeepEqual(got, []Turn{one, two, three}) {
		t.Errorf("Turns after the retry = %q, %v", got, err)
	}
}
