package store

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
)

// Roles of a [Turn].
const (
	RoleUser      = "user"
	RoleAssistant = "assistant"
)

// Journal defaults, used when the corresponding Journal field is zero.
const (
	DefaultJournalTurns = 40
	DefaultJournalBytes = 256 << 10
)

// maxJournalFile bounds how much of a journal file is read, whatever the
// configured MaxBytes: a larger file is treated as corrupt.
const maxJournalFile = 16 << 20

const (
	journalFormat  = "meshweaver-journal"
	journalVersion = 1
)

// ellipsis marks where a text was cut.
const ellipsis = "…"

// Turn is one earlier user or assistant message of a mesh thread.
type Turn struct {
	// Role is RoleUser or RoleAssistant.
	Role string `json:"role" msgpack:"role"`
	// Text is the message text.
	Text string `json:"text" msgpack:"text"`
}

// Journal keeps, per mesh thread, a bounded list of its earlier turns: the
// fallback source of a transcript when a Codex thread cannot be resumed.
// Files live under a single CODEX_HOME:
//
//	CODEX_HOME/meshweaver/journal/<KeyPrefix(key)>.jsonl
//
// One JSON object per line, each ending in a newline. The first line is the
// header, the rest are turns, oldest first:
//
//	{"format":"meshweaver-journal","version":1,"key":"<hex SHA-256 of key>"}
//	{"role":"user","text":"…"}
//	{"role":"assistant","text":"…"}
//
// Write adds its lines at the end of the file, and Sync syncs its data
// (fdatasync): one write and one sync, where rewriting the file atomically
// takes two syncs of the file and one of its folder. A file is written
// whole (atomically) only when it is made, when it is damaged, and when it
// has grown to twice its bounds (then it is compacted to them), so a
// process killed in a Write leaves the earlier turns intact and at worst
// a part of its last line: bytes after the last newline are a cut write
// and are ignored (the next Write rewrites the file without them).
// Unknown fields, other roles, any other damaged line or a header for
// another key make the file corrupt.
//
// The exported fields bound the journal; their zero values mean the
// defaults. A Journal has one owner and takes no locks.
type Journal struct {
	// MaxTurns is the most turns kept; the oldest are dropped first.
	// Zero means DefaultJournalTurns.
	MaxTurns int
	// MaxBytes bounds the turns Turns returns, as if they alone were the
	// file: the oldest turns are dropped first, and a single newest turn
	// that alone is too big keeps the end of its text after an ellipsis.
	// The file itself grows to at most twice MaxBytes (and MaxTurns)
	// before it is compacted. Zero means DefaultJournalBytes.
	MaxBytes int

	dir string
	// known is what this Journal last read or wrote of a key's file: its
	// size and turns when it was clean (whole lines, within twice the
	// bounds). A Write whose file still has that size only appends.
	known map[string]journalState
	// unsynced holds, per key Write appended to since its last Sync, the
	// size the file had then.
	unsynced map[string]int64
}

// journalState is a clean journal file as last seen.
type journalState struct {
	size  int64
	turns int
}

// maxKnownJournals bounds Journal.known; past it the map starts over (a
// Write of a key it forgot reads the file first).
const maxKnownJournals = 1024

// NewJournal returns the Journal kept under dir (in dir/meshweaver/; the
// daemon passes its own folder of the user, beside CODEX_HOME), with default
// bounds. Nothing is touched on disk until Write or Append.
func NewJournal(dir string) *Journal {
	return &Journal{dir: filepath.Join(dir, "meshweaver", "journal"), known: make(map[string]journalState),
		unsynced: make(map[string]int64)}
}

// Path returns the file that holds key's journal, whether or not it exists.
func (j *Journal) Path(key string) string {
	return filepath.Join(j.dir, KeyPrefix(key)+".jsonl")
}

// Turns returns key's turns, oldest first, within the bounds, or nil and a
// nil error when there is no journal. A damaged journal yields nil and an
// error wrapping [ErrCorrupt] that names the path: not even a valid prefix
// is trusted (a cut last line is not damage; see Journal).
func (j *Journal) Turns(key string) ([]Turn, error) {
	if err := ValidateKey(key); err != nil {
		return nil, fmt.Errorf("reading journal: %w", err)
	}
	path := j.Path(key)
	turns, err := j.read(key, path)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("reading journal %s: %w", path, err)
	}
	kept := boundTurns(turns, j.maxTurns(), j.maxBytes()-len(journalHeader(keyHash(key))))
	if len(kept) == 0 {
		return nil, nil
	}
	return kept, nil
}

