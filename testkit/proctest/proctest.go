// Package proctest reads /proc for tests that must check which processes
// run: the codex app-servers a test started (found by executable and by the
// CODEX_HOME in their environment), what they started in turn, and whether
// a process or process group is gone.
//
// Most of these processes are not the test's children, so there is no
// event that says they ended: the helpers poll /proc, with a deadline.
// Linux only.
package proctest

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/meshweaver/supervisor/procs"
)

// HomeVar is the environment variable that names a codex process's home.
const HomeVar = "CODEX_HOME"

// Proc is what /proc/PID/stat says of a process. The other files (exe,
// environ, cmdline) are read on demand by its methods.
type Proc struct {
	PID, PPID, PGID int
	State           byte   // R, S, D, T, Z (zombie), X (dead), ...
	Start           uint64 // field 22: start time, clock ticks after boot
	Comm            string // the command name, as in stat
}

// Read parses /proc/PID/stat. It reports false when the process is gone
// or the file does not parse.
func Read(pid int) (Proc, bool) {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return Proc{}, false
	}
	return parseStat(pid, b)
}

// parseStat parses a stat line: pid (comm) state ppid pgrp ... Comm may
// hold spaces and parentheses, so fields are counted after the last ')'.
func parseStat(pid int, b []byte) (Proc, bool) {
	open, i := bytes.IndexByte(b, '('), bytes.LastIndexByte(b, ')')
	if open < 0 || i < open {
		return Proc{}, false
	}
	f := strings.Fields(string(b[i+1:]))
	if len(f) < 3 || len(f[0]) != 1 {
		return Proc{}, false
	}
	p := Proc{PID: pid, State: f[0][0], Comm: string(b[open+1 : i])}
	p.PPID, _ = strconv.Atoi(f[1])
	p.PGID, _ = strconv.Atoi(f[2])
	if len(f) >= 20 {
		p.Start, _ = strconv.ParseUint(f[19], 10, 64)
	}
	return p, true
}

// Live reports that p was neither a zombie nor dead when it was read.
func (p Proc) Live() bool { return p.State != 'Z' && p.State != 'X' }

// Running reports that p still runs: the same pid with the same start time
// (not a reused pid), and not a zombie.
func (p Proc) Running() bool {
	q, ok := Read(p.PID)
	return ok && q.Live() && q.Start == p.Start
}

// Alive reports that process pid exists and is not a zombie.
func Alive(pid int) bool {
	p, ok := Read(pid)
	return ok && p.Live()
}

func (p Proc) path(name string) string {
	return filepath.Join("/proc", strconv.Itoa(p.PID), name)
}

// Exe is the path of p's executable, without the " (deleted)" the kernel
// appends once the file is replaced; "" when it cannot be read (gone, or
// another user's).
func (p Proc) Exe() string {
	exe, err := os.Readlink(p.path("exe"))
	if err != nil {
		return ""
	}
	return strings.TrimSuffix(exe, " (deleted)")
}

// Environ is p's environment as it was started, one KEY=value a string;
// nil when it cannot be read.
func (p Proc) Environ() []string {
	raw, err := os.ReadFile(p.path("environ"))
	if err != nil {
		return nil
	}
	var env []string
	for _, kv := range bytes.Split(raw, []byte{0}) {
		if len(kv) > 0 {
			env = append(env, string(kv))
		}
	}
	return env
}

// Getenv is the value of key in p's environment (the last one, should it
// be there twice), and whether it is there.
func (p Proc) Getenv(key string) (string, bool) {
	val, found := "", false
	for _, kv := range p.Environ() {
		if v, ok := strings.CutPrefix(kv, key+"="); ok {
			val, found = v, true
		}
	}
	return val, found
}

// Home is p's CODEX_HOME, "" when it has none.
func (p Proc) Home() string {
	home, _ := p.Getenv(HomeVar)
	return home
}

// Cmdline is p's command line, the arguments separated by spaces.
func (p Proc) Cmdline() string {
	cmd, err := os.ReadFile(p.path("cmdline"))
	if err != nil {
		return ""
	}
	return strings.TrimSpace(string(bytes.ReplaceAll(cmd, []byte{0}, []byte{' '})))
}

// String names p by what stat said; it reads nothing.
func (p Proc) String() string {
	return fmt.Sprintf("pid %d (%s) state %c ppid %d pgrp %d", p.PID, p.Comm, p.State, p.PPID, p.PGID)
}

