package contain

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"syscall"
	"time"

	"github.com/containerd/cgroups/v3/cgroup1"
	"github.com/opencontainers/runtime-spec/specs-go"
)

// v1 keeps users in the v1 hierarchies: for each of memory, pids and cpu
// (and freezer, to stop a tree before killing it, and cpuacct, for the
// CPU used) that is mounted, <hierarchy>/<daemon's own>/Name/u-….
type v1 struct {
	mount string
	name  string
	own   map[cgroup1.Name]string // the daemon's cgroup in each hierarchy
	subs  []cgroup1.Subsystem
	memsw bool // memory.memsw.* exists: swap is bounded with memory
	burst bool // cpu.cfs_burst_us exists (Linux 5.14)
}

func openV1(o Options, rep *Report) (backend, error) {
	b := &v1{mount: o.Mount, name: o.Name, own: make(map[cgroup1.Name]string)}
	for _, n := range []cgroup1.Name{cgroup1.Memory, cgroup1.Pids, cgroup1.Cpu, cgroup1.Freezer, cgroup1.Cpuacct} {
		if _, err := os.Stat(filepath.Join(o.Mount, string(n))); err != nil {
			if contains([]string{"memory", "pids", "cpu"}, string(n)) {
				rep.Missing[string(n)] = fmt.Sprintf("no v1 %s hierarchy under %s", n, o.Mount)
			}
			continue
		}
		own := o.Parent
		if own == "" {
			p, err := ownCgroup(string(n))
			if err != nil {
				p = "/"
			}
			own = p
		}
		b.own[n] = filepath.Clean("/" + own)
		switch n {
		case cgroup1.Memory:
			b.subs = append(b.subs, cgroup1.NewMemory(o.Mount, cgroup1.OptionalSwap()))
			if _, err := os.Stat(filepath.Join(o.Mount, "memory", "memory.memsw.limit_in_bytes")); err == nil {
				b.memsw = true
			}
		case cgroup1.Pids:
			b.subs = append(b.subs, cgroup1.NewPids(o.Mount))
		case cgroup1.Cpu:
			b.subs = append(b.subs, cgroup1.NewCpu(o.Mount))
			if _, err := os.Stat(filepath.Join(o.Mount, "cpu", "cpu.cfs_burst_us")); err == nil {
				b.burst = true
			}
		case cgroup1.Freezer:
			b.subs = append(b.subs, cgroup1.NewFreezer(o.Mount))
		case cgroup1.Cpuacct:
			b.subs = append(b.subs, cgroup1.NewCpuacct(o.Mount))
		}
		if contains([]string{"memory", "pids", "cpu"}, string(n)) {
			rep.Enforced = append(rep.Enforced, string(n))
		}
	}
	if len(rep.Enforced) == 0 {
		return nil, fmt.Errorf("no v1 memory, pids or cpu hierarchy under %s", o.Mount)
	}
	for n := range b.own {
		if err := os.MkdirAll(b.dir(n, ""), 0o755); err != nil {
			return nil, fmt.Errorf("making the daemon's cgroup: %w", err)
		}
	}
	if _, ok := b.own[cgroup1.Memory]; ok {
		rep.Path = b.dir(cgroup1.Memory, "")
	} else {
		rep.Path = b.dir(b.subs[0].Name(), "")
	}
	return b, nil
}

// dir is the folder of user (the daemon's, for "") in hierarchy n.
func (b *v1) dir(n cgroup1.Name, user string) string {
	return filepath.Join(b.mount, string(n), b.own[n], b.name, user)
}

// path is user's cgroup path, for the library: relative to each
// hierarchy's root.
func (b *v1) path(user string) cgroup1.Path {
	return func(n cgroup1.Name) (string, error) {
		own, ok := b.own[n]
		if !ok {
			return "", cgroup1.ErrControllerNotActive
		}
		return filepath.Join(own, b.name, user), nil
	}
}

// allowAny has the library skip a hierarchy it cannot use rather than
// fail (its default insists on devices, which the daemon does not use).
func allowAny(c *cgroup1.InitConfig) error {
	c.InitCheck = cgroup1.AllowAny
	return nil
}

func (b *v1) hierarchy() ([]cgroup1.Subsystem, error) { return b.subs, nil }

