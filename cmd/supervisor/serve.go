package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	"github.com/oklog/run"

	"github.com/meshweaver/supervisor/actors"
	"github.com/meshweaver/supervisor/codexrpc"
)

// serveOptions are the daemon's settings.
type serveOptions struct {
	listen         string
	homes          string
	workspace      string
	codex          string
	overrides      stringList
	codexEnv       stringList
	sandbox        string
	approval       string
	logFormat      string
	logLevel       string
	stopTimeout    time.Duration
	callTimeout    time.Duration
	queueLimit     int
	allowPlaintext bool
}

func serveFlags(fs *flag.FlagSet) *serveOptions {
	o := &serveOptions{}
	fs.StringVar(&o.listen, "listen", "127.0.0.1:4100", "`HOST:PORT` of the remote listener other actors reach (the address goes into every PID, so use the one peers dial)")
	fs.StringVar(&o.homes, "homes", "", "`DIR` holding every user's folder; a user's CODEX_HOME is DIR/<user>/.codex (required)")
	fs.StringVar(&o.workspace, "workspace", "", "`DIR`: the shared skills workspace every codex thread runs in (required)")
	fs.StringVar(&o.codex, "codex", "", "codex `PATH` (default: $CODEX_BIN, the project-local install, then codex on PATH)")
	fs.Var(&o.overrides, "codex-override", "`key=value` passed to every app-server as -c (repeatable)")
	fs.Var(&o.codexEnv, "codex-env", "`KEY=VALUE` added to every app-server's environment (repeatable); nothing else of the daemon's environment reaches it beyond PATH, HOME and locale")
	fs.StringVar(&o.sandbox, "sandbox", codexrpc.SandboxReadOnly, "sandbox of codex threads: read-only, workspace-write or danger-full-access")
	fs.StringVar(&o.approval, "approval-policy", codexrpc.ApprovalNever, "approval policy of codex threads: never, on-request or untrusted")
	fs.StringVar(&o.logFormat, "log-format", "auto", "log format: auto (text on a terminal, else json), text or json")
	fs.StringVar(&o.logLevel, "log-level", "info", "log level: debug, info, warn or error")
	fs.DurationVar(&o.stopTimeout, "stop-timeout", 30*time.Second, "how long SIGTERM waits for rounds and app-servers to stop")
	fs.DurationVar(&o.callTimeout, "call-timeout", 60*time.Second, "deadline of every call to an app-server")
	fs.IntVar(&o.queueLimit, "queue-limit", 4, "rounds that may wait behind a running one on the same mesh thread")
	fs.BoolVar(&o.allowPlaintext, "allow-plaintext", false, "allow a plaintext remote listener on a non-loopback address")
	return o
}

func (o *serveOptions) validate() error {
	var errs []error
	if o.homes == "" {
		errs = append(errs, errors.New("--homes is required"))
	}
	if o.workspace == "" {
		errs = append(errs, errors.New("--workspace is required"))
	} else if fi, err := os.Stat(o.workspace); err != nil || !fi.IsDir() {
		errs = append(errs, fmt.Errorf("--workspace %s is not a directory", o.workspace))
	}
	if !isLoopback(o.listen) && !o.allowPlaintext {
		errs = append(errs, fmt.Errorf("--listen %s is not loopback: plaintext there needs --allow-plaintext", o.listen))
	}
	for _, kv := range append(append([]string{}, o.overrides...), o.codexEnv...) {
		if k, _, ok := strings.Cut(kv, "="); !ok || k == "" {
			errs = append(errs, fmt.Errorf("%q is not KEY=VALUE", kv))
		}
	}
	switch o.sandbox {
	case "read-only", "workspace-write", "danger-full-access":
	default:
		errs = append(errs, fmt.Errorf("--sandbox %q is not a sandbox mode", o.sandbox))
	}
	switch o.approval {
	case "never", "on-request", "untrusted", "on-failure":
	default:
		errs = append(errs, fmt.Errorf("--approval-policy %q is not a policy", o.approval))
	}
	if o.stopTimeout <= 0 || o.callTimeout <= 0 || o.queueLimit <= 0 {
		errs = append(errs, errors.New("timeouts and the queue limit must be positive"))
	}
	return errors.Join(errs...)
}

func serve(ctx context.Context, args []string, stderr io.Writer) error {
	fs := flag.NewFlagSet("serve", flag.ContinueOnError)
	fs.SetOutput(stderr)
	o := serveFlags(fs)
	if err := fs.Parse(args); err != nil {
		return err
	}
	if err := o.validate(); err != nil {
		fmt.Fprintf(stderr, "supervisor serve: %v\n", err)
		return errUsage
	}
	log, err := newLogger(stderr, o.logFormat, o.logLevel)
	if err != nil {
		return err
	}
	bin, err := codexrpc.ResolveBinary(o.codex)
	if err != nil {
		return err
	}
	// A daemon killed outright leaves its app-servers behind: end them
	// before any new one starts in the same homes.
	if n := actors.ReapOrphans(o.homes, 2*time.Second, log); n > 0 {
		log.Warn("ended app-servers left by a previous instance", "count", n)
	}
	d, err := startDaemon(o.listen, nil, actors.Config{
		Homes: o.homes, Workspace: o.workspace, CodexBin: bin,
		Overrides: o.overrides, CodexEnv: o.codexEnv,
		Sandbox: o.sandbox, ApprovalPolicy: o.approval,
		CallTimeout: o.callTimeout, QueueLimit: o.queueLimit, Logger: log,
	})
	if err != nil {
		return err
	}
	log.Info("supervisor serving", "listen", o.listen, "codex", bin, "homes", o.homes)

	var g run.Group
	{ // Signals arrive as the end of ctx.
		ctx, cancel := context.WithCancel(ctx)
		g.Add(func() error { <-ctx.Done(); return nil }, func(error) { cancel() })
	}
	{ // The daemon: stopping it drains the tree, then closes the listener.
		stopped := make(chan error, 1)
		g.Add(func() error { return <-stopped }, func(error) {
			log.Info("stopping", "timeout", o.stopTimeout)
			stopped <- d.stop(o.stopTimeout)
		})
	}
	if err := g.Run(); err != nil {
		return err
	}
	log.Info("stopped")
	return nil
}
