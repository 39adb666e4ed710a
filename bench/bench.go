package bench

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/meshweaver/supervisor/actors"
	"github.com/meshweaver/supervisor/client"
	"github.com/meshweaver/supervisor/codexproc"
	"github.com/meshweaver/supervisor/codexproto"
	"github.com/meshweaver/supervisor/demomodel"
	"github.com/meshweaver/supervisor/isolate"
	"github.com/meshweaver/supervisor/messages"
)

// Daemon is a daemon the bench started through Options.StartDaemon.
type Daemon interface {
	// Addr is the daemon's remote address.
	Addr() string
	// Stop drains and stops it, app-servers included.
	Stop() error
}

// Counts are how many samples each measurement takes.
type Counts struct {
	Rounds          int `json:"rounds"`           // warm rounds per side
	Cold            int `json:"cold"`             // cold rounds (a new user, a new client) per side
	Evict           int `json:"evict"`            // rounds after an idle eviction per side
	Users           int `json:"users"`            // users at once
	Batches         int `json:"batches"`          // batches of Users rounds per side
	Events          int `json:"events"`           // deltas in one flood round
	Floods          int `json:"floods"`           // flood rounds (and raw bursts)
	IdleUsers       int `json:"idle_users"`       // registered idle users for the memory row
	RegistryThreads int `json:"registry_threads"` // mesh threads of the big registry
	Fallbacks       int `json:"fallbacks"`        // fallback rounds per size
	MCPCalls        int `json:"mcp_calls"`        // MCP calls per side
}

// DefaultCounts are the counts of a full run (a few minutes on 2 cores).
func DefaultCounts() Counts {
	return Counts{Rounds: 60, Cold: 10, Evict: 5, Users: 20, Batches: 3, Events: 20000, Floods: 5,
		IdleUsers: 10000, RegistryThreads: 10000, Fallbacks: 5, MCPCalls: 300}
}

// QuickCounts are the counts of --quick: every row, fewer samples.
func QuickCounts() Counts {
	return Counts{Rounds: 8, Cold: 2, Evict: 2, Users: 5, Batches: 2, Events: 5000, Floods: 2,
		IdleUsers: 1000, RegistryThreads: 1000, Fallbacks: 2, MCPCalls: 50}
}

// Options configures a run.
type Options struct {
	Counts
	// Codex is the codex binary both sides run.
	Codex string
	// Dir holds the homes, the workspace and the empty HOME; it must
	// exist and be empty.
	Dir string
	// StartDaemon starts a daemon with cfg and deps (the bench fills
	// Homes, Workspace, CodexBin and what the row needs) behind a remote
	// on a free loopback port, its edge letting the bench's one caller
	// send as fast as it likes.
	StartDaemon func(cfg actors.Config, deps actors.Deps) (Daemon, error)
	// FloodLaunch is the binary, arguments and extra environment that run
	// ServeFlood with deltas deltas a turn as the events row's app-server
	// (supervisor bench: its own binary, in a hidden command).
	FloodLaunch func(deltas int) (bin string, args, env []string, err error)
	// Progress receives a line per phase (nil: none).
	Progress io.Writer
	// WarmUp, when set, warms a user (and its mesh thread) up ahead of its
	// first round, as a mesh does when a person opens a chat; it returns
	// once the user's first round would run warm. With it the bench adds
	// the row "first round after a warm-up" against a direct cold round.
	WarmUp func(ctx context.Context, c *client.Client, user, thread string) error
	// Isolate, when set, builds the users' separation serve builds by
	// default for a daemon with these homes and workspace; the deployed
	// rows run with it (as root, with bubblewrap).
	Isolate func(homes, workspace string) (*isolate.Node, error)
	// Only, when set, runs these phases alone: "rounds", "events", "mcp",
	// "memory", "limits", "deployed".
	Only []string
}

// run is one bench run's shared state.
type run struct {
	opts      Options
	model     *demomodel.Server
	workspace string
	home      string // the empty HOME of every CLI
	env       []string
	overrides []string
	rows      []Row
	seq       int
	rng       *rand.Rand // the order of a round's sides
}

