package codexproc

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/meshweaver/supervisor/codexrpc"
	"github.com/meshweaver/supervisor/procs"
)

// Config describes one app-server process.
type Config struct {
	// Binary is the codex executable; empty resolves it with ResolveBinary.
	Binary string
	// Args replaces the default arguments ("app-server"); for fakes.
	Args []string
	// Home is the CODEX_HOME, made absolute and created (0700) before the
	// start: the CLI exits at once when it is missing.
	Home string
	// Dir is the process's working directory (default: Home).
	Dir string
	// Overrides are passed as "-c key=value", in order.
	Overrides []string
	// Env is the whole environment of the child, CODEX_HOME excepted (which
	// is always set from Home). Nil means AllowedEnv(os.Environ()).
	Env []string
	// Wrapper, when set, is a command line the app-server is started under
	// (bubblewrap and its arguments, ending in "--"): the process started,
	// and so the pid and process group, is the wrapper's. Dir then applies
	// to the wrapper, which must change directory itself.
	Wrapper []string
	// Credential, when set, is the uid and gid the process runs as (the
	// daemon must be root or hold CAP_SETUID); groups are cleared.
	Credential *syscall.Credential
	// Prefix, when set, is a command line exec'd before the Wrapper (a
	// user cgroup's join, package contain): it replaces itself with the
	// rest, so the pid stays the process's.
	Prefix []string
	// CgroupDir, when set, is the cgroup v2 directory the process starts
	// in (clone3's CLONE_INTO_CGROUP): nothing it runs is ever outside.
	CgroupDir string
	// Redactor cleans the stderr tail and relayed stderr lines.
	Redactor *Redactor
	// Logger receives the relayed stderr (debug; ERROR lines at warn).
	Logger *slog.Logger
	// StopGrace is how long each polite step of Stop waits (default 2s).
	StopGrace time.Duration
	// ExitDrain bounds the wait, after the output closes unexpectedly, for
	// the exit status and the rest of stderr (default 1s).
	ExitDrain time.Duration
	// StderrTailLines and StderrTailBytes bound the stderr tail kept for
	// error reports (defaults 20 lines, 4 KiB).
	StderrTailLines int
	StderrTailBytes int
	// Conn configures the connection; its OnEOF is set by the Process.
	Conn codexrpc.Options
	// Record, when set, is the home's pid record: Start writes it once the
	// process runs (naming the Wrapper's program when there is one, else
	// Binary; never the Prefix), and the exit removes it if it still names
	// this process, before Exited is closed.
	Record *PidRecord
}

// Process is a running app-server and its connection.
type Process struct {
	cfg  Config
	cmd  *exec.Cmd
	conn *codexrpc.Conn
	pid  int
	log  *slog.Logger

	stdoutR *os.File
	stderrR *os.File

	startTime  uint64        // the process's start time, in clock ticks since boot
	exited     chan struct{} // closed once the exit is observed
	waitDone   chan struct{} // closed when the exit waiter has returned
	exit       codexrpc.ExitStatus
	stderrDone chan struct{}

	tailMu sync.Mutex
	tail   []string

	stopOnce sync.Once
	stopErr  error
}

