package store

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

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
		{"future version", strings.Replace(valid, "v1", "v3", 1)},
		{"v2 without member", "meshweaver-proc v2\npid 4242\nstart 987654\nboot b\nexe /bin/codex\n"},
		{"v2 member with a space", "meshweaver-proc v2\npid 4242\nstart 987654\nmember a b\nboot b\nexe /bin/codex\n"},
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

// TestProcRecordV2 round-trips the member and the boot id, and keeps v1
// for a record without them.
func TestProcRecordV2(t *testing.T) {
	path := filepath.Join(t.TempDir(), "appserver.pid")
	rec := ProcRecord{PID: 4242, StartTime: 987654, Exe: "/bin/codex", Member: "node-2", Boot: "0f6c6a3e-5d3c-4c1e-9d61-2b2f0f3f9a10"}
	if err := WriteProcRecord(path, rec); err != nil {
		t.Fatal(err)
	}
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if want := "meshweaver-proc v2\npid 4242\nstart 987654\nmember node-2\nboot 0f6c6a3e-5d3c-4c1e-9d61-2b2f0f3f9a10\nexe /bin/codex\n"; string(data) != want {
		t.Fatalf("file = %q, want %q", data, want)
	}
	got, err := ReadProcRecord(path)
	if err != nil || got != rec {
		t.Fatalf("read back %+v, %v; want %+v", got, err, rec)
	}
	if err := WriteProcRecord(path, ProcRecord{PID: 7, StartTime: 1, Member: "a\nb"}); err == nil {
		t.Fatal("a member with a newline was written")
	}
}
