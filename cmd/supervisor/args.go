package main

import (
	"bufio"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"strings"
)

// Why a parser of our own on the stdlib FlagSet: flag.Parse stops at the
// first word that is not a flag, so everything after it — a flag after a
// round's message, or every flag after a stray word on serve's line — was
// silently taken as text or dropped; and it stops at the first bad value,
// so a line with three mistakes needed three runs. parseArgs takes flags
// anywhere, refuses positional words where a command takes none, and
// reports every mistake at once. The flags stay defined the stdlib way
// (fs.StringVar and friends), so help, defaults and flagsFromEnv keep
// working, and so does any flag another branch adds.
//
// Why not github.com/peterbourgon/ff (v3.4.0 is what the module proxy here
// serves; v4 is not): ff.Parse calls fs.Parse, so it has both faults above;
// it stops at the first bad environment variable or file line; its plain
// config parser splits on the first space only, so the documented
// "name = value" and "name=value" lines would break, and it cuts values at
// " #"; it reports no line numbers and does not say where a value came
// from, which `supervisor config` prints. It would replace flagsFromEnv and
// configFromReader (about 70 lines) at the cost of those behaviours.

// argsPolicy says what a command does with words that are not flags.
type argsPolicy int

const (
	noArgs   argsPolicy = iota // every positional word is a mistake
	someArgs                   // positional words are the command's text
)

// parseArgs sets fs's flags from args, wherever they stand, and returns
// the positional words. "--" ends the flags; "-h" and "--help" return a
// helpError (flag.ErrHelp), which runCLI prints as the command's help. Every mistake (an unknown flag, a missing
// or bad value, a stray word under noArgs) is printed to fs.Output() and
// the result is errUsage.
func parseArgs(fs *flag.FlagSet, args []string, policy argsPolicy) ([]string, error) {
	rest, errs, err := scanArgs(fs, args, policy)
	if err != nil {
		return nil, err
	}
	if len(errs) > 0 {
		printUsageErrors(fs, errs)
		return nil, errUsage
	}
	return rest, nil
}

// printUsageErrors prints every mistake and where to read about the flags.
func printUsageErrors(fs *flag.FlagSet, errs []string) {
	for _, e := range errs {
		fmt.Fprintf(fs.Output(), "supervisor %s: %s\n", fs.Name(), e)
	}
	fmt.Fprintf(fs.Output(), "Run \"supervisor help %s\" for its flags.\n", fs.Name())
}

// scanArgs is parseArgs without the printing: the positional words, every
// mistake, and a helpError (flag.ErrHelp) for -h, whose help runCLI
// prints on stdout.
func scanArgs(fs *flag.FlagSet, args []string, policy argsPolicy) (rest, errs []string, err error) {
	for i := 0; i < len(args); i++ {
		a := args[i]
		if a == "--" {
			rest = append(rest, args[i+1:]...)
			break
		}
		if len(a) < 2 || a[0] != '-' {
			rest = append(rest, a)
			continue
		}
		name := strings.TrimPrefix(strings.TrimPrefix(a, "-"), "-")
		name, value, hasValue := strings.Cut(name, "=")
		if name == "h" || name == "help" {
			return nil, nil, helpError{fs}
		}
		f := fs.Lookup(name)
		if f == nil {
			errs = append(errs, fmt.Sprintf("unknown flag %s", a))
			continue
		}
		if bf, ok := f.Value.(interface{ IsBoolFlag() bool }); ok && bf.IsBoolFlag() && !hasValue {
			value, hasValue = "true", true
		}
		if !hasValue {
			if i+1 >= len(args) {
				errs = append(errs, fmt.Sprintf("flag --%s needs a value", name))
				continue
			}
			i++
			value = args[i]
		}
		if err := fs.Set(name, value); err != nil {
			errs = append(errs, fmt.Sprintf("--%s %q: %s", name, value, valueError(f, err)))
		}
	}
	if policy == noArgs && len(rest) > 0 {
		errs = append(errs, fmt.Sprintf("%s takes no positional arguments, got %s (a value with spaces needs quotes)", fs.Name(), quoteAll(rest)))
	}
	return rest, errs, nil
}