// weigh writes the users' folder's cpu.shares: 1024 (a nice-0 process's)
// per user, within the kernel's 2–262144.
func (b *v1) weigh(users int) error {
	if _, ok := b.own[cgroup1.Cpu]; !ok {
		return nil
	}
	shares := min(max(users, 1)*1024, 262144)
	return os.WriteFile(filepath.Join(b.dir(cgroup1.Cpu, ""), "cpu.shares"), []byte(strconv.Itoa(shares)), 0)
}

// resources are l for the v1 controllers; a limit of none is -1 (pids
// "max" is written apart, which the library does not).
func (b *v1) resources(l Limits) *specs.LinuxResources {
	mem := int64(-1)
	if l.Memory > 0 {
		mem = l.Memory
	}
	r := &specs.LinuxResources{Memory: &specs.LinuxMemory{Limit: &mem}}
	if b.memsw {
		sw := mem // memory and swap together
		r.Memory.Swap = &sw
	}
	if l.Pids > 0 {
		p := l.Pids
		r.Pids = &specs.LinuxPids{Limit: &p}
	}
	q, period := int64(-1), uint64(100000)
	if l.CPU > 0 {
		q, period = quota(l.CPU)
	}
	r.CPU = &specs.LinuxCPU{Quota: &q, Period: &period}
	return r
}

func (b *v1) group(name string, l Limits) (impl, error) {
	cg, err := cgroup1.New(b.path(name), &specs.LinuxResources{}, cgroup1.WithHierarchy(b.hierarchy), allowAny)
	if err != nil {
		return nil, err
	}
	g := &v1Group{b: b, cg: cg, name: name}
	if err := g.update(l); err != nil {
		return nil, err
	}
	return g, nil
}

func (b *v1) children() ([]string, error) {
	seen := map[string]bool{}
	for n := range b.own {
		names, err := userChildren(b.dir(n, ""))
		if err != nil {
			return nil, err
		}
		for _, x := range names {
			seen[x] = true
		}
	}
	var out []string
	for x := range seen {
		out = append(out, x)
	}
	sort.Strings(out)
	return out, nil
}

