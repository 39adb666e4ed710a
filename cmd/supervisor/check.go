package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"syscall"
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

// check is serve --check: every problem a start or a round of these
// settings would meet, reported at once (problems holds the settings'
// own, one line each): the settings, the limits the host cannot enforce,
// each listener that cannot bind, each path out of the users' reach, and
// then a round's probe (probeRound) when the settings and paths allow one.
// It writes nothing but its probe's temporary folder, removed before it
// returns, and says so. errUsage (exit 2) when anything is wrong.
func (o *serveOptions) check(ctx context.Context, fs *flag.FlagSet, problems []string, stdout io.Writer) error {
	fail := func(err error) { problems = append(problems, strings.Split(err.Error(), "\n")...) }
	settingsOK := len(problems) == 0
	rep, diskBound, err := o.limits.check(o.homes, o.cluster.memberOf(), o.isolation.bwrap != "off")
	if err != nil {
		fail(err)
	}
	binds, held := o.tryBinds()
	for _, err := range binds {
		fail(err)
	}
	pathsOK := true
	if o.isolation.switchesUIDs() {
		for _, err := range o.isolation.unreachable(o.homes, o.workspace) {
			fail(err)
			pathsOK = false
		}
	}
	// Then what a round runs, as a round runs it: only on settings that
	// hold together (a missing CLI, workspace or homes leaves nothing to
	// run), and where the paths let it reach what it needs.
	var ran probeResult
	switch {
	case !settingsOK || !pathsOK:
		problems = append(problems, "a round's probe did not run: it needs the problems above fixed first")
	default:
		if ran, err = o.probeRound(ctx); err != nil {
			fail(err)
		}
	}
	if len(problems) > 0 {
		printUsageErrors(fs, problems)
		return errUsage
	}
	fmt.Fprintf(stdout, "supervisor serve: %s\n", ran.ran)
	if ran.linked != "" {
		fmt.Fprintf(stdout, "supervisor serve: the users' uids cannot reach the codex CLI where it is installed: the probe ran it from %s, links in its temporary folder (removed); serve makes them once per CLI build under %s (hard links, a copy across file systems)\n", ran.linked, isolate.DefaultCLILinks)
	}
	for _, s := range held {
		fmt.Fprintf(stdout, "supervisor serve: warning: %s\n", s)
	}
	fmt.Fprintf(stdout, "supervisor serve: the check wrote nothing but its probe's temporary folder %s (removed)\n", ran.dir)
	fmt.Fprintf(stdout, "supervisor serve: user limits enforced here: %s\n", describeEnforced(rep, diskBound))
	fmt.Fprintf(stdout, "supervisor serve: %s\n", findCodexCLI(o.op.codexBin))
	var uids isolate.Range
	if o.isolation.switchesUIDs() {
		uids, _ = isolate.ParseRange(o.isolation.uidRange)
	}
	kept, open := o.reach(newListenerGuard(uids, nil, nil))
	for _, s := range kept {
		fmt.Fprintf(stdout, "supervisor serve: %s\n", s)
	}
	for _, s := range open {
		fmt.Fprintf(stdout, "supervisor serve: warning: %s\n", s)
	}
	if s := o.cluster.etcdTrustsCallers(o.tls); s != "" {
		fmt.Fprintf(stdout, "supervisor serve: warning: %s\n", s)
	}
	fmt.Fprintln(stdout, "supervisor serve: the settings are valid")
	return nil
}

// tryBinds binds each listener serve opens (the remote, the gateway, the
// metrics, an embedded etcd member's client and peer ports) and closes it
// at once: an address this host does not have, or one another process
// holds, is a start that fails. An address in use while a daemon serves
// these homes (their lock is held: the check before a restart) is that
// daemon's as far as can be told, and only a warning (held).
func (o *serveOptions) tryBinds() (errs []error, held []string) {
	type listener struct{ flag, addr string }
	ls := []listener{{"--listen", o.listen}, {"--gateway-listen", o.callers.gatewayListen}, {"--metrics-listen", o.metricsListen}}
	if o.cluster.embedded() {
		for _, l := range []listener{{"--etcd-client-listen", o.cluster.etcdClient}, {"--etcd-peer-listen", o.cluster.etcdPeer}} {
			if u, err := url.Parse(l.addr); err == nil && u.Host != "" { // validate names a bad URL
				ls = append(ls, listener{l.flag, u.Host})
			}
		}
	}
	for _, l := range ls {
		if l.addr == "" {
			continue
		}
		ln, err := net.Listen("tcp", l.addr)
		if err == nil {
			ln.Close()
			continue
		}
		why := ""
		switch {
		case errors.Is(err, syscall.EADDRNOTAVAIL):
			why = ": no interface of this host has that address; give one it has (ip -brief address), or 0.0.0.0 for all"
		case errors.Is(err, syscall.EADDRINUSE):
			if pid := homesHolder(o.homes, o.cluster.memberOf()); pid != "" {
				held = append(held, fmt.Sprintf("%s %s is in use, by the daemon serving these homes (pid %s) as far as can be told: it is free once that daemon stops", l.flag, l.addr, pid))
				continue
			}
			why = ": another process listens there"
		}
		errs = append(errs, fmt.Errorf("%s %s cannot be bound: %w%s", l.flag, l.addr, err, why))
	}
	return errs, held
}

