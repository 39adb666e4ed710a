package store

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
)

func TestParseProcStat(t *testing.T) {
	tail := " 1 4242 4242 0 -1 4194560 100 0 0 0 1 2 0 0 20 0 1 0 987654 1000000 200 18446744073709551615 1 1 0 0 0 0 0 0 0 0 0 0 17 1 0 0 0 0 0\n"
	tests := []struct {
		name    string
		line    string
		want    procStat
		wantErr bool
	}{
		{name: "plain", line: "4242 (sleep) S" + tail, want: procStat{'S', 4242, 987654}},
		{name: "spaces", line: "4242 (my prog x) R" + tail, want: procStat{'R', 4242, 987654}},
		{name: "parens", line: "4242 (a) S 1 2 (b)) Z" + tail, want: procStat{'Z', 4242, 987654}},
		{name: "newline in comm", line: "4242 (a\nb) D" + tail, want: procStat{'D', 4242, 987654}},
		{name: "empty comm", line: "4242 () S" + tail, want: procStat{'S', 4242, 987654}},
		{name: "empty", line: "", wantErr: true},
		{name: "no parens", line: "4242 sleep S" + tail, wantErr: true},
		{name: "only open", line: "4242 (sleep S" + tail, wantErr: true},
		{name: "short", line: "4242 (sleep) S 1 4242 4242\n", wantErr: true},
		{name: "bad start", line: "4242 (sleep) S" + strings.Replace(tail, "987654", "-1", 1), wantErr: true},
		{name: "bad state", line: "4242 (sleep) SS" + tail, wantErr: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := parseProcStat([]byte(tt.line))
			if (err != nil) != tt.wantErr || got != tt.want {
				t.Errorf("parseProcStat = %+v, %v; want %+v, error %v", got, err, tt.want, tt.wantErr)
			}
		})
	}
}

func TestProcStartTime(t *testing.T) {
	st, err := ProcStartTime(os.Getpid())
	if err != nil || st == 0 {
		t.Fatalf("ProcStartTime(self) = %d, %v", st, err)
	}
	if again, _ := ProcStartTime(os.Getpid()); again != st {
		t.Errorf("start time changed: %d then %d", st, again)
	}
	for _, pid := range []int{0, -1, 1 << 30} {
		if _, err := ProcStartTime(pid); !errors.Is(err, fs.ErrNotExist) {
			t.Errorf("ProcStartTime(%d) = %v, want fs.ErrNotExist", pid, err)
		}
	}
	self := ProcRecord{PID: os.Getpid(), StartTime: st}
	if !IsSameProcess(self) {
		t.Error("IsSameProcess(self) = false")
	}
	for _, rec := range []ProcRecord{
		{PID: self.PID, StartTime: st + 1},
		{PID: self.PID},
		{PID: 1, StartTime: st},
		{PID: 1 << 30, StartTime: st},
	} {
		if IsSameProcess(rec) {
			t.Errorf("IsSameProcess(%+v) = true", rec)
		}
	}
}

func TestProcRecordRoundTrip(t *testing.T) {
	path := filepath.Join(t.TempDir(), "run", "codex.proc")
	rec := ProcRecord{PID: 4242, StartTime: 987654, Exe: "/opt/codex cli/bin/codex"}
	if err := WriteProcRecord(path, rec); err != nil {
		t.Fatal(err)
	}
	got, err := ReadProcRecord(path)
	if err != nil || got != rec {
		t.Fatalf("ReadProcRecord = %+v, %v; want %+v", got, err, rec)
	}
	data, _ := os.ReadFile(path)
	if want := "meshweaver-proc v1\npid 4242\nstart 987654\nexe /opt/codex cli/bin/codex\n"; string(data) != want {
		t.Errorf("file = %q, want %q", data, want)
	}
	assertMode(t, path, 0o600)
	assertNoTemp(t, filepath.Dir(path))

	if _, err := ReadProcRecord(filepath.Join(t.TempDir(), "missing")); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("ReadProcRecord(missing) = %v, want fs.ErrNotExist", err)
	}
	for _, bad := range []ProcRecord{
		{PID: 0, StartTime: 1},
		{PID: 1, StartTime: 1},
		{PID: -5, StartTime: 1},
		{PID: 5, StartTime: 0},
		{PID: 5, StartTime: 1, Exe: "a\nb"},
		{PID: 5, StartTime: 1, Exe: "a\x00b"},
		{PID: 5, StartTime: 1, Exe: strings.Repeat("x", maxExeLen+1)},
	} {
		if err := WriteProcRecord(path, bad); err == nil {
			t.Errorf("WriteProcRecord(%+v) succeeded", bad)
		}
	}
}

