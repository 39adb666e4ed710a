package contain

import (
	"bufio"
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// Options says where a Node keeps its users' cgroups.
type Options struct {
	// Mount is where cgroupfs is mounted (default /sys/fs/cgroup); tests
	// give a folder of their own.
	Mount string
	// Version forces the hierarchy: 1, 2, or 0 to detect it (v2 when the
	// mount is cgroup2, v1 when it holds the v1 memory, pids or cpu
	// hierarchies).
	Version int
	// Parent is the daemon's cgroup the users' go under: on v2 a path
	// relative to Mount, on v1 relative to each hierarchy's root. Empty
	// means the daemon's own (from /proc/self/cgroup).
	Parent string
	// Name is this daemon's folder under Parent ("meshweaver-…"): stable
	// for one daemon's homes, so a restarted daemon finds what the last
	// one left, and apart for two daemons on one host.
	Name string
	// Limits are each user's limits.
	Limits Limits
	// Setpriv is the setpriv binary a start switches uids with once its
	// cgroup and OOM score are set (default: from PATH).
	Setpriv string
}

// UserOOMScore is the oom_score_adj of every user process: the first the
// kernel's OOM killer picks. DaemonOOMScore is the daemon's: the last.
const (
	UserOOMScore   = 1000
	DaemonOOMScore = -900
)

// Report says what a Node enforces on this host and why not the rest.
type Report struct {
	// Version is 2, 1, or 0 when no cgroup limit can be set.
	Version int
	// Path is the users' parent cgroup (v2), or the memory hierarchy's
	// (v1).
	Path string
	// Enforced names each limit the host enforces: "memory", "pids",
	// "cpu".
	Enforced []string
	// Missing says, for each limit asked and not enforced, why.
	Missing map[string]string
}

// Node is the daemon's owner of its users' cgroups (see the package
// comment).
type Node struct {
	b       backend
	rep     Report
	setpriv string

	mu     sync.Mutex
	limits Limits
	groups map[string]*Group // by cgroup name
}

// backend is one cgroup hierarchy's way of doing things.
type backend interface {
	// group makes (or finds) the named user cgroup and sets l on it.
	group(name string, l Limits) (impl, error)
	// child makes the cgroup of one process inside the user's, with no
	// limits of its own, in as few hierarchies as its kill needs.
	child(user, name string) (impl, error)
	// children names the user cgroups under the daemon's folder.
	children() ([]string, error)
	// removeParent removes the daemon's folder once it is empty.
	removeParent() error
	// weigh sets the CPU weight of the users' folder to that of users
	// processes of default weight.
	weigh(users int) error
}

// impl is one user's cgroup in one hierarchy.
type impl interface {
	update(l Limits) error
	procs() ([]int, error)
	kill() error
	remove() error
	usage() Usage
	hits() Hits
	// hierarchical reports counts that include the children's (v2).
	hierarchical() bool
	// placement is how a start enters the cgroup: cgroup.procs files its
	// first process writes its pid into (v1), or a directory opened for
	// clone3 (v2).
	placement() (files []string, dir string)
}

// Usage is what a user's cgroup holds now.
type Usage struct {
	Memory     int64 // bytes, swap included where counted
	MemoryPeak int64 // the most it held (0 where the kernel does not say)
	Pids       int64
	PidsPeak   int64
	CPU        time.Duration // CPU time used since the cgroup was made
}

// Hits counts the times a limit was met since the cgroup was made.
type Hits struct {
	OOMKills int64 // processes the kernel killed for memory
	Pids     int64 // forks refused at the process limit
}

// Open finds the cgroup hierarchy, makes the daemon's folder under the
// parent and says what it enforces. A host that enforces nothing gives a
// Node whose groups do nothing and a Report saying why; an error means
// the settings themselves are wrong.
func Open(o Options) (*Node, error) {
	if o.Mount == "" {
		o.Mount = "/sys/fs/cgroup"
	}
	if o.Name == "" {
		return nil, errors.New("contain: no name for the daemon's cgroup")
	}
	n := &Node{limits: o.Limits, groups: make(map[string]*Group)}
	n.rep.Missing = make(map[string]string)
	version := o.Version
	if version == 0 {
		version = detect(o.Mount)
	}
	var err error
	switch version {
	case 2:
		n.b, err = openV2(o, &n.rep)
	case 1:
		n.b, err = openV1(o, &n.rep)
	default:
		err = fmt.Errorf("no cgroup v2 and no v1 memory, pids or cpu hierarchy under %s", o.Mount)
	}
	if err != nil {
		n.b = nil
		n.rep.Version, n.rep.Enforced = 0, nil
		for _, r := range asked(o.Limits) {
			n.rep.Missing[r] = err.Error()
		}
		return n, nil
	}
	n.rep.Version = version
	for _, r := range asked(o.Limits) {
		if !contains(n.rep.Enforced, r) && n.rep.Missing[r] == "" {
			n.rep.Missing[r] = "controller not available"
		}
	}
	if o.Setpriv != "" {
		n.setpriv = o.Setpriv
	} else if p, err := lookPath("setpriv"); err == nil {
		n.setpriv = p
	}
	return n, nil
}

// asked names the cgroup limits l sets.
func asked(l Limits) []string {
	var out []string
	if l.Memory > 0 {
		out = append(out, "memory")
	}
	if l.Pids > 0 {
		out = append(out, "pids")
	}
	if l.CPU > 0 {
		out = append(out, "cpu")
	}
	return out
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

// Report says what this node enforces.
func (n *Node) Report() Report { return n.rep }

// Active reports whether users get cgroups at all.
func (n *Node) Active() bool { return n != nil && n.b != nil }

// Limits are the limits new and live groups get.
func (n *Node) Limits() Limits {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.limits
}

// GroupName is the cgroup name of the user whose folder is userDir: a
// hash, so that no user id reaches the host's cgroup tree.
func GroupName(userDir string) string {
	sum := sha256.Sum256([]byte("user:" + filepath.Base(userDir)))
	return "u-" + hex.EncodeToString(sum[:8])
}

// Group makes the cgroup of the user whose folder is userDir, or finds
// it, with the node's current limits set: before that user's app-server
// starts, so nothing it forks starts outside.
func (n *Node) Group(userDir string) (*Group, error) {
	if !n.Active() {
		return nil, ErrNoLimits
	}
	name := GroupName(userDir)
	n.mu.Lock()
	defer n.mu.Unlock()
	if g, ok := n.groups[name]; ok {
		return g, nil
	}
	im, err := n.b.group(name, n.limits)
	if err != nil {
		return nil, fmt.Errorf("making the user's cgroup %s: %w", name, err)
	}
	g := &Group{n: n, name: name, im: im}
	n.groups[name] = g
	n.weigh()
	return g, nil
}

// weigh gives the users' folder the CPU weight of as many default-weight
// processes as it holds users (with n.mu held). One folder of default
// weight made every user together weigh as much as one process beside
// the host's others (the daemon among them): under load their rounds got
// a share of the CPU a user's sandbox alone gets without limits, which
// made 20 users' rounds at once 1.2–1.4 times slower than the same
// without cgroups. The weight only shares out a contended CPU; each user's
// own cap is its cpu limit. Best effort: a weight that cannot be written
// leaves the scheduling as it was, and no limit is lost.
func (n *Node) weigh() {
	_ = n.b.weigh(len(n.groups))
}

// SetLimits sets l on every live group and on every group made from now
// on (a SIGHUP's reload). The first failure is returned; the others are
// still tried.
func (n *Node) SetLimits(l Limits) error {
	n.mu.Lock()
	defer n.mu.Unlock()
	n.limits = l
	var errs []error
	for _, g := range n.groups {
		if err := g.im.update(l); err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", g.name, err))
		}
	}
	return errors.Join(errs...)
}

// Sweep empties and removes the user cgroups a previous daemon of the
// same name left (it was killed, and its users' processes may live on):
// at start, before any user's app-server. It returns how many it found.
func (n *Node) Sweep(ctx context.Context) (int, error) {
	if !n.Active() {
		return 0, nil
	}
	names, err := n.b.children()
	if err != nil {
		return 0, err
	}
	var errs []error
	found := 0
	for _, name := range names {
		n.mu.Lock()
		_, live := n.groups[name]
		n.mu.Unlock()
		if live {
			continue
		}
		found++
		im, err := n.b.group(name, Limits{})
		if err != nil {
			errs = append(errs, err)
			continue
		}
		g := &Group{n: n, name: name, im: im}
		if err := g.Remove(ctx); err != nil {
			errs = append(errs, err)
		}
	}
	return found, errors.Join(errs...)
}

// Close empties and removes every user's group, live or left, and then
// the daemon's folder: the daemon's last act, once its app-servers are
// stopped.
func (n *Node) Close(ctx context.Context) error {
	if !n.Active() {
		return nil
	}
	n.mu.Lock()
	var live []*Group
	for _, g := range n.groups {
		live = append(live, g)
	}
	n.mu.Unlock()
	var errs []error
	for _, g := range live {
		if err := g.Remove(ctx); err != nil {
			errs = append(errs, err)
		}
	}
	if _, err := n.Sweep(ctx); err != nil {
		errs = append(errs, err)
	}
	if err := n.b.removeParent(); err != nil {
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}

// Group is one user's cgroup.
type Group struct {
	n      *Node
	name   string
	im     impl
	parent *Group // of a Child
	gone   Hits   // removed children's counts, where the kernel does not keep them (v1); under n.mu
}

// Name is the cgroup's name.
func (g *Group) Name() string { return g.name }

// Procs lists the processes in the group.
func (g *Group) Procs() ([]int, error) { return g.im.procs() }

// Usage is what the group holds now.
func (g *Group) Usage() Usage { return g.im.usage() }

// Hits counts the limits met so far in the group, children included
// (those removed too).
func (g *Group) Hits() Hits {
	h := g.im.hits()
	g.n.mu.Lock()
	defer g.n.mu.Unlock()
	h.OOMKills += g.gone.OOMKills
	h.Pids += g.gone.Pids
	return h
}

// Kill ends every process in the group, descendants that left their
// session or process group included, and waits until it is empty or ctx
// ends.
func (g *Group) Kill(ctx context.Context) error {
	for {
		pids, err := g.im.procs()
		if errors.Is(err, fs.ErrNotExist) || err == nil && len(pids) == 0 {
			return nil
		}
		if err != nil {
			return fmt.Errorf("emptying cgroup %s: %w", g.name, err)
		}
		if err := g.im.kill(); err != nil {
			return fmt.Errorf("emptying cgroup %s: %w", g.name, err)
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("emptying cgroup %s: %d processes left: %w", g.name, len(pids), ctx.Err())
		case <-time.After(10 * time.Millisecond): // a killed process takes a moment to leave
		}
	}
}

// Remove empties the group and removes it; the user's next start makes a
// fresh one.
func (g *Group) Remove(ctx context.Context) error {
	if err := g.Kill(ctx); err != nil {
		return err
	}
	g.n.mu.Lock()
	if g.n.groups[g.name] == g {
		delete(g.n.groups, g.name)
		g.n.weigh()
	}
	g.n.mu.Unlock()
	// What the child met, which v1 keeps in the child only, goes to the
	// parent once the child is gone (not before: it would count twice).
	h := g.im.hits()
	// A killed process can stay counted for a moment after it left the
	// list; the removal is retried until ctx ends.
	for {
		err := g.im.remove()
		if err == nil || errors.Is(err, fs.ErrNotExist) {
			if p := g.parent; p != nil && !g.im.hierarchical() {
				g.n.mu.Lock()
				p.gone.OOMKills += h.OOMKills + g.gone.OOMKills
				p.gone.Pids += h.Pids + g.gone.Pids
				g.n.mu.Unlock()
			}
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("removing cgroup %s: %w", g.name, err)
		case <-time.After(10 * time.Millisecond):
		}
	}
}

// Child makes a group inside g, with no limits of its own (g's bound
// it): one process's, so that the end of that process empties exactly
// what it started, and a start beside it is untouched.
func (g *Group) Child(name string) (*Group, error) {
	if strings.ContainsAny(name, "/.") || name == "" {
		return nil, fmt.Errorf("contain: bad child name %q", name)
	}
	full := g.name + "/" + name
	im, err := g.n.b.child(g.name, name)
	if err != nil {
		return nil, fmt.Errorf("making cgroup %s: %w", full, err)
	}
	return &Group{n: g.n, name: full, im: im, parent: g}, nil
}

// Release removes g if nothing is in it (its user stopped); a group that
// holds a process or a child stays.
func (g *Group) Release() bool {
	g.n.mu.Lock()
	defer g.n.mu.Unlock()
	if p, err := g.im.procs(); err != nil || len(p) > 0 {
		return false
	}
	if err := g.im.remove(); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return false
	}
	if g.n.groups[g.name] == g {
		delete(g.n.groups, g.name)
		g.n.weigh()
	}
	return true
}

// Start is how a process starts inside a group.
type Start struct {
	// Prefix is the command line the process is started under (it joins
	// the cgroup, sets its OOM score, switches uid when Credential was
	// given, and execs the rest): prepend it to the command.
	Prefix []string
	// Dir, when set, is the cgroup directory to start the process in
	// (clone3's CLONE_INTO_CGROUP: open it and set
	// SysProcAttr.UseCgroupFD).
	Dir string
	// SwitchesUID says Prefix switches to the credential given: the
	// process itself is started as the daemon's uid.
	SwitchesUID bool
}

// joinScript is the prefix's shell: it writes its own pid into each
// cgroup.procs file given before "--", raises its OOM score (as the
// daemon's uid, so the user's uid cannot lower it again), and execs the
// rest. It is /bin/sh rather than a helper of the daemon's own: a v1
// cgroup can only be joined from inside the new process, and a shell
// starts in well under a millisecond.
const joinScript = `adj=$1; shift
while [ "$1" != -- ]; do echo $$ > "$1" || exit 125; shift; done; shift
echo "$adj" > /proc/self/oom_score_adj || exit 125
exec "$@"`

// Start says how to start a process in the group, as cred when not nil.
func (g *Group) Start(cred *syscall.Credential) (Start, error) {
	files, dir := g.im.placement()
	s := Start{Dir: dir}
	s.Prefix = append([]string{"/bin/sh", "-c", joinScript, "meshweaver-join", strconv.Itoa(UserOOMScore)}, files...)
	s.Prefix = append(s.Prefix, "--")
	if cred != nil {
		if g.n.setpriv == "" {
			return Start{}, errors.New("setpriv (util-linux) not found: needed to switch uids after joining the cgroup")
		}
		s.SwitchesUID = true
		s.Prefix = append(s.Prefix, g.n.setpriv,
			"--reuid="+strconv.FormatUint(uint64(cred.Uid), 10), "--regid="+strconv.FormatUint(uint64(cred.Gid), 10),
			"--clear-groups", "--")
	}
	return s, nil
}

// ProtectSelf makes this process the last the OOM killer picks. It needs
// CAP_SYS_RESOURCE; without it the score stays and the error says so.
func ProtectSelf() error {
	if err := os.WriteFile("/proc/self/oom_score_adj", []byte(strconv.Itoa(DaemonOOMScore)), 0); err != nil {
		return fmt.Errorf("setting the daemon's oom_score_adj: %w", err)
	}
	return nil
}

// detect tells the hierarchy mounted at mount: 2 for cgroup2, 1 when the
// v1 memory, pids or cpu hierarchy is there, else 0.
func detect(mount string) int {
	var st syscall.Statfs_t
	if err := syscall.Statfs(mount, &st); err == nil && st.Type == cgroup2Magic {
		return 2
	}
	if _, err := os.Stat(filepath.Join(mount, "cgroup.controllers")); err == nil {
		return 2 // a test's fake tree
	}
	for _, c := range []string{"memory", "pids", "cpu"} {
		if _, err := os.Stat(filepath.Join(mount, c)); err == nil {
			return 1
		}
	}
	return 0
}

const cgroup2Magic = 0x63677270

// ownCgroup reads this process's cgroup path in hierarchy key ("" for
// v2's "0::", else a v1 controller name) from /proc/self/cgroup.
func ownCgroup(key string) (string, error) {
	data, err := os.ReadFile("/proc/self/cgroup")
	if err != nil {
		return "", err
	}
	for _, line := range strings.Split(strings.TrimSpace(string(data)), "\n") {
		parts := strings.SplitN(line, ":", 3)
		if len(parts) != 3 {
			continue
		}
		if key == "" && parts[0] == "0" && parts[1] == "" {
			return parts[2], nil
		}
		for _, c := range strings.Split(parts[1], ",") {
			if key != "" && c == key {
				return parts[2], nil
			}
		}
	}
	return "", fmt.Errorf("no %q hierarchy in /proc/self/cgroup", key)
}

// readKV reads one key's number from a "key value" file (memory.events,
// pids.events, memory.oom_control); 0 when absent.
func readKV(path, key string) int64 {
	f, err := os.Open(path)
	if err != nil {
		return 0
	}
	defer f.Close()
	s := bufio.NewScanner(f)
	for s.Scan() {
		k, v, ok := strings.Cut(s.Text(), " ")
		if ok && k == key {
			n, _ := strconv.ParseInt(strings.TrimSpace(v), 10, 64)
			return n
		}
	}
	return 0
}

// readInt reads a file holding one number; 0 when absent or "max".
func readInt(path string) int64 {
	data, err := os.ReadFile(path)
	if err != nil {
		return 0
	}
	n, _ := strconv.ParseInt(string(bytes.TrimSpace(data)), 10, 64)
	return n
}

// readPids reads a cgroup.procs file.
func readPids(path string) ([]int, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var out []int
	for _, f := range strings.Fields(string(data)) {
		if pid, err := strconv.Atoi(f); err == nil {
			out = append(out, pid)
		}
	}
	return out, nil
}

// rmdirTree removes the cgroup folder dir and every cgroup folder under
// it, deepest first (a cgroup's files go with its folder).
func rmdirTree(dir string) error {
	var dirs []string
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			dirs = append(dirs, p)
		}
		return nil
	})
	if err != nil {
		return err
	}
	for i := len(dirs) - 1; i >= 0; i-- {
		if err := os.Remove(dirs[i]); err != nil && !errors.Is(err, fs.ErrNotExist) {
			return err
		}
	}
	return nil
}