func (b *v1) removeParent() error {
	var errs []error
	for n := range b.own {
		if err := os.Remove(b.dir(n, "")); err != nil && !errors.Is(err, fs.ErrNotExist) {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

type v1Group struct {
	b    *v1
	cg   cgroup1.Cgroup
	name string
	// user, for a process's cgroup (a child), is its user's: the child is
	// made in the pids and freezer hierarchies only (what listing and
	// killing its tree need; a cgroup takes milliseconds to make in each),
	// and its process stays in the user's cgroup in the others.
	user string
}

// leafHierarchies are the hierarchies a process's own cgroup is made in.
var leafHierarchies = map[cgroup1.Name]bool{cgroup1.Pids: true, cgroup1.Freezer: true}

// dir is g's folder in hierarchy n: a child's is its user's where the
// child is not made.
func (g *v1Group) dir(n cgroup1.Name) string {
	if g.user != "" && !leafHierarchies[n] && g.b.hasLeafHierarchy() {
		return g.b.dir(n, g.user)
	}
	return g.b.dir(n, g.name)
}

// hasLeafHierarchy reports whether pids or freezer is mounted: without
// either, a child is made everywhere.
func (b *v1) hasLeafHierarchy() bool {
	for n := range leafHierarchies {
		if _, ok := b.own[n]; ok {
			return true
		}
	}
	return false
}

func (b *v1) child(user, name string) (impl, error) {
	full := user + "/" + name
	subs := b.subs
	if b.hasLeafHierarchy() {
		subs = nil
		for _, s := range b.subs {
			if leafHierarchies[s.Name()] {
				subs = append(subs, s)
			}
		}
	}
	cg, err := cgroup1.New(b.path(full), &specs.LinuxResources{},
		cgroup1.WithHierarchy(func() ([]cgroup1.Subsystem, error) { return subs, nil }), allowAny)
	if err != nil {
		return nil, err
	}
	return &v1Group{b: b, cg: cg, name: full, user: user}, nil
}

func (g *v1Group) update(l Limits) error {
	r := g.b.resources(l)
	// The library does not write cpu.cfs_burst_us. The kernel refuses a
	// quota below the burst, so the burst is cleared before the quota is
	// written and set after it.
	burstFile := filepath.Join(g.dir(cgroup1.Cpu), "cpu.cfs_burst_us")
	if g.b.burst {
		_ = os.WriteFile(burstFile, []byte("0"), 0) // a fresh group's is 0 already
	}
	if r.Memory.Swap != nil {
		// memsw may never be below the memory limit: raising both, memsw
		// goes first; lowering, the memory limit does (this write then
		// fails, and the one below sets both in the right order).
		_ = g.cg.Update(&specs.LinuxResources{Memory: &specs.LinuxMemory{Swap: r.Memory.Swap}})
	}
	if err := g.cg.Update(r); err != nil {
		return err
	}
	if g.b.burst {
		if err := os.WriteFile(burstFile, []byte(strconv.FormatInt(burst(l.CPU), 10)), 0); err != nil {
			return err
		}
	}
	if l.Pids <= 0 {
		if _, ok := g.b.own[cgroup1.Pids]; ok {
			return os.WriteFile(filepath.Join(g.dir(cgroup1.Pids), "pids.max"), []byte("max"), 0)
		}
	}
	return nil
}

func (g *v1Group) procs() ([]int, error) {
	seen := map[int]bool{}
	var out []int
	// Every hierarchy: a process that was in one only (a start that
	// failed half-way) is counted too.
	for _, sub := range g.cg.Subsystems() {
		ps, err := g.cg.Processes(sub.Name(), true)
		if err != nil {
			if errors.Is(err, fs.ErrNotExist) {
				continue
			}
			return nil, err
		}
		for _, p := range ps {
			if !seen[p.Pid] {
				seen[p.Pid] = true
				out = append(out, p.Pid)
			}
		}
	}
	sort.Ints(out)
	return out, nil
}

// kill freezes the tree (so nothing forks while it is signalled), sends
// every process SIGKILL and thaws it, so the signals are delivered.
func (g *v1Group) kill() error {
	_, frozen := g.b.own[cgroup1.Freezer]
	if frozen {
		if err := g.cg.Freeze(); err != nil {
			frozen = false
		}
	}
	pids, err := g.procs()
	for _, pid := range pids {
		_ = syscall.Kill(pid, syscall.SIGKILL) // ESRCH: gone already
	}
	if frozen {
		if terr := g.cg.Thaw(); terr != nil && err == nil {
			err = terr
		}
	}
	return err
}

func (g *v1Group) remove() error {
	var errs []error
	for n := range g.b.own {
		if err := rmdirTree(g.b.dir(n, g.name)); err != nil && !errors.Is(err, fs.ErrNotExist) {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

func (g *v1Group) usage() Usage {
	mem := g.dir(cgroup1.Memory)
	pids := g.dir(cgroup1.Pids)
	u := Usage{Pids: readInt(filepath.Join(pids, "pids.current")), PidsPeak: readInt(filepath.Join(pids, "pids.peak"))}
	if g.b.memsw {
		u.Memory = readInt(filepath.Join(mem, "memory.memsw.usage_in_bytes"))
		u.MemoryPeak = readInt(filepath.Join(mem, "memory.memsw.max_usage_in_bytes"))
	} else {
		u.Memory = readInt(filepath.Join(mem, "memory.usage_in_bytes"))
		u.MemoryPeak = readInt(filepath.Join(mem, "memory.max_usage_in_bytes"))
	}
	u.CPU = time.Duration(readInt(filepath.Join(g.dir(cgroup1.Cpuacct), "cpuacct.usage")))
	return u
}

// hits sums the group's counts and its children's: v1 counts an OOM kill
// and a refused fork in the cgroup of the process that met them, not in
// the ancestor whose limit they met.
func (g *v1Group) hits() Hits {
	var h Hits
	sum := func(dir, file, key string, into *int64) {
		_ = filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
			if err == nil && d.IsDir() {
				*into += readKV(filepath.Join(p, file), key)
			}
			return nil
		})
	}
	// A child's own folders only: where it is not made, its counts are
	// its user's.
	sum(g.b.dir(cgroup1.Memory, g.name), "memory.oom_control", "oom_kill", &h.OOMKills)
	sum(g.b.dir(cgroup1.Pids, g.name), "pids.events", "max", &h.Pids)
	return h
}

func (g *v1Group) hierarchical() bool { return false }

func (g *v1Group) placement() ([]string, string) {
	var files []string
	for _, s := range g.b.subs {
		files = append(files, filepath.Join(g.dir(s.Name()), "cgroup.procs"))
	}
	return files, ""
}
