package codexproto_test

import (
	"bufio"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/meshweaver/supervisor/codexproto"
)

// semver matches a codex release version.
var semver = regexp.MustCompile(`\b\d+\.\d+\.\d+\b`)

// pinSpellings are the ways the repository states which codex it installs
// or checks, each with the version as its first group. Any of them must
// name the pin. A line that says "pin" (pinned, pins) and spells versions
// must name the pin among them, so "moved the pin from A to B" is fine
// and a stale "the pinned CLI (A)" is not.
var pinSpellings = []*regexp.Regexp{
	regexp.MustCompile(`@openai/codex@(\d+\.\d+\.\d+)`),
	regexp.MustCompile(`CODEX_VERSION=(\d+\.\d+\.\d+)`),
	regexp.MustCompile(`^\s*version=(\d+\.\d+\.\d+)`), // shell scripts
	regexp.MustCompile(`(?i)(?:cli|codex|pinned)\w*version\s*=\s*"(\d+\.\d+\.\d+)"`),
	// A version written as a regular expression (a test's pattern).
	regexp.MustCompile(`\b(\d+\\\.\d+\\\.\d+)\b`),
}

var sayPin = regexp.MustCompile(`(?i)\bpin(s|ned)?\b`)

// TestPinSpelledOnce: codexproto/cli-version is the one source of the
// pinned codex version. scripts/install-codex and the Dockerfile read it,
// the Go code embeds it; no other file may state another pin.
func TestPinSpelledOnce(t *testing.T) {
	pin := codexproto.PinnedCLIVersion
	if _, err := codexproto.ParseUserAgent("pin/" + pin); err != nil || !semver.MatchString(pin) {
		t.Fatalf("codexproto/cli-version holds %q, not a version x.y.z (%v)", pin, err)
	}
	for _, f := range []string{"../scripts/install-codex", "../Dockerfile"} {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		if !strings.Contains(string(b), "codexproto/cli-version") {
			t.Errorf("%s does not read codexproto/cli-version", f)
		}
	}
	checked := 0
	err := filepath.WalkDir("..", func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		name := d.Name()
		if d.IsDir() {
			// Recorded transcripts say which CLI made them; vendored
			// code and the CLI installs are not ours.
			if name == ".git" || strings.HasPrefix(name, ".codex-cli") || name == "testdata" || name == "third_party" || name == "node_modules" {
				return fs.SkipDir
			}
			return nil
		}
		if !d.Type().IsRegular() || !textFile(name) || name == "pin_test.go" {
			return nil
		}
		checked++
		for n, line := range fileLines(t, path) {
			for _, re := range pinSpellings {
				for _, m := range re.FindAllStringSubmatch(line, -1) {
					if strings.ReplaceAll(m[1], `\.`, ".") != pin {
						t.Errorf("%s:%d states codex %s, the pin is %s (codexproto/cli-version): %s", path, n+1, m[1], pin, strings.TrimSpace(line))
					}
				}
			}
			if vs := semver.FindAllString(line, -1); len(vs) > 0 && sayPin.MatchString(line) && !contains(vs, pin) {
				t.Errorf("%s:%d speaks of the pin as %v, the pin is %s (codexproto/cli-version): %s", path, n+1, vs, pin, strings.TrimSpace(line))
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if checked < 50 {
		t.Errorf("checked %d files: the walk did not see the repository", checked)
	}
}

// TestPinSpellingsCatch: the patterns of TestPinSpelledOnce see a stale
// pin in each place one was written before codexproto/cli-version.
func TestPinSpellingsCatch(t *testing.T) {
	for _, line := range []string{
		"version=0.1.0",
		"ARG CODEX_VERSION=0.1.0",
		"const PinnedVersion = \"0.1.0\"",
		"const PinnedCLIVersion = \"0.1.0\"",
		"You need Node 20 with npm (for `@openai/codex@0.1.0`)",
		"regexp.MustCompile(`codex 0\\.1\\.0\\)`)", // escaped, as in a pattern
	} {
		caught := false
		for _, re := range pinSpellings {
			caught = caught || re.MatchString(line)
		}
		if !caught {
			t.Errorf("%q: no pattern catches it", line)
		}
	}
	if !sayPin.MatchString("# The pinned codex CLI (0.1.0)") || sayPin.MatchString("pinpoint 0.1.0") {
		t.Error("sayPin does not tell a pin from another word")
	}
}

func textFile(name string) bool {
	switch filepath.Ext(name) {
	case ".go", ".md", ".sh", ".service", ".toml", ".yaml", ".yml", ".txt":
		return true
	}
	return name == "Dockerfile" || name == "install-codex" || name == "run" || name == "test" || name == "release"
}

func fileLines(t *testing.T, path string) []string {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var out []string
	sc := bufio.NewScanner(f)
	sc.Buffer(nil, 4<<20)
	for sc.Scan() {
		out = append(out, sc.Text())
	}
	if err := sc.Err(); err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	return out
}

func contains(xs []string, x string) bool {
	for _, y := range xs {
		if y == x {
			return true
		}
	}
	return false
}