// Start creates the home and starts `codex app-server` in its own process
// group. The returned Process owns three goroutines (the connection's reader,
// the stderr reader and the exit waiter); Stop ends and waits for them.
func Start(cfg Config) (*Process, error) {
	if cfg.Binary == "" {
		bin, err := ResolveBinary("")
		if err != nil {
			return nil, err
		}
		cfg.Binary = bin
	}
	if cfg.Home == "" {
		return nil, errors.New("starting codex: no CODEX_HOME given")
	}
	home, err := filepath.Abs(cfg.Home)
	if err != nil {
		return nil, fmt.Errorf("starting codex: %w", err)
	}
	cfg.Home = home
	if err := EnsureHome(home); err != nil {
		return nil, fmt.Errorf("starting codex: %w", err)
	}
	if cfg.Dir == "" {
		cfg.Dir = home
	}
	if cfg.StopGrace <= 0 {
		cfg.StopGrace = 2 * time.Second
	}
	if cfg.ExitDrain <= 0 {
		cfg.ExitDrain = time.Second
	}
	if cfg.StderrTailLines <= 0 {
		cfg.StderrTailLines = 20
	}
	if cfg.StderrTailBytes <= 0 {
		cfg.StderrTailBytes = 4 << 10
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if cfg.Redactor == nil {
		cfg.Redactor = &Redactor{}
	}
	env := cfg.Env
	if env == nil {
		env = AllowedEnv(os.Environ(), nil)
	}
	env = append(withoutKey(env, "CODEX_HOME"), "CODEX_HOME="+home)
	env = PreferBundledBwrap(env, cfg.Binary)
	env = TempDirOutside(env, home)

	args := cfg.Args
	if args == nil {
		args = []string{"app-server"}
	}
	for _, o := range cfg.Overrides {
		args = append(args, "-c", o)
	}

	stdinR, stdinW, err := os.Pipe()
	if err != nil {
		return nil, fmt.Errorf("starting codex: %w", err)
	}
	stdoutR, stdoutW, err := os.Pipe()
	if err != nil {
		closeAll(stdinR, stdinW)
		return nil, fmt.Errorf("starting codex: %w", err)
	}
	stderrR, stderrW, err := os.Pipe()
	if err != nil {
		closeAll(stdinR, stdinW, stdoutR, stdoutW)
		return nil, fmt.Errorf("starting codex: %w", err)
	}
	argv := append(append(append([]string{}, cfg.Prefix...), cfg.Wrapper...), cfg.Binary)
	cmd := exec.Command(argv[0], append(argv[1:], args...)...)
	cmd.Dir = cfg.Dir
	cmd.Env = env
	cmd.Stdin, cmd.Stdout, cmd.Stderr = stdinR, stdoutW, stderrW
	// Its own group, so a stop reaches every process it started; Pdeathsig
	// is a best effort for a daemon killed outright (it follows the thread).
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if c := cfg.Credential; c != nil {
		// Groups empty (not nil) with NoSetGroups false: setgroups(0) clears
		// the daemon's supplementary groups.
		cmd.SysProcAttr.Credential = &syscall.Credential{Uid: c.Uid, Gid: c.Gid, Groups: []uint32{}}
	}
	var cgroupDir *os.File
	if cfg.CgroupDir != "" {
		if cgroupDir, err = os.Open(cfg.CgroupDir); err != nil {
			closeAll(stdinR, stdinW, stdoutR, stdoutW, stderrR, stderrW)
			return nil, fmt.Errorf("starting codex: opening its cgroup: %w", err)
		}
		cmd.SysProcAttr.UseCgroupFD, cmd.SysProcAttr.CgroupFD = true, int(cgroupDir.Fd())
	}
	err = cmd.Start()
	if cgroupDir != nil {
		cgroupDir.Close()
	}
	if err != nil {
		closeAll(stdinR, stdinW, stdoutR, stdoutW, stderrR, stderrW)
		return nil, fmt.Errorf("starting codex %s: %w", cfg.Binary, err)
	}
	// The child holds its own copies now.
	closeAll(stdinR, stdoutW, stderrW)

	p := &Process{
		cfg: cfg, cmd: cmd, pid: cmd.Process.Pid,
		log:        cfg.Logger.With("pid", cmd.Process.Pid),
		stdoutR:    stdoutR,
		stderrR:    stderrR,
		exited:     make(chan struct{}),
		waitDone:   make(chan struct{}),
		stderrDone: make(chan struct{}),
	}
	if st, err := procs.StartTime(p.pid); err == nil {
		p.startTime = st
		if cfg.Record != nil {
			// The record names the program the pid ends up as: the
			// sandbox's, or the CLI's; not the cgroup join's shell.
			exe := cfg.Binary
			if len(cfg.Wrapper) > 0 {
				exe = cfg.Wrapper[0] // the pid is bubblewrap's
			}
			if err := cfg.Record.write(p.pid, st, exe); err != nil {
				cfg.Logger.Warn("recording the app-server's pid", "err", err)
			}
		}
	}
	opts := cfg.Conn
	opts.OnEOF = p.exitCause
	onAbort := opts.OnAbort
	opts.OnAbort = func(err error) {
		// The Conn stopped reading output that goes on (a flood of lines
		// that are not JSON-RPC): the process is ended, and its exit is
		// reported as any death, with err as the cause.
		select {
		case <-p.exited:
		default:
			p.log.Warn("killing the codex app-server: it broke the bound of lines that are not JSON-RPC", "err", err)
			signalGroup(p.pid, syscall.SIGKILL)
		}
		if onAbort != nil {
			onAbort(err)
		}
	}
	if opts.Logger == nil {
		opts.Logger = p.log
	}
	p.conn = codexrpc.NewConn(stdoutR, stdinW, opts)
	go p.wait()
	go p.readStderr()
	return p, nil
}

// Conn is the process's connection.
func (p *Process) Conn() *codexrpc.Conn { return p.conn }

// PID is the process id, which is also its process group id.
func (p *Process) PID() int { return p.pid }

// Exited is closed as soon as the process has exited (and its pid record,
// if it still named the process, is gone).
func (p *Process) Exited() <-chan struct{} { return p.exited }

// ExitStatus is how the process ended; valid once Exited is closed.
func (p *Process) ExitStatus() codexrpc.ExitStatus {
	select {
	case <-p.exited:
		return p.exit
	default:
		return codexrpc.ExitStatus{}
	}
}

// StderrTail is the redacted tail of stderr so far.
func (p *Process) StderrTail() string {
	p.tailMu.Lock()
	defer p.tailMu.Unlock()
	return strings.Join(p.tail, "\n")
}

// wait observes the exit at once (cmd.Wait, no polling), then removes what
// is left of the process group, and the pid record if it is still ours.
func (p *Process) wait() {
	defer close(p.waitDone)
	err := p.cmd.Wait()
	st := codexrpc.ExitStatus{Code: -1, Known: true}
	var ee *exec.ExitError
	switch {
	case err == nil:
		st.Code = 0
	case errors.As(err, &ee):
		if ws, ok := ee.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
			st.Signal = signalName(ws.Signal())
		} else {
			st.Code = ee.ExitCode()
		}
	}
	p.exit = st
	// Helpers the CLI started live in its group; they must not outlive it.
	_ = syscall.Kill(-p.pid, syscall.SIGKILL)
	if r := p.cfg.Record; r != nil && p.startTime != 0 {
		r.remove(p.pid, p.startTime)
	}
	close(p.exited)
	// A helper outside the group may still hold stdout open, and then the
	// reader would never see the end: past the drain interval, close our
	// end, so that pending calls learn of the exit all the same.
	t := time.NewTimer(2 * p.cfg.ExitDrain)
	defer t.Stop()
	select {
	case <-p.conn.Done():
	case <-t.C:
		_ = p.stdoutR.Close()
	}
}