// roundTimeout bounds one round or one direct turn.
const roundTimeout = 2 * time.Minute

// Run measures every row and returns them.
func Run(ctx context.Context, opts Options) (*Result, error) {
	if opts.StartDaemon == nil || opts.FloodLaunch == nil || opts.Codex == "" || opts.Dir == "" {
		return nil, errors.New("bench: Codex, Dir, StartDaemon and FloodLaunch are required")
	}
	c := &opts.Counts
	for _, n := range []*int{&c.Rounds, &c.Cold, &c.Evict, &c.Users, &c.Batches, &c.Events, &c.Floods, &c.IdleUsers, &c.RegistryThreads, &c.Fallbacks, &c.MCPCalls} {
		if *n < 1 {
			*n = 1
		}
	}
	start := time.Now()
	load, _ := os.ReadFile("/proc/loadavg")
	r := &run{opts: opts, workspace: filepath.Join(opts.Dir, "workspace"), home: filepath.Join(opts.Dir, "home"),
		rng: rand.New(rand.NewPCG(12, 1))} // one seed: every run interleaves alike
	for _, d := range []string{r.workspace, r.home} {
		if err := os.MkdirAll(d, 0o700); err != nil {
			return nil, err
		}
	}
	model, err := demomodel.Start(demomodel.Options{Responder: demomodel.DemoResponder})
	if err != nil {
		return nil, err
	}
	defer model.Close()
	r.model = model
	r.overrides = demomodel.Overrides(model.URL())
	// The CLI's login shells must not read the operator's profile, and
	// its temporary files go where the daemon's go.
	r.env = []string{"HOME=" + r.home, "TMPDIR=/var/tmp"}

	type phase struct {
		key, name string
		f         func(context.Context) error
	}
	phases := []phase{
		{"rounds", "rounds (warm, cold, evicted, users at once, growth)", r.realRounds},
		{"events", "events through the remote", r.events},
		{"mcp", "MCP calls through the front", r.mcpFront},
		{"memory", "idle users' memory", r.idleMemory},
		{"limits", "per-user limits' cost to a cold round", r.limits},
		{"deployed", "users at once, the daemon isolated as deployed", r.deployed},
	}
	for _, k := range opts.Only {
		if !slices.ContainsFunc(phases, func(p phase) bool { return p.key == k }) {
			return nil, fmt.Errorf("bench: no phase %q (rounds, events, mcp, memory, limits, deployed)", k)
		}
	}
	for _, p := range phases {
		if len(opts.Only) > 0 && !slices.Contains(opts.Only, p.key) {
			continue
		}
		r.progress("bench: %s", p.name)
		if err := p.f(ctx); err != nil {
			return nil, fmt.Errorf("bench: %s: %w", p.name, err)
		}
	}
	for i := range r.rows {
		if r.rows[i].Config == "" {
			r.rows[i].Config = ConfigIsoOff
		}
	}
	return &Result{
		Started: start.UTC(), Took: time.Since(start).Round(time.Second).String(), Codex: opts.Codex,
		Load: strings.TrimSpace(string(load)), Options: opts.Counts, Rows: r.rows,
	}, nil
}

func (r *run) progress(format string, args ...any) {
	if r.opts.Progress != nil {
		fmt.Fprintf(r.opts.Progress, format+"\n", args...)
	}
}

// daemonConfig is the real-CLI daemon's configuration: what `demo` gives
// it, with homes of its own under the run's folder.
func (r *run) daemonConfig(name string) actors.Config {
	return actors.Config{
		Homes: filepath.Join(r.opts.Dir, "homes-"+name), Workspace: r.workspace,
		CodexBin: r.opts.Codex, Overrides: r.overrides, CodexEnv: r.env,
		MaxUsers: max(r.opts.IdleUsers+100, 10000),
	}
}

// quiet are a daemon's dependencies when the row needs none: its log goes
// nowhere.
func quiet() actors.Deps { return actors.Deps{Logger: slog.New(slog.DiscardHandler)} }

