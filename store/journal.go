package store

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
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
// Unknown fields, other roles, a missing final newline or a header for
// another key make the file corrupt.
//
// The exported fields bound the journal; their zero values mean the
// defaults. A Journal has one owner and takes no locks.
type Journal struct {
	// MaxTurns is the most turns kept; the oldest are dropped first.
	// Zero means DefaultJournalTurns.
	MaxTurns int
	// MaxBytes bounds the size of the file. The oldest turns are dropped
	// first; a single newest turn that alone is too big keeps the end of
	// its text after an ellipsis. Zero means DefaultJournalBytes.
	MaxBytes int

	dir string
}

// NewJournal returns the Journal kept under dir (in dir/meshweaver/; the
// daemon passes its own folder of the user, beside CODEX_HOME), with default
// bounds. Nothing is touched on disk until Append.
func NewJournal(dir string) *Journal {
	return &Journal{dir: filepath.Join(dir, "meshweaver", "journal")}
}

// Path returns the file that holds key's journal, whether or not it exists.
func (j *Journal) Path(key string) string {
	return filepath.Join(j.dir, KeyPrefix(key)+".jsonl")
}

// Turns returns key's turns, oldest first, or nil and a nil error when there
// is no journal. A damaged journal yields nil and an error wrapping
// [ErrCorrupt] that names the path: not even a valid prefix is trusted.
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
	return turns, nil
}

func (j *Journal) read(key, path string) ([]Turn, error) {
	data, err := readSmall(path, maxJournalFile)
	if err != nil {
		return nil, err
	}
	hash, turns, err := parseJournal(data)
	if err != nil {
		return nil, err
	}
	if hash != keyHash(key) {
		return nil, corruptf("journal of another key")
	}
	return turns, nil
}

// Append adds turns to key's journal, then drops the oldest turns beyond
// MaxTurns or MaxBytes, and rewrites the file atomically. Each role must be
// RoleUser or RoleAssistant; invalid UTF-8 in a text is replaced by U+FFFD.
// A damaged journal is replaced, since its content is not trusted anyway.
func (j *Journal) Append(key string, turns ...Turn) error {
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
	path := j.Path(key)
	old, err := j.read(key, path)
	if err != nil && !errors.Is(err, fs.ErrNotExist) && !errors.Is(err, ErrCorrupt) {
		return fmt.Errorf("appending to journal %s: %w", path, err)
	}
	all := make([]Turn, 0, len(old)+len(turns))
	all = append(all, old...)
	for _, t := range turns {
		t.Text = strings.ToValidUTF8(t.Text, "\uFFFD")
		all = append(all, t)
	}
	hash := keyHash(key)
	kept := boundTurns(all, j.maxTurns(), j.maxBytes()-len(journalHeader(hash)))
	return WriteFileAtomic(path, formatJournal(hash, kept), 0o600)
}

// Forget removes key's journal. A missing journal is not an error.
func (j *Journal) Forget(key string) error {
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

func parseJournal(data []byte) (hash string, turns []Turn, err error) {
	if len(data) == 0 {
		return "", nil, corruptf("empty")
	}
	if data[len(data)-1] != '\n' {
		return "", nil, corruptf("truncated: no final newline")
	}
	lines := bytes.Split(data[:len(data)-1], []byte("\n"))
	var h journalHeaderLine
	if err := decodeStrict(lines[0], &h); err != nil {
		return "", nil, corruptf("header: %v", err)
	}
	if h.Format != journalFormat || h.Version != journalVersion {
		return "", nil, corruptf("unknown format or version")
	}
	if !isLowerHex(h.Key, 64) {
		return "", nil, corruptf("key is not a lowercase hex SHA-256")
	}
	for i, line := range lines[1:] {
		var t Turn
		if err := decodeStrict(line, &t); err != nil {
			return "", nil, corruptf("turn %d: %v", i, err)
		}
		if !validRole(t.Role) {
			return "", nil, corruptf("turn %d: invalid role", i)
		}
		turns = append(turns, t)
	}
	return h.Key, turns, nil
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
