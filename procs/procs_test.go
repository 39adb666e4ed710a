package procs

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
)

// statTail is /proc/PID/stat after the state field, with ppid 1, pgrp 4242
// and start time 987654.
const statTail = " 1 4242 4242 0 -1 4194560 100 0 0 0 1 2 0 0 20 0 1 0 987654 1000000 200 18446744073709551615 1 1 0 0 0 0 0 0 0 0 0 0 17 1 0 0 0 0 0\n"

// fakeProc is one process of a fake proc tree.
type fakeProc struct {
	stat    string // the whole stat line
	uid     int
	environ []string
}

// fakeFS builds a proc tree in a test folder and opens it.
func fakeFS(t *testing.T, procs map[int]fakeProc) FS {
	t.Helper()
	root := t.TempDir()
	for pid, p := range procs {
		dir := filepath.Join(root, strconv.Itoa(pid))
		if err := os.Mkdir(dir, 0o755); err != nil {
			t.Fatal(err)
		}
		u := strconv.Itoa(p.uid)
		env := ""
		for _, kv := range p.environ {
			env += kv + "\x00"
		}
		for name, data := range map[string]string{
			"stat":    p.stat,
			"status":  "Name:\tx\nState:\tS (sleeping)\nUid:\t" + u + "\t" + u + "\t" + u + "\t" + u + "\n",
			"environ": env,
		} {
			if err := os.WriteFile(filepath.Join(dir, name), []byte(data), 0o644); err != nil {
				t.Fatal(err)
			}
		}
	}
	f, err := NewFS(root)
	if err != nil {
		t.Fatal(err)
	}
	return f
}

// statLine is a stat line for pid with its parent and start time.
func statLine(pid, ppid int, start uint64) string {
	return strconv.Itoa(pid) + " (sh) S " + strconv.Itoa(ppid) + " " + strconv.Itoa(pid) +
		" 0 0 -1 4194560 100 0 0 0 1 2 0 0 20 0 1 0 " + strconv.FormatUint(start, 10) +
		" 1000000 200 18446744073709551615 1 1 0 0 0 0 0 0 0 0 0 0 17 1 0 0 0 0 0\n"
}

func TestStat(t *testing.T) {
	tail := statTail
	tests := []struct {
		name    string
		line    string
		want    Stat
		wantErr bool
	}{
		{name: "plain", line: "4242 (sleep) S" + tail, want: Stat{'S', 1, 4242, 987654}},
		{name: "spaces", line: "4242 (my prog x) R" + tail, want: Stat{'R', 1, 4242, 987654}},
		{name: "parens", line: "4242 (a) S 1 2 (b)) Z" + tail, want: Stat{'Z', 1, 4242, 987654}},
		{name: "newline in comm", line: "4242 (a\nb) D" + tail, want: Stat{'D', 1, 4242, 987654}},
		{name: "empty comm", line: "4242 () S" + tail, want: Stat{'S', 1, 4242, 987654}},
		{name: "empty", line: "", wantErr: true},
		{name: "no parens", line: "4242 sleep S" + tail, wantErr: true},
		{name: "only open", line: "4242 (sleep S" + tail, wantErr: true},
		{name: "short", line: "4242 (sleep) S 1 4242 4242\n", wantErr: true},
		{name: "bad start", line: "4242 (sleep) S" + strings.Replace(tail, "987654", "-1", 1), wantErr: true},
		{name: "bad state", line: "4242 (sleep) SS" + tail, wantErr: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := fakeFS(t, map[int]fakeProc{4242: {stat: tt.line}})
			got, err := f.Stat(4242)
			if (err != nil) != tt.wantErr || got != tt.want {
				t.Errorf("Stat = %+v, %v; want %+v, error %v", got, err, tt.want, tt.wantErr)
			}
		})
	}
}

func TestIsSameFake(t *testing.T) {
	f := fakeFS(t, map[int]fakeProc{
		4242: {stat: "4242 (sleep) S" + statTail},
		4343: {stat: "4343 (dead) Z" + statTail},
	})
	if _, err := f.Stat(99); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("Stat(99) = %v, want fs.ErrNotExist", err)
	}
	tests := []struct {
		id   ID
		want bool
	}{
		{ID{4242, 987654}, true},
		{ID{4242, 987655}, false}, // pid reused
		{ID{4242, 0}, false},
		{ID{4343, 987654}, false}, // a zombie has exited
		{ID{99, 987654}, false},
		{ID{1, 987654}, false},
	}
	for _, tt := range tests {
		if got := f.IsSame(tt.id); got != tt.want {
			t.Errorf("IsSame(%+v) = %v, want %v", tt.id, got, tt.want)
		}
	}
}

func TestDescendantsFake(t *testing.T) {
	// 10 ─┬─ 11 ── 13
	//     └─ 12        14 (child of 1: not ours)
	f := fakeFS(t, map[int]fakeProc{
		1:  {stat: statLine(1, 0, 1)},
		10: {stat: statLine(10, 1, 100)},
		11: {stat: statLine(11, 10, 110)},
		12: {stat: statLine(12, 10, 120)},
		13: {stat: statLine(13, 11, 130)},
		14: {stat: statLine(14, 1, 140)},
		15: {stat: "garbage"}, // unreadable: skipped
	})
	got := f.Descendants(10)
	want := []ID{{11, 110}, {12, 120}, {13, 130}}
	if !slices.Equal(got, want) {
		t.Errorf("Descendants(10) = %v, want %v", got, want)
	}
	if got := f.Descendants(13); len(got) != 0 {
		t.Errorf("Descendants(13) = %v, want none", got)
	}
}

