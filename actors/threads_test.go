package actors

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/meshweaver/supervisor/messages"
	"github.com/meshweaver/supervisor/store"
	"github.com/meshweaver/supervisor/testkit/fakeappserver"
)

// ListThreads names the user's mesh threads with their codex threads, most
// recently active first, within the limit.
func TestListThreads(t *testing.T) {
	h := fakeHarness(t, fakeappserver.Config{}, nil)
	c := h.caller()
	list := func(limit int) messages.Threads {
		t.Helper()
		h.engine.SendWithSender(h.root, messages.ListThreads{User: "ivy", Limit: limit}, c.pid)
		return expect[messages.Threads](t, c)
	}
	if got := list(0); got.User != "ivy" || len(got.Threads) != 0 || got.Error != "" || got.Truncated {
		t.Fatalf("Threads before any round = %+v, want none", got)
	}
	ids := map[string]string{}
	for _, key := range []string{"mesh/1", "mesh/2"} {
		r := h.round(c, messages.StartRound{User: "ivy", Thread: key, Text: "hi"})
		if r.verdict.Status != messages.StatusCompleted || r.verdict.CodexThreadID == "" {
			t.Fatalf("round on %s = %+v", key, r.verdict)
		}
		ids[key] = r.verdict.CodexThreadID
	}
	// mesh/1 ran last (its journal says so).
	home, err := homeFor(h.cfg, "ivy")
	if err != nil {
		t.Fatal(err)
	}
	later := time.Now().Add(time.Hour).Truncate(time.Second)
	if err := os.Chtimes(store.NewJournal(filepath.Dir(home)).Path("mesh/1"), later, later); err != nil {
		t.Fatal(err)
	}
	got := list(0)
	if got.Error != "" || len(got.Threads) != 2 || got.Truncated {
		t.Fatalf("Threads = %+v, want two", got)
	}
	first, second := got.Threads[0], got.Threads[1]
	if first.Thread != "mesh/1" || first.CodexThreadID != ids["mesh/1"] || first.LastActivityUnix != later.Unix() {
		t.Errorf("first = %+v, want mesh/1 (%s) active at %d", first, ids["mesh/1"], later.Unix())
	}
	if second.Thread != "mesh/2" || second.CodexThreadID != ids["mesh/2"] || second.LastActivityUnix == 0 || second.LastActivityUnix > later.Unix() {
		t.Errorf("second = %+v, want mesh/2 (%s)", second, ids["mesh/2"])
	}
	if got := list(1); len(got.Threads) != 1 || !got.Truncated || got.Threads[0].Thread != "mesh/1" {
		t.Errorf("Threads with limit 1 = %+v, want mesh/1, truncated", got)
	}
	// Another user's threads are not listed.
	if got := (func() messages.Threads {
		h.engine.SendWithSender(h.root, messages.ListThreads{User: "jon"}, c.pid)
		return expect[messages.Threads](t, c)
	})(); len(got.Threads) != 0 {
		t.Errorf("jon's threads = %+v, want none", got)
	}
	// A bad request is rejected by the root.
	h.engine.SendWithSender(h.root, messages.ListThreads{User: "ivy", Limit: -1}, c.pid)
	if r := expect[messages.Rejected](t, c); !strings.Contains(r.Reason, "limit is -1") {
		t.Errorf("rejected: %q", r.Reason)
	}
}

// A thread record of an older daemon (no mesh key) is rewritten when a
// round looks it up, so that the thread is listed from then on.
func TestRegistryUpgradesRecordOnLookup(t *testing.T) {
	h := fakeHarness(t, fakeappserver.Config{}, nil)
	home, err := homeFor(h.cfg, "kim")
	if err != nil {
		t.Fatal(err)
	}
	reg := store.NewRegistry(filepath.Dir(home))
	const thread = "019a236e-a444-7bc3-a218-be6e30739714"
	sum := strings.TrimSpace(strings.Split(string(mustRecord(t, reg, "mesh/old", thread)), "\n")[1])
	v1 := "meshweaver-thread v1\n" + sum + "\nthread " + thread + "\n"
	if err := os.WriteFile(reg.Path("mesh/old"), []byte(v1), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, v, err := reg.LookupVersion("mesh/old"); v != 1 || err != nil {
		t.Fatalf("version = %d, %v; want 1", v, err)
	}
	pid := h.engine.Spawn(newRegistryActor(h.cfg, "kim", home), "test-registry")
	defer h.engine.Poison(pid)
	asker := h.caller() // gets the threadLookup as it is (no wire message)
	h.engine.Send(pid, lookupThread{key: "mesh/old", round: asker.pid})
	select {
	case m := <-asker.ch:
		got, ok := m.(threadLookup)
		if !ok || got.threadID != thread || got.damaged {
			t.Fatalf("lookup = %#v, want %s", m, thread)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("no lookup answer")
	}
	if _, v, err := reg.LookupVersion("mesh/old"); v != 2 || err != nil {
		t.Errorf("version after the lookup = %d, %v; want 2", v, err)
	}
	if entries, _, _ := reg.List(); len(entries) != 1 || entries[0].Key != "mesh/old" || entries[0].ThreadID != thread {
		t.Errorf("List = %+v", entries)
	}
}

// mustRecord writes a record and returns its bytes.
func mustRecord(t *testing.T, reg *store.Registry, key, thread string) []byte {
	t.Helper()
	if err := reg.Record(key, thread); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(reg.Path(key))
	if err != nil {
		t.Fatal(err)
	}
	return b
}
