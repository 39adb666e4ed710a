package actors

import (
	"log/slog"
	"os"
	"path/filepath"
	"testing"

	"github.com/meshweaver/supervisor/store"
)

// TestRegistryMovesLegacyRecords: thread records and journals an older
// daemon kept in CODEX_HOME/meshweaver/ move, once, to the daemon's folder
// of the user, where the user's app-server cannot write; a symlink in their
// place is never followed.
func TestRegistryMovesLegacyRecords(t *testing.T) {
	homes := t.TempDir()
	home := filepath.Join(homes, "alice", ".codex")
	old := store.NewRegistry(home)
	if err := old.Record("mesh/t1", "01a23a92-74b4-7130-8ebe-1588db09b15c"); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(t.TempDir(), filepath.Join(home, "meshweaver", "journal")); err != nil {
		t.Fatal(err)
	}
	cfg := &tree{Deps: Deps{Logger: slog.New(slog.DiscardHandler)}}
	a := newRegistryActor(cfg, "alice", home)().(*registryActor)
	a.moveLegacy()
	if id, err := a.reg.Lookup("mesh/t1"); err != nil || id != "01a23a92-74b4-7130-8ebe-1588db09b15c" {
		t.Errorf("moved record: %q %v", id, err)
	}
	if _, err := os.Stat(filepath.Join(homes, "alice", "meshweaver", "threads")); err != nil {
		t.Errorf("records not in the daemon's folder: %v", err)
	}
	if _, err := os.Lstat(filepath.Join(homes, "alice", "meshweaver", "journal")); err == nil {
		t.Errorf("a symlinked journal folder was moved")
	}

	// A CODEX_HOME/meshweaver that is a symlink (to another user's daemon
	// folder) is never followed.
	bob := filepath.Join(homes, "bob", "meshweaver")
	if err := store.NewRegistry(filepath.Join(homes, "bob")).Record("mesh/b", "01a23a92-74b4-7130-8ebe-1588db09b15d"); err != nil {
		t.Fatal(err)
	}
	carolHome := filepath.Join(homes, "carol", ".codex")
	if err := os.MkdirAll(carolHome, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(bob, filepath.Join(carolHome, "meshweaver")); err != nil {
		t.Fatal(err)
	}
	newRegistryActor(cfg, "carol", carolHome)().(*registryActor).moveLegacy()
	if _, err := os.Stat(filepath.Join(bob, "threads")); err != nil {
		t.Errorf("bob's records were moved through carol's symlink: %v", err)
	}
	if _, err := os.Lstat(filepath.Join(homes, "carol", "meshweaver", "threads")); err == nil {
		t.Errorf("carol got a threads folder through a symlink")
	}

	// A folder the user's uid made (not the daemon) is not moved either.
	if os.Geteuid() == 0 {
		daveHome := filepath.Join(homes, "dave", ".codex")
		if err := store.NewRegistry(daveHome).Record("mesh/d", "01a23a92-74b4-7130-8ebe-1588db09b15e"); err != nil {
			t.Fatal(err)
		}
		if err := os.Lchown(filepath.Join(daveHome, "meshweaver", "threads"), 240000, 240000); err != nil {
			t.Fatal(err)
		}
		newRegistryActor(cfg, "dave", daveHome)().(*registryActor).moveLegacy()
		if _, err := os.Lstat(filepath.Join(homes, "dave", "meshweaver", "threads")); err == nil {
			t.Errorf("a folder the user's uid owns was moved into the daemon's folder")
		}
	}
}
