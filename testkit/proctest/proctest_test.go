package proctest

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// sleeper starts `sleep 60` in its own process group with CODEX_HOME set to
// home, and returns it and the resolved path of its executable. The
// cleanup kills it by its PID and reaps it.
func sleeper(t *testing.T, home string) (*exec.Cmd, string) {
	t.Helper()
	path, err := exec.LookPath("sleep")
	if err != nil {
		t.Fatal(err)
	}
	bin, err := filepath.EvalSymlinks(path)
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(path, "60")
	cmd.Env = append(os.Environ(), HomeVar+"="+home, "PROCTEST_MARK=1")
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = cmd.Process.Kill() // by PID; a no-op once the test reaped it
		_ = cmd.Wait()
	})
	// The child execs sleep right after the fork; until then it runs this
	// binary, so wait for the exec before matching on the executable.
	if !Poll(10*time.Second, 5*time.Millisecond, func() bool { return (Proc{PID: cmd.Process.Pid}).Exe() == bin }) {
		t.Fatalf("process %d never ran %s", cmd.Process.Pid, bin)
	}
	return cmd, bin
}

// wantKilled reaps cmd and checks that who SIGKILLed it.
func wantKilled(t *testing.T, cmd *exec.Cmd, who string) {
	t.Helper()
	var exit *exec.ExitError
	if err := cmd.Wait(); !errors.As(err, &exit) || exit.Sys().(syscall.WaitStatus).Signal() != syscall.SIGKILL {
		t.Errorf("sleeper ended with %v, want SIGKILL from %s", err, who)
	}
}

