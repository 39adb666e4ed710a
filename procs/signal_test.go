package procs

import (
	"bufio"
	"errors"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/meshweaver/supervisor/store"
)

// writeRaw puts data at path (creating parents) without
// store.WriteFileAtomic, to plant damaged files.
func writeRaw(t testing.TB, path string, data []byte) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, data, 0o600); err != nil {
		t.Fatal(err)
	}
}

// orphanCommand prepares argv to run in its own process group, as the
// daemon starts codex.
func orphanCommand(argv ...string) *exec.Cmd {
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	return cmd
}

// recordOrphan records the started cmd at a fresh path. Cleanup kills it by
// its handle (a pidfd, so never a reused PID) if the test did not reap it.
func recordOrphan(t *testing.T, cmd *exec.Cmd) (store.ProcRecord, string) {
	t.Helper()
	t.Cleanup(func() {
		cmd.Process.Kill()
		cmd.Wait()
	})
	start, err := StartTime(cmd.Process.Pid)
	if err != nil {
		t.Fatal(err)
	}
	rec := store.ProcRecord{PID: cmd.Process.Pid, StartTime: start, Exe: cmd.Path}
	path := filepath.Join(t.TempDir(), "codex.proc")
	if err := store.WriteProcRecord(path, rec); err != nil {
		t.Fatal(err)
	}
	return rec, path
}

// waitSignal waits for cmd and checks that sig ended it.
func waitSignal(t *testing.T, cmd *exec.Cmd, sig syscall.Signal) {
	t.Helper()
	err := cmd.Wait()
	var exit *exec.ExitError
	if !errors.As(err, &exit) {
		t.Fatalf("Wait = %v, want a signal exit", err)
	}
	ws := exit.Sys().(syscall.WaitStatus)
	if !ws.Signaled() || ws.Signal() != sig {
		t.Errorf("process ended with %v, want signal %v", ws, sig)
	}
}

func assertGone(t *testing.T, path string) {
	t.Helper()
	if _, err := os.Stat(path); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("record %s still there: %v", path, err)
	}
}

func TestReapRecordTerm(t *testing.T) {
	cmd := orphanCommand("sleep", "30")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	rec, path := recordOrphan(t, cmd)
	reaped, err := ReapRecord(path, 30*time.Second)
	if !reaped || err != nil {
		t.Fatalf("ReapRecord = %v, %v; want true, nil", reaped, err)
	}
	if IsSame(ID{rec.PID, rec.StartTime}) {
		t.Error("process still running after reap")
	}
	waitSignal(t, cmd, syscall.SIGTERM)
	assertGone(t, path)
}

func TestReapRecordKill(t *testing.T) {
	// The shell ignores SIGTERM before saying ready; sleep inherits that.
	cmd := orphanCommand("sh", "-c", `trap "" TERM; echo ready; exec sleep 30`)
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	_, path := recordOrphan(t, cmd)
	line, err := bufio.NewReader(out).ReadString('\n')
	if err != nil || line != "ready\n" {
		t.Fatalf("child said %q, %v", line, err)
	}
	reaped, err := ReapRecord(path, 50*time.Millisecond)
	if !reaped || err != nil {
		t.Fatalf("ReapRecord = %v, %v; want true, nil", reaped, err)
	}
	waitSignal(t, cmd, syscall.SIGKILL)
	assertGone(t, path)
}

func TestReapRecordWrongStartTime(t *testing.T) {
	cmd := orphanCommand("sleep", "30")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	rec, path := recordOrphan(t, cmd)
	wrong := rec
	wrong.StartTime++
	if err := store.WriteProcRecord(path, wrong); err != nil {
		t.Fatal(err)
	}
	reaped, err := ReapRecord(path, 30*time.Second)
	if reaped || err != nil {
		t.Fatalf("ReapRecord = %v, %v; want false, nil", reaped, err)
	}
	assertGone(t, path)
	if !IsSame(ID{rec.PID, rec.StartTime}) {
		t.Fatal("a process with another start time was signalled")
	}
	// Signal 0 probes without signalling: still there, not a zombie.
	if err := syscall.Kill(rec.PID, 0); err != nil {
		t.Errorf("kill(%d, 0) = %v", rec.PID, err)
	}
	if err := cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	waitSignal(t, cmd, syscall.SIGKILL)
}

