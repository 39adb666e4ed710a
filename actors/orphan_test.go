package actors

import (
	"errors"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/meshweaver/supervisor/messages"
	"github.com/meshweaver/supervisor/procs"
	"github.com/meshweaver/supervisor/store"
	"github.com/meshweaver/supervisor/testkit/fakeappserver"
	"github.com/meshweaver/supervisor/testkit/proctest"
)

// Orphans.

// sleeper starts `sleep 60` in its own process group, as a stand-in for an
// app-server a killed daemon left behind. exited is closed when it ends.
func sleeper(t *testing.T) (pid int, rec store.ProcRecord, exited chan struct{}) {
	t.Helper()
	cmd := exec.Command("sleep", "60")
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited = make(chan struct{})
	go func() {
		_ = cmd.Wait()
		close(exited)
	}()
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		<-exited
	})
	st, err := procs.StartTime(cmd.Process.Pid)
	if err != nil {
		t.Fatal(err)
	}
	return cmd.Process.Pid, store.ProcRecord{PID: cmd.Process.Pid, StartTime: st, Exe: "/bin/sleep"}, exited
}

func writeProcRecord(t *testing.T, homes, user string, rec store.ProcRecord) string {
	t.Helper()
	home, err := store.HomeDir(homes, user)
	if err != nil {
		t.Fatal(err)
	}
	path := ProcRecordPath(home)
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := store.WriteProcRecord(path, rec); err != nil {
		t.Fatal(err)
	}
	return path
}

func waitClosed(t *testing.T, ch <-chan struct{}, d time.Duration, what string) {
	t.Helper()
	select {
	case <-ch:
	case <-time.After(d):
		t.Fatalf("%s: not within %v", what, d)
	}
}

// TestOrphanReapOrphans: a recorded process that is provably ours is
// ended; one whose start time does not match is never signalled.
func TestOrphanReapOrphans(t *testing.T) {
	homes := t.TempDir()
	log := slog.New(slog.DiscardHandler)
	_, ours, oursExited := sleeper(t)
	oursRec := writeProcRecord(t, homes, "alice", ours)
	stranger, strangerRec, strangerExited := sleeper(t)
	strangerRec.StartTime++ // the pid was reused by another process
	strangerPath := writeProcRecord(t, homes, "bob", strangerRec)
	if err := os.MkdirAll(filepath.Join(homes, "carol", "meshweaver"), 0o700); err != nil {
		t.Fatal(err)
	}
	garbage := filepath.Join(homes, "carol", "meshweaver", ProcRecordName)
	if err := os.WriteFile(garbage, []byte("pid 1\n"), 0o600); err != nil {
		t.Fatal(err)
	}

	if n := ReapOrphans(homes, 500*time.Millisecond, log); n != 1 {
		t.Errorf("ReapOrphans ended %d, want 1", n)
	}
	waitClosed(t, oursExited, waitFor, "the recorded process ending")
	select {
	case <-strangerExited:
		t.Fatalf("a process whose start time does not match the record was signalled")
	default:
	}
	if !proctest.Alive(stranger) {
		t.Fatalf("the stranger %d is not running", stranger)
	}
	for _, p := range []string{oursRec, strangerPath, garbage} {
		if _, err := os.Stat(p); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("record %s is still there (%v)", p, err)
		}
	}
}

// TestOrphanReapedBeforeStart: the codex actor ends the process its home's
// record names before it starts an app-server there.
func TestOrphanReapedBeforeStart(t *testing.T) {
	h := supHarness(t, withFake(t, fakeappserver.Config{}))
	events := tapEvents(t, h.engine)
	leftover, rec, exited := sleeper(t)
	writeProcRecord(t, h.cfg.Homes, "alice", rec)
	c := h.caller()
	mustStatus(t, h.round(c, messages.StartRound{User: "alice", Thread: "mesh/o", Text: "hi"}), messages.StatusCompleted)
	waitClosed(t, exited, waitFor, "the leftover process ending")
	waitEvent(t, events, 0, waitFor, "of the reap", func(e LeftoverEnded) bool { return e.User == "alice" })
	if pid := liveAppServerPID(t, h, "alice"); pid == leftover {
		t.Errorf("the record still names the leftover")
	}
}

// otherKeyRecord is a valid thread record of another mesh thread.
func otherKeyRecord(t *testing.T) []byte {
	t.Helper()
	reg := store.NewRegistry(t.TempDir())
	if err := reg.Record("mesh/other", "0199a0a0-0000-7000-8000-000000000001"); err != nil {
		t.Fatal(err)
	}
	data, err := os.ReadFile(reg.Path("mesh/other"))
	if err != nil {
		t.Fatal(err)
	}
	return data
}
