package store

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"strconv"
	"unicode/utf8"
)

// ErrCorrupt reports a stored file that exists but cannot be trusted: empty,
// truncated, of an unknown format or version, not in canonical form, or
// holding values that fail validation. It is always wrapped with the path.
var ErrCorrupt = errors.New("corrupt file")

// ErrInvalidKey reports a mesh thread key that cannot be stored.
var ErrInvalidKey = errors.New("invalid thread key")

// MaxKeyLen is the longest mesh thread key, in bytes, the Registry and the
// Journal accept.
const MaxKeyLen = 1024

// ValidateKey reports whether key can name a mesh thread: 1 to [MaxKeyLen]
// bytes of any content. The error never echoes the key.
func ValidateKey(key string) error {
	switch {
	case key == "":
		return fmt.Errorf("%w: empty", ErrInvalidKey)
	case len(key) > MaxKeyLen:
		return fmt.Errorf("%w: %d bytes, longer than %d", ErrInvalidKey, len(key), MaxKeyLen)
	}
	return nil
}

// keyHash is the full lowercase hex SHA-256 of key, recorded inside files
// to catch prefix collisions and misplaced files.
func keyHash(key string) string {
	sum := sha256.Sum256([]byte(key))
	return hex.EncodeToString(sum[:])
}

// KeyPrefix returns the first 16 hex digits of the SHA-256 of key: the base
// name of the key's thread record and journal, and a stable short name for
// the key elsewhere (for example a Codex thread name).
func KeyPrefix(key string) string {
	return keyHash(key)[:16]
}

// quoteClip quotes s for an error message. Hostile input stays short: the
// quoted form keeps at most 40 bytes of s's leading characters (escapes
// count), and a clipped one names the full length.
func quoteClip(s string) string {
	const max = 40
	if len(s) <= max {
		if q := strconv.Quote(s); len(q) <= max {
			return q
		}
	}
	clip := `""`
	for i := 0; i < len(s); {
		_, size := utf8.DecodeRuneInString(s[i:])
		i += size
		q := strconv.Quote(s[:i])
		if len(q) > max {
			break
		}
		clip = q
	}
	return fmt.Sprintf("%s… (%d bytes)", clip, len(s))
}

// corruptf builds the reason part of an ErrCorrupt error. Reasons never
// quote file content: some files hold secrets.
func corruptf(format string, args ...any) error {
	return fmt.Errorf("%w: "+format, append([]any{ErrCorrupt}, args...)...)
}

// readSmall reads the whole file at path, refusing more than limit bytes as
// corrupt. A missing file yields an error satisfying errors.Is(err,
// fs.ErrNotExist).
func readSmall(path string, limit int64) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	data, err := io.ReadAll(io.LimitReader(f, limit+1))
	if err != nil {
		return nil, err
	}
	if int64(len(data)) > limit {
		return nil, corruptf("longer than %d bytes", limit)
	}
	return data, nil
}

// parseFields parses the line format shared by the thread record, the
// process record and the credentials file:
//
//	HEADER\n
//	NAME1 VALUE1\n
//	NAME2 VALUE2\n
//
// with exactly the given names in order and nothing after the last newline.
// Values run to the end of their line and may be empty. Errors are
// ErrCorrupt and never include file content.
func parseFields(data []byte, header string, names ...string) ([]string, error) {
	if len(data) == 0 {
		return nil, corruptf("empty")
	}
	line, rest, ok := bytes.Cut(data, []byte("\n"))
	if !ok {
		return nil, corruptf("truncated header")
	}
	if string(line) != header {
		return nil, corruptf("unknown format or version")
	}
	values := make([]string, len(names))
	for i, name := range names {
		if len(rest) == 0 {
			return nil, corruptf("truncated: missing field %s", name)
		}
		line, rest, ok = bytes.Cut(rest, []byte("\n"))
		if !ok {
			return nil, corruptf("truncated: field %s", name)
		}
		value, found := bytes.CutPrefix(line, []byte(name+" "))
		if !found {
			return nil, corruptf("line %d: want field %s", i+2, name)
		}
		values[i] = string(value)
	}
	if len(rest) != 0 {
		return nil, corruptf("trailing data after field %s", names[len(names)-1])
	}
	return values, nil
}

// formatFields renders the format parseFields reads.
func formatFields(header string, pairs ...string) []byte {
	var b bytes.Buffer
	b.WriteString(header)
	b.WriteByte('\n')
	for i := 0; i+1 < len(pairs); i += 2 {
		b.WriteString(pairs[i])
		b.WriteByte(' ')
		b.WriteString(pairs[i+1])
		b.WriteByte('\n')
	}
	return b.Bytes()
}

// isLowerHex reports whether s is n lowercase hex digits.
func isLowerHex(s string, n int) bool {
	if len(s) != n {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !('0' <= c && c <= '9' || 'a' <= c && c <= 'f') {
			return false
		}
	}
	return true
}