// valueError says what is wrong with a flag's value: flag's own values
// only say "parse error", so the expected type is named instead.
func valueError(f *flag.Flag, err error) string {
	if err.Error() == "parse error" || err.Error() == "value out of range" {
		kind, _ := flag.UnquoteUsage(f)
		if kind == "" {
			kind = "boolean"
		}
		return "not a valid " + kind
	}
	return err.Error()
}

func quoteAll(words []string) string {
	q := make([]string, len(words))
	for i, w := range words {
		q[i] = fmt.Sprintf("%q", w)
	}
	return strings.Join(q, " ")
}

// callerEnv names the caller flags that take their default from the
// environment, so a shell can set the daemon's address and the node's TLS
// files once.
var callerEnv = map[string]string{
	"addr":      "SUPERVISOR_ADDR",
	"tls-cert":  "SUPERVISOR_TLS_CERT",
	"tls-key":   "SUPERVISOR_TLS_KEY",
	"tls-ca":    "SUPERVISOR_TLS_CA",
	"server-id": "SUPERVISOR_SERVER_ID",
}

// parseCaller is parseArgs for the remote callers: a flag missing from the
// command line takes its value from callerEnv's variable when that is set.
func parseCaller(fs *flag.FlagSet, args []string, policy argsPolicy) ([]string, error) {
	rest, err := parseArgs(fs, args, policy)
	if err != nil {
		return nil, err
	}
	given := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { given[f.Name] = true })
	var errs []string
	for name, key := range callerEnv {
		if v, ok := os.LookupEnv(key); ok && !given[name] && fs.Lookup(name) != nil {
			if err := fs.Set(name, v); err != nil {
				errs = append(errs, fmt.Sprintf("%s: %v", key, err))
			}
		}
	}
	if len(errs) > 0 {
		fmt.Fprintf(fs.Output(), "supervisor %s: %s\n", fs.Name(), strings.Join(errs, "; "))
		return nil, errUsage
	}
	return rest, nil
}

// configFromFile sets every flag given neither on the command line nor in
// the environment from path: one setting a line, "name value" or
// "name = value", the flag's name without dashes; blank lines and lines
// starting with # are skipped; a repeatable flag may appear on several
// lines. Every mistake is reported, with its line number.
func configFromFile(fs *flag.FlagSet, path string, setAlready map[string]bool) error {
	f, err := os.Open(path)
	if err != nil {
		return fmt.Errorf("--config: %w", err)
	}
	defer f.Close()
	return configFromReader(fs, path, f, setAlready)
}

func configFromReader(fs *flag.FlagSet, path string, r io.Reader, setAlready map[string]bool) error {
	var errs []error
	sc := bufio.NewScanner(r)
	for n := 1; sc.Scan(); n++ {
		line := strings.TrimSpace(sc.Text())
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		name, value := line, ""
		if i := strings.IndexAny(line, " \t="); i >= 0 { // name value, name = value, name=value
			name, value = line[:i], strings.TrimSpace(line[i:])
			value = strings.TrimSpace(strings.TrimPrefix(value, "="))
		}
		if len(value) >= 2 && value[0] == '"' && value[len(value)-1] == '"' {
			value = value[1 : len(value)-1]
		}
		name = strings.TrimLeft(name, "-")
		fl := fs.Lookup(name)
		switch {
		case fl == nil || name == "config":
			errs = append(errs, fmt.Errorf("%s:%d: unknown setting %q", path, n, name))
			continue
		case setAlready[name]:
			continue // the command line and the environment win
		}
		if value == "" {
			if bf, ok := fl.Value.(interface{ IsBoolFlag() bool }); ok && bf.IsBoolFlag() {
				value = "true"
			}
		}
		if err := fs.Set(name, value); err != nil {
			errs = append(errs, fmt.Errorf("%s:%d: %s %q: %s", path, n, name, value, valueError(fl, err)))
		}
	}
	if err := sc.Err(); err != nil {
		errs = append(errs, fmt.Errorf("reading %s: %w", path, err))
	}
	return errors.Join(errs...)
}
