package codexproc

import (
	"os"
	"path/filepath"
	"slices"
	"testing"
)

func TestPreferBundledBwrap(t *testing.T) {
	dir := t.TempDir()
	bin := filepath.Join(dir, "bin", "codex")
	res := filepath.Join(dir, "codex-resources")
	for _, d := range []string{filepath.Dir(bin), res} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	env := []string{"HOME=/h", "PATH=/usr/bin:/bin"}

	// No bundled bwrap: env unchanged.
	if got := PreferBundledBwrap(env, bin); !slices.Equal(got, env) {
		t.Errorf("without a bundled bwrap: got %q, want %q", got, env)
	}
	if err := os.WriteFile(filepath.Join(res, "bwrap"), []byte("#!/bin/sh\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name string
		env  []string
		want []string
	}{
		{"first on PATH", env, []string{"HOME=/h", "PATH=" + res + ":/usr/bin:/bin"}},
		{"no PATH", []string{"HOME=/h"}, []string{"HOME=/h", "PATH=" + res}},
		{"empty PATH", []string{"PATH="}, []string{"PATH=" + res}},
	}
	for _, tt := range tests {
		if got := PreferBundledBwrap(tt.env, bin); !slices.Equal(got, tt.want) {
			t.Errorf("%s: got %q, want %q", tt.name, got, tt.want)
		}
	}
}
