package fakeappserver_test

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/meshweaver/supervisor/testkit/fakeappserver"
)

// proc is the fake running as a child process (this test binary,
// re-executed; see TestMain).
type proc struct {
	t      *testing.T
	cmd    *exec.Cmd
	stdin  io.WriteCloser
	stdout chan string
	stderr chan string
	waited chan error
}

func startProc(t *testing.T, cfg fakeappserver.Config, codexHome string) *proc {
	t.Helper()
	cmd := fakeappserver.Command(t, cfg, codexHome)
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	stderr, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	p := &proc{t: t, cmd: cmd, stdin: stdin, stdout: make(chan string, 1024), stderr: make(chan string, 1024), waited: make(chan error, 1)}
	pump := func(r io.Reader, out chan<- string) <-chan struct{} {
		done := make(chan struct{})
		go func() {
			defer close(done)
			defer close(out)
			sc := bufio.NewScanner(r)
			sc.Buffer(nil, 16<<20)
			for sc.Scan() {
				out <- sc.Text()
			}
		}()
		return done
	}
	outDone, errDone := pump(stdout, p.stdout), pump(stderr, p.stderr)
	go func() {
		// Drain both pipes before Wait, as os/exec requires.
		<-outDone
		<-errDone
		p.waited <- cmd.Wait()
	}()
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		if ok, _ := p.drainUntilExit(); !ok {
			t.Errorf("fake process %d not reaped within %v", cmd.Process.Pid, timeout)
		}
	})
	return p
}

func (p *proc) line(ch <-chan string, what string) string {
	p.t.Helper()
	select {
	case l, ok := <-ch:
		if !ok {
			p.t.Fatalf("fake's %s closed", what)
		}
		return l
	case <-time.After(timeout):
		p.t.Fatalf("no %s line within %v", what, timeout)
	}
	return ""
}

// stderrUntil reads stderr lines until one equal to want.
func (p *proc) stderrUntil(want string) {
	p.t.Helper()
	for p.line(p.stderr, "stderr") != want {
	}
}

func (p *proc) send(line string) {
	p.t.Helper()
	if _, err := io.WriteString(p.stdin, line+"\n"); err != nil {
		p.t.Fatalf("writing to the fake: %v", err)
	}
}

// wait returns the process's exit error, draining its pipes meanwhile.
func (p *proc) wait() error {
	p.t.Helper()
	ok, err := p.drainUntilExit()
	if !ok {
		p.t.Fatalf("fake process did not exit within %v", timeout)
	}
	return err
}

// drainUntilExit discards output until the process has been reaped, for at
// most timeout.
func (p *proc) drainUntilExit() (exited bool, err error) {
	timer := time.NewTimer(timeout)
	defer timer.Stop()
	out, errs := p.stdout, p.stderr
	for {
		select {
		case _, ok := <-out:
			if !ok {
				out = nil
			}
		case _, ok := <-errs:
			if !ok {
				errs = nil
			}
		case err = <-p.waited:
			p.waited <- err // for later calls and the cleanup
			return true, err
		case <-timer.C:
			return false, nil
		}
	}
}

// sigIgnored reports whether pid ignores sig, from /proc/<pid>/status.
func sigIgnored(t *testing.T, pid int, sig syscall.Signal) bool {
	t.Helper()
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range strings.Split(string(b), "\n") {
		if mask, ok := strings.CutPrefix(l, "SigIgn:"); ok {
			bits, err := strconv.ParseUint(strings.TrimSpace(mask), 16, 64)
			if err != nil {
				t.Fatal(err)
			}
			return bits&(1<<(uint(sig)-1)) != 0
		}
	}
	t.Fatal("no SigIgn line in /proc status")
	return false
}

func TestProcessExitAfterMessages(t *testing.T) {
	home := t.TempDir()
	record := filepath.Join(t.TempDir(), "record.jsonl")
	p := startProc(t, fakeappserver.Config{ExitAfterMessages: 2, ExitCode: 7, RecordPath: record}, home)
	p.send(`{"id":1,"method":"initialize","params":{"clientInfo":{"name":"meshweaver","version":"1"}}}`)
	answer := p.line(p.stdout, "stdout")
	if str([]byte(answer), "result", "codexHome") != home {
		t.Errorf("initialize answer %s, want codexHome %s from CODEX_HOME", answer, home)
	}
	p.send(`{"method":"initialized"}`)
	err := p.wait()
	var exit *exec.ExitError
	if !errors.As(err, &exit) || exit.ExitCode() != 7 {
		t.Fatalf("process ended with %v, want exit status 7", err)
	}
	b, err := os.ReadFile(record)
	if err != nil {
		t.Fatal(err)
	}
	if n := bytes.Count(b, []byte("\n")); n != 2 {
		t.Errorf("recorded %d lines, want 2:\n%s", n, b)
	}
}