func TestScanFake(t *testing.T) {
	f := fakeFS(t, map[int]fakeProc{
		20: {stat: statLine(20, 1, 200), uid: 1000, environ: []string{"PATH=/bin", "CODEX_HOME=/homes/a/.codex"}},
		21: {stat: statLine(21, 1, 210), uid: 1001, environ: []string{"CODEX_HOME=/homes/b/.codex"}},
		22: {stat: statLine(22, 5, 220), uid: 1000, environ: []string{"CODEX_HOME=/homes/a/.codex"}},
		23: {stat: statLine(23, 1, 230), uid: 1000, environ: []string{"CODEX_HOME_X=/homes/a/.codex"}},
		24: {stat: statLine(24, 1, 240), uid: 1000},
	})
	tests := []struct {
		name  string
		match func(Proc) bool
		want  []ID
	}{
		{"all", func(Proc) bool { return true }, []ID{{20, 200}, {21, 210}, {22, 220}, {23, 230}, {24, 240}}},
		{"orphans", func(p Proc) bool { return p.PPID == 1 }, []ID{{20, 200}, {21, 210}, {23, 230}, {24, 240}}},
		{"since", func(p Proc) bool { return p.Start >= 215 }, []ID{{22, 220}, {23, 230}, {24, 240}}},
		{"uid", func(p Proc) bool { u, err := p.UID(); return err == nil && u == 1001 }, []ID{{21, 210}}},
		{"env", func(p Proc) bool { h, ok := p.Getenv("CODEX_HOME"); return ok && h == "/homes/a/.codex" }, []ID{{20, 200}, {22, 220}}},
		{"none", func(Proc) bool { return false }, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := f.Scan(tt.match); !slices.Equal(got, tt.want) {
				t.Errorf("Scan = %v, want %v", got, tt.want)
			}
		})
	}
}

func TestNewFSMissing(t *testing.T) {
	if _, err := NewFS(filepath.Join(t.TempDir(), "none")); err == nil {
		t.Error("NewFS(missing) succeeded")
	}
}

func TestStartTime(t *testing.T) {
	st, err := StartTime(os.Getpid())
	if err != nil || st == 0 {
		t.Fatalf("StartTime(self) = %d, %v", st, err)
	}
	if again, _ := StartTime(os.Getpid()); again != st {
		t.Errorf("start time changed: %d then %d", st, again)
	}
	for _, pid := range []int{0, -1, 1 << 30} {
		if _, err := StartTime(pid); !errors.Is(err, fs.ErrNotExist) {
			t.Errorf("StartTime(%d) = %v, want fs.ErrNotExist", pid, err)
		}
	}
	self := ID{PID: os.Getpid(), Start: st}
	if !IsSame(self) {
		t.Error("IsSame(self) = false")
	}
	for _, id := range []ID{
		{PID: self.PID, Start: st + 1},
		{PID: self.PID},
		{PID: 1, Start: st},
		{PID: 1 << 30, Start: st},
	} {
		if IsSame(id) {
			t.Errorf("IsSame(%+v) = true", id)
		}
	}
}

// FuzzStat checks that reading a damaged /proc/PID/stat never panics.
func FuzzStat(f *testing.F) {
	f.Add([]byte("4242 (a) b)) S 1 4242 4242 0 -1 4194560 100 0 0 0 1 2 0 0 20 0 1 0 987654 1000000\n"))
	f.Add([]byte("4242 (sleep) S" + statTail))
	f.Add([]byte("1 ("))
	f.Add([]byte(")("))
	f.Add([]byte("1 (a)"))
	f.Fuzz(func(t *testing.T, data []byte) {
		fs := fakeFS(t, map[int]fakeProc{7: {stat: string(data)}})
		_, _ = fs.Stat(7)
	})
}

// groupStat is a stat line for pid in process group pgrp, in state state.
func groupStat(pid, pgrp int, state byte, start uint64) string {
	return strconv.Itoa(pid) + " (sh) " + string(state) + " 1 " + strconv.Itoa(pgrp) +
		" 0 0 -1 4194560 100 0 0 0 1 2 0 0 20 0 1 0 " + strconv.FormatUint(start, 10) +
		" 1000000 200 18446744073709551615 1 1 0 0 0 0 0 0 0 0 0 0 17 1 0 0 0 0 0\n"
}

func TestGroupsFake(t *testing.T) {
	f := fakeFS(t, map[int]fakeProc{
		30: {stat: groupStat(30, 30, 'S', 300)}, // a leader and its members
		31: {stat: groupStat(31, 30, 'S', 310)},
		32: {stat: groupStat(32, 30, 'Z', 320)}, // a zombie member: not live
		41: {stat: groupStat(41, 40, 'R', 410)}, // leader 40 gone, a member left
		50: {stat: groupStat(50, 50, 'Z', 500)}, // a zombie leader, alone
		51: {stat: groupStat(51, 50, 'S', 510)}, // … and another group's zombie leader with a member
		60: {stat: groupStat(60, 60, 'S', 600)}, // not asked for
		61: {stat: "garbage"},
	})
	got := f.Groups(30, 40, 50, 70)
	want := map[int][]ID{30: {{30, 300}, {31, 310}}, 40: {{41, 410}}, 50: {{51, 510}}}
	if len(got) != len(want) {
		t.Fatalf("Groups = %v, want %v", got, want)
	}
	for g, ids := range want {
		if !slices.Equal(got[g], ids) {
			t.Errorf("Groups[%d] = %v, want %v", g, got[g], ids)
		}
	}
	if got := f.Groups(); len(got) != 0 {
		t.Errorf("Groups() = %v, want none", got)
	}
}
