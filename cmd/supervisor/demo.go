package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"time"

	"github.com/meshweaver/supervisor/actors"
	"github.com/meshweaver/supervisor/client"
	"github.com/meshweaver/supervisor/codexproc"
	"github.com/meshweaver/supervisor/codexproto"
	"github.com/meshweaver/supervisor/demomodel"
	"github.com/meshweaver/supervisor/messages"
)

// demoRound is one round the demo sends.
type demoRound struct {
	text        string
	autoApprove bool
}

// demoRounds are the rounds the demo sends when given none: a shell
// command in the sandbox, one that needs an approval (the round allows
// it), and a resumed round whose answer quotes the earlier ones.
var demoRounds = []demoRound{
	{text: "Hello! What is in the workspace?"},
	{text: "Please save a note for me.", autoApprove: true},
	{text: "What did I ask you a moment ago?"},
}

// demo runs the daemon's main job end to end with no account and no
// network: an embedded demo model stands in for OpenAI, the real codex CLI
// runs every turn, and a remote caller in a second engine sends the rounds
// over hollywood's remote, exactly as a mesh actor would.
func demo(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("demo", flag.ContinueOnError)
	fs.SetOutput(stderr)
	dir := fs.String("dir", "", "keep homes and workspace in `DIR` (default: a temporary folder, removed afterwards)")
	codex := fs.String("codex", "", "codex `PATH` (default: $CODEX_BIN, the project-local install, then PATH)")
	logLevel := fs.String("log-level", "error", "daemon log level")
	texts, err := parseArgs(fs, args, someArgs)
	if err != nil {
		return err
	}
	rounds := demoRounds
	if len(texts) > 0 {
		rounds = nil
		for _, t := range texts {
			rounds = append(rounds, demoRound{text: t, autoApprove: true})
		}
	}
	bin, err := codexproc.ResolveBinary(*codex)
	if err != nil {
		return err
	}
	root := *dir
	if root == "" {
		if root, err = os.MkdirTemp("", "supervisor-demo-"); err != nil {
			return err
		}
		defer os.RemoveAll(root)
	}
	homes, workspace, home := root+"/homes", root+"/workspace", root+"/home"
	for _, d := range []string{workspace, home} {
		if err := os.MkdirAll(d, 0o700); err != nil {
			return err
		}
	}
	if err := os.WriteFile(workspace+"/SKILLS.md", []byte("# Skills\n\nThe shared skills workspace every codex thread runs in.\n"), 0o600); err != nil {
		return err
	}
	model, err := demomodel.Start(demomodel.Options{Responder: demoResponder()})
	if err != nil {
		return err
	}
	defer model.Close()
	log, _, err := newLogger(stderr, "auto", *logLevel, homes)
	if err != nil {
		return err
	}
	slog.SetDefault(log)
	listen, err := freeLoopbackAddr()
	if err != nil {
		return err
	}
	d, err := startDaemon(listen, nil, actors.Config{
		Homes: homes, Workspace: workspace, CodexBin: bin,
		Overrides: demomodel.Overrides(model.URL()),
		// An empty HOME: the CLI's login shells must not read the
		// operator's own profile (and print its noise into tool output).
		CodexEnv: []string{"HOME=" + home},
		// The read-only sandbox (serve's default), and approvals on
		// request: the second round's command asks to leave the sandbox,
		// and its auto_approve answers.
		Sandbox: codexproto.SandboxReadOnly, ApprovalPolicy: codexproto.ApprovalOnRequest,
	}, actors.Deps{Logger: log})
	if err != nil {
		return err
	}
	defer func() {
		if err := d.stop(30 * time.Second); err != nil {
			fmt.Fprintf(stderr, "stopping the daemon: %v\n", err)
		}
	}()
	c, err := client.Dial(ctx, listen)
	if err != nil {
		return err
	}
	defer c.Close()

	fmt.Fprintf(stdout, "demo: daemon on %s, codex %s, homes in %s\n", listen, bin, homes)
	fmt.Fprintln(stdout, "demo: the model is an embedded DEMO model (no account, no network); codex, its sandbox and the daemon are real.")
	for i, r := range rounds {
		id := fmt.Sprintf("demo-%d", i+1)
		approve := ""
		if r.autoApprove {
			approve = "   (this round allows approvals: auto_approve)"
		}
		fmt.Fprintf(stdout, "\nyou> %s%s\n", r.text, approve)
		p := &printer{w: stdout, errw: stdout, prefix: "codex> ", start: time.Now()}
		req := messages.StartRound{RoundID: id, User: "demo-user", Thread: "demo-thread", Text: r.text, AutoApprove: r.autoApprove}
		v, err := streamRound(ctx, c, req, p, 2*time.Minute)
		if err != nil {
			return err
		}
		how := "on a new codex thread"
		if v.Resumed {
			how = "on the resumed codex thread"
		}
		fmt.Fprintf(stdout, "[%s]\n", how)
		if v.Status != messages.StatusCompleted {
			return exitError{code: roundExit(v.Status)}
		}
	}
	return nil
}

// demoResponder is the embedded demo model of `demo` and `serve
// --demo-model`.
func demoResponder() demomodel.Responder { return demomodel.ShowcaseResponder }
