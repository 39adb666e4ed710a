package store

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestWriteFileAtomic(t *testing.T) {
	tests := []struct {
		name string
		perm os.FileMode
		data []byte
	}{
		{"private", 0o600, []byte("secret\n")},
		{"readable", 0o644, []byte("hello")},
		{"empty", 0o600, nil},
		{"read only", 0o400, bytes.Repeat([]byte("x"), 1<<20)},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			root := t.TempDir()
			dir := filepath.Join(root, "a", "b")
			path := filepath.Join(dir, "file")
			if err := WriteFileAtomic(path, tt.data, tt.perm); err != nil {
				t.Fatalf("WriteFileAtomic: %v", err)
			}
			got, err := os.ReadFile(path)
			if err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(got, tt.data) {
				t.Errorf("content = %d bytes, want %d", len(got), len(tt.data))
			}
			assertMode(t, path, tt.perm)
			assertMode(t, dir, 0o700)
			assertMode(t, filepath.Join(root, "a"), 0o700)
			assertNoTemp(t, dir)
		})
	}
}

func TestWriteFileAtomicReplaces(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "f")
	if err := WriteFileAtomic(path, []byte("old content that is longer"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := WriteFileAtomic(path, []byte("new"), 0o600); err != nil {
		t.Fatal(err)
	}
	got, _ := os.ReadFile(path)
	if string(got) != "new" {
		t.Errorf("content = %q, want %q", got, "new")
	}
	assertMode(t, path, 0o600)
	assertNoTemp(t, dir)
}

func TestWriteFileAtomicErrors(t *testing.T) {
	tests := []struct {
		name  string
		setup func(t *testing.T, dir string) string // returns the path to write
	}{
		{"target is a directory", func(t *testing.T, dir string) string {
			p := filepath.Join(dir, "d")
			if err := os.MkdirAll(filepath.Join(p, "child"), 0o700); err != nil {
				t.Fatal(err)
			}
			return p
		}},
		{"parent is a file", func(t *testing.T, dir string) string {
			p := filepath.Join(dir, "file")
			writeRaw(t, p, []byte("x"))
			return filepath.Join(p, "f")
		}},
		{"no file name", func(t *testing.T, dir string) string {
			return dir + "/"
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dir := t.TempDir()
			path := tt.setup(t, dir)
			err := WriteFileAtomic(path, []byte("data"), 0o600)
			if err == nil {
				t.Fatal("WriteFileAtomic succeeded, want an error")
			}
			if !strings.Contains(err.Error(), path) {
				t.Errorf("error %q does not name %s", err, path)
			}
			if strings.Contains(err.Error(), "data") {
				t.Errorf("error %q contains the data", err)
			}
			assertNoTemp(t, dir)
		})
	}
}
