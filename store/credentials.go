package store

import (
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"path/filepath"
	"strings"
)

// ErrInvalidAPIKey reports an API key that cannot be stored. Errors wrapping
// it never contain the key.
var ErrInvalidAPIKey = errors.New("invalid api key")

// MaxAPIKeyLen is the longest API key, in bytes, Credentials accepts.
const MaxAPIKeyLen = 512

// APIKeyFile is the name of the API key file inside a Credentials directory.
const APIKeyFile = "openai-api-key"

// credentialsHeader is the first line of the API key file, version included.
const credentialsHeader = "meshweaver-credentials v1"

// maxCredentialsFile bounds how much of the API key file is read.
const maxCredentialsFile = 4 << 10

// Credentials stores one user's OpenAI API key in a directory outside its
// CODEX_HOME ({homes}/{user}/meshweaver/), in the file [APIKeyFile], mode
// 0600:
//
//	meshweaver-credentials v1
//	openai-api-key <key>
//
// each line ending in a newline, nothing else. The value holds only the
// directory, never the key, and formats (%v, %#v, slog) without it anyway.
// Errors never contain the key or the file's content.
type Credentials struct {
	dir string
}

// NewCredentials returns the Credentials kept in dir. Nothing is touched on
// disk until SaveAPIKey.
func NewCredentials(dir string) *Credentials {
	return &Credentials{dir: dir}
}

// Path returns the API key file, whether or not it exists.
func (c *Credentials) Path() string {
	return filepath.Join(c.dir, APIKeyFile)
}

// ValidateAPIKey reports whether key can be stored: 1 to [MaxAPIKeyLen]
// printable ASCII characters without spaces. The error never contains the
// key.
func ValidateAPIKey(key string) error {
	switch {
	case key == "":
		return fmt.Errorf("%w: empty", ErrInvalidAPIKey)
	case len(key) > MaxAPIKeyLen:
		return fmt.Errorf("%w: %d bytes, longer than %d", ErrInvalidAPIKey, len(key), MaxAPIKeyLen)
	}
	for i := 0; i < len(key); i++ {
		if c := key[i]; c <= ' ' || c >= 0x7f {
			return fmt.Errorf("%w: byte %d is not printable ASCII", ErrInvalidAPIKey, i)
		}
	}
	return nil
}

// SaveAPIKey stores key atomically with mode 0600, replacing any earlier
// key. Surrounding white space (a pasted newline) is trimmed first; what
// remains must pass [ValidateAPIKey].
func (c *Credentials) SaveAPIKey(key string) error {
	key = strings.TrimSpace(key)
	if err := ValidateAPIKey(key); err != nil {
		return fmt.Errorf("saving api key in %s: %w", c.dir, err)
	}
	return WriteFileAtomic(c.Path(), formatFields(credentialsHeader, APIKeyFile, key), 0o600)
}

// APIKey returns the stored key and true, or "", false and a nil error when
// none is stored. A damaged file yields an error wrapping [ErrCorrupt] that
// names the path but none of its content.
func (c *Credentials) APIKey() (string, bool, error) {
	path := c.Path()
	data, err := readSmall(path, maxCredentialsFile)
	if errors.Is(err, fs.ErrNotExist) {
		return "", false, nil
	}
	if err == nil {
		var v []string
		v, err = parseFields(data, credentialsHeader, APIKeyFile)
		if err == nil {
			if ValidateAPIKey(v[0]) != nil {
				// Not the validation error: keep even its shape out.
				err = corruptf("stored key is not a valid api key")
			} else {
				return v[0], true, nil
			}
		}
	}
	return "", false, fmt.Errorf("reading api key %s: %w", path, err)
}

// Delete removes the stored key. A missing key is not an error.
func (c *Credentials) Delete() error {
	return removeIfExists(c.Path())
}

// String describes c without any secret.
func (c Credentials) String() string {
	return "store.Credentials{dir: " + c.dir + ", api key: [redacted]}"
}

// GoString describes c without any secret, for %#v.
func (c Credentials) GoString() string {
	return c.String()
}

// LogValue describes c for slog without any secret.
func (c Credentials) LogValue() slog.Value {
	return slog.GroupValue(slog.String("dir", c.dir), slog.String("api_key", "[redacted]"))
}
