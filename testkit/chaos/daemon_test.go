package chaos

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
)

// buildSupervisor builds the daemon binary into dir, with the race detector
// when the test itself runs with it, so that a data race in the daemon
// under chaos shows up in its log (and its exit code). It returns the
// binary, or "" and the error text.
func buildSupervisor(dir string) (string, string) {
	goBin, err := exec.LookPath("go")
	if err != nil {
		return "", err.Error()
	}
	out := filepath.Join(dir, "supervisor")
	args := []string{"build", "-o", out}
	if raceEnabled {
		args = append(args, "-race")
	}
	args = append(args, "github.com/meshweaver/supervisor/cmd/supervisor")
	start := time.Now()
	if b, err := exec.Command(goBin, args...).CombinedOutput(); err != nil {
		return "", fmt.Sprintf("go %s: %v\n%s", strings.Join(args, " "), err, b)
	}
	return out, fmt.Sprintf("built the supervisor (race=%v) in %v", raceEnabled, time.Since(start).Round(time.Millisecond))
}

// freeAddr picks a free loopback port. hollywood puts the listen address
// into every PID, so ":0" cannot be used.
func freeAddr() (string, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", err
	}
	addr := ln.Addr().String()
	return addr, ln.Close()
}

// daemonProc is one run of `supervisor serve`: a child process in its own
// process group, signalled only by its PID, logging JSON to a file.
type daemonProc struct {
	epoch   int
	cmd     *exec.Cmd
	pid     int
	logPath string
	started time.Time

	exited chan struct{} // closed when Wait returned
	state  *os.ProcessState

	// dead is closed when the process is gone, whatever the reason.
	// killed (the suite SIGKILLed it) and stopping (SIGTERM) are set
	// before; unexpected is set when it died of neither.
	dead       chan struct{}
	killed     atomic.Bool
	stopping   atomic.Bool
	unexpected atomic.Bool

	log *logTail
}

// startDaemon starts the daemon with args and waits until it logs that it
// serves.
func startDaemon(bin string, epoch int, logPath, home string, args []string) (*daemonProc, error) {
	f, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(bin, append([]string{"serve"}, args...)...)
	cmd.Stdout = f
	cmd.Stderr = f
	// HOME reaches the app-servers (and the login shell each one runs
	// for its shell snapshot): an empty one keeps the machine's dotfiles
	// out of the run.
	cmd.Env = append(os.Environ(), "GORACE=halt_on_error=0", "HOME="+home)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		f.Close()
		return nil, fmt.Errorf("starting the daemon: %w", err)
	}
	f.Close() // the child holds its own copy
	d := &daemonProc{
		epoch: epoch, cmd: cmd, pid: cmd.Process.Pid, logPath: logPath, started: time.Now(),
		exited: make(chan struct{}), dead: make(chan struct{}),
		log: &logTail{path: logPath, ready: map[int]readyLine{}},
	}
	go func() {
		_ = cmd.Wait()
		d.state = cmd.ProcessState
		close(d.exited)
		if !d.killed.Load() && !d.stopping.Load() {
			d.unexpected.Store(true)
		}
		close(d.dead)
	}()
	deadline := time.Now().Add(60 * time.Second)
	for {
		d.log.scan()
		if d.log.serving() {
			return d, nil
		}
		select {
		case <-d.dead:
			return nil, fmt.Errorf("the daemon exited before serving (%v); log:\n%s", d.state, tailOf(logPath, 4096))
		case <-time.After(20 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			d.kill()
			return nil, fmt.Errorf("the daemon did not serve within 60s; log:\n%s", tailOf(logPath, 4096))
		}
	}
}

// kill SIGKILLs the daemon (its PID only: its app-servers are left to
// Pdeathsig and to the next daemon) and waits until it is reaped.
func (d *daemonProc) kill() {
	d.killed.Store(true)
	_ = syscall.Kill(d.pid, syscall.SIGKILL)
	<-d.dead
}