// userChildren names the "u-…" folders in dir.
func userChildren(dir string) ([]string, error) {
	entries, err := os.ReadDir(dir)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	var out []string
	for _, e := range entries {
		if e.IsDir() && strings.HasPrefix(e.Name(), "u-") {
			out = append(out, e.Name())
		}
	}
	sort.Strings(out)
	return out, nil
}

// quota is l's CPU as a CFS quota per 100 ms period (microseconds).
func quota(cpu float64) (int64, uint64) {
	const period = 100000
	return int64(math.Round(cpu * period)), period
}

// burst is the CFS burst a cap of cpu cores gets (microseconds; 0 for no
// cap): a whole period's quota, the most the kernel accepts (burst ≤
// quota). What a group left unused of its quota, up to that, it may spend
// on top of the quota later, so a CLI's start, which runs several threads
// at once for a moment after being idle, is not throttled, while a
// spinner that uses its whole quota every period saves nothing and stays
// held to the cap. The kernel fills the burst when it is written, so a
// new group's first start has it too.
func burst(cpu float64) int64 {
	if cpu <= 0 {
		return 0
	}
	q, _ := quota(cpu)
	return q
}

// memTotal is the node's memory, from /proc/meminfo.
func memTotal() (int64, error) {
	data, err := os.ReadFile("/proc/meminfo")
	if err != nil {
		return 0, err
	}
	for _, line := range strings.Split(string(data), "\n") {
		if f := strings.Fields(line); len(f) >= 2 && f[0] == "MemTotal:" {
			kb, err := strconv.ParseInt(f[1], 10, 64)
			if err == nil && kb > 0 {
				return kb << 10, nil
			}
		}
	}
	return 0, errors.New("no MemTotal in /proc/meminfo")
}

