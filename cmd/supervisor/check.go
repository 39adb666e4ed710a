package main

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/meshweaver/supervisor/codexproc"
	"github.com/meshweaver/supervisor/codexproto"
	"github.com/meshweaver/supervisor/isolate"
)

// probeTimeout bounds serve --check's round probe: a start of the CLI in
// its sandbox and one command (about a second on a warm machine).
const probeTimeout = 60 * time.Second

// Exit codes of the probe's command, which says which step failed.
const (
	probeCannotEnter = 10 // cd into the workspace
	probeCannotList  = 11 // list it
)

// probeRound runs, for serve --check, what a user's first round runs:
// an app-server started as a user's would be (its uid, its bubblewrap
// sandbox, the CLI where the users' uids run it, the operator's
// overrides and environment), its handshake, and one command in the CLI's
// own sandbox, which enters the workspace and lists it, in the default
// sandbox mode and in --max-sandbox's when a round may ask for more. It returns what ran, or an error naming the path a round
// would fail on and the fix. The probe's home is a folder of its own
// under the homes (or under the deepest folder of them that exists), gone
// when the probe ends; no user's home, uid claim or cgroup is touched.
func (o *serveOptions) probeRound(ctx context.Context) (string, error) {
	ctx, cancel := context.WithTimeout(ctx, probeTimeout)
	defer cancel()
	quiet := slog.New(slog.DiscardHandler)
	node, err := o.isolation.node(o.homes, o.workspace, nil, quiet)
	if err != nil {
		return "", err
	}
	bin, err := codexproc.ResolveBinary(o.op.codexBin)
	if err != nil {
		return "", err
	}
	base, _, err := isolate.Existing(o.homes)
	if err != nil {
		return "", fmt.Errorf("probing a round: the homes %s: %w", o.homes, err)
	}
	dir, err := os.MkdirTemp(base, isolate.ProbePrefix+"*")
	if err != nil {
		return "", fmt.Errorf("probing a round: %w", err)
	}
	defer os.RemoveAll(dir)
	home := filepath.Join(dir, ".codex")
	l, err := node.Probe(home, bin)
	if err != nil {
		return "", err
	}
	cfg := codexproc.Config{
		Binary: bin, Home: home, Dir: o.workspace, Overrides: o.overrides,
		Env:        codexproc.AllowedEnv(os.Environ(), append(append([]string{}, o.codexEnv...), l.Env...)),
		Wrapper:    l.Wrapper,
		Credential: l.Credential,
		Logger:     quiet,
	}
	if l.Binary != "" {
		cfg.Binary = l.Binary
	}
	if l.Wrapper != nil {
		cfg.Dir = "/" // bubblewrap changes into the workspace itself
	}
	as := "the daemon's uid"
	if l.Credential != nil {
		as = fmt.Sprintf("uid %d", l.Credential.Uid)
	}
	where := fmt.Sprintf("as %s, isolation %s", as, node.Mode())
	p, err := codexproc.Start(cfg)
	if err != nil {
		return "", fmt.Errorf("a round's app-server (%s) does not start: %w", where, err)
	}
	defer func() {
		stop, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = p.Stop(stop)
	}()
	client := codexproto.NewClient(p.Conn())
	if _, err := client.Initialize(ctx, codexproto.ClientInfo{Name: "supervisor-check", Version: "check"}); err != nil {
		return "", fmt.Errorf("a round's app-server (%s) does not answer: %w; its stderr: %s", where, err, oneLine(p.StderrTail()))
	}
	ws := o.workspace
	if ws == "" {
		ws = home
	}
	// The default sandbox, and the most a round may ask for when more.
	modes := []string{o.sandbox}
	if o.maxSandbox != "" && o.maxSandbox != o.sandbox {
		modes = append(modes, o.maxSandbox)
	}
	for _, mode := range modes {
		res, err := client.CommandExec(ctx, codexproto.CommandExecParams{
			Command:       []string{"/bin/sh", "-c", fmt.Sprintf(`cd "$1" || exit %d; ls -A >/dev/null || exit %d`, probeCannotEnter, probeCannotList), "sh", ws},
			SandboxPolicy: codexproto.PolicyOf(mode),
			TimeoutMs:     (probeTimeout / 2).Milliseconds(),
		})
		if err != nil {
			return "", fmt.Errorf("a round's app-server (%s) cannot run a command in its %s sandbox: %w; its stderr: %s", where, mode, err, oneLine(p.StderrTail()))
		}
		if res.ExitCode != 0 {
			return "", probeFailure(ws, where, mode, res)
		}
	}
	return fmt.Sprintf("codex %s started %s and ran a command in the workspace in its %s sandbox", client.Version, where, strings.Join(modes, " and ")), nil
}

// probeFailure names what stopped the probe's command, with the fix when
// it is the workspace's mode.
func probeFailure(ws, where, sandbox string, res codexproto.CommandExecResult) error {
	mode := "?"
	if fi, err := os.Stat(ws); err == nil {
		mode = fmt.Sprintf("%04o", fi.Mode().Perm())
	}
	out := oneLine(res.Stderr + " " + res.Stdout)
	switch res.ExitCode {
	case probeCannotEnter:
		return fmt.Errorf("a round's commands cannot enter the workspace %s (mode %s) %s: every shell command would fail. Let the users' uids through (chmod o+x %s): %s", ws, mode, where, ws, out)
	case probeCannotList:
		return fmt.Errorf("a round's commands cannot list the workspace %s (mode %s) %s: the agent would see none of its files. Let the users' uids read it (chmod o+rx %s): %s", ws, mode, where, ws, out)
	}
	if sandbox == codexproto.SandboxWorkspaceWrite && strings.Contains(out, "bwrap:") {
		// The CLI's sandbox makes the workspace's .git and .codex read-only
		// mounts, which it cannot where the workspace is not the user's to
		// write.
		return fmt.Errorf("a round's commands cannot start in the workspace-write sandbox %s: the workspace %s (mode %s) is not writable by the users' uids. Bind it writable (--workspace-writable) and let them write it, or keep rounds at --sandbox read-only (and --max-sandbox read-only or danger-full-access): %s", where, ws, mode, out)
	}
	return fmt.Errorf("a round's command failed in its %s sandbox %s: exit %d: %s", sandbox, where, res.ExitCode, out)
}

// oneLine folds s onto one line of at most 300 bytes for an error text.
func oneLine(s string) string {
	s = strings.Join(strings.Fields(s), " ")
	if len(s) > 300 {
		s = s[:300] + "…"
	}
	return s
}
