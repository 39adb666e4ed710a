package main

import (
	"fmt"
	"strings"
	"testing"

	"github.com/meshweaver/supervisor/demomodel"
)

// TestRoundShowsAFailedTool: a round whose shell command fails (output on
// stderr, exit 1) and whose model then claims success completes (exit 0),
// and `supervisor round` shows the command's failure with its output and
// names the failed tool on the status line. Before, it printed only
// "[tool shell failed: exit code 1]" and a plain "round completed".
func TestRoundShowsAFailedTool(t *testing.T) {
	e := newEnv(t, nil)
	// The command's output avoids "Read-only file system": with it, this
	// codex sent no item of the command at all (no tool event reached the
	// daemon; left to the event mapping's owners).
	e.model.Enqueue(
		demomodel.Respond(demomodel.ExecCommand("call-note", `echo "saving notes.txt" >&2; echo "notes.txt: the disk said no" >&2; exit 1`)),
		demomodel.Text("I saved your note."),
	)
	code, stdout, stderr := tlsRunCLI(t, "round", "--addr", e.addr, "--user", "toolfail", "--thread", "t",
		"--timeout", opsRoundWait.String(), "save a note")
	if code != 0 || strings.TrimSpace(stdout) != "I saved your note." {
		t.Fatalf("round: exit %d, stdout %q, stderr %q; want completed with the model's claim", code, stdout, stderr)
	}
	for _, w := range []string{
		"[tool shell failed: exit code 1:\n  saving notes.txt\n  notes.txt: the disk said no]",
		"round completed in ", "; 1 tool call(s) failed: shell]",
	} {
		if !strings.Contains(stderr, w) {
			t.Errorf("round's stderr lacks %q:\n%s", w, stderr)
		}
	}
}

// TestLastLinesBoundsAFailedToolsOutput: a failed tool's output is shown
// by its last lines, at most n and about max bytes, after a count of the
// lines left out; one long line is cut from its start.
func TestLastLinesBoundsAFailedToolsOutput(t *testing.T) {
	var many []string
	for i := 1; i <= 100; i++ {
		many = append(many, fmt.Sprintf("line %d", i))
	}
	for _, c := range []struct {
		name, in string
		n, max   int
		want     string
	}{
		{"short", "a\nb", 20, 2000, "a\nb"},
		{"many lines", strings.Join(many, "\n"), 3, 2000, "… (97 lines above)\nline 98\nline 99\nline 100"},
		{"many bytes", strings.Join(many, "\n"), 20, 20, "… (98 lines above)\nline 99\nline 100"},
		{"one long line", strings.Repeat("x", 50) + "END", 20, 10, "…xxxxxxxEND"},
	} {
		if got := lastLines(c.in, c.n, c.max); got != c.want {
			t.Errorf("%s: %q, want %q", c.name, got, c.want)
		}
	}
}
