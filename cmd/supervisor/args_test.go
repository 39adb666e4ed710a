package main

import (
	"bytes"
	"errors"
	"flag"
	"strings"
	"testing"
	"time"

	"github.com/meshweaver/supervisor/messages"
)

// TestScanArgs: flags anywhere, "--" ends them, switches with and without
// a value, and every mistake of a line reported, none swallowed.
func TestScanArgs(t *testing.T) {
	for _, c := range []struct {
		name     string
		args     []string
		policy   argsPolicy
		wantRest string
		wantErrs []string
		check    func(t *testing.T, n int, d time.Duration, b bool)
	}{
		{name: "flags after words", args: []string{"hello", "--n", "3", "world", "-b"}, policy: someArgs, wantRest: "hello world",
			check: func(t *testing.T, n int, _ time.Duration, b bool) {
				if n != 3 || !b {
					t.Errorf("n %d b %v", n, b)
				}
			}},
		{name: "double dash", args: []string{"-n=4", "--", "--b", "-n"}, policy: someArgs, wantRest: "--b -n",
			check: func(t *testing.T, n int, _ time.Duration, b bool) {
				if n != 4 || b {
					t.Errorf("n %d b %v", n, b)
				}
			}},
		{name: "switch off", args: []string{"--b=false", "-"}, policy: someArgs, wantRest: "-"},
		{name: "every mistake", args: []string{"stray", "--n", "x", "--d", "soon", "--nope", "--b=maybe", "--d"}, policy: noArgs,
			wantErrs: []string{`--n "x": not a valid int`, `--d "soon": not a valid duration`, "unknown flag --nope",
				`--b "maybe": not a valid boolean`, "flag --d needs a value", `got "stray"`}},
	} {
		t.Run(c.name, func(t *testing.T) {
			fs := flag.NewFlagSet("t", flag.ContinueOnError)
			fs.SetOutput(&bytes.Buffer{})
			n := fs.Int("n", 0, "a number")
			d := fs.Duration("d", 0, "a duration")
			b := fs.Bool("b", false, "a switch")
			rest, errs, err := scanArgs(fs, c.args, c.policy)
			if err != nil {
				t.Fatal(err)
			}
			if got := strings.Join(rest, " "); c.wantErrs == nil && got != c.wantRest {
				t.Errorf("rest %q, want %q", got, c.wantRest)
			}
			all := strings.Join(errs, "\n")
			if len(errs) != len(c.wantErrs) {
				t.Errorf("%d mistakes, want %d:\n%s", len(errs), len(c.wantErrs), all)
			}
			for _, w := range c.wantErrs {
				if !strings.Contains(all, w) {
					t.Errorf("mistakes lack %q:\n%s", w, all)
				}
			}
			if c.check != nil {
				c.check(t, *n, *d, *b)
			}
		})
	}
	fs := flag.NewFlagSet("t", flag.ContinueOnError)
	var out bytes.Buffer
	fs.SetOutput(&out)
	fs.Int("n", 0, "a number to show in the usage")
	// -h prints nothing itself: runCLI prints the help on stdout.
	_, err := parseArgs(fs, []string{"word", "-h", "--nope"}, noArgs)
	var help helpError
	if !errors.Is(err, flag.ErrHelp) || !errors.As(err, &help) || out.Len() != 0 {
		t.Fatalf("-h: %v, output %q; want a helpError and nothing printed", err, out.String())
	}
	writeHelp(&out, help.fs)
	if !strings.Contains(out.String(), "a number to show") {
		t.Errorf("-h: the help %q lacks the flag", out.String())
	}
}

// TestConfigFile: the settings file's forms, its comments and quotes, and
// its mistakes with their line numbers; settings already set are kept.
func TestConfigFile(t *testing.T) {
	fs := flag.NewFlagSet("serve", flag.ContinueOnError)
	o := serveFlags(fs)
	text := "# comment\n\nhomes /h\nworkspace=/w\nqueue-limit = 3\ncodex-override a=\"1 2\"\ncodex-override b=2\nallow-plaintext\nlisten \"127.0.0.1:9\"\nmax-live lots\nbogus 1\nconfig other\n"
	err := configFromReader(fs, "f.conf", strings.NewReader(text), map[string]bool{"queue-limit": true})
	if o.homes != "/h" || o.workspace != "/w" || o.queueLimit != 4 || strings.Join(o.overrides, "|") != `a="1 2"|b=2` ||
		!o.allowPlaintext || o.listen != "127.0.0.1:9" {
		t.Errorf("homes %q workspace %q queue %d overrides %q plaintext %v listen %q", o.homes, o.workspace, o.queueLimit, o.overrides, o.allowPlaintext, o.listen)
	}
	for _, want := range []string{`f.conf:10: max-live "lots": not a valid int`, `f.conf:11: unknown setting "bogus"`, `f.conf:12: unknown setting "config"`} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("err %v, want %q", err, want)
		}
	}
}

// The models lines: unchanged for visible models, hidden ones marked.
func TestPrintModels(t *testing.T) {
	var b strings.Builder
	printModels(&b, []messages.Model{
		{ID: "m1", IsDefault: true, Efforts: []string{"low", "high"}, DefaultEffort: "low", InputModalities: []string{"text"}},
		{ID: "m2", Hidden: true, Efforts: []string{"low"}, DefaultEffort: "low"},
	})
	want := "m1 (default)\tefforts: low, high (default low)\nm2 (hidden)\tefforts: low (default low)\n"
	if b.String() != want {
		t.Errorf("got %q, want %q", b.String(), want)
	}
}
