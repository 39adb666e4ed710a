package codexrpc

import (
	"bytes"
	"os"
	"strconv"
	"syscall"
)

// envCodexHome is how a process's environment names its CODEX_HOME.
const envCodexHome = "CODEX_HOME="

// procID names a process by pid and start time (field 22 of
// /proc/PID/stat), which together cannot be reused.
type procID struct {
	pid   int
	start uint64
}

// procStat reads a process's parent and start time.
func procStat(pid int) (ppid int, start uint64, ok bool) {
	data, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return 0, 0, false
	}
	// comm may hold spaces and parentheses: fields follow the last ')'.
	i := bytes.LastIndexByte(data, ')')
	if i < 0 {
		return 0, 0, false
	}
	f := bytes.Fields(data[i+1:])
	if len(f) < 20 {
		return 0, 0, false
	}
	pp, err1 := strconv.Atoi(string(f[1]))
	st, err2 := strconv.ParseUint(string(f[19]), 10, 64)
	if err1 != nil || err2 != nil {
		return 0, 0, false
	}
	return pp, st, true
}

// descendants lists the live descendants of root, wherever their process
// group: the CLI starts some helpers (login-shell snapshots) in groups of
// their own, which a group kill does not reach.
func descendants(root int) []procID {
	entries, err := os.ReadDir("/proc")
	if err != nil {
		return nil
	}
	children := make(map[int][]procID)
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		if ppid, start, ok := procStat(pid); ok {
			children[ppid] = append(children[ppid], procID{pid, start})
		}
	}
	var out []procID
	queue := []int{root}
	for len(queue) > 0 {
		p := queue[0]
		queue = queue[1:]
		for _, c := range children[p] {
			out = append(out, c)
			queue = append(queue, c.pid)
		}
	}
	return out
}

// killIfSame SIGKILLs each process that is still the one recorded.
func killIfSame(ps []procID) {
	for _, p := range ps {
		if _, start, ok := procStat(p.pid); ok && start == p.start {
			_ = syscall.Kill(p.pid, syscall.SIGKILL)
		}
	}
}

// orphansOf lists the orphans (parent init) of this user that run with
// exactly home as their CODEX_HOME and started no earlier than since (the
// app-server's own start): what an app-server of that home left behind
// when a helper double-forked or its parent died first.
func orphansOf(home string, since uint64) []procID {
	return orphans(func(h string) bool { return h == home }, since)
}

// orphans lists the orphans (parent init), started no earlier than since,
// whose CODEX_HOME satisfies match and that run as the daemon's user or as
// the user owning that CODEX_HOME (an app-server started under a uid of
// its own, see package isolate): never anyone else's process.
func orphans(match func(codexHome string) bool, since uint64) []procID {
	entries, err := os.ReadDir("/proc")
	if err != nil {
		return nil
	}
	uid, self := os.Getuid(), os.Getpid()
	var out []procID
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil || pid <= 1 || pid == self {
			continue
		}
		ppid, start, ok := procStat(pid)
		if !ok || ppid != 1 || start < since {
			continue
		}
		fi, err := os.Stat("/proc/" + e.Name())
		if err != nil {
			continue
		}
		st, ok := fi.Sys().(*syscall.Stat_t)
		if !ok {
			continue
		}
		env, err := os.ReadFile("/proc/" + e.Name() + "/environ")
		if err != nil {
			continue
		}
		for _, kv := range bytes.Split(env, []byte{0}) {
			if home, ok := bytes.CutPrefix(kv, []byte(envCodexHome)); ok {
				if match(string(home)) && (int(st.Uid) == uid || ownerOf(string(home)) == int(st.Uid)) {
					out = append(out, procID{pid, start})
				}
				break
			}
		}
	}
	return out
}

// KillOrphans SIGKILLs this user's orphaned processes (parent init) whose
// CODEX_HOME satisfies match, each only while it is still the process that
// was found (pid and start time), and reports how many it signalled.
func KillOrphans(match func(codexHome string) bool) int {
	found := orphans(match, 0)
	killIfSame(found)
	return len(found)
}

// ownerOf is the uid owning path, or -1.
func ownerOf(path string) int {
	fi, err := os.Stat(path)
	if err != nil {
		return -1
	}
	if st, ok := fi.Sys().(*syscall.Stat_t); ok {
		return int(st.Uid)
	}
	return -1
}