func lookPath(name string) (string, error) { return exec.LookPath(name) }

// Probe says what Open would enforce with o, changing nothing: for serve
// --check, which must not touch a running daemon's cgroups.
func Probe(o Options) Report {
	if o.Mount == "" {
		o.Mount = "/sys/fs/cgroup"
	}
	rep := Report{Missing: make(map[string]string)}
	version := o.Version
	if version == 0 {
		version = detect(o.Mount)
	}
	want := asked(o.Limits)
	writable := func(dir string) error {
		if err := unix.Access(dir, unix.W_OK); err != nil {
			return fmt.Errorf("the daemon may not write %s (%v): run it as root, or delegate the cgroup to it (systemd: Delegate=yes)", dir, err)
		}
		return nil
	}
	switch version {
	case 2:
		parent := o.Parent
		if parent == "" {
			parent, _ = ownCgroup("")
		}
		dir := filepath.Join(o.Mount, filepath.Clean("/"+parent))
		data, err := os.ReadFile(filepath.Join(dir, "cgroup.controllers"))
		werr := writable(dir)
		for _, c := range want {
			switch {
			case err != nil:
				rep.Missing[c] = fmt.Sprintf("reading %s: %v", dir, err)
			case !contains(strings.Fields(string(data)), c):
				rep.Missing[c] = fmt.Sprintf("the %s controller is not delegated to %s (systemd: Delegate=yes)", c, dir)
			case werr != nil:
				rep.Missing[c] = werr.Error()
			default:
				rep.Enforced = append(rep.Enforced, c)
			}
		}
		rep.Path = filepath.Join(dir, o.Name)
	case 1:
		for _, c := range want {
			own := o.Parent
			if own == "" {
				own, _ = ownCgroup(c)
			}
			dir := filepath.Join(o.Mount, c, filepath.Clean("/"+own))
			if _, err := os.Stat(dir); err != nil {
				rep.Missing[c] = fmt.Sprintf("no v1 %s hierarchy at %s", c, dir)
			} else if err := writable(dir); err != nil {
				rep.Missing[c] = err.Error()
			} else {
				rep.Enforced = append(rep.Enforced, c)
			}
		}
	default:
		for _, c := range want {
			rep.Missing[c] = fmt.Sprintf("no cgroup v2 and no v1 %s hierarchy under %s", c, o.Mount)
		}
	}
	if len(rep.Enforced) > 0 {
		rep.Version = version
	}
	return rep
}