func TestProcRecordCorrupt(t *testing.T) {
	valid := "meshweaver-proc v1\npid 4242\nstart 987654\nexe /bin/codex\n"
	tests := []struct{ name, content string }{
		{"empty", ""},
		{"truncated", valid[:len(valid)-1]},
		{"truncated half", valid[:len(valid)/2]},
		{"garbage", "\xff\x00garbage"},
		{"bare pid", "4242\n"},
		{"pid 0", strings.Replace(valid, "pid 4242", "pid 0", 1)},
		{"pid 1", strings.Replace(valid, "pid 4242", "pid 1", 1)},
		{"negative pid", strings.Replace(valid, "pid 4242", "pid -4242", 1)},
		{"plus pid", strings.Replace(valid, "pid 4242", "pid +4242", 1)},
		{"padded pid", strings.Replace(valid, "pid 4242", "pid 04242", 1)},
		{"spaced pid", strings.Replace(valid, "pid 4242", "pid  4242", 1)},
		{"start 0", strings.Replace(valid, "start 987654", "start 0", 1)},
		{"huge start", strings.Replace(valid, "start 987654", "start 99999999999999999999999", 1)},
		{"no exe line", "meshweaver-proc v1\npid 4242\nstart 987654\n"},
		{"trailing", valid + "x\n"},
		{"future version", strings.Replace(valid, "v1", "v2", 1)},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "codex.proc")
			writeRaw(t, path, []byte(tt.content))
			_, err := ReadProcRecord(path)
			if !errors.Is(err, ErrCorrupt) || !strings.Contains(err.Error(), path) {
				t.Errorf("ReadProcRecord = %v, want ErrCorrupt naming the path", err)
			}
		})
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
func recordOrphan(t *testing.T, cmd *exec.Cmd) (ProcRecord, string) {
	t.Helper()
	t.Cleanup(func() {
		cmd.Process.Kill()
		cmd.Wait()
	})
	start, err := ProcStartTime(cmd.Process.Pid)
	if err != nil {
		t.Fatal(err)
	}
	rec := ProcRecord{PID: cmd.Process.Pid, StartTime: start, Exe: cmd.Path}
	path := filepath.Join(t.TempDir(), "codex.proc")
	if err := WriteProcRecord(path, rec); err != nil {
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

func TestReapProcRecordTerm(t *testing.T) {
	cmd := orphanCommand("sleep", "30")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	rec, path := recordOrphan(t, cmd)
	reaped, err := ReapProcRecord(path, 30*time.Second)
	if !reaped || err != nil {
		t.Fatalf("ReapProcRecord = %v, %v; want true, nil", reaped, err)
	}
	if IsSameProcess(rec) {
		t.Error("process still running after reap")
	}
	waitSignal(t, cmd, syscall.SIGTERM)
	assertGone(t, path)
}

func TestReapProcRecordKill(t *testing.T) {
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
	reaped, err := ReapProcRecord(path, 50*time.Millisecond)
	if !reaped || err != nil {
		t.Fatalf("ReapProcRecord = %v, %v; want true, nil", reaped, err)
	}
	waitSignal(t, cmd, syscall.SIGKILL)
	assertGone(t, path)
}

func TestReapProcRecordWrongStartTime(t *testing.T) {
	cmd := orphanCommand("sleep", "30")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	rec, path := recordOrphan(t, cmd)
	wrong := rec
	wrong.StartTime++
	if err := WriteProcRecord(path, wrong); err != nil {
		t.Fatal(err)
	}
	reaped, err := ReapProcRecord(path, 30*time.Second)
	if reaped || err != nil {
		t.Fatalf("ReapProcRecord = %v, %v; want false, nil", reaped, err)
	}
	assertGone(t, path)
	if !IsSameProcess(rec) {
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

func TestReapProcRecordNothingToDo(t *testing.T) {
	dir := t.TempDir()
	t.Run("missing record", func(t *testing.T) {
		reaped, err := ReapProcRecord(filepath.Join(dir, "none"), time.Second)
		if reaped || err != nil {
			t.Errorf("ReapProcRecord = %v, %v; want false, nil", reaped, err)
		}
	})
	t.Run("process gone", func(t *testing.T) {
		cmd := exec.Command("true")
		if err := cmd.Run(); err != nil {
			t.Fatal(err)
		}
		// The PID is free now (or reused, with another start time).
		path := filepath.Join(dir, "gone.proc")
		if err := WriteProcRecord(path, ProcRecord{PID: cmd.Process.Pid, StartTime: 1, Exe: "true"}); err != nil {
			t.Fatal(err)
		}
		reaped, err := ReapProcRecord(path, time.Second)
		if reaped || err != nil {
			t.Errorf("ReapProcRecord = %v, %v; want false, nil", reaped, err)
		}
		assertGone(t, path)
	})
	t.Run("corrupt record", func(t *testing.T) {
		path := filepath.Join(dir, "bad.proc")
		writeRaw(t, path, []byte("meshweaver-proc v1\npid 1\nstart 1\nexe x\n"))
		reaped, err := ReapProcRecord(path, time.Second)
		if reaped || !errors.Is(err, ErrCorrupt) {
			t.Errorf("ReapProcRecord = %v, %v; want false, ErrCorrupt", reaped, err)
		}
		assertGone(t, path)
	})
	t.Run("refuses self", func(t *testing.T) {
		start, err := ProcStartTime(os.Getpid())
		if err != nil {
			t.Fatal(err)
		}
		path := filepath.Join(dir, "self.proc")
		if err := WriteProcRecord(path, ProcRecord{PID: os.Getpid(), StartTime: start, Exe: os.Args[0]}); err != nil {
			t.Fatal(err)
		}
		reaped, err := ReapProcRecord(path, time.Second)
		if reaped || err == nil || !strings.Contains(err.Error(), strconv.Itoa(os.Getpid())) {
			t.Errorf("ReapProcRecord(self) = %v, %v; want a refusal", reaped, err)
		}
		if _, err := os.Stat(path); err != nil {
			t.Errorf("record removed after a refusal: %v", err)
		}
	})
}