func signalName(s syscall.Signal) string {
	switch s {
	case syscall.SIGKILL:
		return "SIGKILL"
	case syscall.SIGTERM:
		return "SIGTERM"
	case syscall.SIGINT:
		return "SIGINT"
	case syscall.SIGSEGV:
		return "SIGSEGV"
	case syscall.SIGABRT:
		return "SIGABRT"
	}
	return s.String()
}

// stderrLogged is how many stderr lines of a process a minute reach the
// log, at each level; the rest are counted in one line. The process is
// hostile input (an agent controls its own), and its stderr is a pipe it
// can flood: each ERROR line was a WARN of its own.
const stderrLogged = 20

// readStderr relays stderr to the log, sampled, and keeps a bounded,
// redacted tail.
func (p *Process) readStderr() {
	defer close(p.stderrDone)
	warn := codexrpc.NewLogSampler(p.log, slog.LevelWarn, stderrLogged, time.Minute, "codex stderr: more lines, not logged")
	debug := codexrpc.NewLogSampler(p.log, slog.LevelDebug, stderrLogged, time.Minute, "codex stderr: more lines, not logged")
	defer warn.Flush()
	defer debug.Flush()
	lr := codexrpc.NewLineReader(p.stderrR, 64<<10)
	for {
		line, err := lr.ReadLine()
		if errors.Is(err, codexrpc.ErrLineTooLong) {
			continue
		}
		if err != nil {
			return
		}
		text := p.cfg.Redactor.Redact(string(bytes.TrimSpace(line)))
		if text == "" {
			continue
		}
		if len(text) > 512 {
			text = text[:512] + "…"
		}
		if strings.Contains(text, " ERROR ") || strings.HasPrefix(text, "Error:") {
			warn.Log("codex stderr", "line", text)
		} else {
			debug.Log("codex stderr", "line", text)
		}
		p.tailMu.Lock()
		p.tail = append(p.tail, text)
		for len(p.tail) > p.cfg.StderrTailLines || (len(p.tail) > 1 && tailBytes(p.tail) > p.cfg.StderrTailBytes) {
			p.tail = p.tail[1:]
		}
		p.tailMu.Unlock()
	}
}

func tailBytes(lines []string) int {
	n := 0
	for _, l := range lines {
		n += len(l) + 1
	}
	return n
}

