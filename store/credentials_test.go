package store

import (
	"bytes"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// secretMarker is part of every test key, so leaks are easy to find.
const secretMarker = "SECRETxyz123"

const testAPIKey = "sk-proj-" + secretMarker + "AbCdEf"

func assertNoSecret(t testing.TB, what, s string) {
	t.Helper()
	if strings.Contains(s, secretMarker) {
		t.Errorf("%s leaks the key: %q", what, s)
	}
}

func TestCredentialsRoundTrip(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "alice", "meshweaver")
	c := NewCredentials(dir)
	if key, ok, err := c.APIKey(); key != "" || ok || err != nil {
		t.Fatalf("APIKey before Save = %q, %v, %v; want none", key, ok, err)
	}
	if err := c.SaveAPIKey("  " + testAPIKey + "\r\n"); err != nil {
		t.Fatal(err)
	}
	key, ok, err := c.APIKey()
	if key != testAPIKey || !ok || err != nil {
		t.Fatalf("APIKey = %q, %v, %v; want %q", key, ok, err, testAPIKey)
	}
	if got, want := c.Path(), filepath.Join(dir, APIKeyFile); got != want {
		t.Errorf("Path = %q, want %q", got, want)
	}
	data, _ := os.ReadFile(c.Path())
	if want := "meshweaver-credentials v1\nopenai-api-key " + testAPIKey + "\n"; string(data) != want {
		t.Errorf("file = %q, want %q", data, want)
	}
	assertMode(t, c.Path(), 0o600)
	assertMode(t, dir, 0o700)
	assertNoTemp(t, dir)

	if err := c.SaveAPIKey("sk-second"); err != nil {
		t.Fatal(err)
	}
	if key, _, _ := c.APIKey(); key != "sk-second" {
		t.Errorf("APIKey after replace = %q", key)
	}
	for i := 0; i < 2; i++ {
		if err := c.Delete(); err != nil {
			t.Fatalf("Delete #%d: %v", i, err)
		}
	}
	if key, ok, err := c.APIKey(); key != "" || ok || err != nil {
		t.Errorf("APIKey after Delete = %q, %v, %v", key, ok, err)
	}
}

func TestCredentialsRejects(t *testing.T) {
	tests := []struct{ name, key string }{
		{"empty", ""},
		{"blank", " \t\n"},
		{"inner space", "sk-" + secretMarker + " more"},
		{"NUL", "sk-" + secretMarker + "\x00"},
		{"newline inside", "sk-" + secretMarker + "\nopenai-api-key x"},
		{"non-ASCII", "sk-" + secretMarker + "é"},
		{"DEL", "sk-" + secretMarker + "\x7f"},
		{"too long", "sk-" + secretMarker + strings.Repeat("k", MaxAPIKeyLen)},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := NewCredentials(t.TempDir())
			err := c.SaveAPIKey(tt.key)
			if !errors.Is(err, ErrInvalidAPIKey) {
				t.Fatalf("SaveAPIKey = %v, want ErrInvalidAPIKey", err)
			}
			assertNoSecret(t, "error", err.Error())
			assertNoSecret(t, "error %+v", fmt.Sprintf("%+v", err))
			if _, err := os.Stat(c.Path()); !errors.Is(err, os.ErrNotExist) {
				t.Errorf("rejected key was written: %v", err)
			}
		})
	}
}

func TestCredentialsCorrupt(t *testing.T) {
	tests := []struct{ name, content string }{
		{"empty", ""},
		{"raw key", testAPIKey + "\n"},
		{"raw key no newline", testAPIKey},
		{"no final newline", "meshweaver-credentials v1\nopenai-api-key " + testAPIKey},
		{"future version", "meshweaver-credentials v2\nopenai-api-key " + testAPIKey + "\n"},
		{"wrong field", "meshweaver-credentials v1\n" + testAPIKey + "\n"},
		{"bad key", "meshweaver-credentials v1\nopenai-api-key " + testAPIKey + " x\n"},
		{"empty key", "meshweaver-credentials v1\nopenai-api-key \n"},
		{"trailing", "meshweaver-credentials v1\nopenai-api-key " + testAPIKey + "\n" + testAPIKey + "\n"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := NewCredentials(t.TempDir())
			writeRaw(t, c.Path(), []byte(tt.content))
			key, ok, err := c.APIKey()
			if !errors.Is(err, ErrCorrupt) || key != "" || ok {
				t.Fatalf("APIKey = %q, %v, %v; want ErrCorrupt", key, ok, err)
			}
			assertNoSecret(t, "error", err.Error())
			if !strings.Contains(err.Error(), c.Path()) {
				t.Errorf("error %q does not name %s", err, c.Path())
			}
		})
	}
}

func TestCredentialsWriteErrorHasNoKey(t *testing.T) {
	c := NewCredentials(t.TempDir())
	if err := os.MkdirAll(filepath.Join(c.Path(), "x"), 0o700); err != nil {
		t.Fatal(err)
	}
	err := c.SaveAPIKey(testAPIKey)
	if err == nil {
		t.Fatal("SaveAPIKey over a directory succeeded")
	}
	assertNoSecret(t, "error", err.Error())
}

func TestCredentialsFormatting(t *testing.T) {
	c := NewCredentials(t.TempDir())
	if err := c.SaveAPIKey(testAPIKey); err != nil {
		t.Fatal(err)
	}
	for _, verb := range []string{"%v", "%+v", "%#v", "%s", "%q", "%x"} {
		for _, v := range []any{c, *c} {
			s := fmt.Sprintf(verb, v)
			assertNoSecret(t, verb, s)
			if verb == "%v" && !strings.Contains(s, "[redacted]") {
				t.Errorf("%s of %T = %q, want it marked redacted", verb, v, s)
			}
		}
	}
	var buf bytes.Buffer
	slog.New(slog.NewJSONHandler(&buf, nil)).Info("creds", "c", c)
	assertNoSecret(t, "slog", buf.String())
	if !strings.Contains(buf.String(), `"api_key":"[redacted]"`) {
		t.Errorf("slog output %s lacks the redacted marker", buf.String())
	}
}
