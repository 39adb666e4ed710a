package store

import (
	"errors"
	"fmt"
	"path/filepath"
	"strconv"
	"strings"
	"unicode/utf8"
)

// ErrInvalidUserID reports a user id that cannot name a home directory.
var ErrInvalidUserID = errors.New("invalid user id")

// MaxUserIDLen is the longest user id, in bytes, ValidateUserID accepts.
const MaxUserIDLen = 64

// ValidateUserID reports whether id can name a user's directory: 1 to
// [MaxUserIDLen] of the characters A-Z a-z 0-9 . _ @ -, not starting with
// '.' or '-' (so never "." or ".." and never a hidden file or an option).
// The error quotes at most a short prefix of id.
func ValidateUserID(id string) error {
	reason := ""
	switch {
	case id == "":
		reason = "empty"
	case len(id) > MaxUserIDLen:
		reason = fmt.Sprintf("longer than %d bytes", MaxUserIDLen)
	case id[0] == '.' || id[0] == '-':
		reason = fmt.Sprintf("starts with %q", id[0])
	default:
		for i := 0; i < len(id); i++ {
			if !userIDByte(id[i]) {
				reason = fmt.Sprintf("byte %d (%s) is not one of A-Z a-z 0-9 . _ @ -", i, byteName(id[i]))
				break
			}
		}
	}
	if reason == "" {
		return nil
	}
	return fmt.Errorf("%w %s: %s", ErrInvalidUserID, quoteClip(id), reason)
}

// byteName shows one byte of hostile input readably: quoted when ASCII, in
// hex otherwise (it may be part of a multi-byte character).
func byteName(c byte) string {
	if c < utf8.RuneSelf {
		return strconv.QuoteRune(rune(c))
	}
	return fmt.Sprintf("0x%02x", c)
}

func userIDByte(c byte) bool {
	switch {
	case 'a' <= c && c <= 'z', 'A' <= c && c <= 'Z', '0' <= c && c <= '9':
		return true
	}
	return c == '.' || c == '_' || c == '@' || c == '-'
}

// UserDir returns {root}/{user}: the directory holding everything of one
// user (its CODEX_HOME and the supervisor's own files beside it). root must
// be absolute; user must pass [ValidateUserID]. The result is clean and
// provably inside root.
func UserDir(root, user string) (string, error) {
	if err := ValidateUserID(user); err != nil {
		return "", err
	}
	if !filepath.IsAbs(root) {
		return "", fmt.Errorf("homes root %s is not absolute", quoteClip(root))
	}
	root = filepath.Clean(root)
	dir := filepath.Join(root, user)
	// Belt and braces: the validation above already rules out separators
	// and dot names, so this only fails if that logic is broken.
	rel, err := filepath.Rel(root, dir)
	if err != nil || rel != user || !filepath.IsLocal(rel) {
		return "", fmt.Errorf("%w %s: escapes the homes root %s", ErrInvalidUserID, quoteClip(user), root)
	}
	return dir, nil
}

// HomeDir returns {root}/{user}/.codex, the user's CODEX_HOME, under the
// same rules as [UserDir].
func HomeDir(root, user string) (string, error) {
	dir, err := UserDir(root, user)
	if err != nil {
		return "", err
	}
	home := filepath.Join(dir, ".codex")
	if !strings.HasPrefix(home, dir+string(filepath.Separator)) {
		return "", fmt.Errorf("%w %s: escapes the homes root %s", ErrInvalidUserID, quoteClip(user), root)
	}
	return home, nil
}
