package codexproc

import (
	"context"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/meshweaver/supervisor/procs"
	"github.com/meshweaver/supervisor/store"
)

// recorded starts /bin/sh -c script under the pid record r, as a home's
// app-server would be.
func recorded(t *testing.T, r *PidRecord, script string, wrapper ...string) *Process {
	t.Helper()
	p, err := Start(Config{
		Binary:    "/bin/sh",
		Args:      []string{"-c", script},
		Wrapper:   wrapper,
		Home:      t.TempDir(),
		Logger:    testLogger(t),
		StopGrace: 200 * time.Millisecond,
		ExitDrain: 200 * time.Millisecond,
		Record:    r,
	})
	if err != nil {
		t.Fatal(err)
	}
	stopOnCleanup(t, p)
	return p
}

func stopNow(t *testing.T, p *Process) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if err := p.Stop(ctx); err != nil {
		t.Fatalf("stop: %v", err)
	}
}

func readRecord(t *testing.T, path string) store.ProcRecord {
	t.Helper()
	rec, err := store.ReadProcRecord(path)
	if err != nil {
		t.Fatal(err)
	}
	return rec
}

func recordGone(t *testing.T, path string) {
	t.Helper()
	if _, err := store.ReadProcRecord(path); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("record %s after the exit: %v, want it gone", path, err)
	}
}

// Start writes the record once the process runs: its pid, its start time
// and its program, v1 outside a cluster; its exit removes it.
func TestPidRecordWrittenAtStartRemovedAtExit(t *testing.T) {
	r := &PidRecord{Path: filepath.Join(t.TempDir(), "appserver.pid")}
	p := recorded(t, r, "exec sleep 300")
	rec := readRecord(t, r.Path)
	st, err := procs.StartTime(p.PID())
	if err != nil {
		t.Fatal(err)
	}
	if want := (store.ProcRecord{PID: p.PID(), StartTime: st, Exe: "/bin/sh"}); rec != want {
		t.Fatalf("record = %+v, want %+v", rec, want)
	}
	if data, err := os.ReadFile(r.Path); err != nil || !strings.HasPrefix(string(data), "meshweaver-proc v1\n") {
		t.Errorf("record = %q, %v; want v1", data, err)
	}
	stopNow(t, p)
	recordGone(t, r.Path)
}

// A process that dies on its own removes its record too, before Exited
// is closed.
func TestPidRecordRemovedAtDeath(t *testing.T) {
	r := &PidRecord{Path: filepath.Join(t.TempDir(), "appserver.pid")}
	p := recorded(t, r, "exec sleep 300")
	readRecord(t, r.Path)
	if err := syscall.Kill(p.PID(), syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	select {
	case <-p.Exited():
	case <-time.After(10 * time.Second):
		t.Fatal("the process did not exit")
	}
	recordGone(t, r.Path)
}

// A member's record names the member and this kernel's boot (v2); with a
// wrapper it names the wrapper's program, whose pid it is.
func TestPidRecordMemberAndWrapper(t *testing.T) {
	r := &PidRecord{Path: filepath.Join(t.TempDir(), "appserver.pid"), Member: "m1"}
	// env stands for bubblewrap: the pid is the wrapper's.
	p := recorded(t, r, "exec sleep 300", "/usr/bin/env", "--")
	rec := readRecord(t, r.Path)
	boot, err := procs.BootID()
	if err != nil {
		t.Fatal(err)
	}
	if rec.PID != p.PID() || rec.Member != "m1" || rec.Boot != boot || rec.Exe != "/usr/bin/env" {
		t.Fatalf("record = %+v, want pid %d, member m1, boot %s, exe /usr/bin/env", rec, p.PID(), boot)
	}
	stopNow(t, p)
	recordGone(t, r.Path)
}

// An older process's exit leaves alone the record a newer process of the
// same home wrote meanwhile; the newer one's exit removes it.
func TestPidRecordNewerGenerationKept(t *testing.T) {
	r := &PidRecord{Path: filepath.Join(t.TempDir(), "appserver.pid")}
	older := recorded(t, r, "exec sleep 300")
	newer := recorded(t, r, "exec sleep 300")
	want := readRecord(t, r.Path)
	if want.PID != newer.PID() {
		t.Fatalf("record names %d, want the newer process %d", want.PID, newer.PID())
	}
	stopNow(t, older)
	if got := readRecord(t, r.Path); got != want {
		t.Fatalf("after the older process's exit the record is %+v, want the newer one's %+v", got, want)
	}
	stopNow(t, newer)
	recordGone(t, r.Path)
}

// A record that names the same pid with another start time is another
// process's: the exit leaves it alone.
func TestPidRecordOfAnotherStartKept(t *testing.T) {
	r := &PidRecord{Path: filepath.Join(t.TempDir(), "appserver.pid")}
	p := recorded(t, r, "exec sleep 300")
	other := readRecord(t, r.Path)
	other.StartTime++
	if err := store.WriteProcRecord(r.Path, other); err != nil {
		t.Fatal(err)
	}
	stopNow(t, p)
	if got := readRecord(t, r.Path); got != other {
		t.Fatalf("record = %+v, want %+v left alone", got, other)
	}
}
