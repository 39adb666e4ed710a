package actors

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/meshweaver/supervisor/messages"
	"github.com/meshweaver/supervisor/store"
	"github.com/meshweaver/supervisor/testkit/fakeappserver"
)

// blockDir puts a plain file where the registry's folder dir should be, so
// that every write into it fails (root, which runs these tests, ignores
// permissions but not ENOTDIR); the returned func puts the folder back
// (empty: the registry recreates what it writes).
func blockDir(t *testing.T, dir string) (unblock func()) {
	t.Helper()
	if err := os.RemoveAll(dir); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(dir, []byte("not a folder\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	return func() {
		t.Helper()
		if err := os.Remove(dir); err != nil {
			t.Fatal(err)
		}
	}
}

// A round whose thread record or journal entry could not be written says
// so in its verdict; the write is kept and retried by the thread's next
// round, which then finds what the failed write held.
func TestUnsavedWritesNamedAndRetried(t *testing.T) {
	h := supHarness(t, heldFake(t, fakeappserver.Config{}))
	c := h.caller()
	const key = "mesh/unsaved"
	home := userHome(t, h, "alice")
	reg, jr := store.NewRegistry(filepath.Dir(home)), store.NewJournal(filepath.Dir(home))
	round := func(id, text string) messages.RoundFinished {
		t.Helper()
		return h.heldRound(c, messages.StartRound{User: "alice", Thread: key, Text: text, RoundID: id}).verdict
	}

	if v := round("u-1", "one"); v.NotSaved != "" || v.ContextLost {
		t.Fatalf("a round with a healthy registry: %+v", v)
	}

	// The thread record cannot be written: the fresh thread (the record
	// is unreadable too) is seeded from the journal, and its record waits.
	unblock := blockDir(t, filepath.Dir(reg.Path(key)))
	v2 := round("u-2", "two")
	if !strings.HasPrefix(v2.NotSaved, "thread record: ") || v2.ContextLost || v2.Resumed {
		t.Errorf("record not writable: verdict %+v, want not_saved naming the thread record, a fresh thread with its context", v2)
	}
	unblock()
	v3 := round("u-3", "three")
	if v3.NotSaved != "" || !v3.Resumed || v3.CodexThreadID != v2.CodexThreadID {
		t.Errorf("the round after: verdict %+v, want thread %s resumed from the retried record", v3, v2.CodexThreadID)
	}
	if id, err := reg.Lookup(key); err != nil || id != v2.CodexThreadID {
		t.Errorf("record on disk = %q, %v; want %s", id, err, v2.CodexThreadID)
	}

	// The journal cannot be written: named, then appended by the next round.
	// The registry syncs a round's lines after its verdict; a sync that
	// failed on the blocked folder would keep round three's lines for the
	// next round as well. Its answer to a listing comes after that sync.
	h.engine.SendWithSender(h.root, messages.ListThreads{User: "alice"}, c.pid)
	if r, ok := c.next(t).(messages.Threads); !ok {
		t.Fatalf("ListThreads: %#v", r)
	}
	unblock = blockDir(t, filepath.Dir(jr.Path(key)))
	v4 := round("u-4", "four")
	if !strings.HasPrefix(v4.NotSaved, "journal: ") || !v4.Resumed {
		t.Errorf("journal not writable: verdict %+v, want not_saved naming the journal", v4)
	}
	unblock()
	if v := round("u-5", "five"); v.NotSaved != "" {
		t.Errorf("the round after: verdict %+v, want everything saved", v)
	}
	turns, err := jr.Turns(key)
	if err != nil {
		t.Fatal(err)
	}
	var users []string
	for _, tu := range turns {
		if tu.Role == store.RoleUser {
			users = append(users, tu.Text)
		}
	}
	if got, want := strings.Join(users, ","), "four,five"; got != want {
		t.Errorf("journal's user turns = %s, want %s (the failed append retried before the next)", got, want)
	}
}
