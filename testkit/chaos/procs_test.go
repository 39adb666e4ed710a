package chaos

import (
	"bytes"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// proc is what the suite reads of a process from /proc.
type proc struct {
	pid, ppid, pgid int
	state           byte
	start           uint64 // field 22: clock ticks after boot
	home            string // its CODEX_HOME, if any
	exe             string
	cmd             string // the command line, NULs as spaces
}

// readStat parses /proc/PID/stat; comm may hold spaces and parentheses,
// so fields are counted after the last ')'.
func readStat(pid int) (proc, bool) {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return proc{}, false
	}
	i := bytes.LastIndexByte(b, ')')
	if i < 0 {
		return proc{}, false
	}
	f := strings.Fields(string(b[i+1:]))
	if len(f) < 20 || len(f[0]) != 1 {
		return proc{}, false
	}
	p := proc{pid: pid, state: f[0][0]}
	p.ppid, _ = strconv.Atoi(f[1])
	p.pgid, _ = strconv.Atoi(f[2])
	p.start, _ = strconv.ParseUint(f[19], 10, 64)
	return p, true
}

func (p proc) alive() bool { return p.state != 'Z' && p.state != 'X' }

// details fills home, exe and cmd.
func (p *proc) details() {
	dir := "/proc/" + strconv.Itoa(p.pid)
	if exe, err := os.Readlink(dir + "/exe"); err == nil {
		p.exe = strings.TrimSuffix(exe, " (deleted)")
	}
	if env, err := os.ReadFile(dir + "/environ"); err == nil {
		for _, kv := range bytes.Split(env, []byte{0}) {
			if v, ok := bytes.CutPrefix(kv, []byte("CODEX_HOME=")); ok {
				p.home = string(v)
			}
		}
	}
	if cmd, err := os.ReadFile(dir + "/cmdline"); err == nil {
		p.cmd = strings.TrimSpace(string(bytes.ReplaceAll(cmd, []byte{0}, []byte{' '})))
	}
}

// allProcs lists the live processes.
func allProcs() []proc {
	ents, err := os.ReadDir("/proc")
	if err != nil {
		return nil
	}
	var out []proc
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		if p, ok := readStat(pid); ok && p.alive() {
			out = append(out, p)
		}
	}
	return out
}

// appServers lists the live app-servers of the daemon daemonPID: its
// children whose executable is codexBin, or bubblewrap when the daemon
// isolates users (the CLI then runs in the sandbox bubblewrap made, and
// dies with it).
func appServers(daemonPID int, codexBin string) []proc {
	var out []proc
	for _, p := range allProcs() {
		if p.ppid != daemonPID {
			continue
		}
		p.details()
		if p.exe == codexBin || filepath.Base(p.exe) == "bwrap" {
			out = append(out, p)
		}
	}
	return out
}

// userOfHome maps a CODEX_HOME under homes (homes/<user>/.codex) to the user.
func userOfHome(homes, home string) string {
	rel, err := filepath.Rel(homes, home)
	if err != nil || strings.HasPrefix(rel, "..") {
		return ""
	}
	user, rest, _ := strings.Cut(rel, string(filepath.Separator))
	if rest != ".codex" {
		return ""
	}
	return user
}

// runProcs lists the live processes that belong to the run: any process
// whose CODEX_HOME is under root (app-servers and what they started:
// shell snapshots, sandboxed commands), any process of the codex binary
// whose command line names root, and any whose command line holds the
// run's marker (the commands the mock model asks for). The daemon and the
// test process are not included.
func runProcs(root, codexBin, marker string, exclude ...int) []proc {
	skip := map[int]bool{os.Getpid(): true}
	for _, pid := range exclude {
		skip[pid] = true
	}
	var out []proc
	for _, p := range allProcs() {
		if skip[p.pid] {
			continue
		}
		p.details()
		switch {
		case p.home == root || strings.HasPrefix(p.home, root+string(filepath.Separator)):
		case p.exe == codexBin && strings.Contains(p.cmd, root):
		case marker != "" && strings.Contains(p.cmd, marker):
		default:
			continue
		}
		out = append(out, p)
	}
	return out
}

// sameProc reports whether p still runs (same pid and start time, not a
// zombie).
func sameProc(p proc) bool {
	q, ok := readStat(p.pid)
	return ok && q.alive() && q.start == p.start
}

// waitGone polls until none of ps runs or d passed, and returns those still
// running.
func waitGone(ps []proc, d time.Duration) []proc {
	deadline := time.Now().Add(d)
	for {
		var left []proc
		for _, p := range ps {
			if sameProc(p) {
				left = append(left, p)
			}
		}
		if len(left) == 0 || time.Now().After(deadline) {
			return left
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// killGroup SIGKILLs p's process group when p leads it, else p alone,
// after checking p is still the same process.
func killGroup(p proc) bool {
	if !sameProc(p) || p.pid <= 1 {
		return false
	}
	target := p.pid
	if p.pgid == p.pid {
		target = -p.pid
	}
	return syscall.Kill(target, syscall.SIGKILL) == nil
}
