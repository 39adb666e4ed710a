package bench

import (
	"context"
	"errors"
	"fmt"
	"os"
	"time"

	"github.com/meshweaver/supervisor/actors"
	"github.com/meshweaver/supervisor/client"
	"github.com/meshweaver/supervisor/codexproc"
	"github.com/meshweaver/supervisor/contain"
	"github.com/meshweaver/supervisor/isolate"
	"github.com/meshweaver/supervisor/procs"
	"github.com/prometheus/procfs"
)

// Configurations of the deployed rows, named in Row.Config.
const (
	ConfigIsoOff     = "isolation off"
	ConfigUIDBwrap   = "uid+bwrap"
	ConfigUIDBwrapLi = "uid+bwrap+limits"
)

// sideHomes names each configuration's homes (Options.Dir/homes-<name>).
var sideHomes = map[string]string{ConfigIsoOff: "deployed-off", ConfigUIDBwrap: "deployed-iso", ConfigUIDBwrapLi: "deployed-limits"}

// deployedSide is one daemon of the deployed rows.
type deployedSide struct {
	config string
	c      *client.Client
	t      timings
	wall   []time.Duration
}

// deployed: Users users at once, the daemon as serve runs it as root
// (each user's app-server under a uid of its own in a bubblewrap sandbox;
// then with serve's default per-user limits too, contain.Defaults), against the same daemon with
// isolation off and against as many direct clients. All sides are live
// at once and take their batches in a random order, so every ratio is
// against the one set of direct clients of the same run; besides the
// rounds' own times, each batch's wall time (its first send to its last
// verdict). Where the host cannot isolate (not root, no bubblewrap, a
// folder of the run the users' uids cannot reach), the rows with
// isolation are left out and the progress says why.
func (r *run) deployed(ctx context.Context) (err error) {
	if r.opts.Isolate == nil {
		r.progress("  deployed: not measured: no Options.Isolate")
		return nil
	}
	// The users' uids pass through the run's folder to their homes and
	// read the workspace, as they do a deployed daemon's.
	if err := errors.Join(os.Chmod(r.opts.Dir, 0o711), os.Chmod(r.workspace, 0o755)); err != nil {
		return err
	}
	// Isolation off as serve has it (--uid-range off --bwrap off
	// --allow-shared-uid): each CLI's HOME is its user's home.
	off := r.daemonConfig(sideHomes[ConfigIsoOff])
	shared, err := isolate.New(isolate.Options{Homes: off.Homes, Workspace: off.Workspace, AllowShared: true})
	if err != nil {
		return err
	}
	offDeps := quiet()
	offDeps.Isolation = shared
	sides := []*deployedSide{{config: ConfigIsoOff}}
	d, c, err := r.startDaemon(off, offDeps)
	if err != nil {
		return err
	}
	defer func() { c.Close(); err = errors.Join(err, d.Stop()) }()
	sides[0].c = c

	iso, why := r.isolation(r.daemonConfig(sideHomes[ConfigUIDBwrap]))
	if why != "" {
		r.progress("  deployed: isolation rows not measured: %s", why)
	}
	if iso != nil {
		cfg := r.daemonConfig(sideHomes[ConfigUIDBwrap])
		deps := quiet()
		deps.Isolation = iso
		d, c, err := r.startDaemon(cfg, deps)
		if err != nil {
			return err
		}
		defer func() { c.Close(); err = errors.Join(err, d.Stop()) }()
		sides = append(sides, &deployedSide{config: ConfigUIDBwrap, c: c})

		if err := LimitsMeasurable(); err != nil {
			r.progress("  deployed: limits row not measured: %v", err)
		} else {
			cfg := r.daemonConfig(sideHomes[ConfigUIDBwrapLi])
			lim, why := r.isolation(cfg)
			if lim == nil {
				return fmt.Errorf("isolating the limits side: %s", why)
			}
			// serve's default limits, which protect a node whose operator
			// set none (no home image: that needs --user-disk-max).
			node, err := contain.Open(limitsOptions("deployed", contain.Defaults()))
			if err != nil {
				return err
			}
			defer func() {
				ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
				defer cancel()
				err = errors.Join(err, node.Close(ctx))
			}()
			deps := quiet()
			deps.Isolation, deps.Contain = lim, node
			d, c, err := r.startDaemon(cfg, deps)
			if err != nil {
				return err
			}
			defer func() { c.Close(); err = errors.Join(err, d.Stop()) }()
			sides = append(sides, &deployedSide{config: ConfigUIDBwrapLi, c: c})
		}
	}

	n := r.opts.Users
	r.progress("  %d users at once as deployed (%d daemons and the direct clients): %d batches per side", n, len(sides), r.opts.Batches)
	user := func(i int) string { return fmt.Sprintf("deployed-%d", i) }
	for _, s := range sides { // every user's app-server and thread warm
		if err := parallel(n, func(i int) error { _, err := daemonRound(ctx, s.c, user(i), "c", text); return err }); err != nil {
			return fmt.Errorf("%s: %w", s.config, err)
		}
	}
	cfgs := make([]DirectConfig, n)
	for i := range cfgs {
		if cfgs[i], err = r.ownDirectConfig(); err != nil {
			return err
		}
	}
	clients, threads, err := r.startDirects(ctx, cfgs)
	defer closeDirects(clients)
	if err != nil {
		return err
	}
	// Each live user's app-server (its tree: bubblewrap, the CLI) and
	// each direct client's CLI, for their CPU over the batches and their
	// memory after.
	pids := make(map[*deployedSide][]int)
	for _, s := range sides {
		homes := r.daemonConfig(sideHomes[s.config]).Homes
		for i := range n {
			pid, err := livePID(homes, user(i))
			if err != nil {
				return fmt.Errorf("%s: %w", s.config, err)
			}
			pids[s] = append(pids[s], pid)
		}
	}
	directPIDs := make([]int, n)
	for i, dc := range clients {
		directPIDs[i] = dc.PID()
	}
	cpuBefore := make(map[*deployedSide][]float64)
	for _, s := range sides {
		cpuBefore[s] = treeCPUs(pids[s])
	}
	directCPUBefore := treeCPUs(directPIDs)
	var direct timings
	var directWall []time.Duration
	turns := make([]func() error, 0, len(sides)+1)
	for _, s := range sides {
		turns = append(turns, func() error {
			start := time.Now()
			err := parallel(n, func(i int) error {
				o, err := daemonRound(ctx, s.c, user(i), "c", text)
				s.t.add(o.Timing)
				return err
			})
			s.wall = append(s.wall, time.Since(start))
			if err != nil {
				return fmt.Errorf("%s: %w", s.config, err)
			}
			return nil
		})
	}
	turns = append(turns, func() error {
		start := time.Now()
		err := parallel(n, func(i int) error {
			t, err := r.directTurn(ctx, clients[i], threads[i])
			direct.add(t)
			return err
		})
		directWall = append(directWall, time.Since(start))
		return err
	})
	for range r.opts.Batches {
		if err := r.inTurn(turns...); err != nil {
			return err
		}
	}
	perRound := func(before, after []float64) []float64 {
		out := make([]float64, len(before))
		for i := range before {
			out[i] = (after[i] - before[i]) * 1000 / float64(r.opts.Batches)
		}
		return out
	}
	directCPU := perRound(directCPUBefore, treeCPUs(directPIDs))
	// The memory of a live user: its app-server's whole process tree
	// (bubblewrap's included), against a direct client's CLI.
	directPSS, err := treePSSes(directPIDs)
	if err != nil {
		return err
	}
	base := fmt.Sprintf("%d direct clients", n)
	for _, s := range sides {
		cpu := perRound(cpuBefore[s], treeCPUs(pids[s]))
		pss, err := treePSSes(pids[s])
		if err != nil {
			return fmt.Errorf("%s: %w", s.config, err)
		}
		name := fmt.Sprintf("%d users at once, %s", n, s.config)
		first := len(r.rows)
		r.pair(name, &s.t, &direct, base, "")
		r.rows = append(r.rows,
			row(name+": batch wall", "ms", ms(s.wall), base, ms(directWall), "a batch's first send to its last verdict"),
			row(name+": rounds a second", "rounds/s", rate(n, s.wall), base, rate(n, directWall), "a batch's rounds over its wall time"),
			row(fmt.Sprintf("app-server CPU per round, %s", s.config), "ms", cpu, "direct client's CLI", directCPU,
				"utime+stime of the user's app-server and every process under it over the batches, per round"),
			row(fmt.Sprintf("memory per live user, %s", s.config), "MiB", pss, "direct client's CLI", directPSS,
				"proportional set size (PSS) of the user's app-server and every process under it (bubblewrap's), after the batches"))
		for i := first; i < len(r.rows); i++ {
			r.rows[i].Config = s.config
		}
		if s.config == ConfigUIDBwrapLi {
			r.rows[first].Note = "serve's default limits: " + contain.Defaults().String()
		}
	}
	return nil
}

