package main

import (
	"strings"
	"testing"
)

// TestEveryCommandHasHelp: each command the top-level usage lists answers
// both `supervisor help CMD` and `supervisor CMD -h` with its own help on
// stdout, exit 0 and nothing on stderr: a synopsis naming it, its flags
// and its exit statuses. Before, 10 of them printed Go's bare "Usage of
// CMD:" and the flags on stderr.
func TestEveryCommandHasHelp(t *testing.T) {
	var commands []string
	_, list, _ := strings.Cut(usage, "commands:\n")
	list, _, _ = strings.Cut(list, "\n\n")
	for _, line := range strings.Split(list, "\n") {
		if f := strings.Fields(line); len(f) > 0 && f[0] != "help" {
			commands = append(commands, f[0])
		}
	}
	if len(commands) < 14 {
		t.Fatalf("the usage lists %d commands (%q), want every one", len(commands), commands)
	}
	for _, c := range commands {
		for _, args := range [][]string{{"help", c}, {c, "-h"}, {c, "--help"}} {
			code, stdout, stderr := tlsRunCLI(t, args...)
			if code != 0 || stderr != "" {
				t.Errorf("%q: exit %d, stderr %q; want 0 and the help on stdout", args, code, stderr)
			}
			if !strings.HasPrefix(stdout, "usage: supervisor "+c+" ") {
				t.Errorf("%q: stdout %.80q does not start with its synopsis", args, stdout)
			}
			for _, w := range []string{"\nflags:\n  -", "\nexit status: 0 "} {
				if !strings.Contains(stdout, w) {
					t.Errorf("%q: the help lacks %q:\n%s", args, w, stdout)
				}
			}
			if about := docOf(c).about; about == "" {
				t.Errorf("%s: no description in its help", c)
			}
		}
	}
}
