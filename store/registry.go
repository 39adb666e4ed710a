package store

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
)

// ErrInvalidThreadID reports a Codex thread id that does not look like a
// UUID.
var ErrInvalidThreadID = errors.New("invalid thread id")

// threadHeader is the first line of a thread record, version included.
const threadHeader = "meshweaver-thread v1"

// maxThreadRecord bounds how much of a thread record is read; a valid one
// is about 130 bytes.
const maxThreadRecord = 4 << 10

// Registry records which Codex thread runs each mesh thread, one small file
// per mesh thread under a single CODEX_HOME:
//
//	CODEX_HOME/meshweaver/threads/<KeyPrefix(key)>.txt
//
// beside the rollouts it points at, so the two live and die together. The
// file is
//
//	meshweaver-thread v1
//	key <lowercase hex SHA-256 of the mesh thread key>
//	thread <Codex thread id, a UUID>
//
// each line ending in a newline, nothing else. The full key hash guards
// against prefix collisions and misplaced files.
//
// A Registry has one owner (the user's session) and takes no locks.
type Registry struct {
	dir string
}

// NewRegistry returns the Registry kept under dir (in dir/meshweaver/; the
// daemon passes its own folder of the user, beside CODEX_HOME). Nothing is
// touched on disk until Record.
func NewRegistry(dir string) *Registry {
	return &Registry{dir: filepath.Join(dir, "meshweaver", "threads")}
}

// Path returns the file that holds key's record, whether or not it exists.
func (r *Registry) Path(key string) string {
	return filepath.Join(r.dir, KeyPrefix(key)+".txt")
}

// Lookup returns the Codex thread id recorded for key, or "" and a nil error
// when none is recorded. A damaged record — empty, truncated, garbage, for
// another key, or with a thread id that is not a UUID — yields an error
// wrapping [ErrCorrupt] that names the path; Record overwrites it.
func (r *Registry) Lookup(key string) (string, error) {
	if err := ValidateKey(key); err != nil {
		return "", fmt.Errorf("looking up thread: %w", err)
	}
	path := r.Path(key)
	data, err := readSmall(path, maxThreadRecord)
	if errors.Is(err, fs.ErrNotExist) {
		return "", nil
	}
	if err == nil {
		var hash, thread string
		hash, thread, err = parseThreadRecord(data)
		if err == nil && hash != keyHash(key) {
			err = corruptf("recorded for another key")
		}
		if err == nil {
			return thread, nil
		}
	}
	return "", fmt.Errorf("reading thread record %s: %w", path, err)
}

// Record stores threadID as the Codex thread of key, atomically replacing
// any earlier (or damaged) record. threadID must look like a UUID.
func (r *Registry) Record(key, threadID string) error {
	if err := ValidateKey(key); err != nil {
		return fmt.Errorf("recording thread: %w", err)
	}
	if !IsUUID(threadID) {
		return fmt.Errorf("recording thread: %w %s: not a UUID", ErrInvalidThreadID, quoteClip(threadID))
	}
	return WriteFileAtomic(r.Path(key), formatThreadRecord(keyHash(key), threadID), 0o600)
}

// Forget removes key's record. A missing record is not an error.
func (r *Registry) Forget(key string) error {
	return removeIfExists(r.Path(key))
}

func parseThreadRecord(data []byte) (hash, thread string, err error) {
	v, err := parseFields(data, threadHeader, "key", "thread")
	if err != nil {
		return "", "", err
	}
	hash, thread = v[0], v[1]
	if !isLowerHex(hash, 64) {
		return "", "", corruptf("key is not a lowercase hex SHA-256")
	}
	if !IsUUID(thread) {
		return "", "", corruptf("thread id is not a UUID")
	}
	return hash, thread, nil
}

func formatThreadRecord(hash, thread string) []byte {
	return formatFields(threadHeader, "key", hash, "thread", thread)
}

// IsUUID reports whether s has the textual shape of a UUID,
// xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx in hex digits of either case. Codex
// mints UUIDv7 thread ids; the version is not checked.
func IsUUID(s string) bool {
	if len(s) != 36 {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch i {
		case 8, 13, 18, 23:
			if c != '-' {
				return false
			}
		default:
			if !('0' <= c && c <= '9' || 'a' <= c && c <= 'f' || 'A' <= c && c <= 'F') {
				return false
			}
		}
	}
	return true
}

// removeIfExists removes path, treating a missing file as success.
func removeIfExists(path string) error {
	err := os.Remove(path)
	if err == nil || errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	return fmt.Errorf("removing %s: %w", path, err)
}
