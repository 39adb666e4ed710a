package main

import (
	"bytes"
	"log/slog"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/meshweaver/supervisor/codexproto"
)

// TestCodexCLIRange: serve --check's line and the start log name the
// CLI's version and say whether it is in the tested range; a CLI that
// cannot say its version is a warning, not a refusal.
func TestCodexCLIRange(t *testing.T) {
	pin := codexproto.PinnedCLI()
	newer := codexproto.Version{Major: pin.Major, Minor: pin.Minor + 1}
	for _, tt := range []struct {
		name, out string
		line      string // in String()
		level     string // of the log line
	}{
		{"pinned", "codex-cli " + pin.String(), pin.String() + ", in the tested range", "INFO"},
		{"newer", "codex-cli " + newer.String(), newer.String() + ", OUTSIDE the tested range", "WARN"},
		{"mute", "", "asking", "WARN"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			bin := filepath.Join(t.TempDir(), "codex")
			if err := os.WriteFile(bin, []byte("#!/bin/sh\necho '"+tt.out+"'\n"), 0o755); err != nil {
				t.Fatal(err)
			}
			c := findCodexCLI(bin)
			if got := c.String(); !strings.Contains(got, tt.line) || !strings.Contains(got, codexproto.TestedRange()) {
				t.Errorf("line %q, want it to say %q and the range %s", got, tt.line, codexproto.TestedRange())
			}
			var buf bytes.Buffer
			c.log(slog.New(slog.NewTextHandler(&buf, nil)))
			if got := buf.String(); !strings.Contains(got, "level="+tt.level) || !strings.Contains(got, "tested="+strconv.Quote(codexproto.TestedRange())) {
				t.Errorf("log %q, want level %s and tested=%q", got, tt.level, codexproto.TestedRange())
			}
		})
	}
}
