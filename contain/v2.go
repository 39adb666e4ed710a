package contain

import (
	"errors"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/containerd/cgroups/v3/cgroup2"
)

// v2 keeps users in the unified hierarchy: Mount/Parent/Name/u-….
type v2 struct {
	mount   string
	top     string // Parent/Name, relative to mount, starting with "/"
	enabled []string
	swap    bool // memory.swap.max exists: swap is bounded with memory
	burst   bool // cpu.max.burst exists (Linux 5.14)
}

// openV2 readies Mount/Parent/Name for the users' cgroups. Under
// systemd's Delegate=yes (or a container's own cgroup namespace) the
// daemon's cgroup holds the daemon: a v2 cgroup with processes cannot
// hand controllers to children, so the daemon first moves into a leaf of
// its own ("daemon") beside the users' folder.
func openV2(o Options, rep *Report) (backend, error) {
	parent := o.Parent
	if parent == "" {
		own, err := ownCgroup("")
		if err != nil {
			return nil, err
		}
		parent = own
	}
	parent = filepath.Clean("/" + parent)
	dir := filepath.Join(o.Mount, parent)
	data, err := os.ReadFile(filepath.Join(dir, "cgroup.controllers"))
	if err != nil {
		return nil, fmt.Errorf("reading the daemon's cgroup %s: %w", dir, err)
	}
	avail := strings.Fields(string(data))
	var want []string
	for _, c := range []string{"memory", "pids", "cpu"} {
		if contains(avail, c) {
			want = append(want, c)
		} else {
			rep.Missing[c] = fmt.Sprintf("the %s controller is not delegated to %s (systemd: Delegate=yes)", c, dir)
		}
	}
	if len(want) == 0 {
		return nil, fmt.Errorf("no memory, pids or cpu controller in %s (systemd: Delegate=yes)", dir)
	}
	if err := enable(dir, want); errors.Is(err, syscall.EBUSY) {
		// Processes in the cgroup: the daemon goes into a leaf first.
		if err := moveToLeaf(dir); err != nil {
			return nil, fmt.Errorf("moving the daemon into %s/daemon: %w", dir, err)
		}
		err = enable(dir, want)
		if err != nil {
			return nil, fmt.Errorf("enabling %v in %s: %w", want, dir, err)
		}
	} else if err != nil {
		return nil, fmt.Errorf("enabling %v in %s: %w", want, dir, err)
	}
	b := &v2{mount: o.Mount, top: filepath.Join(parent, o.Name), enabled: want}
	top := filepath.Join(o.Mount, b.top)
	if err := os.MkdirAll(top, 0o755); err != nil {
		return nil, err
	}
	if err := enable(top, want); err != nil {
		return nil, fmt.Errorf("enabling %v in %s: %w", want, top, err)
	}
	if _, err := os.Stat(filepath.Join(top, "memory.swap.max")); err == nil {
		b.swap = true
	}
	if _, err := os.Stat(filepath.Join(top, "cpu.max.burst")); err == nil {
		b.burst = true
	}
	rep.Path = top
	rep.Enforced = want
	return b, nil
}

// enable writes "+c" for each controller into dir's subtree_control.
func enable(dir string, controllers []string) error {
	var s []string
	for _, c := range controllers {
		s = append(s, "+"+c)
	}
	return os.WriteFile(filepath.Join(dir, "cgroup.subtree_control"), []byte(strings.Join(s, " ")), 0)
}

// moveToLeaf moves every process of dir into dir/daemon.
func moveToLeaf(dir string) error {
	leaf := filepath.Join(dir, "daemon")
	if err := os.MkdirAll(leaf, 0o755); err != nil {
		return err
	}
	pids, err := readPids(filepath.Join(dir, "cgroup.procs"))
	if err != nil {
		return err
	}
	for _, pid := range pids {
		err := os.WriteFile(filepath.Join(leaf, "cgroup.procs"), []byte(fmt.Sprint(pid)), 0)
		if err != nil && !errors.Is(err, syscall.ESRCH) {
			return err
		}
	}
	return nil
}

func (b *v2) resources(l Limits) *cgroup2.Resources {
	r := &cgroup2.Resources{}
	if contains(b.enabled, "memory") {
		max := int64(math.MaxInt64) // the kernel reads it as "max"
		if l.Memory > 0 {
			max = l.Memory
		}
		r.Memory = &cgroup2.Memory{Max: &max}
		if b.swap {
			swap := int64(0) // memory and swap together: no swap past the memory
			if l.Memory <= 0 {
				swap = math.MaxInt64
			}
			r.Memory.Swap = &swap
		}
	}
	if contains(b.enabled, "pids") {
		r.Pids = &cgroup2.Pids{Max: -1}
		if l.Pids > 0 {
			r.Pids.Max = l.Pids
		}
	}
	if contains(b.enabled, "cpu") {
		var q *int64
		_, period := quota(l.CPU)
		if l.CPU > 0 {
			v, _ := quota(l.CPU)
			q = &v
		}
		r.CPU = &cgroup2.CPU{Max: cgroup2.NewCPUMax(q, &period)}
	}
	return r
}

