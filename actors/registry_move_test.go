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
	cfg := &Config{Logger: slog.New(slog.DiscardHandler)}
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
}
