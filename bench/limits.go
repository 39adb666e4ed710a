package bench

import (
	"context"
	"errors"
	"fmt"
	"os"
	"runtime"
	"time"

	"github.com/meshweaver/supervisor/client"
	"github.com/meshweaver/supervisor/contain"
)

// benchLimits are the limits of the limits rows: the containment issue's,
// but for the CPU, which is every core: a cap of one core slows a CLI's
// start, which runs several threads at once (that is the cap working, not
// the cost of making it; 1.10 in one run).
func benchLimits() contain.Limits {
	return contain.Limits{Memory: 512 << 20, Pids: 256, CPU: float64(runtime.NumCPU()), Disk: 256 << 20}
}

func limitsOptions() contain.Options {
	return contain.Options{Name: fmt.Sprintf("meshweaver-bench-%d", os.Getpid()), Limits: benchLimits()}
}

// LimitsMeasurable says why the limits rows would be left out on this
// host, or nil where they are measured.
func LimitsMeasurable() error {
	if rep := contain.Probe(limitsOptions()); len(rep.Missing) > 0 {
		return fmt.Errorf("the host cannot enforce %v", rep.Missing)
	}
	return nil
}

// limits: a cold round (a user the daemon never saw) on a daemon whose
// users get cgroups, limits and a home image, against the same round on
// the same daemon's configuration without them: what making the cgroup,
// the process's cgroup inside it, the join before exec and the image
// (mkfs and mount on a user's first start) cost a round. Where the host
// cannot enforce limits (not root, no cgroup controllers), the row is
// left out and the progress says why.
func (r *run) limits(ctx context.Context) (err error) {
	node, err := contain.Open(limitsOptions())
	if err != nil {
		return err
	}
	if rep := node.Report(); len(rep.Missing) > 0 || !node.Active() {
		r.progress("  limits: not measured, the host cannot enforce them: %v", rep.Missing)
		return nil
	}
	defer func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		err = errors.Join(err, node.Close(ctx))
	}()
	disk, derr := contain.OpenDisk(benchLimits().Disk)
	withDisk := derr == nil
	if !withDisk {
		r.progress("  limits: without the home image: %v", derr)
		disk = nil
	}
	defer func() { err = errors.Join(err, disk.Close()) }()

	// Both daemons stop idle app-servers after a second: the second row
	// is a known user's round after that (its cgroup and its process's
	// are made again, its image is mounted already).
	onCfg, offCfg := r.daemonConfig("limits-on"), r.daemonConfig("limits-off")
	onDeps := quiet()
	onDeps.Contain, onDeps.Disk = node, disk
	onCfg.IdleTimeout, offCfg.IdleTimeout = time.Second, time.Second
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

	r.progress("  cold rounds with limits on and off: %d per side", r.opts.Cold)
	var newOn, newOff, evOn, evOff timings
	side := func(c *client.Client, homes, user string, into *timings) func() error {
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
		if err := r.inTurn(side(onC, onCfg.Homes, user, &newOn), side(offC, offCfg.Homes, user, &newOff)); err != nil {
			return err
		}
		if err := errors.Join(evicted(onCfg.Homes, user), evicted(offCfg.Homes, user)); err != nil {
			return err
		}
		if err := r.inTurn(side(onC, onCfg.Homes, user, &evOn), side(offC, offCfg.Homes, user, &evOff)); err != nil {
			return err
		}
	}
	what := fmt.Sprintf("cgroups (memory 512MiB, 256 pids, %d cores)", runtime.NumCPU())
	if withDisk {
		what += " and a 256MiB home image"
	}
	first := len(r.rows)
	r.pair("new user's first round, limits on", &newOn, &newOff, "the same daemon, limits off", what+", made for the user")
	r.pair("round after an idle eviction, limits on", &evOn, &evOff, "the same daemon, limits off", what+"; target ≤ 1.02")
	for i := first; i < len(r.rows); i++ {
		r.rows[i].Config = ConfigIsoOff + ", limits on"
	}
	return nil
}
