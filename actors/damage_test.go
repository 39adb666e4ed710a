package actors

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/meshweaver/supervisor/messages"
	"github.com/meshweaver/supervisor/store"
	"github.com/meshweaver/supervisor/testkit/fakeappserver"
)

// On-disk damage.

// TestDamageRegistryAndJournal: a damaged thread record makes the round
// start a fresh thread, seeded with the journal, and the record is
// rewritten; a damaged journal counts as empty and is rewritten.
func TestDamageRegistryAndJournal(t *testing.T) {
	record := filepath.Join(t.TempDir(), "record.jsonl")
	h := supHarness(t, heldFake(t, fakeappserver.Config{RecordPath: record}))
	c := h.caller()
	const key = "mesh/damaged"
	home := userHome(t, h, "alice")
	reg, jr := store.NewRegistry(filepath.Dir(home)), store.NewJournal(filepath.Dir(home))
	n := 0
	round := func(text string) roundResult {
		n++
		return h.heldRound(c, messages.StartRound{User: "alice", Thread: key, Text: text, RoundID: fmt.Sprintf("dmg-%d", n)})
	}
	// The registry actor has written before the verdict is sent (the
	// verdict names a failed write); these check what is on disk.
	recorded := func(threadID string) {
		t.Helper()
		poll(t, waitFor, "the thread record of "+threadID, func() bool {
			id, err := reg.Lookup(key)
			return err == nil && id == threadID
		})
	}
	// journaled waits for a valid journal whose last user turn is last; the
	// held turns answer "Hello " before they are interrupted.
	journaled := func(last string) []store.Turn {
		t.Helper()
		var turns []store.Turn
		poll(t, waitFor, "a valid journal ending with "+last, func() bool {
			var err error
			turns, err = jr.Turns(key)
			n := len(turns)
			return err == nil && n >= 2 && turns[n-2].Role == store.RoleUser && turns[n-2].Text == last &&
				turns[n-1].Role == store.RoleAssistant
		})
		return turns
	}

	r := round("first message")
	recorded(r.verdict.CodexThreadID)
	journaled("first message")
	valid, err := os.ReadFile(reg.Path(key))
	if err != nil {
		t.Fatal(err)
	}
	for _, d := range []struct {
		name string
		data []byte
	}{
		{"empty", nil},
		{"truncated", valid[:len(valid)/2]},
		{"garbage", []byte("\x00\xffnot a record at all\n")},
		{"another key", otherKeyRecord(t)},
	} {
		prev := r.verdict.CodexThreadID
		if err := os.WriteFile(reg.Path(key), d.data, 0o600); err != nil {
			t.Fatal(err)
		}
		text := "after " + d.name
		r = round(text)
		if r.verdict.Resumed || r.verdict.CodexThreadID == prev || r.verdict.CodexThreadID == "" {
			t.Errorf("%s record: verdict %+v, want a fresh thread", d.name, r.verdict)
		}
		if r.verdict.ContextLost || r.verdict.NotSaved != "" {
			t.Errorf("%s record: verdict %+v, want the context kept (journal) and everything saved", d.name, r.verdict)
		}
		if got := lastTurnText(t, record); !strings.Contains(got, "first message") || !strings.HasSuffix(got, text) {
			t.Errorf("%s record: the fresh thread was not seeded with the journal: %q", d.name, got)
		}
		recorded(r.verdict.CodexThreadID)
		journaled(text)
	}

	// A record of a thread the CLI does not know (rollouts lost): fall back.
	prev := r.verdict.CodexThreadID
	if err := reg.Record(key, "0199a0a0-0000-7000-8000-000000000000"); err != nil {
		t.Fatal(err)
	}
	r = round("after lost rollout")
	if !r.verdict.FellBack || r.verdict.CodexThreadID == prev || r.verdict.ContextLost {
		t.Errorf("unknown thread: verdict %+v, want a fallback to a fresh thread seeded with the journal", r.verdict)
	}
	if got := lastTurnText(t, record); !strings.Contains(got, "first message") {
		t.Errorf("the fallback thread was not seeded with the journal: %q", got)
	}
	recorded(r.verdict.CodexThreadID)
	journaled("after lost rollout")

	// A garbage journal with a good record: the thread resumes, the journal
	// starts over.
	prev = r.verdict.CodexThreadID
	if err := os.WriteFile(jr.Path(key), []byte("{\"format\":\"garbage\"\n\x00\x01"), 0o600); err != nil {
		t.Fatal(err)
	}
	r = round("after garbage journal")
	if !r.verdict.Resumed || r.verdict.CodexThreadID != prev {
		t.Errorf("garbage journal: verdict %+v, want thread %s resumed", r.verdict, prev)
	}
	if turns := journaled("after garbage journal"); len(turns) != 2 {
		t.Errorf("the rewritten journal holds %d turns, want just this round's 2: %+v", len(turns), turns)
	}

	// Both damaged: a fresh thread with no transcript, both rewritten.
	for _, p := range []string{reg.Path(key), jr.Path(key)} {
		if err := os.WriteFile(p, []byte("garbage"), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	r = round("after both")
	if r.verdict.Resumed || !r.verdict.ContextLost {
		t.Errorf("both damaged: verdict %+v, want a fresh thread that says it lost the context", r.verdict)
	}
	if got := lastTurnText(t, record); got != "after both" {
		t.Errorf("both damaged: the fresh thread got %q, want the bare message", got)
	}
	recorded(r.verdict.CodexThreadID)
	if turns := journaled("after both"); len(turns) != 2 {
		t.Errorf("the rewritten journal holds %d turns, want 2", len(turns))
	}
}
