package store

import (
	"encoding/base64"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestRegistryReadsVersion1(t *testing.T) {
	r := NewRegistry(t.TempDir())
	writeRaw(t, r.Path(testKey), []byte("meshweaver-thread v1\nkey "+testKeyHash+"\nthread "+testThread+"\n"))
	id, v, err := r.LookupVersion(testKey)
	if id != testThread || v != 1 || err != nil {
		t.Fatalf("LookupVersion = %q, %d, %v; want the thread, version 1", id, v, err)
	}
	// A version 1 record is not listed (it cannot be named) until rewritten.
	if entries, skipped, err := r.List(); len(entries) != 0 || skipped != 1 || err != nil {
		t.Errorf("List = %v, %d skipped, %v; want none, 1 skipped", entries, skipped, err)
	}
	if err := r.Record(testKey, testThread); err != nil {
		t.Fatal(err)
	}
	if _, v, _ := r.LookupVersion(testKey); v != 2 {
		t.Errorf("version after Record = %d, want 2", v)
	}
	if entries, skipped, err := r.List(); len(entries) != 1 || entries[0].Key != testKey || skipped != 0 || err != nil {
		t.Errorf("List after rewrite = %v, %d skipped, %v", entries, skipped, err)
	}
}

func TestRegistryList(t *testing.T) {
	r := NewRegistry(t.TempDir())
	if entries, skipped, err := r.List(); entries != nil || skipped != 0 || err != nil {
		t.Fatalf("List of nothing = %v, %d, %v", entries, skipped, err)
	}
	keys := []string{"mesh/b", "mesh/a", "ünï/🧵 with spaces\tand tab", strings.Repeat("k", MaxKeyLen)}
	for _, k := range keys {
		if err := r.Record(k, testThread); err != nil {
			t.Fatal(err)
		}
	}
	if err := r.Record("mesh/a", otherThread); err != nil { // replaced, listed once
		t.Fatal(err)
	}
	// Noise in the folder: a damaged record, a temp file, a record moved
	// to another key's name, a subfolder.
	dir := filepath.Dir(r.Path("x"))
	writeRaw(t, filepath.Join(dir, "0000000000000000.txt"), []byte("garbage"))
	writeRaw(t, filepath.Join(dir, ".tmp-123.txt"), formatThreadRecord("mesh/tmp", testThread))
	writeRaw(t, filepath.Join(dir, "1111111111111111.txt"), formatThreadRecord("mesh/elsewhere", testThread))
	if err := os.Mkdir(filepath.Join(dir, "sub.txt"), 0o700); err != nil {
		t.Fatal(err)
	}
	entries, skipped, err := r.List()
	if err != nil {
		t.Fatal(err)
	}
	if skipped != 2 {
		t.Errorf("skipped = %d, want 2 (the damaged and the misplaced record)", skipped)
	}
	var got []string
	for _, e := range entries {
		got = append(got, e.Key)
		if e.Modified.IsZero() {
			t.Errorf("%q has no modification time", e.Key)
		}
		if want := map[bool]string{true: otherThread, false: testThread}[e.Key == "mesh/a"]; e.ThreadID != want {
			t.Errorf("%q: thread %s, want %s", e.Key, e.ThreadID, want)
		}
	}
	want := []string{keys[3], keys[1], keys[0], keys[2]} // sorted
	if strings.Join(got, "|") != strings.Join(want, "|") {
		t.Errorf("keys = %q, want %q", got, want)
	}
}

func TestRegistryVersion2Corrupt(t *testing.T) {
	mesh := func(s string) string { return base64.StdEncoding.EncodeToString([]byte(s)) }
	head := "meshweaver-thread v2\nkey " + testKeyHash + "\nthread " + testThread + "\nmesh "
	for _, tt := range []struct{ name, content string }{
		{"no mesh line", "meshweaver-thread v2\nkey " + testKeyHash + "\nthread " + testThread + "\n"},
		{"another key's mesh", head + mesh("other") + "\n"},
		{"not base64", head + "%%%\n"},
		{"unpadded base64", head + strings.TrimRight(mesh(testKey), "=") + "\n"},
		{"empty mesh", head + "\n"},
		{"v1 with a mesh line", "meshweaver-thread v1\nkey " + testKeyHash + "\nthread " + testThread + "\nmesh " + mesh(testKey) + "\n"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			r := NewRegistry(t.TempDir())
			writeRaw(t, r.Path(testKey), []byte(tt.content))
			if got, err := r.Lookup(testKey); !errors.Is(err, ErrCorrupt) || got != "" {
				t.Errorf("Lookup = %q, %v; want ErrCorrupt", got, err)
			}
		})
	}
}
