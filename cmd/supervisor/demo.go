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
	"github.com/meshweaver/supervisor/codexrpc"
	"github.com/meshweaver/supervisor/messages"
	"github.com/meshweaver/supervisor/testkit/codexhome"
	"github.com/meshweaver/supervisor/testkit/mockmodel"
)

// demoMessages are the rounds the demo sends when given none.
var demoMessages = []string{
	"Hello! Who am I talking to?",
	"What did I ask you a moment ago?",
	"Thanks, that is all for now.",
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
	if len(texts) == 0 {
		texts = demoMessages
	}
	bin, err := codexrpc.ResolveBinary(*codex)
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
	homes, workspace := root+"/homes", root+"/workspace"
	if err := os.MkdirAll(workspace, 0o700); err != nil {
		return err
	}
	model, err := mockmodel.Start(mockmodel.Options{})
	if err != nil {
		return err
	}
	defer model.Close()
	log, _, err := newLogger(stderr, "auto", *logLevel)
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
		Overrides: codexhome.Overrides(model.URL()), Logger: log,
	})
	if err != nil {
		return err
	}
	defer func() {
		if err := d.stop(30 * time.Second); err != nil {
			fmt.Fprintf(stderr, "stopping the daemon: %v\n", err)
		}
	}()
	c, err := newRemoteClient(listen, "")
	if err != nil {
		return err
	}
	defer c.close()

	fmt.Fprintf(stdout, "demo: daemon on %s, codex %s, homes in %s\n", listen, bin, homes)
	fmt.Fprintln(stdout, "demo: the model is an embedded DEMO model that only echoes you; see the README to use a real login.")
	p := &printer{w: stdout, errw: stdout}
	for i, text := range texts {
		id := fmt.Sprintf("demo-%d", i+1)
		fmt.Fprintf(stdout, "\nyou> %s\ncodex> ", text)
		if err := c.send(messages.StartRound{RoundID: id, User: "demo-user", Thread: "demo-thread", Text: text}); err != nil {
			return err
		}
		v, err := c.awaitVerdict(ctx, roundOptions{roundID: id, user: "demo-user", thread: "demo-thread", timeout: 2 * time.Minute}, p)
		if err != nil {
			return err
		}
		how := "new codex thread " + v.CodexThreadID
		if v.Resumed {
			how = "resumed codex thread " + v.CodexThreadID
		}
		fmt.Fprintf(stdout, "[round %d: %s, %s]\n", i+1, v.Status, how)
		if v.Status != messages.StatusCompleted {
			return exitError{code: 1}
		}
	}
	return nil
}

// demoResponder is the embedded demo model of `demo` and `serve
// --demo-model`.
func demoResponder() mockmodel.Responder { return mockmodel.DemoResponder }