// killAndReap SIGKILLs cmd by its PID and reaps it.
func killAndReap(t *testing.T, cmd *exec.Cmd) {
	t.Helper()
	if err := syscall.Kill(cmd.Process.Pid, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	_ = cmd.Wait()
}

func TestParseStat(t *testing.T) {
	line := "42 (a) b (c)) S 7 42 42 0 -1 4194560 100 0 0 0 0 0 0 0 20 0 1 0 123456 1000 100 18446744073709551615"
	p, ok := parseStat(42, []byte(line))
	if !ok {
		t.Fatal("did not parse")
	}
	want := Proc{PID: 42, PPID: 7, PGID: 42, State: 'S', Start: 123456, Comm: "a) b (c)"}
	if p != want {
		t.Errorf("parseStat = %+v, want %+v", p, want)
	}
	for _, bad := range []string{"", "42 nocomm S 1 2", "42 (x)", "42 (x) S 1"} {
		if p, ok := parseStat(42, []byte(bad)); ok {
			t.Errorf("parseStat(%q) = %+v, want no parse", bad, p)
		}
	}
}

func TestSelf(t *testing.T) {
	p, ok := Read(os.Getpid())
	if !ok || !p.Live() || p.PID != os.Getpid() || p.PPID != os.Getppid() || p.PGID != syscall.Getpgrp() || p.Start == 0 {
		t.Fatalf("Read(self) = %+v, %v", p, ok)
	}
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	if exe, _ = filepath.EvalSymlinks(exe); p.Exe() != exe {
		t.Errorf("Exe = %q, want %q", p.Exe(), exe)
	}
	if !p.Running() || !Alive(p.PID) {
		t.Error("the test process does not run")
	}
	if got := List(NotSelf, func(q Proc) bool { return q.PID == os.Getpid() }); len(got) != 0 {
		t.Errorf("NotSelf kept %v", got)
	}
}

func TestSleeper(t *testing.T) {
	root := t.TempDir()
	home := filepath.Join(root, "alice", ".codex")
	cmd, bin := sleeper(t, home)
	pid := cmd.Process.Pid

	got := List(ExeIs(bin), UnderHome(root))
	if len(got) != 1 || got[0].PID != pid {
		t.Fatalf("List(ExeIs, UnderHome(root)) = %v, want just pid %d", got, pid)
	}
	p := got[0]
	if p.PGID != pid || p.PPID != os.Getpid() || !p.Live() {
		t.Errorf("sleeper = %+v, want its own group, the test as parent, live", p)
	}
	if p.Home() != home {
		t.Errorf("Home = %q, want %q", p.Home(), home)
	}
	if v, ok := p.Getenv("PROCTEST_MARK"); !ok || v != "1" {
		t.Errorf("Getenv(PROCTEST_MARK) = %q, %v", v, ok)
	}
	if _, ok := p.Getenv("PROCTEST_NONE"); ok {
		t.Error("Getenv found an unset variable")
	}
	if env := p.Environ(); !slices.Contains(env, "PROCTEST_MARK=1") || !slices.Contains(env, HomeVar+"="+home) {
		t.Errorf("Environ = %q, want PROCTEST_MARK and CODEX_HOME in it", env)
	}
	if p.Cmdline() != cmd.Path+" 60" {
		t.Errorf("Cmdline = %q, want %q", p.Cmdline(), cmd.Path+" 60")
	}
	if d := Describe(pid); !strings.Contains(d, fmt.Sprintf("pid %d ", pid)) || !strings.Contains(d, "60") {
		t.Errorf("Describe = %q", d)
	}
	for _, dir := range []string{home, filepath.Join(root, "alice")} {
		if len(List(ExeIs(bin), UnderHome(dir))) != 1 {
			t.Errorf("UnderHome(%s) misses %s", dir, home)
		}
	}
	for _, dir := range []string{filepath.Join(home, "sub"), filepath.Join(root, "ali"), root + "-x"} {
		if got := List(ExeIs(bin), UnderHome(dir)); len(got) != 0 {
			t.Errorf("UnderHome(%s) matches %v", dir, got)
		}
	}
	if got := List(ExeIs(bin), UnderHome(root), NotPID(pid)); len(got) != 0 {
		t.Errorf("NotPID(%d) kept %v", pid, got)
	}
	if GroupGone(pid) {
		t.Error("GroupGone with the sleeper running")
	}
	if m := GroupMembers(pid); len(m) != 1 || m[0].PID != pid {
		t.Errorf("GroupMembers = %v", m)
	}

	// Killed but not reaped: a zombie, which List drops and ListAll keeps.
	if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	if !Poll(10*time.Second, 5*time.Millisecond, func() bool { q, _ := Read(pid); return q.State == 'Z' }) {
		t.Fatal("the killed sleeper never became a zombie")
	}
	if Alive(pid) || p.Running() {
		t.Error("a zombie counts as alive")
	}
	if !GroupGone(pid) {
		t.Error("a group of one zombie is not gone")
	}
	if got := ListAll(func(q Proc) bool { return q.PID == pid }); len(got) != 1 {
		t.Errorf("ListAll lost the zombie: %v", got)
	}
	WaitGone(t, 0, 0, func(q Proc) bool { return q.PID == pid })

	_ = cmd.Wait()
	if _, ok := Read(pid); ok || !GroupGone(pid) {
		t.Error("the reaped sleeper is still in /proc")
	}
	WaitGroupGone(t, pid, time.Second, 5*time.Millisecond)
}

// failTB records Errorf instead of failing.
type failTB struct {
	testing.TB
	errs []string
}

func (f *failTB) Helper() {}
func (f *failTB) Errorf(format string, args ...any) {
	f.errs = append(f.errs, fmt.Sprintf(format, args...))
}

func TestWaitGoneKillsLeftovers(t *testing.T) {
	root := t.TempDir()
	cmd, bin := sleeper(t, filepath.Join(root, "bob", ".codex"))
	pid := cmd.Process.Pid
	ftb := &failTB{TB: t}
	start := time.Now()
	left := WaitGone(ftb, 100*time.Millisecond, 20*time.Millisecond, ExeIs(bin), UnderHome(root))
	if time.Since(start) < 100*time.Millisecond {
		t.Errorf("WaitGone gave up after %v, before its deadline", time.Since(start))
	}
	if len(left) != 1 || left[0].PID != pid || len(ftb.errs) != 1 || !strings.Contains(ftb.errs[0], fmt.Sprintf("pid %d ", pid)) {
		t.Fatalf("WaitGone = %v, errors %q; want the sleeper reported", left, ftb.errs)
	}
	wantKilled(t, cmd, "WaitGone")
}

func TestWaitGroupGoneKillsGroup(t *testing.T) {
	cmd, _ := sleeper(t, t.TempDir())
	pid := cmd.Process.Pid
	ftb := &failTB{TB: t}
	WaitGroupGone(ftb, pid, 50*time.Millisecond, 5*time.Millisecond)
	if len(ftb.errs) != 1 || !strings.Contains(ftb.errs[0], fmt.Sprintf("pid %d ", pid)) {
		t.Fatalf("WaitGroupGone errors %q; want the sleeper named", ftb.errs)
	}
	wantKilled(t, cmd, "WaitGroupGone")
}

func TestWaitGoneReturnsOnceGone(t *testing.T) {
	cmd, bin := sleeper(t, t.TempDir())
	pid := cmd.Process.Pid
	killAndReap(t, cmd)
	if left := WaitGone(t, 5*time.Second, 20*time.Millisecond, ExeIs(bin), func(p Proc) bool { return p.PID == pid }); left != nil {
		t.Errorf("WaitGone = %v after the reap", left)
	}
}
