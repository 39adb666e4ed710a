package store

import (
	"encoding/base64"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

const (
	testKey     = "mesh/thread/42"
	testKeyHash = "1f6c2f3e05384262cb53f9fa04a52f8f3134b69be3609f023e7962139fdd84d8" // sha256sum
	testThread  = "019a236e-a444-7bc3-a218-be6e30739714"
	otherThread = "019a2370-0000-7000-8000-000000000001"
)

func TestRegistryPath(t *testing.T) {
	r := NewRegistry("/h/.codex")
	if got, want := r.Path(testKey), "/h/.codex/meshweaver/threads/1f6c2f3e05384262.txt"; got != want {
		t.Errorf("Path = %q, want %q", got, want)
	}
	if got, want := KeyPrefix(testKey), testKeyHash[:16]; got != want {
		t.Errorf("KeyPrefix = %q, want %q", got, want)
	}
}

func TestRegistryRoundTrip(t *testing.T) {
	home := t.TempDir()
	r := NewRegistry(home)
	got, err := r.Lookup(testKey)
	if got != "" || err != nil {
		t.Fatalf("Lookup before Record = %q, %v; want \"\", nil", got, err)
	}
	if err := r.Record(testKey, testThread); err != nil {
		t.Fatal(err)
	}
	if got, err := r.Lookup(testKey); got != testThread || err != nil {
		t.Fatalf("Lookup = %q, %v; want %q", got, err, testThread)
	}
	data, err := os.ReadFile(r.Path(testKey))
	if err != nil {
		t.Fatal(err)
	}
	want := "meshweaver-thread v2\nkey " + testKeyHash + "\nthread " + testThread + "\nmesh " + base64.StdEncoding.EncodeToString([]byte(testKey)) + "\n"
	if string(data) != want {
		t.Errorf("file = %q, want %q", data, want)
	}
	assertMode(t, r.Path(testKey), 0o600)
	assertMode(t, filepath.Join(home, "meshweaver"), 0o700)
	assertMode(t, filepath.Join(home, "meshweaver", "threads"), 0o700)
	assertNoTemp(t, filepath.Dir(r.Path(testKey)))

	// Another key is independent.
	if got, err := r.Lookup("other"); got != "" || err != nil {
		t.Errorf("Lookup(other) = %q, %v", got, err)
	}
	// Record replaces.
	if err := r.Record(testKey, otherThread); err != nil {
		t.Fatal(err)
	}
	if got, _ := r.Lookup(testKey); got != otherThread {
		t.Errorf("Lookup after replace = %q, want %q", got, otherThread)
	}
	// Forget, twice.
	for i := 0; i < 2; i++ {
		if err := r.Forget(testKey); err != nil {
			t.Fatalf("Forget #%d: %v", i, err)
		}
	}
	if got, err := r.Lookup(testKey); got != "" || err != nil {
		t.Errorf("Lookup after Forget = %q, %v", got, err)
	}
}

func TestRegistryRejects(t *testing.T) {
	r := NewRegistry(t.TempDir())
	tests := []struct {
		name, key, thread string
		want              error
	}{
		{"empty key", "", testThread, ErrInvalidKey},
		{"long key", strings.Repeat("k", MaxKeyLen+1), testThread, ErrInvalidKey},
		{"empty thread", testKey, "", ErrInvalidThreadID},
		{"name not id", testKey, "mw-1f6c2f3e05384262", ErrInvalidThreadID},
		{"short", testKey, testThread[:35], ErrInvalidThreadID},
		{"long", testKey, testThread + "0", ErrInvalidThreadID},
		{"no dashes", testKey, strings.ReplaceAll(testThread, "-", "") + "0000", ErrInvalidThreadID},
		{"newline", testKey, testThread[:35] + "\n", ErrInvalidThreadID},
		{"not hex", testKey, "019a236e-a444-7bc3-a218-be6e3073971g", ErrInvalidThreadID},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if err := r.Record(tt.key, tt.thread); !errors.Is(err, tt.want) {
				t.Errorf("Record = %v, want %v", err, tt.want)
			}
		})
	}
	if err := r.Record(strings.Repeat("k", MaxKeyLen), strings.ToUpper(testThread)); err != nil {
		t.Errorf("Record with a %d-byte key and an upper-case id: %v", MaxKeyLen, err)
	}
	if _, err := r.Lookup(""); !errors.Is(err, ErrInvalidKey) {
		t.Errorf("Lookup(\"\") = %v, want ErrInvalidKey", err)
	}
}

