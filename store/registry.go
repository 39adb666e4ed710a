package store

import (
	"bytes"
	"encoding/base64"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"time"
)

// ErrInvalidThreadID reports a Codex thread id that does not look like a
// UUID.
var ErrInvalidThreadID = errors.New("invalid thread id")

// threadHeader is the first line of a thread record, version included;
// threadHeaderV1 that of the records older daemons wrote (without the
// mesh key), still read.
const (
	threadHeader   = "meshweaver-thread v2"
	threadHeaderV1 = "meshweaver-thread v1"
)

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
//	meshweaver-thread v2
//	key <lowercase hex SHA-256 of the mesh thread key>
//	thread <Codex thread id, a UUID>
//	mesh <the mesh thread key, standard base64>
//
// each line ending in a newline, nothing else. The full key hash guards
// against prefix collisions and misplaced files; the key itself lets List
// name the threads. Version 1 records (no mesh line) are still read; List
// cannot name them, so the daemon rewrites one as version 2 when it looks
// it up.
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
	thread, _, err := r.LookupVersion(key)
	return thread, err
}

// LookupVersion is Lookup that also reports the record's format version
// (0 when there is no record): a version below the current one is worth
// rewriting with Record.
func (r *Registry) LookupVersion(key string) (thread string, version int, err error) {
	if err := ValidateKey(key); err != nil {
		return "", 0, fmt.Errorf("looking up thread: %w", err)
	}
	path := r.Path(key)
	data, err := readSmall(path, maxThreadRecord)
	if errors.Is(err, fs.ErrNotExist) {
		return "", 0, nil
	}
	if err == nil {
		var rec threadRecord
		rec, err = parseThreadRecord(data)
		if err == nil && rec.hash != keyHash(key) {
			err = corruptf("recorded for another key")
		}
		if err == nil {
			return rec.thread, rec.version, nil
		}
	}
	return "", 0, fmt.Errorf("reading thread record %s: %w", path, err)
}

// Entry is one mesh thread of List.
type Entry struct {
	// Key is the mesh thread key.
	Key string
	// ThreadID is its Codex thread.
	ThreadID string
	// Modified is when the record was last written.
	Modified time.Time
}

// List returns the mesh threads recorded in version 2 records, by key.
// Records it cannot name (version 1) or read (damaged, or removed while
// listing) are counted in skipped, not returned: Lookup reports those.
// A missing folder is no threads.
func (r *Registry) List() (entries []Entry, skipped int, err error) {
	des, err := os.ReadDir(r.dir)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, 0, nil
	}
	if err != nil {
		return nil, 0, fmt.Errorf("listing thread records in %s: %w", r.dir, err)
	}
	for _, de := range des {
		name := de.Name()
		if !de.Type().IsRegular() || !strings.HasSuffix(name, ".txt") || strings.HasPrefix(name, ".") {
			continue
		}
		path := filepath.Join(r.dir, name)
		data, err := readSmall(path, maxThreadRecord)
		var rec threadRecord
		if err == nil {
			rec, err = parseThreadRecord(data)
		}
		info, serr := de.Info()
		if err != nil || serr != nil || rec.version < 2 || KeyPrefix(rec.key)+".txt" != name {
			skipped++
			continue
		}
		entries = append(entries, Entry{Key: rec.key, ThreadID: rec.thread, Modified: info.ModTime()})
	}
	sort.Slice(entries, func(i, j int) bool { return entries[i].Key < entries[j].Key })
	return entries, skipped, nil
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
	return WriteFileAtomic(r.Path(key), formatThreadRecord(key, threadID), 0o600)
}

// Forget removes key's record. A missing record is not an error.
func (r *Registry) Forget(key string) error {
	return removeIfExists(r.Path(key))
}

// threadRecord is a parsed thread record; key is empty in version 1.
type threadRecord struct {
	version      int
	hash, thread string
	key          string
}

func parseThreadRecord(data []byte) (threadRecord, error) {
	var rec threadRecord
	if bytes.HasPrefix(data, []byte(threadHeaderV1+"\n")) {
		v, err := parseFields(data, threadHeaderV1, "key", "thread")
		if err != nil {
			return rec, err
		}
		rec = threadRecord{version: 1, hash: v[0], thread: v[1]}
	} else {
		v, err := parseFields(data, threadHeader, "key", "thread", "mesh")
		if err != nil {
			return rec, err
		}
		key, err := base64.StdEncoding.Strict().DecodeString(v[2])
		if err != nil || len(key) == 0 || len(key) > MaxKeyLen {
			return rec, corruptf("mesh key is not the base64 of a key")
		}
		rec = threadRecord{version: 2, hash: v[0], thread: v[1], key: string(key)}
		if keyHash(rec.key) != rec.hash {
			return rec, corruptf("mesh key does not match its hash")
		}
	}
	if !isLowerHex(rec.hash, 64) {
		return threadRecord{}, corruptf("key is not a lowercase hex SHA-256")
	}
	if !IsUUID(rec.thread) {
		return threadRecord{}, corruptf("thread id is not a UUID")
	}
	return rec, nil
}

func formatThreadRecord(key, thread string) []byte {
	return formatFields(threadHeader, "key", keyHash(key), "thread", thread, "mesh", base64.StdEncoding.EncodeToString([]byte(key)))
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
