package bench

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"time"

	"github.com/meshweaver/supervisor/actors"
	"github.com/meshweaver/supervisor/client"
	"github.com/meshweaver/supervisor/contain"
)

// benchLimits are the limits of the limits rows: the containment issue's,
// but for the CPU, which is every core (the cap of one core has a row of
// its own).
func benchLimits() contain.Limits {
	return contain.Limits{Memory: 512 << 20, Pids: 256, CPU: float64(runtime.NumCPU()), Disk: 256 << 20}
}

func limitsOptions(name string, l contain.Limits) contain.Options {
	return contain.Options{Name: fmt.Sprintf("meshweaver-bench-%d-%s", os.Getpid(), name), Limits: l}
}

// LimitsMeasurable says why the limits rows would be left out on this
// host, or nil where they are measured.
func LimitsMeasurable() error {
	if rep := contain.Probe(limitsOptions("probe", benchLimits())); len(rep.Missing) > 0 {
		return fmt.Errorf("the host cannot enforce %v", rep.Missing)
	}
	return nil
}

// limitsFSSize is the sparse image the limits rows' homes are on: room for
// every side's users, of which each writes a few MiB.
const limitsFSSize = 4 << 30

// limits: a cold round (a user the daemon never saw) and a round after an
// idle eviction on a daemon whose users get cgroups, limits and a disk
// bound, against the same rounds on the same daemon's configuration
// without them; and the same on a third daemon whose users are capped at
// one core. The homes of all three are on an ext4 image the phase makes
// and mounts with project quotas (removed after), so the disk bound is a
// project quota and the sides write to the same kind of filesystem; where
// the kernel has no quotas, the homes stay where they are and the bound is
// a home image. Where the host cannot enforce limits (not root, no cgroup
// controllers), the rows are left out and the progress says why.
func (r *run) limits(ctx context.Context) (err error) {
	var nodes []*contain.Node
	var disks []*contain.Disk
	defer func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		for _, n := range nodes {
			err = errors.Join(err, n.Close(ctx))
		}
		for _, d := range disks {
			err = errors.Join(err, d.Close())
		}
	}()
	open := func(name string, l contain.Limits) (*contain.Node, error) {
		n, err := contain.Open(limitsOptions(name, l))
		if err != nil {
			return nil, err
		}
		nodes = append(nodes, n)
		if rep := n.Report(); len(rep.Missing) > 0 || !n.Active() {
			return nil, fmt.Errorf("the host cannot enforce them: %v", rep.Missing)
		}
		return n, nil
	}
	cpu1 := benchLimits()
	cpu1.CPU = 1
	node, err := open("all", benchLimits())
	if err == nil {
		_, err = open("cpu1", cpu1)
	}
	if err != nil {
		r.progress("  limits: not measured: %v", err)
		return nil
	}
	nodeCPU1 := nodes[1]

	onCfg, offCfg, cpuCfg := r.daemonConfig("limits-on"), r.daemonConfig("limits-off"), r.daemonConfig("limits-cpu1")
	quotas := false
	qfs, qerr := contain.MakeQuotaFS(ctx, filepath.Join(r.opts.Dir, "limits-homes.img"), filepath.Join(r.opts.Dir, "limits-homes"), limitsFSSize)
	if qerr == nil {
		defer func() { err = errors.Join(err, qfs.Close()) }()
		for _, c := range []*actors.Config{&onCfg, &offCfg, &cpuCfg} {
			c.Homes = filepath.Join(qfs.Dir, filepath.Base(c.Homes))
		}
		quotas = true
	} else {
		r.progress("  limits: no project quotas here (%v); the disk bound is a home image", qerr)
	}
	diskFor := func(homes string) *contain.Disk {
		// The bench's daemons run without sandboxes: quotas are taken
		// where the filesystem has them, as serve takes them with
		// bubblewrap on.
		d, err := contain.OpenDiskOn(homes, benchLimits().Disk, quotas)
		if err != nil {
			r.progress("  limits: without a disk bound: %v", err)
			return nil
		}
		disks = append(disks, d)
		return d
	}
	disk, diskCPU1 := diskFor(onCfg.Homes), diskFor(cpuCfg.Homes)

	// The daemons stop idle app-servers after a second: the second row is
	// a known user's round after that (its cgroup and its process's are
	// made again; its home is bound already).
	onDeps, cpuDeps := quiet(), quiet()
	onDeps.Contain, onDeps.Disk = node, disk
	cpuDeps.Contain, cpuDeps.Disk = nodeCPU1, diskCPU1
	onCfg.IdleTimeout, offCfg.IdleTimeout, cpuCfg.IdleTimeout = time.Second, time.Second, time.Second
	on, onC, err := r.startDaemon(onCfg, onDeps)
	if err != nil {
		return err
	}
	defer func() { onC.Close(); err = errors.Join(err, on.Stop()) }()
	off, offC, err := r.startDaemon(offCfg, quiet())
	if err != nil {
		return err
	}
	defer func() { offC.Close(); err = errors.Join(err, off.Stop()) }()
	cpu, cpuC, err := r.startDaemon(cpuCfg, cpuDeps)
	if err != nil {
		return err
	}
	defer func() { cpuC.Close(); err = errors.Join(err, cpu.Stop()) }()

	r.progress("  cold rounds with limits on, off, and at one core: %d per side", r.opts.Cold)
	var newOn, newOff, newCPU, evOn, evOff, evCPU timings
	side := func(c *client.Client, user string, into *timings) func() error {
		return func() error {
			o, err := daemonRound(ctx, c, user, "c", text)
			into.add(o.Timing)
			return err
		}
	}
	evicted := func(homes, user string) error {
		record, err := procRecord(homes, user)
		if err != nil {
			return err
		}
		return waitUntil(ctx, time.Minute, "the idle eviction", func() bool {
			_, err := os.Stat(record)
			return errors.Is(err, os.ErrNotExist)
		})
	}
	for i := range r.opts.Cold {
		user := fmt.Sprintf("limits-%d", i)
		if err := r.inTurn(side(onC, user, &newOn), side(offC, user, &newOff), side(cpuC, user, &newCPU)); err != nil {
			return err
		}
		if err := errors.Join(evicted(onCfg.Homes, user), evicted(offCfg.Homes, user), evicted(cpuCfg.Homes, user)); err != nil {
			return err
		}
		if err := r.inTurn(side(onC, user, &evOn), side(offC, user, &evOff), side(cpuC, user, &evCPU)); err != nil {
			return err
		}
	}
	what := fmt.Sprintf("cgroups (memory 512MiB, 256 pids, %%s cores)")
	if k := disk.Kind(); k != "" {
		what += " and a 256MiB home " + k
	}
	first := len(r.rows)
	all := fmt.Sprintf(what, strconv.Itoa(runtime.NumCPU()))
	r.pair("new user's first round, limits on", &newOn, &newOff, "the same daemon, limits off", all+", made for the user")
	r.pair("round after an idle eviction, limits on", &evOn, &evOff, "the same daemon, limits off", all+"; target ≤ 1.02")
	one := fmt.Sprintf(what, "1 (burst: one period's quota)")
	r.pair("new user's first round, --user-cpu-max 1", &newCPU, &newOff, "the same daemon, limits off", one+", made for the user")
	r.pair("round after an idle eviction, --user-cpu-max 1", &evCPU, &evOff, "the same daemon, limits off", one+"; target ≤ 1.02")
	for i := first; i < len(r.rows); i++ {
		r.rows[i].Config = ConfigIsoOff + ", limits on"
	}
	return nil
}