func TestReapRecordNothingToDo(t *testing.T) {
	dir := t.TempDir()
	t.Run("missing record", func(t *testing.T) {
		reaped, err := ReapRecord(filepath.Join(dir, "none"), time.Second)
		if reaped || err != nil {
			t.Errorf("ReapRecord = %v, %v; want false, nil", reaped, err)
		}
	})
	t.Run("process gone", func(t *testing.T) {
		cmd := exec.Command("true")
		if err := cmd.Run(); err != nil {
			t.Fatal(err)
		}
		// The PID is free now (or reused, with another start time).
		path := filepath.Join(dir, "gone.proc")
		if err := store.WriteProcRecord(path, store.ProcRecord{PID: cmd.Process.Pid, StartTime: 1, Exe: "true"}); err != nil {
			t.Fatal(err)
		}
		reaped, err := ReapRecord(path, time.Second)
		if reaped || err != nil {
			t.Errorf("ReapRecord = %v, %v; want false, nil", reaped, err)
		}
		assertGone(t, path)
	})
	t.Run("corrupt record", func(t *testing.T) {
		path := filepath.Join(dir, "bad.proc")
		writeRaw(t, path, []byte("meshweaver-proc v1\npid 1\nstart 1\nexe x\n"))
		reaped, err := ReapRecord(path, time.Second)
		if reaped || !errors.Is(err, store.ErrCorrupt) {
			t.Errorf("ReapRecord = %v, %v; want false, ErrCorrupt", reaped, err)
		}
		assertGone(t, path)
	})
	t.Run("refuses self", func(t *testing.T) {
		start, err := StartTime(os.Getpid())
		if err != nil {
			t.Fatal(err)
		}
		path := filepath.Join(dir, "self.proc")
		if err := store.WriteProcRecord(path, store.ProcRecord{PID: os.Getpid(), StartTime: start, Exe: os.Args[0]}); err != nil {
			t.Fatal(err)
		}
		reaped, err := ReapRecord(path, time.Second)
		if reaped || err == nil || !strings.Contains(err.Error(), strconv.Itoa(os.Getpid())) {
			t.Errorf("ReapRecord(self) = %v, %v; want a refusal", reaped, err)
		}
		if _, err := os.Stat(path); err != nil {
			t.Errorf("record removed after a refusal: %v", err)
		}
	})
}

// TestReapMemberRecord: on a shared homes volume a daemon starting in a
// cluster leaves another member's record and its live process alone, and
// reaps only what its own earlier life left; a record of another kernel
// (another machine, another boot) is never signalled.
func TestReapMemberRecord(t *testing.T) {
	boot, err := BootID()
	if err != nil {
		t.Fatal(err)
	}
	cmd := orphanCommand("sleep", "30")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	rec, path := recordOrphan(t, cmd)
	rec.Member, rec.Boot = "node-b", boot
	if err := store.WriteProcRecord(path, rec); err != nil {
		t.Fatal(err)
	}
	if reaped, err := ReapMemberRecord(path, time.Second, "node-a"); reaped || err != nil {
		t.Fatalf("node-a reaping node-b's record = %v, %v; want false, nil", reaped, err)
	}
	if !IsSame(ID{rec.PID, rec.StartTime}) {
		t.Fatal("node-a's start killed node-b's live process")
	}
	if _, err := os.Stat(path); err != nil {
		t.Fatalf("node-b's record is gone: %v", err)
	}

	// The same pid and start time recorded on another kernel: not this
	// process, never signalled; the record goes (the caller takes over).
	other := rec
	other.Boot = "00000000-0000-0000-0000-000000000000"
	if err := store.WriteProcRecord(path, other); err != nil {
		t.Fatal(err)
	}
	if reaped, err := ReapRecord(path, time.Second); reaped || err != nil {
		t.Fatalf("ReapRecord of another kernel's record = %v, %v; want false, nil", reaped, err)
	}
	if !IsSame(ID{rec.PID, rec.StartTime}) {
		t.Fatal("a record of another kernel got a local process killed")
	}
	assertGone(t, path)

	// node-b's own start reaps its own leftover.
	if err := store.WriteProcRecord(path, rec); err != nil {
		t.Fatal(err)
	}
	if reaped, err := ReapMemberRecord(path, 10*time.Second, "node-b"); !reaped || err != nil {
		t.Fatalf("node-b reaping its own record = %v, %v; want true, nil", reaped, err)
	}
	waitSignal(t, cmd, syscall.SIGTERM)
	assertGone(t, path)
}
