package isolate

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
)

// Modes of the folders on the way to a user's home. A user's uid is never
// a folder's owner nor in its group, so it passes a folder through the
// bits for others only.
const (
	// PassMode is a folder the users' uids pass through without listing
	// it: the homes with a uid switch, each user's folder, and the
	// folders MakeHomes creates above the homes.
	PassMode os.FileMode = 0o711
	// privateMode is the homes folder MakeHomes creates: the daemon's
	// alone until OpenHomes (or a user's first start) opens it.
	privateMode os.FileMode = 0o700
)

// MakeHomes creates the homes folder (0700) and each folder above it that
// does not exist yet (PassMode, past the umask), so that a uid switch,
// which opens the homes themselves, finds its way to them: with 0700
// folders above the homes every app-server of a user's uid would fail to
// bind its home. Folders that exist keep their modes (Unreachable names
// one that stops the users' uids).
func MakeHomes(homes string) error {
	abs, err := filepath.Abs(homes)
	if err != nil {
		return err
	}
	var missing []string // deepest first
	for d := abs; ; d = filepath.Dir(d) {
		_, err := os.Stat(d)
		if err == nil {
			break
		}
		if !errors.Is(err, fs.ErrNotExist) {
			return fmt.Errorf("creating the homes %s: %w", abs, err)
		}
		missing = append(missing, d)
		if d == filepath.Dir(d) {
			break
		}
	}
	for i := len(missing) - 1; i >= 0; i-- {
		mode := PassMode
		if i == 0 {
			mode = privateMode
		}
		switch err := os.Mkdir(missing[i], mode); {
		case errors.Is(err, fs.ErrExist): // another member made it meanwhile
		case err != nil:
			return fmt.Errorf("creating the homes %s: %w", abs, err)
		default:
			if err := os.Chmod(missing[i], mode); err != nil {
				return fmt.Errorf("creating the homes %s: %w", abs, err)
			}
		}
	}
	return nil
}

// OpenHomes gives the homes folder, with a uid switch, the mode a user's
// first start gives it (PassMode: the users' uids pass through it to
// their homes): opened at start, a check of the paths before any start
// sees what a start will. Without a uid switch it does nothing.
func (n *Node) OpenHomes() error {
	if n.opts.UIDs.Empty() {
		return nil
	}
	if err := os.MkdirAll(n.opts.Homes, PassMode); err != nil {
		return fmt.Errorf("opening the homes: %w", err)
	}
	if err := os.Chmod(n.opts.Homes, PassMode); err != nil {
		return fmt.Errorf("opening the homes: %w", err)
	}
	return nil
}
