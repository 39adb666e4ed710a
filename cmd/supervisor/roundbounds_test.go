package main

import (
	"bytes"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// TestRoundBoundsFlags: --max-sandbox and --allow-approval-policies come
// from the command line or the --config file, and a bound below the
// daemon's own defaults is refused with the flag named.
func TestRoundBoundsFlags(t *testing.T) {
	dir := t.TempDir()
	noEnv := func(string) (string, bool) { return "", false }
	base := []string{"--homes", dir, "--workspace", dir, "--codex", opsCodexBin(t)}
	conf := filepath.Join(dir, "c.conf")
	if err := os.WriteFile(conf, []byte("max-sandbox workspace-write\nallow-approval-policies never, on-request\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	o, err := loadServeOptions(append(base, "--config", conf), noEnv, &bytes.Buffer{})
	if err != nil {
		t.Fatalf("bounds from the config file: %v", err)
	}
	if o.maxSandbox != "workspace-write" || !slices.Equal(splitList(o.approvals), []string{"never", "on-request"}) {
		t.Fatalf("bounds: %q %q", o.maxSandbox, o.approvals)
	}
	for _, args := range [][]string{
		{"--sandbox", "workspace-write", "--max-sandbox", "read-only"},
		{"--max-sandbox", "everything"},
		{"--allow-approval-policies", "on-request"}, // not the default never
	} {
		var stderr bytes.Buffer
		_, err := loadServeOptions(append(base, args...), noEnv, &stderr)
		if err == nil || !strings.Contains(err.Error()+stderr.String(), "--max-sandbox or --allow-approval-policies") {
			t.Errorf("%v: err = %v; stderr %s", args, err, stderr.String())
		}
	}
}
