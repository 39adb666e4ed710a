package actors

import (
	"os"
	"path/filepath"
	"reflect"
	"testing"
	"time"

	"github.com/meshweaver/supervisor/store"
	"github.com/meshweaver/supervisor/testkit/fakeappserver"
)

// A lookup reads the journal only for a mesh thread with no codex thread
// to resume: a warm round does not parse it before its turn. A damaged
// journal behind a good record is left for the next append to replace.
func TestRegistryLookupReadsJournalOnlyWithoutThread(t *testing.T) {
	h := fakeHarness(t, fakeappserver.Config{}, nil)
	home, err := homeFor(h.cfg, "lee")
	if err != nil {
		t.Fatal(err)
	}
	reg, jr := store.NewRegistry(filepath.Dir(home)), store.NewJournal(filepath.Dir(home))
	const thread = "019a236e-a444-7bc3-a218-be6e30739714"
	turns := []store.Turn{{Role: store.RoleUser, Text: "hi"}, {Role: store.RoleAssistant, Text: "hello"}}
	if err := reg.Record("mesh/known", thread); err != nil {
		t.Fatal(err)
	}
	garbage := []byte("garbage\n")
	if err := os.MkdirAll(filepath.Dir(jr.Path("mesh/known")), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(jr.Path("mesh/known"), garbage, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := jr.Append("mesh/new", turns...); err != nil {
		t.Fatal(err)
	}
	pid := h.engine.Spawn(newRegistryActor(h.cfg, "lee", home), "test-registry")
	defer h.engine.Poison(pid)
	asker := h.caller()
	lookup := func(key string) threadLookup {
		t.Helper()
		h.engine.Send(pid, lookupThread{key: key, round: asker.pid})
		select {
		case m := <-asker.ch:
			l, ok := m.(threadLookup)
			if !ok {
				t.Fatalf("lookup answered %#v", m)
			}
			return l
		case <-time.After(30 * time.Second):
			t.Fatal("no lookup answer")
		}
		return threadLookup{}
	}
	if l := lookup("mesh/known"); l.threadID != thread || l.damaged || l.turns != nil {
		t.Errorf("lookup of a recorded thread = %+v, want its thread, no journal read", l)
	}
	if data, _ := os.ReadFile(jr.Path("mesh/known")); string(data) != string(garbage) {
		t.Errorf("the damaged journal behind a good record was touched by a lookup: %q", data)
	}
	if l := lookup("mesh/new"); l.threadID != "" || l.damaged || !reflect.DeepEqual(l.turns, turns) {
		t.Errorf("lookup of a thread with no record = %+v, want its journal", l)
	}
	if l := lookup("mesh/known-not"); l.threadID != "" || l.damaged || l.turns != nil {
		t.Errorf("lookup of an unknown thread = %+v, want nothing", l)
	}
}
