// Command supervisor is the meshweaver codex supervisor: a daemon that runs
// one supervised `codex app-server` per mesh user (serve), the remote
// callers that talk to it (round, interrupt), and a self-contained demo.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"syscall"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	// The first signal asks for a clean end (a drain, a cancelled login, an
	// interrupted round); a second one ends the process the usual way.
	go func() { <-ctx.Done(); stop() }()
	code := runCLI(ctx, os.Args[1:], os.Stdin, os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}

const usage = `usage: supervisor <command> [flags]

commands:
  serve       run the daemon
  config      print the settings serve would run with, and where each came from
  demo        run the daemon against an embedded demo model and chat with it
  round       send one chat round to a daemon and stream its answer
  interrupt   interrupt the running round of a mesh thread
  steer       add a message to the running round of a mesh thread
  login       log a user in with ChatGPT (device code), or store an API key (--api-key-stdin)
  logout      clear a user's stored credential and codex login
  models      list the models a user's codex offers
  account     show a user's codex account
  bench       measure the daemon against a direct client of the same codex CLI
  fence       the out-of-process fence of a cluster member (serve starts it; docs/DEPLOY.md)
  version     print the version, commit, Go version and pinned codex CLI
  usage       show a user's use of this node's limits
  help        show a command's help: supervisor help <command>

Flags may come before or after a command's words; "--" ends them.
Run "supervisor help <command>" (or "supervisor <command> -h") for a
command's synopsis, flags and exit statuses.
`

// errUsage marks a command-line mistake: exit code 2.
var errUsage = errors.New("usage")

// exitError carries a specific exit code, and an error to print if err is
// set (else the command printed what it had to say).
type exitError struct {
	code int
	err  error
}

func (e exitError) Error() string {
	if e.err != nil {
		return e.err.Error()
	}
	return fmt.Sprintf("exit %d", e.code)
}

func runCLI(ctx context.Context, args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		fmt.Fprint(stderr, usage)
		return 2
	}
	if args[0] == "help" && len(args) > 1 { // help <command> is <command> --help
		if len(args) > 2 {
			fmt.Fprintf(stderr, "supervisor help: one command at a time, got %s\n", quoteAll(args[1:]))
			return 2
		}
		args = []string{args[1], "--help"}
	}
	// Callers print their own errors; hollywood's dial retries would only
	// repeat them on stderr.
	if args[0] != "serve" && args[0] != "demo" {
		slog.SetDefault(slog.New(slog.DiscardHandler))
	}
	var err error
	switch args[0] {
	case "serve":
		err = serve(ctx, args[1:], stdout, stderr)
	case "config":
		err = configCmd(args[1:], os.LookupEnv, stdout, stderr)
	case "demo":
		err = demo(ctx, args[1:], stdout, stderr)
	case "round":
		err = roundCmd(ctx, args[1:], stdout, stderr)
	case "interrupt":
		err = controlCmd(ctx, "interrupt", args[1:], stdout, stderr)
	case "steer":
		err = controlCmd(ctx, "steer", args[1:], stdout, stderr)
	case "login":
		err = loginCmd(ctx, args[1:], stdin, stdout, stderr)
	case "logout", "models", "account", "usage":
		err = simpleCmd(ctx, args[0], args[1:], stdout, stderr)
	case "bench":
		err = benchCmd(ctx, args[1:], stdout, stderr)
	case benchFloodCommand: // the bench's events row's app-server (hidden)
		err = benchFloodCmd(ctx, args[1:], stdin, stdout, stderr)
	case "fence":
		err = fenceCmd(ctx, args[1:], stdin, stderr)
	case "version", "--version", "-version":
		err = versionCmd(args[0], args[1:], stdout, stderr)
	case "-h", "--help", "help":
		fmt.Fprint(stdout, usage)
		return 0
	default:
		fmt.Fprintf(stderr, "supervisor: unknown command %q\n\n%s", args[0], usage)
		return 2
	}
	var ee exitError
	var help helpError
	switch {
	case err == nil:
		return 0
	case errors.As(err, &help):
		writeHelp(stdout, help.fs)
		return 0
	case errors.Is(err, flag.ErrHelp):
		return 0
	case errors.Is(err, errUsage):
		return 2
	case errors.As(err, &ee):
		if ee.err != nil {
			fmt.Fprintf(stderr, "supervisor %s: %v\n", args[0], ee.err)
		}
		return ee.code
	default:
		fmt.Fprintf(stderr, "supervisor %s: %v\n", args[0], err)
		return 1
	}
}

// versionCmd prints the build: one line, or JSON with --json.
func versionCmd(name string, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("version", flag.ContinueOnError)
	fs.SetOutput(stderr)
	asJSON := fs.Bool("json", false, "print the build as one JSON object: version, commit, goversion, codex")
	if name != "version" { // --version takes nothing more
		fs = flag.NewFlagSet("version", flag.ContinueOnError)
		fs.SetOutput(stderr)
	}
	if _, err := parseArgs(fs, args, noArgs); err != nil {
		return err
	}
	bi := readBuildInfo()
	if *asJSON {
		b, err := json.Marshal(bi)
		if err != nil {
			return err
		}
		fmt.Fprintln(stdout, string(b))
		return nil
	}
	fmt.Fprintln(stdout, bi)
	return nil
}

// stringList is a repeatable flag.
type stringList []string

func (s *stringList) String() string     { return fmt.Sprint(*s) }
func (s *stringList) Set(v string) error { *s = append(*s, v); return nil }