// read parses key's whole file, and notes its state when it is clean.
func (j *Journal) read(key, path string) ([]Turn, error) {
	delete(j.known, key)
	data, err := readSmall(path, maxJournalFile)
	if err != nil {
		return nil, err
	}
	hash, turns, cut, err := parseJournal(data)
	if err != nil {
		return nil, err
	}
	if hash != keyHash(key) {
		return nil, corruptf("journal of another key")
	}
	if cut == 0 {
		j.note(key, journalState{size: int64(len(data)), turns: len(turns)})
	}
	return turns, nil
}

func (j *Journal) note(key string, st journalState) {
	if j.known == nil || len(j.known) >= maxKnownJournals {
		j.known = make(map[string]journalState)
	}
	j.known[key] = st
}

// Append adds turns to key's journal and syncs them to disk before it
// returns: Write, then Sync.
func (j *Journal) Append(key string, turns ...Turn) error {
	if err := j.Write(key, turns...); err != nil {
		return err
	}
	return j.Sync(key)
}

// Write adds turns to key's journal. Each role must be RoleUser or
// RoleAssistant; invalid UTF-8 in a text is replaced by U+FFFD. It appends
// to the file (see Journal) without syncing it: the turns are the
// system's once Write returns (a killed process loses nothing), on disk
// once Sync returns. It rewrites the file atomically (synced, with what an
// earlier Write left unsynced), keeping the newest turns within MaxTurns
// and MaxBytes, when it is new, damaged (its content is not trusted
// anyway), ends in a cut line, or would grow past twice those bounds. A
// failed Write leaves the file as it was.
func (j *Journal) Write(key string, turns ...Turn) error {
	if err := ValidateKey(key); err != nil {
		return fmt.Errorf("appending to journal: %w", err)
	}
	for i, t := range turns {
		if !validRole(t.Role) {
			return fmt.Errorf("appending to journal: turn %d: invalid role %s", i, quoteClip(t.Role))
		}
	}
	if len(turns) == 0 {
		return nil
	}
	hash := keyHash(key)
	budget := j.maxBytes() - len(journalHeader(hash))
	add := make([]Turn, 0, len(turns))
	var lines []byte
	for _, t := range turns {
		t.Text = strings.ToValidUTF8(t.Text, "\uFFFD")
		line := encodeTurn(t)
		if len(line) > budget {
			// What Turns would keep of it: its end, or nothing.
			var ok bool
			if t, ok = fitTurn(t, budget); !ok {
				continue
			}
			line = encodeTurn(t)
		}
		add = append(add, t)
		lines = append(lines, line...)
	}
	path := j.Path(key)
	st, ok := j.known[key]
	if !ok {
		// Not seen yet: read it (a damaged or missing file is rewritten).
		if _, err := j.read(key, path); err != nil && !errors.Is(err, fs.ErrNotExist) && !errors.Is(err, ErrCorrupt) {
			return fmt.Errorf("appending to journal %s: %w", path, err)
		}
		st, ok = j.known[key]
	}
	if ok && st.turns+len(add) <= 2*j.maxTurns() && st.size+int64(len(lines)) <= j.compactAt() {
		err := appendAt(path, st.size, lines)
		if err == nil {
			if j.unsynced == nil {
				j.unsynced = make(map[string]int64)
			}
			if _, pending := j.unsynced[key]; !pending {
				j.unsynced[key] = st.size
			}
			j.note(key, journalState{size: st.size + int64(len(lines)), turns: st.turns + len(add)})
			return nil
		}
		delete(j.known, key)
		if !errors.Is(err, errJournalMoved) {
			return fmt.Errorf("appending to journal %s: %w", path, err)
		}
	}
	return j.rewrite(key, path, add)
}