func (b *v2) group(name string, l Limits) (impl, error) {
	m, err := cgroup2.NewManager(b.mount, filepath.Join(b.top, name), b.resources(l))
	if err != nil {
		return nil, err
	}
	g := &v2Group{b: b, m: m, dir: filepath.Join(b.mount, b.top, name)}
	if b.burst {
		// After the quota the manager wrote: the kernel refuses a burst
		// above it.
		if err := g.setBurst(l.CPU); err != nil {
			return nil, err
		}
	}
	return g, nil
}

// child is a plain leaf: the user's limits bound it; nothing is written.
func (b *v2) child(user, name string) (impl, error) {
	full := filepath.Join(b.top, user, name)
	m, err := cgroup2.NewManager(b.mount, full, &cgroup2.Resources{})
	if err != nil {
		return nil, err
	}
	return &v2Group{b: b, m: m, dir: filepath.Join(b.mount, full)}, nil
}

func (b *v2) children() ([]string, error) {
	return userChildren(filepath.Join(b.mount, b.top))
}

// weigh writes the users' folder's cpu.weight: 100 (a default cgroup's)
// per user, within the kernel's 1–10000. Without the cpu controller
// delegated there is nothing to weigh.
func (b *v2) weigh(users int) error {
	if !contains(b.enabled, "cpu") {
		return nil
	}
	weight := min(max(users, 1)*100, 10000)
	return os.WriteFile(filepath.Join(b.mount, b.top, "cpu.weight"), []byte(strconv.Itoa(weight)), 0)
}

func (b *v2) removeParent() error {
	return os.Remove(filepath.Join(b.mount, b.top))
}

type v2Group struct {
	b   *v2
	m   *cgroup2.Manager
	dir string
}

// update sets l. The library does not write cpu.max.burst; the kernel
// refuses a quota below the burst, so the burst is cleared before the
// quota is written and set after it.
func (g *v2Group) update(l Limits) error {
	if !g.b.burst {
		return g.m.Update(g.b.resources(l))
	}
	if err := g.setBurst(0); err != nil {
		return err
	}
	if err := g.m.Update(g.b.resources(l)); err != nil {
		return err
	}
	return g.setBurst(l.CPU)
}

// setBurst writes the burst of a cap of cpu cores.
func (g *v2Group) setBurst(cpu float64) error {
	return os.WriteFile(filepath.Join(g.dir, "cpu.max.burst"), []byte(strconv.FormatInt(burst(cpu), 10)), 0)
}

func (g *v2Group) procs() ([]int, error) {
	pids, err := g.m.Procs(true)
	out := make([]int, 0, len(pids))
	for _, p := range pids {
		out = append(out, int(p))
	}
	return out, err
}

// kill writes cgroup.kill (Linux 5.14), which ends the whole subtree at
// once; the library falls back to signalling every process.
func (g *v2Group) kill() error { return g.m.Kill() }

func (g *v2Group) remove() error { return rmdirTree(g.dir) }

func (g *v2Group) usage() Usage {
	u := Usage{
		Memory:     readInt(filepath.Join(g.dir, "memory.current")) + readInt(filepath.Join(g.dir, "memory.swap.current")),
		MemoryPeak: readInt(filepath.Join(g.dir, "memory.peak")) + readInt(filepath.Join(g.dir, "memory.swap.peak")),
		Pids:       readInt(filepath.Join(g.dir, "pids.current")),
		PidsPeak:   readInt(filepath.Join(g.dir, "pids.peak")),
	}
	u.CPU = time.Duration(readKV(filepath.Join(g.dir, "cpu.stat"), "usage_usec")) * time.Microsecond
	return u
}

func (g *v2Group) hits() Hits {
	return Hits{
		OOMKills: readKV(filepath.Join(g.dir, "memory.events"), "oom_kill"),
		Pids:     readKV(filepath.Join(g.dir, "pids.events"), "max"),
	}
}

// hierarchical: memory.events and pids.events count a subtree's events.
func (g *v2Group) hierarchical() bool { return true }

func (g *v2Group) placement() ([]string, string) { return nil, g.dir }