// Describe names process pid for an error message: pid, command name,
// state, parent, group and command line, as they are now.
func Describe(pid int) string {
	p, ok := Read(pid)
	if !ok {
		return fmt.Sprintf("pid %d (gone)", pid)
	}
	return fmt.Sprintf("%s cmd %q", p, p.Cmdline())
}

// describeAll is Describe of each of ps, joined.
func describeAll(ps []Proc) string {
	var desc []string
	for _, p := range ps {
		desc = append(desc, Describe(p.PID))
	}
	return strings.Join(desc, "; ")
}

// List lists the live (neither zombie nor dead) processes for which every
// match holds. The matches run in order and stop at the first that fails,
// so put the cheap and selective ones first.
func List(match ...func(Proc) bool) []Proc {
	return ListAll(append([]func(Proc) bool{Proc.Live}, match...)...)
}

// ListAll is List with the zombies and dead processes kept.
func ListAll(match ...func(Proc) bool) []Proc {
	ents, err := os.ReadDir("/proc")
	if err != nil {
		return nil
	}
	var out []Proc
next:
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		p, ok := Read(pid)
		if !ok {
			continue
		}
		for _, m := range match {
			if !m(p) {
				continue next
			}
		}
		out = append(out, p)
	}
	return out
}

// UnderHome matches the processes whose CODEX_HOME is dir or below it.
func UnderHome(dir string) func(Proc) bool {
	dir = filepath.Clean(dir)
	return func(p Proc) bool {
		home, ok := p.Getenv(HomeVar)
		return ok && (home == dir || strings.HasPrefix(home, dir+string(filepath.Separator)))
	}
}

// ExeIs matches the processes whose executable is bin (see Proc.Exe).
func ExeIs(bin string) func(Proc) bool {
	return func(p Proc) bool { return p.Exe() == bin }
}

// NotPID matches every process but the ones listed.
func NotPID(pids ...int) func(Proc) bool {
	return func(p Proc) bool {
		for _, pid := range pids {
			if p.PID == pid {
				return false
			}
		}
		return true
	}
}

// NotSelf matches every process but the test's own.
func NotSelf(p Proc) bool { return p.PID != os.Getpid() }

// GroupMembers lists the live processes of process group pgid.
func GroupMembers(pgid int) []Proc {
	return List(func(p Proc) bool { return p.PGID == pgid })
}

// GroupGone reports that no live process is left in process group pgid:
// kill(-pgid, 0) fails with ESRCH, or only zombies (already dead, not yet
// reaped) are left.
func GroupGone(pgid int) bool {
	return errors.Is(syscall.Kill(-pgid, 0), syscall.ESRCH) || len(GroupMembers(pgid)) == 0
}

// Poll checks cond every interval until it holds or within has passed, and
// reports whether it held. cond runs at least once, and once more after
// the deadline, so a zero within checks it just once.
func Poll(within, interval time.Duration, cond func() bool) bool {
	return procs.Poll(within, interval, cond)
}

// WaitGone polls /proc every interval until no live process matches, for
// at most within. If some are left then, it fails tb with Errorf, naming
// them, SIGKILLs each, and returns them; else it returns nil. A zero
// within checks once, without waiting.
func WaitGone(tb testing.TB, within, interval time.Duration, match ...func(Proc) bool) []Proc {
	tb.Helper()
	var left []Proc
	if Poll(within, interval, func() bool { left = List(match...); return len(left) == 0 }) {
		return nil
	}
	if within > 0 {
		tb.Errorf("processes left behind after %v: %s", within, describeAll(left))
	} else {
		tb.Errorf("processes left behind: %s", describeAll(left))
	}
	for _, p := range left {
		_ = syscall.Kill(p.PID, syscall.SIGKILL)
	}
	return left
}

// WaitGroupGone polls every interval until process group pgid is gone (see
// GroupGone), for at most within. If it is not by then, it fails tb with
// Errorf, naming the live members, and SIGKILLs the group.
func WaitGroupGone(tb testing.TB, pgid int, within, interval time.Duration) {
	tb.Helper()
	if Poll(within, interval, func() bool { return GroupGone(pgid) }) {
		return
	}
	err := syscall.Kill(-pgid, 0)
	tb.Errorf("process group %d still has live members: %s (kill -0: %v)", pgid, describeAll(GroupMembers(pgid)), err)
	_ = syscall.Kill(-pgid, syscall.SIGKILL)
}