func TestRegistryCorrupt(t *testing.T) {
	valid := "meshweaver-thread v1\nkey " + testKeyHash + "\nthread " + testThread + "\n"
	otherHash := "d9298a10d1b0735837dc4bd85dac641b0f3cef27a47e5d53a54f2f3f5b2fcffa"
	tests := []struct{ name, content string }{
		{"empty", ""},
		{"truncated last newline", valid[:len(valid)-1]},
		{"truncated half", valid[:len(valid)/2]},
		{"header only", "meshweaver-thread v1\n"},
		{"garbage", "\x00\x01garbage\xff"},
		{"bare uuid", testThread + "\n"},
		{"wrong key", "meshweaver-thread v1\nkey " + otherHash + "\nthread " + testThread + "\n"},
		{"bad uuid", "meshweaver-thread v1\nkey " + testKeyHash + "\nthread mw-1f6c2f3e05384262\n"},
		{"upper-case hash", "meshweaver-thread v1\nkey " + strings.ToUpper(testKeyHash) + "\nthread " + testThread + "\n"},
		{"short hash", "meshweaver-thread v1\nkey " + testKeyHash[:16] + "\nthread " + testThread + "\n"},
		{"future version", strings.Replace(valid, "v1", "v2", 1)},
		{"crlf", strings.ReplaceAll(valid, "\n", "\r\n")},
		{"trailing data", valid + "extra\n"},
		{"swapped lines", "meshweaver-thread v1\nthread " + testThread + "\nkey " + testKeyHash + "\n"},
		{"huge", valid + strings.Repeat("x", 1<<20)},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := NewRegistry(t.TempDir())
			path := r.Path(testKey)
			writeRaw(t, path, []byte(tt.content))
			got, err := r.Lookup(testKey)
			if !errors.Is(err, ErrCorrupt) || got != "" {
				t.Fatalf("Lookup = %q, %v; want ErrCorrupt", got, err)
			}
			if !strings.Contains(err.Error(), path) {
				t.Errorf("error %q does not name %s", err, path)
			}
			if err := r.Record(testKey, testThread); err != nil {
				t.Fatalf("Record over a corrupt file: %v", err)
			}
			if got, err := r.Lookup(testKey); got != testThread || err != nil {
				t.Errorf("Lookup after Record = %q, %v", got, err)
			}
		})
	}
}

func TestRegistryUnreadable(t *testing.T) {
	r := NewRegistry(t.TempDir())
	if err := os.MkdirAll(r.Path(testKey), 0o700); err != nil {
		t.Fatal(err)
	}
	_, err := r.Lookup(testKey)
	if err == nil || errors.Is(err, ErrCorrupt) {
		t.Errorf("Lookup of a directory = %v, want a plain read error", err)
	}
}

func TestIsUUID(t *testing.T) {
	tests := map[string]bool{
		testThread:                             true,
		"00000000-0000-0000-0000-000000000000": true,
		"019A236E-A444-7BC3-A218-BE6E30739714": true,
		"":                                     false,
		"019a236e_a444_7bc3_a218_be6e30739714": false,
		"019a236e-a444-7bc3-a218be6e30739714-": false,
		"019a236e-a444-7bc3-a218-be6e3073971":  false,
		" 19a236e-a444-7bc3-a218-be6e30739714": false,
	}
	for s, want := range tests {
		if got := IsUUID(s); got != want {
			t.Errorf("IsUUID(%q) = %v, want %v", s, got, want)
		}
	}
}