// exitCause runs on the connection's reader when stdout ends unexpectedly.
// It waits, bounded by ExitDrain, for the exit status and for stderr to
// drain, so that the error pending calls get says what happened.
func (p *Process) exitCause() error {
	t := time.NewTimer(p.cfg.ExitDrain)
	defer t.Stop()
	// One timer bounds both waits: once it has fired, its channel stays
	// empty, so the second wait must not select on it again.
	select {
	case <-p.exited:
		select {
		case <-p.stderrDone:
		case <-t.C:
		}
	case <-t.C:
	}
	return &codexrpc.ExitError{Exit: p.ExitStatus(), Stderr: p.StderrTail()}
}

// Stop ends the process politely, then firmly: it closes stdin and waits
// StopGrace, then SIGTERMs the process group and waits StopGrace again, then
// SIGKILLs the group. It returns once the process has exited and every
// goroutine of the Process has returned, or when ctx ends. Pending calls end
// with ErrClosed. Stop is idempotent.
func (p *Process) Stop(ctx context.Context) error {
	p.stopOnce.Do(func() { p.stopErr = p.stop(ctx) })
	return p.stopErr
}

func (p *Process) stop(ctx context.Context) error {
	// Helpers outside the CLI's process group would outlive it: note them
	// now, while they are still its descendants, and end them last.
	strays := append(procs.Host().Descendants(p.pid), p.orphans()...)
	defer func() {
		procs.KillIfSame(strays)
		procs.KillIfSame(p.orphans()) // those orphaned while it stopped
	}()
	_ = p.conn.Close() // closes stdin: the polite request
	steps := []syscall.Signal{syscall.SIGTERM, syscall.SIGKILL}
	for i := 0; ; i++ {
		t := time.NewTimer(p.cfg.StopGrace)
		select {
		case <-p.exited:
			t.Stop()
		case <-t.C:
			if i < len(steps) {
				signalGroup(p.pid, steps[i])
				continue
			}
			// SIGKILL was sent a grace ago: it can only be exiting.
			select {
			case <-p.exited:
			case <-ctx.Done():
			}
		case <-ctx.Done():
			t.Stop()
			// Do not leave it running: kill the group and still reap.
			signalGroup(p.pid, syscall.SIGKILL)
			reap := time.NewTimer(p.cfg.StopGrace)
			select {
			case <-p.exited:
			case <-reap.C:
			}
			reap.Stop()
		}
		break
	}
	return p.release(ctx)
}

// orphans lists what this app-server's home has left running without a
// parent; none when the start time is unknown.
func (p *Process) orphans() []procs.ID {
	if p.startTime == 0 {
		return nil
	}
	return orphansOf(p.cfg.Home, p.startTime)
}

// Kill SIGKILLs the process group and waits like Stop. Calls still pending
// end with an *ExitError, as for any unexpected death.
func (p *Process) Kill(ctx context.Context) error {
	signalGroup(p.pid, syscall.SIGKILL)
	select {
	case <-p.exited:
	case <-ctx.Done():
		return ctx.Err()
	}
	p.stopOnce.Do(func() {
		// Let the reader see EOF and report the death before closing.
		drain := time.NewTimer(2 * p.cfg.ExitDrain)
		select {
		case <-p.conn.Done():
		case <-ctx.Done():
		case <-drain.C:
		}
		drain.Stop()
		_ = p.conn.Close()
		p.stopErr = p.release(ctx)
	})
	return p.stopErr
}

// release waits for the reader goroutines once the process is gone. Closing
// our ends forces them out even when a stray descendant still holds the pipes.
func (p *Process) release(ctx context.Context) error {
	drain := time.NewTimer(p.cfg.ExitDrain)
	defer drain.Stop()
	drained := false // the timer fired; its channel will not fire again
	select {
	case <-p.conn.Done():
	case <-drain.C:
		drained = true
	case <-ctx.Done():
	}
	closeAll(p.stdoutR)
	if !drained {
		select {
		case <-p.stderrDone:
		case <-drain.C:
		case <-ctx.Done():
		}
	}
	closeAll(p.stderrR)
	<-p.stderrDone
	select {
	case <-p.waitDone:
	case <-ctx.Done():
	}
	return p.conn.Wait(ctx)
}

// signalGroup signals the process group led by pid, once; the pid alone
// when there is no such group (the CLI left it).
func signalGroup(pid int, sig syscall.Signal) {
	if err := syscall.Kill(-pid, sig); err != nil {
		_ = syscall.Kill(pid, sig)
	}
}

