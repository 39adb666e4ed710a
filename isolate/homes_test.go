package isolate

import (
	"os"
	"path/filepath"
	"syscall"
	"testing"
)

// TestMakeHomesPassableParents: the folders MakeHomes creates above the
// homes are 0711 whatever the umask, the homes 0700, and a folder that
// existed keeps its mode (0750 here: no pass for others, which
// Unreachable then names).
func TestMakeHomesPassableParents(t *testing.T) {
	old := syscall.Umask(0o077)
	defer syscall.Umask(old)
	root := t.TempDir()
	kept := filepath.Join(root, "kept")
	if err := os.Mkdir(kept, 0o750); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(kept, 0o750); err != nil {
		t.Fatal(err)
	}
	homes := filepath.Join(kept, "a", "b", "homes")
	if err := MakeHomes(homes); err != nil {
		t.Fatal(err)
	}
	for d, want := range map[string]os.FileMode{
		kept:                          0o750,
		filepath.Join(kept, "a"):      PassMode,
		filepath.Join(kept, "a", "b"): PassMode,
		homes:                         0o700,
	} {
		fi, err := os.Stat(d)
		if err != nil {
			t.Fatal(err)
		}
		if got := fi.Mode().Perm(); got != want {
			t.Errorf("%s: mode %04o, want %04o", d, got, want)
		}
	}
	if err := MakeHomes(homes); err != nil { // all there: nothing to do
		t.Errorf("MakeHomes on made homes: %v", err)
	}
}
