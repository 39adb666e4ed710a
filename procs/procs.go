package procs

import (
	"fmt"
	"io/fs"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/prometheus/procfs"
)

// ID names a process by pid and start time, which together cannot be
// reused.
type ID struct {
	PID int
	// Start is field 22 of /proc/PID/stat: clock ticks after boot.
	Start uint64
}

// Stat is what the daemon uses of /proc/PID/stat.
type Stat struct {
	State byte   // field 3: R, S, D, Z, X, …
	PPID  int    // field 4
	PGRP  int    // field 5
	Start uint64 // field 22
}

// Alive reports whether the process has not exited: a zombie has.
func (s Stat) Alive() bool {
	return s.State != 'Z' && s.State != 'X' && s.State != 'x'
}

// FS is a proc file system: the host's ([Host]) or a fake tree in a test.
type FS struct {
	proc procfs.FS
	err  error // why the tree could not be opened; every read fails with it
}

// NewFS opens the proc tree mounted at root.
func NewFS(root string) (FS, error) {
	p, err := procfs.NewFS(root)
	if err != nil {
		return FS{}, fmt.Errorf("opening proc tree %s: %w", root, err)
	}
	return FS{proc: p}, nil
}

// Host is the machine's /proc.
func Host() FS {
	f, err := NewFS(procfs.DefaultMountPoint)
	if err != nil {
		return FS{err: err}
	}
	return f
}

// Stat reads /proc/PID/stat. A process that does not exist yields an error
// satisfying errors.Is(err, fs.ErrNotExist).
func (f FS) Stat(pid int) (Stat, error) {
	p, err := f.open(pid)
	if err != nil {
		return Stat{}, err
	}
	return readStat(p)
}

// StartTime returns the start time of process pid. A process that does not
// exist yields an error satisfying errors.Is(err, fs.ErrNotExist).
func (f FS) StartTime(pid int) (uint64, error) {
	st, err := f.Stat(pid)
	if err != nil {
		return 0, err
	}
	return st.Start, nil
}

// IsSame reports whether the process id names is still running: its pid
// exists, has not exited (a zombie has), and started at id.Start, so the
// pid was not reused.
func (f FS) IsSame(id ID) bool {
	_, ok := f.same(id)
	return ok
}

func (f FS) same(id ID) (Stat, bool) {
	if id.PID <= 1 || id.Start == 0 {
		return Stat{}, false
	}
	st, err := f.Stat(id.PID)
	if err != nil || !st.Alive() || st.Start != id.Start {
		return Stat{}, false
	}
	return st, true
}

func (f FS) open(pid int) (procfs.Proc, error) {
	if f.err != nil {
		return procfs.Proc{}, f.err
	}
	if pid <= 0 {
		return procfs.Proc{}, fmt.Errorf("reading process %d: invalid pid: %w", pid, fs.ErrNotExist)
	}
	p, err := f.proc.Proc(pid)
	if err != nil {
		return procfs.Proc{}, fmt.Errorf("reading process %d: %w", pid, err)
	}
	return p, nil
}

func readStat(p procfs.Proc) (Stat, error) {
	s, err := procStat(p)
	if err != nil {
		return Stat{}, fmt.Errorf("reading stat of process %d: %w", p.PID, err)
	}
	if len(s.State) != 1 {
		return Stat{}, fmt.Errorf("reading stat of process %d: bad state field %q", p.PID, s.State)
	}
	return Stat{State: s.State[0], PPID: s.PPID, PGRP: s.PGRP, Start: s.Starttime}, nil
}

// Proc is a process met by [FS.Scan]; its stat is read, the rest on demand.
type Proc struct {
	PID int
	Stat
	p procfs.Proc
}

// ID names the process.
func (p Proc) ID() ID { return ID{PID: p.PID, Start: p.Start} }

// UID is the process's effective uid.
func (p Proc) UID() (int, error) {
	s, err := p.p.NewStatus()
	if err != nil {
		return -1, fmt.Errorf("reading status of process %d: %w", p.PID, err)
	}
	return int(s.UIDs[1]), nil
}

// Getenv looks key up in the process's initial environment; ok is false
// when it is unset or the environment cannot be read.
func (p Proc) Getenv(key string) (value string, ok bool) {
	env, err := p.p.Environ()
	if err != nil {
		return "", false
	}
	for _, kv := range env {
		if v, found := strings.CutPrefix(kv, key+"="); found {
			return v, true
		}
	}
	return "", false
}

// Scan lists the processes for which match reports true, in pid order.
// Processes that vanish or cannot be read while it looks are skipped.
func (f FS) Scan(match func(Proc) bool) []ID {
	var out []ID
	for _, p := range f.procs() {
		if match(p) {
			out = append(out, p.ID())
		}
	}
	return out
}

// procs reads the stat of every process, in pid order.
func (f FS) procs() []Proc {
	if f.err != nil {
		return nil
	}
	all, err := f.proc.AllProcs()
	if err != nil {
		return nil
	}
	sort.Sort(all)
	out := make([]Proc, 0, len(all))
	for _, p := range all {
		st, err := readStat(p)
		if err != nil {
			continue
		}
		out = append(out, Proc{PID: p.PID, Stat: st, p: p})
	}
	return out
}

// Groups lists the live (not zombie) members of each of the process groups
// pgids, in one pass over the tree; a group without live members is left
// out. A group outlives its leader while it has members (the leader may
// be gone or a zombie), and the kernel does not reuse a process group's
// id while any process is in it.
func (f FS) Groups(pgids ...int) map[int][]ID {
	out := make(map[int][]ID)
	if len(pgids) == 0 {
		return out
	}
	for _, p := range f.procs() {
		if p.Alive() && slices.Contains(pgids, p.PGRP) {
			out[p.PGRP] = append(out[p.PGRP], p.ID())
		}
	}
	return out
}

// Descendants lists the live descendants of root, wherever their process
// group, breadth first: a child may start helpers in groups or sessions of
// their own, which a group signal does not reach.
func (f FS) Descendants(root int) []ID {
	children := make(map[int][]ID)
	for _, p := range f.procs() {
		children[p.PPID] = append(children[p.PPID], p.ID())
	}
	var out []ID
	queue := []int{root}
	for len(queue) > 0 {
		p := queue[0]
		queue = queue[1:]
		for _, c := range children[p] {
			out = append(out, c)
			queue = append(queue, c.PID)
		}
	}
	return out
}

// procStat is p.Stat, which slices out of range on some malformed lines
// (")(", or nothing after the ')'): the kernel never writes those, but a
// damaged line must be an error, not a crash.
func procStat(p procfs.Proc) (s procfs.ProcStat, err error) {
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("malformed stat line: %v", r)
		}
	}()
	return p.Stat()
}

// Poll checks cond every interval until it holds or within has passed, and
// reports whether it held. cond runs at least once, and once more after
// the deadline, so a zero within checks it just once.
func Poll(within, interval time.Duration, cond func() bool) bool {
	deadline := time.Now().Add(within)
	for !cond() {
		if !time.Now().Before(deadline) {
			return false
		}
		time.Sleep(interval)
	}
	return true
}