func closeAll(fs ...io.Closer) {
	for _, f := range fs {
		_ = f.Close()
	}
}

// EnsureHome creates a CODEX_HOME (0700) unless it exists, keeping whatever
// it holds, and refuses a path that is not a directory.
func EnsureHome(home string) error {
	fi, err := os.Stat(home)
	switch {
	case err == nil && !fi.IsDir():
		return fmt.Errorf("codex home %s is not a directory", home)
	case err == nil:
		return nil
	case !errors.Is(err, os.ErrNotExist):
		return fmt.Errorf("codex home: %w", err)
	}
	if err := os.MkdirAll(home, 0o700); err != nil {
		return fmt.Errorf("creating codex home: %w", err)
	}
	return nil
}

// PreferBundledBwrap puts the bubblewrap that the codex package ships
// (codex-resources/bwrap beside the executable's folder, "built for Codex")
// first on env's PATH, when there is one. codex sandboxes its commands with
// the first bwrap on PATH and falls back to the bundled one only when there
// is none; Debian's bubblewrap 0.8 lacks --argv0, which codex 0.169 passes,
// so with it installed every sandboxed command and patch failed.
func PreferBundledBwrap(env []string, bin string) []string {
	dir := filepath.Join(filepath.Dir(filepath.Dir(bin)), "codex-resources")
	if fi, err := os.Stat(filepath.Join(dir, "bwrap")); err != nil || fi.IsDir() {
		return env
	}
	path := dir
	for _, kv := range env {
		if v, ok := strings.CutPrefix(kv, "PATH="); ok && v != "" {
			path += string(os.PathListSeparator) + v
		}
	}
	return append(withoutKey(env, "PATH"), "PATH="+path)
}

// TempDirOutside gives env a TMPDIR that does not hold home: the first of
// env's own TMPDIR (else /tmp, the default), /tmp and /var/tmp that is a
// folder and not home or above it. The CLI refuses to make its helper
// links (codex-linux-sandbox among them) in a CODEX_HOME under its
// TMPDIR, and from 0.171.0 its bubblewrap sandbox execs that link by name:
// with the home under TMPDIR (the demo's homes, the tests') every
// sandboxed command failed with "execvp codex-linux-sandbox". env is
// returned as it is when no candidate fits.
func TempDirOutside(env []string, home string) []string {
	current := "/tmp"
	for _, kv := range env {
		if v, ok := strings.CutPrefix(kv, "TMPDIR="); ok && v != "" {
			current = v
		}
	}
	for _, dir := range []string{current, "/tmp", "/var/tmp"} {
		if under(home, dir) {
			continue
		}
		if fi, err := os.Stat(dir); err != nil || !fi.IsDir() {
			continue
		}
		if dir == current {
			return env
		}
		return append(withoutKey(env, "TMPDIR"), "TMPDIR="+dir)
	}
	return env
}

// under reports whether path is dir or inside it (both absolute, cleaned
// here; symlinks are not followed).
func under(path, dir string) bool {
	rel, err := filepath.Rel(filepath.Clean(dir), filepath.Clean(path))
	return err == nil && rel != ".." && !strings.HasPrefix(rel, "../")
}

// allowedEnv names the variables of the daemon's own environment a codex
// child may see; everything else (the daemon's secrets among it) stays out.
var allowedEnv = []string{"PATH", "HOME", "USER", "LOGNAME", "SHELL", "TMPDIR", "TZ", "LANG", "LANGUAGE", "TERM"}

// AllowedEnv filters environ down to what a codex child needs (PATH, HOME,
// locale and a few more) and appends extra ("KEY=VALUE") after it.
func AllowedEnv(environ, extra []string) []string {
	var out []string
	for _, kv := range environ {
		k, _, ok := strings.Cut(kv, "=")
		if !ok {
			continue
		}
		if strings.HasPrefix(k, "LC_") || contains(allowedEnv, k) {
			out = append(out, kv)
		}
	}
	for _, kv := range extra {
		k, _, _ := strings.Cut(kv, "=")
		out = append(withoutKey(out, k), kv)
	}
	return out
}

func contains(xs []string, x string) bool {
	for _, y := range xs {
		if x == y {
			return true
		}
	}
	return false
}

func withoutKey(env []string, key string) []string {
	out := env[:0:0]
	for _, kv := range env {
		if k, _, _ := strings.Cut(kv, "="); k != key {
			out = append(out, kv)
		}
	}
	return out
}