// probeResult is what probeRound ran: a line about it, the probe's
// temporary folder (removed), and the CLI's link there when the users'
// uids could not reach the CLI where it is installed.
type probeResult struct{ ran, dir, linked string }

// probeRound runs, for serve --check, what a user's first round runs:
// an app-server started as a user's would be (its uid, its bubblewrap
// sandbox, the CLI where the users' uids run it, the operator's
// overrides and environment), its handshake, and one command in the CLI's
// own sandbox, which enters the workspace and lists it, in the default
// sandbox mode and in --max-sandbox's when a round may ask for more. It
// returns what ran, or an error naming the path a round would fail on and
// the fix. The probe's home is a folder of its own under the homes (or
// under the deepest folder of them that exists, or beside homes the users'
// uids cannot pass until serve opens them), gone when the probe ends;
// no user's home, uid claim or cgroup is touched. Where the users' uids
// cannot reach the CLI, its links are made in that folder too, not under
// isolate.DefaultCLILinks, which is serve's.
func (o *serveOptions) probeRound(ctx context.Context) (probeResult, error) {
	ctx, cancel := context.WithTimeout(ctx, probeTimeout)
	defer cancel()
	var res probeResult
	bin, err := codexproc.ResolveBinary(o.op.codexBin)
	if err != nil {
		return res, err
	}
	base, fi, err := isolate.Existing(o.homes)
	if err != nil {
		return res, fmt.Errorf("probing a round: the homes %s: %w", o.homes, err)
	}
	if abs, _ := filepath.Abs(o.homes); base == abs && fi.Mode().Perm()&0o001 == 0 && o.isolation.switchesUIDs() {
		// Homes the users' uids cannot pass yet: serve opens them at start
		// (isolate.Node.OpenHomes); the probe, which changes no mode, runs
		// beside them meanwhile.
		base = filepath.Dir(base)
	}
	dir, err := os.MkdirTemp(base, isolate.ProbePrefix+"*")
	if err != nil {
		return res, fmt.Errorf("probing a round: %w", err)
	}
	defer os.RemoveAll(dir)
	res.dir = dir
	iso := o.isolation
	iso.cliLinks = filepath.Join(dir, ".cli")
	iso.uidClaims = "off" // the probe's uid is claimed under its own folder only, not on the host
	node, err := iso.node(o.homes, o.workspace, nil, slog.New(slog.DiscardHandler))
	if err != nil {
		return res, err
	}
	home := filepath.Join(dir, ".codex")
	l, err := node.Probe(home, bin)
	if err != nil {
		return res, err
	}
	if l.Binary != "" && l.Binary != bin {
		res.linked = l.Binary
	}
	quiet := slog.New(slog.DiscardHandler)
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
		return res, fmt.Errorf("a round's app-server (%s) does not start: %w", where, err)
	}
	defer func() {
		stop, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = p.Stop(stop)
	}()
	client := codexproto.NewClient(p.Conn())
	if _, err := client.Initialize(ctx, codexproto.ClientInfo{Name: "supervisor-check", Version: "check"}); err != nil {
		return res, fmt.Errorf("a round's app-server (%s) does not answer: %w; its stderr: %s", where, err, oneLine(p.StderrTail()))
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
		out, err := client.CommandExec(ctx, codexproto.CommandExecParams{
			Command:       []string{"/bin/sh", "-c", fmt.Sprintf(`cd "$1" || exit %d; ls -A >/dev/null || exit %d`, probeCannotEnter, probeCannotList), "sh", ws},
			SandboxPolicy: codexproto.PolicyOf(mode),
			TimeoutMs:     (probeTimeout / 2).Milliseconds(),
		})
		if err != nil {
			return res, fmt.Errorf("a round's app-server (%s) cannot run a command in its %s sandbox: %w; its stderr: %s", where, mode, err, oneLine(p.StderrTail()))
		}
		if out.ExitCode != 0 {
			return res, probeFailure(ws, where, mode, out)
		}
	}
	res.ran = fmt.Sprintf("codex %s started %s and ran a command in the workspace in its %s sandbox", client.Version, where, strings.Join(modes, " and "))
	return res, nil
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