// isolation is the users' separation of a daemon with cfg's homes as
// serve builds it here; nil and why where the host cannot separate them
// or the users' uids cannot reach a folder of the run.
func (r *run) isolation(cfg actors.Config) (*isolate.Node, string) {
	if os.Geteuid() != 0 {
		return nil, "not root: no uid switch"
	}
	for _, p := range []string{cfg.Homes, r.workspace} {
		if blocked, err := isolate.Unreachable(p); err != nil || blocked != "" {
			return nil, fmt.Sprintf("the users' uids cannot reach %s (%v %s)", p, err, blocked)
		}
	}
	node, err := r.opts.Isolate(cfg.Homes, cfg.Workspace)
	if err != nil {
		return nil, err.Error()
	}
	if node.Mode() != "uid+bwrap" {
		return nil, "the host gives " + node.Mode() + ", not uid+bwrap"
	}
	return node, ""
}

// rate is n rounds over each wall time, a second.
func rate(n int, walls []time.Duration) []float64 {
	out := make([]float64, len(walls))
	for i, w := range walls {
		out[i] = float64(n) / w.Seconds()
	}
	return out
}

// treeCPUs is the user and system CPU, in seconds, of each pid's process
// and every process under it.
func treeCPUs(pids []int) []float64 {
	out := make([]float64, len(pids))
	for i, pid := range pids {
		out[i] = cpuTime(pid)
		for _, id := range procs.Host().Descendants(pid) {
			out[i] += cpuTime(id.PID)
		}
	}
	return out
}