// Sync puts on disk what Write appended to key's journal since the last
// Sync (fdatasync: the data and the size, one journal commit). When that
// fails, the file is cut back to what it was synced with, and the error
// says the turns written since are not saved: write them again.
func (j *Journal) Sync(key string) error {
	size, ok := j.unsynced[key]
	if !ok {
		return nil
	}
	delete(j.unsynced, key)
	path := j.Path(key)
	if err := syncFile(path, size); err != nil {
		delete(j.known, key)
		return fmt.Errorf("syncing journal %s: %w", path, err)
	}
	return nil
}

// rewrite writes key's journal whole: its turns that are still trusted,
// then add, within the bounds.
func (j *Journal) rewrite(key, path string, add []Turn) error {
	old, err := j.read(key, path)
	if err != nil && !errors.Is(err, fs.ErrNotExist) && !errors.Is(err, ErrCorrupt) {
		return fmt.Errorf("appending to journal %s: %w", path, err)
	}
	hash := keyHash(key)
	kept := boundTurns(append(old, add...), j.maxTurns(), j.maxBytes()-len(journalHeader(hash)))
	data := formatJournal(hash, kept)
	delete(j.known, key)
	if err := WriteFileAtomic(path, data, 0o600); err != nil {
		return err
	}
	delete(j.unsynced, key) // what was written unsynced is in data, synced
	j.note(key, journalState{size: int64(len(data)), turns: len(kept)})
	return nil
}

// compactAt is the size past which a journal file is rewritten within
// its bounds rather than appended to.
func (j *Journal) compactAt() int64 {
	return int64(min(2*j.maxBytes(), maxJournalFile))
}

// errJournalMoved is an append that found the file not as last seen
// (removed, or written by someone else): it is read again and rewritten.
var errJournalMoved = errors.New("the journal changed since it was read")

// appendAt appends data to the file at path, which must be size bytes
// long. On error it cuts the file back to size (best effort), so that a
// retry does not write the turns twice.
func appendAt(path string, size int64, data []byte) (err error) {
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_APPEND, 0)
	if errors.Is(err, fs.ErrNotExist) {
		return errJournalMoved
	}
	if err != nil {
		return err
	}
	defer func() {
		if err != nil && !errors.Is(err, errJournalMoved) {
			_ = f.Truncate(size)
		}
		if cerr := f.Close(); err == nil {
			err = cerr
		}
	}()
	fi, err := f.Stat()
	if err != nil {
		return err
	}
	if fi.Size() != size || !fi.Mode().IsRegular() {
		return errJournalMoved
	}
	_, err = f.Write(data)
	return err
}

// syncFile syncs the file at path; on failure it cuts it back to size
// (best effort): what lay beyond may or may not be on disk.
func syncFile(path string, size int64) (err error) {
	f, err := os.OpenFile(path, os.O_WRONLY, 0)
	if err != nil {
		return err
	}
	defer func() {
		if err != nil {
			_ = f.Truncate(size)
		}
		if cerr := f.Close(); err == nil {
			err = cerr
		}
	}()
	return syncData(f)
}

// syncData is fdatasync; tests make it fail.
var syncData = fdatasync

// Forget removes key's journal. A missing journal is not an error.
func (j *Journal) Forget(key string) error {
	delete(j.known, key)
	delete(j.unsynced, key)
	return removeIfExists(j.Path(key))
}

func (j *Journal) maxTurns() int {
	if j.MaxTurns > 0 {
		return j.MaxTurns
	}
	return DefaultJournalTurns
}

func (j *Journal) maxBytes() int {
	if j.MaxBytes > 0 {
		return j.MaxBytes
	}
	return DefaultJournalBytes
}

func validRole(role string) bool {
	return role == RoleUser || role == RoleAssistant
}

// boundTurns keeps the newest turns: at most maxTurns, whose encoded lines
// total at most budget bytes. The newest turn alone is cut (keeping the end
// of its text) rather than dropped when it does not fit.
func boundTurns(turns []Turn, maxTurns, budget int) []Turn {
	if len(turns) > maxTurns {
		turns = turns[len(turns)-maxTurns:]
	}
	total := 0
	for i := len(turns) - 1; i >= 0; i-- {
		n := len(encodeTurn(turns[i]))
		if total+n > budget {
			if i == len(turns)-1 {
				if t, ok := fitTurn(turns[i], budget); ok {
					return []Turn{t}
				}
				return nil
			}
			return turns[i+1:]
		}
		total += n
	}
	return turns
}

