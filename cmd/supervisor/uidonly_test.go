package main

import (
	"flag"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// Uid switching without bubblewrap (uid-only) is refused unless the
// operator accepts it with --allow-uid-only: the users' agents would share
// /tmp, /dev/shm and every world-readable file. The host claims folder is
// the one given.
func TestUIDOnlyRefused(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("uid switching needs root")
	}
	homes, ws := t.TempDir(), t.TempDir()
	claims := filepath.Join(t.TempDir(), "uids")
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	opts := func(args ...string) *isolationOptions {
		fs := flag.NewFlagSet("serve", flag.ContinueOnError)
		var o isolationOptions
		o.register(fs)
		if err := fs.Parse(append([]string{"--bwrap", "off", "--uid-claims", claims}, args...)); err != nil {
			t.Fatal(err)
		}
		return &o
	}
	_, err := opts().node(homes, ws, nil, log)
	if err == nil || !strings.Contains(err.Error(), "--allow-uid-only") || !strings.Contains(err.Error(), "bubblewrap") {
		t.Fatalf("uid-only: %v, want a refusal naming bubblewrap and --allow-uid-only", err)
	}
	n, err := opts("--allow-uid-only").node(homes, ws, nil, log)
	if err != nil || n.Mode() != "uid" {
		t.Fatalf("uid-only accepted: %v, mode %v", err, n)
	}
	if _, err := opts("--uid-range", "off").node(homes, ws, nil, log); err != nil {
		t.Fatalf("no uid switch, no bubblewrap (one user): %v", err)
	}
}