// terminate SIGTERMs the daemon and waits up to timeout for its exit; it
// returns the exit code (-1 for a signal) or an error on timeout, after
// which the daemon is SIGKILLed.
func (d *daemonProc) terminate(timeout time.Duration) (int, time.Duration, error) {
	start := time.Now()
	d.stopping.Store(true)
	_ = syscall.Kill(d.pid, syscall.SIGTERM)
	select {
	case <-d.dead:
		return d.state.ExitCode(), time.Since(start), nil
	case <-time.After(timeout):
		d.kill()
		return d.state.ExitCode(), time.Since(start), fmt.Errorf("no exit within %v of SIGTERM", timeout)
	}
}

// tailOf is the last n bytes of a file, for failure messages.
func tailOf(path string, n int64) string {
	f, err := os.Open(path)
	if err != nil {
		return err.Error()
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return err.Error()
	}
	off := max(fi.Size()-n, 0)
	b, _ := io.ReadAll(io.NewSectionReader(f, off, fi.Size()-off))
	return string(b)
}

// readyLine is one "codex app-server ready" of the log.
type readyLine struct {
	at   time.Time
	user string // the daemon's user tag (u-…)
}

// logTail follows a daemon's JSON log and keeps what the suite needs.
type logTail struct {
	path string

	mu        sync.Mutex
	off       int64
	partial   []byte
	isServing bool
	ready     map[int]readyLine // app-server pid → when it became ready
	reaped    int               // app-servers the start reaped ("ended app-servers left by a previous instance")
	reapLines int               // "ended an app-server a previous daemon left running"
	panics    []string
	races     int
	errors    map[string]int // ERROR lines by message
	warns     map[string]int // WARN lines by message
	cooldowns int
}

func (l *logTail) serving() bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.isServing
}

func (l *logTail) readyAt(pid int) (readyLine, bool) {
	l.scan()
	l.mu.Lock()
	defer l.mu.Unlock()
	r, ok := l.ready[pid]
	return r, ok
}

// scan reads what was appended since the last scan.
func (l *logTail) scan() {
	l.mu.Lock()
	defer l.mu.Unlock()
	f, err := os.Open(l.path)
	if err != nil {
		return
	}
	defer f.Close()
	if _, err := f.Seek(l.off, io.SeekStart); err != nil {
		return
	}
	data, err := io.ReadAll(f)
	if err != nil || len(data) == 0 {
		return
	}
	l.off += int64(len(data))
	data = append(l.partial, data...)
	last := bytes.LastIndexByte(data, '\n')
	if last < 0 {
		l.partial = data
		return
	}
	l.partial = append([]byte(nil), data[last+1:]...)
	sc := bufio.NewScanner(bytes.NewReader(data[:last+1]))
	sc.Buffer(make([]byte, 0, 64<<10), 16<<20)
	for sc.Scan() {
		l.line(sc.Bytes())
	}
}

func (l *logTail) line(b []byte) {
	if bytes.Contains(b, []byte("WARNING: DATA RACE")) {
		l.races++
		return
	}
	if len(b) == 0 || b[0] != '{' {
		return
	}
	var rec struct {
		Time  time.Time `json:"time"`
		Level string    `json:"level"`
		Msg   string    `json:"msg"`
		User  string    `json:"user"`
		PID   int       `json:"pid"`
		Count int       `json:"count"`
		Panic string    `json:"panic"`
	}
	if json.Unmarshal(b, &rec) != nil {
		return
	}
	switch rec.Msg {
	case "supervisor serving":
		l.isServing = true
	case "codex app-server ready":
		l.ready[rec.PID] = readyLine{at: rec.Time, user: rec.User}
	case "ended app-servers left by a previous instance":
		l.reaped += rec.Count
	case "ended an app-server a previous daemon left running":
		l.reapLines++
	case "actor panicked; contained":
		l.panics = append(l.panics, rec.Panic)
	case "codex app-server keeps dying; the user is unavailable for a cool-down":
		l.cooldowns++
	}
	switch rec.Level {
	case "ERROR":
		if l.errors == nil {
			l.errors = map[string]int{}
		}
		l.errors[rec.Msg]++
	case "WARN":
		if l.warns == nil {
			l.warns = map[string]int{}
		}
		l.warns[rec.Msg]++
	}
}