func TestProcessEOFAndSIGTERM(t *testing.T) {
	t.Run("stdin EOF", func(t *testing.T) {
		p := startProc(t, fakeappserver.Config{}, t.TempDir())
		p.stdin.Close()
		if err := p.wait(); err != nil {
			t.Errorf("after stdin EOF: %v, want exit status 0", err)
		}
	})
	t.Run("SIGTERM", func(t *testing.T) {
		p := startProc(t, fakeappserver.Config{ExitCode: 5, StderrLines: []string{"ready"}}, t.TempDir())
		p.stderrUntil("ready")
		if sigIgnored(t, p.cmd.Process.Pid, syscall.SIGTERM) {
			t.Error("SIGTERM is ignored without TermIgnored")
		}
		if err := p.cmd.Process.Signal(syscall.SIGTERM); err != nil {
			t.Fatal(err)
		}
		var exit *exec.ExitError
		if err := p.wait(); !errors.As(err, &exit) || exit.ExitCode() != 5 {
			t.Errorf("after SIGTERM: %v, want exit status 5 (ExitCode)", err)
		}
	})
	t.Run("bad config", func(t *testing.T) {
		l, err := fakeappserver.Relaunch(fakeappserver.Config{}, "")
		if err != nil {
			t.Fatal(err)
		}
		cmd := exec.Command(l.Path, l.Args...)
		cmd.Env = append(os.Environ(), fakeappserver.EnvVar+`={"noSuchKnob":true}`)
		var stderr bytes.Buffer
		cmd.Stderr = &stderr
		err = runWithin(t, cmd)
		var exit *exec.ExitError
		if !errors.As(err, &exit) || exit.ExitCode() != 2 || !strings.Contains(stderr.String(), "noSuchKnob") {
			t.Errorf("bad config: %v, stderr %q; want exit status 2 naming the knob", err, stderr.String())
		}
	})
}

// TestProcessTermIgnored shows the escalation the supervisor needs: the
// fake ignores stdin EOF and SIGTERM, so only SIGKILL ends it.
func TestProcessTermIgnored(t *testing.T) {
	p := startProc(t, fakeappserver.Config{IgnoreStdinEOF: true, TermIgnored: true, StderrLines: []string{"ready"}}, t.TempDir())
	p.stderrUntil("ready")
	p.stdin.Close()
	p.stderrUntil("fakeappserver: stdin closed; ignoring EOF")
	pid := p.cmd.Process.Pid
	if !sigIgnored(t, pid, syscall.SIGTERM) {
		t.Fatal("SIGTERM is not ignored")
	}
	// An ignored signal is discarded when sent, so after this returns the
	// process can only end by SIGKILL.
	if err := p.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if err := p.cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	err := p.wait()
	var exit *exec.ExitError
	if !errors.As(err, &exit) {
		t.Fatalf("process ended with %v, want a signal", err)
	}
	if ws, ok := exit.Sys().(syscall.WaitStatus); !ok || !ws.Signaled() || ws.Signal() != syscall.SIGKILL {
		t.Errorf("process ended with %v, want killed by SIGKILL", err)
	}
}

func TestRelaunch(t *testing.T) {
	l, err := fakeappserver.Relaunch(fakeappserver.Config{HangOnMethod: "model/list"}, "/tmp/home")
	if err != nil {
		t.Fatal(err)
	}
	exe, _ := os.Executable()
	if l.Path != exe || len(l.Args) != 1 || l.Args[0] != "app-server" {
		t.Errorf("Relaunch = %+v, want this binary with app-server", l)
	}
	if len(l.Env) != 2 || l.Env[0] != fakeappserver.Env(fakeappserver.Config{HangOnMethod: "model/list"}) || l.Env[1] != "CODEX_HOME=/tmp/home" {
		t.Errorf("Relaunch env = %q", l.Env)
	}
	t.Setenv(fakeappserver.EnvVar, "{}")
	if _, err := fakeappserver.Relaunch(fakeappserver.Config{}, ""); err == nil {
		t.Error("Relaunch inside a fake process (a missing TestMain hook) succeeded")
	}
}

func runWithin(t *testing.T, cmd *exec.Cmd) error {
	t.Helper()
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	select {
	case err := <-done:
		return err
	case <-time.After(timeout):
		_ = cmd.Process.Kill()
		<-done
		t.Fatalf("%s did not exit within %v", cmd.Path, timeout)
		return nil
	}
}
