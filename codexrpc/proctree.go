package codexrpc

import (
	"bytes"
	"os"
	"strconv"
	"syscall"
)

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