// treePSSes is treePSS of each pid, in MiB.
func treePSSes(pids []int) ([]float64, error) {
	out := make([]float64, len(pids))
	for i, pid := range pids {
		m, err := treePSS(pid)
		if err != nil {
			return nil, err
		}
		out[i] = m / (1 << 20)
	}
	return out, nil
}

// treePSS is the proportional set size of pid and every process under it,
// in bytes.
func treePSS(pid int) (float64, error) {
	ids := append([]procs.ID{{PID: pid}}, procs.Host().Descendants(pid)...)
	var sum float64
	for _, id := range ids {
		p, err := procfs.NewProc(id.PID)
		if err != nil {
			return 0, err
		}
		m, err := p.ProcSMapsRollup()
		if err != nil {
			return 0, fmt.Errorf("memory of pid %d: %w", id.PID, err)
		}
		sum += float64(m.Pss)
	}
	return sum, nil
}

// ownDirectConfig is a direct client's configuration with a HOME, a
// TMPDIR and a session of its own, as each isolated CLI has (its home, a
// private /var/tmp, bubblewrap's --new-session): the deployed rows'
// baseline.
func (r *run) ownDirectConfig() (DirectConfig, error) {
	c := r.directConfig()
	c.OwnSession = true
	tmp := c.Home + "-tmp"
	c.Env = codexproc.AllowedEnv(os.Environ(), append(append([]string{}, r.env...), "HOME="+c.Home, "TMPDIR="+tmp))
	return c, os.MkdirAll(tmp, 0o700)
}