// directConfig is a direct client's configuration with a home of its own.
func (r *run) directConfig() DirectConfig {
	r.seq++
	return DirectConfig{
		Bin: r.opts.Codex, Home: filepath.Join(r.opts.Dir, "direct", fmt.Sprintf("c%03d", r.seq)), Dir: r.workspace,
		Overrides: r.overrides, Env: codexproc.AllowedEnv(os.Environ(), r.env),
		Sandbox: codexproto.SandboxReadOnly, Approval: codexproto.ApprovalNever,
	}
}

// startDaemon starts a daemon and dials it.
func (r *run) startDaemon(cfg actors.Config, deps actors.Deps) (Daemon, *client.Client, error) {
	d, err := r.opts.StartDaemon(cfg, deps)
	if err != nil {
		return nil, nil, err
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	c, err := client.Dial(ctx, d.Addr(), client.WithLogger(slog.New(slog.DiscardHandler)))
	if err != nil {
		_ = d.Stop()
		return nil, nil, err
	}
	return d, c, nil
}

// roundOutcome is what a daemon round gave, besides its timing.
type roundOutcome struct {
	Timing
	verdict messages.RoundFinished
	events  int
}

// daemonRound runs one round through the daemon and times it from the
// send: to the first text event, to the verdict.
func daemonRound(ctx context.Context, c *client.Client, user, thread, text string) (roundOutcome, error) {
	return daemonRoundReq(ctx, c, messages.StartRound{User: user, Thread: thread, Text: text})
}

// daemonRoundReq is daemonRound with the whole request.
func daemonRoundReq(ctx context.Context, c *client.Client, req messages.StartRound) (roundOutcome, error) {
	user, thread := req.User, req.Thread
	ctx, cancel := context.WithTimeout(ctx, roundTimeout)
	defer cancel()
	var out roundOutcome
	start := time.Now()
	rd, err := c.Round(ctx, req)
	if err != nil {
		return out, err
	}
	for e := range rd.Events() {
		out.events++
		if e.Kind == messages.KindText && out.FirstDelta == 0 {
			out.FirstDelta = time.Since(start)
		}
	}
	v, err := rd.Wait()
	out.Verdict, out.verdict = time.Since(start), v
	if err != nil {
		return out, err
	}
	if v.Status != messages.StatusCompleted {
		return out, fmt.Errorf("round of %s/%s: %s: %s", user, thread, v.Status, v.Error)
	}
	if out.FirstDelta == 0 {
		out.FirstDelta = out.Verdict
	}
	return out, nil
}

// timings collects first-delta and verdict samples.
type timings struct {
	mu           sync.Mutex
	first, whole []time.Duration
}

func (t *timings) add(x Timing) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.first = append(t.first, x.FirstDelta)
	t.whole = append(t.whole, x.Verdict)
}

// pair adds the two rows (first delta, verdict) of daemon against base.
func (r *run) pair(name string, daemon, base *timings, baseName, note string) {
	r.rows = append(r.rows,
		row(name+": send → first text", "ms", ms(daemon.first), baseName, ms(base.first), note),
		row(name+": send → verdict", "ms", ms(daemon.whole), baseName, ms(base.whole), ""))
}

// parallel runs f(0..n-1) at once and returns the first error.
func parallel(n int, f func(i int) error) error {
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() { errs[i] = f(i) })
	}
	wg.Wait()
	return errors.Join(errs...)
}

// waitUntil polls cond every 20ms until it holds or the deadline passes:
// the bench watches processes that are not its children, which send no
// event when they end.
func waitUntil(ctx context.Context, d time.Duration, what string, cond func() bool) error {
	ctx, cancel := context.WithTimeout(ctx, d)
	defer cancel()
	t := time.NewTicker(20 * time.Millisecond)
	defer t.Stop()
	for !cond() {
		select {
		case <-ctx.Done():
			return fmt.Errorf("waiting for %s: %w", what, ctx.Err())
		case <-t.C:
		}
	}
	return nil
}