// fitTurn cuts the start of t's text, marking the cut with an ellipsis,
// so that its encoded line fits in budget bytes, keeping as much of the end
// as fits.
func fitTurn(t Turn, budget int) (Turn, bool) {
	if len(encodeTurn(t)) <= budget {
		return t, true
	}
	cut := func(keep int) Turn {
		return Turn{Role: t.Role, Text: ellipsis + tailUTF8(t.Text, keep)}
	}
	// The encoded length grows with the kept length, and is never less,
	// so binary search for the longest tail that fits.
	lo, hi := 0, min(len(t.Text), budget)
	for lo < hi {
		mid := lo + (hi-lo+1)/2
		if len(encodeTurn(cut(mid))) <= budget {
			lo = mid
		} else {
			hi = mid - 1
		}
	}
	if tailUTF8(t.Text, lo) == "" {
		return Turn{}, false
	}
	return cut(lo), true
}

// journalHeaderLine is the JSON of a journal's first line.
type journalHeaderLine struct {
	Format  string `json:"format"`
	Version int    `json:"version"`
	Key     string `json:"key"`
}

func journalHeader(hash string) []byte {
	return encodeLine(journalHeaderLine{Format: journalFormat, Version: journalVersion, Key: hash})
}

func encodeTurn(t Turn) []byte {
	return encodeLine(t)
}

// encodeLine renders v as one JSON line ending in a newline. HTML is not
// escaped: the files are not HTML, and escaping only makes them bigger.
func encodeLine(v any) []byte {
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		panic(fmt.Sprintf("store: encoding %T: %v", v, err)) // plain strings and ints cannot fail
	}
	return b.Bytes()
}

func formatJournal(hash string, turns []Turn) []byte {
	b := journalHeader(hash)
	for _, t := range turns {
		b = append(b, encodeTurn(t)...)
	}
	return b
}

// parseJournal parses a journal file. Bytes after its last newline are a
// write cut short (see Journal): they are not read, and cut says how many
// there were.
func parseJournal(data []byte) (hash string, turns []Turn, cut int, err error) {
	end := bytes.LastIndexByte(data, '\n')
	if end < 0 {
		return "", nil, 0, corruptf("no complete header line")
	}
	cut = len(data) - end - 1
	lines := bytes.Split(data[:end], []byte("\n"))
	var h journalHeaderLine
	if err := decodeStrict(lines[0], &h); err != nil {
		return "", nil, 0, corruptf("header: %v", err)
	}
	if h.Format != journalFormat || h.Version != journalVersion {
		return "", nil, 0, corruptf("unknown format or version")
	}
	if !isLowerHex(h.Key, 64) {
		return "", nil, 0, corruptf("key is not a lowercase hex SHA-256")
	}
	for i, line := range lines[1:] {
		var t Turn
		if err := decodeStrict(line, &t); err != nil {
			return "", nil, 0, corruptf("turn %d: %v", i, err)
		}
		if !validRole(t.Role) {
			return "", nil, 0, corruptf("turn %d: invalid role", i)
		}
		turns = append(turns, t)
	}
	return h.Key, turns, cut, nil
}

// decodeStrict decodes exactly one JSON object with only known fields. Its
// errors describe the syntax, never the content.
func decodeStrict(line []byte, v any) error {
	if len(bytes.TrimSpace(line)) == 0 || bytes.TrimSpace(line)[0] != '{' {
		return errors.New("not a JSON object")
	}
	dec := json.NewDecoder(bytes.NewReader(line))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		var unknown *json.UnmarshalTypeError
		if errors.As(err, &unknown) {
			return fmt.Errorf("field %s has the wrong type", unknown.Field)
		}
		var syntax *json.SyntaxError
		if errors.As(err, &syntax) {
			return fmt.Errorf("invalid JSON at byte %d", syntax.Offset)
		}
		if strings.HasPrefix(err.Error(), "json: unknown field") {
			return errors.New("unknown field")
		}
		return errors.New("invalid JSON")
	}
	if _, err := dec.Token(); err != io.EOF {
		return errors.New("data after the JSON object")
	}
	return nil
}
