package bench

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/meshweaver/supervisor/actors"
	"github.com/meshweaver/supervisor/client"
	"github.com/meshweaver/supervisor/mcpecho"
	"github.com/meshweaver/supervisor/messages"
	"github.com/meshweaver/supervisor/store"
	"github.com/prometheus/procfs"
)

// text is every round's message; the demo model echoes it word by word.
const text = "Hello there, how is the weather in the workspace today?"

// realRounds runs the rows that need the real CLI: warm, cold, after an
// eviction, users at once (with the memory of live users), and growth.
func (r *run) realRounds(ctx context.Context) (err error) {
	d, c, err := r.startDaemon(r.daemonConfig("a"), quiet())
	if err != nil {
		return err
	}
	defer func() {
		c.Close()
		err = errors.Join(err, d.Stop())
	}()
	homes := r.daemonConfig("a").Homes
	for _, f := range []func(context.Context, *client.Client, string) error{r.warm, r.cold, r.warmedUp, r.crowd, r.registryGrowth, r.fallbackGrowth} {
		if err := f(ctx, c, homes); err != nil {
			return err
		}
	}
	return r.evicted(ctx)
}

// warm: the same thread, round after round, in a live app-server; the
// same with the mesh's MCP back-connection (an mcpecho server) and a new
// bearer token every round, as a mesh sends them, for another user, so
// that each CLI on either side holds one thread, as the direct client's
// does; and two more sides, direct clients that replay what the daemon
// asked the CLI before each turn before issue 12 (thread/unsubscribe,
// thread/resume), with and without its config overlay, which split the
// daemon's extra time into the CLI's part and the daemon's own.
func (r *run) warm(ctx context.Context, c *client.Client, homes string) error {
	r.progress("  warm rounds: %d per side", r.opts.Rounds)
	dc, err := StartDirect(ctx, r.directConfig())
	if err != nil {
		return err
	}
	defer dc.Close()
	thread, err := dc.StartThread(ctx)
	if err != nil {
		return err
	}
	// Two replays of what the daemon asks before each turn: with the
	// config overlay it sends today with a round that has no MCP
	// back-connection (actors/round.go, overlay), and without one.
	overlay := map[string]any{"mcp_servers": map[string]any{"meshweaver": map[string]any{
		"url": "http://127.0.0.1:9/disabled", "enabled": false,
	}}}
	replays := []*replayer{{name: "direct replaying the daemon's unsubscribe+resume", overlay: overlay},
		{name: "direct with unsubscribe+resume, no config overlay"}}
	for _, rp := range replays {
		cfg := r.directConfig()
		cfg.ThreadConfig = rp.overlay
		if rp.c, err = StartDirect(ctx, cfg); err != nil {
			return err
		}
		defer rp.c.Close()
		if rp.thread, err = rp.c.StartThread(ctx); err != nil {
			return err
		}
	}
	mcp, err := mcpecho.Start(mcpecho.Options{})
	if err != nil {
		return err
	}
	defer mcp.Close()
	var daemon, withMCP, direct timings
	var cpuDaemon, cpuDirect, selfDaemon, selfDirect float64
	// Round 0 of each side makes the thread (and loads the app-server);
	// it is not a warm round.
	for i := range r.opts.Rounds + 1 {
		pid := 0
		if i > 0 {
			if pid, err = livePID(homes, "warm"); err != nil {
				return err
			}
		}
		measured := i > 0
		sides := []func() error{
			func() error {
				cpu0, self0 := cpuTime(pid), selfCPU()
				o, err := daemonRound(ctx, c, "warm", "w", text)
				if err == nil && measured {
					daemon.add(o.Timing)
					cpuDaemon += cpuTime(pid) - cpu0
					selfDaemon += selfCPU() - self0
				}
				return err
			},
			func() error {
				m, err := daemonRoundReq(ctx, c, messages.StartRound{User: "warm-mcp", Thread: "w-mcp", Text: text,
					MCPURL: mcp.URL(), MCPToken: fmt.Sprintf("bench-token-%d", i)})
				if err == nil && measured {
					withMCP.add(m.Timing)
				}
				return err
			},
			func() error {
				cpu0, self0 := cpuTime(dc.PID()), selfCPU()
				t, err := r.directTurn(ctx, dc, thread)
				if err == nil && measured {
					direct.add(t)
					cpuDirect += cpuTime(dc.PID()) - cpu0
					selfDirect += selfCPU() - self0
				}
				return err
			},
		}
		for _, rp := range replays {
			sides = append(sides, func() error { return rp.round(ctx, measured) })
		}
		if err := r.inTurn(sides...); err != nil {
			return err
		}
	}
	r.pair("warm round", &daemon, &direct, "direct client", "")
	r.pair("warm round, MCP with a new token each round", &withMCP, &direct, "direct client (no MCP)", "")
	for _, rp := range replays {
		r.pair(rp.name, &rp.t, &direct, "direct client", "")
		r.rows = append(r.rows, row("of which: thread/unsubscribe + thread/resume", "ms", rp.reload, "direct: send → verdict", ms(direct.whole), ""))
	}
	r.rows = append(r.rows,
		row("app-server CPU per warm round", "ms", []float64{cpuDaemon * 1000 / float64(r.opts.Rounds)}, "direct client's CLI",
			[]float64{cpuDirect * 1000 / float64(r.opts.Rounds)}, "utime+stime of the CLI process over all warm rounds, per round"),
		row("bench process CPU per warm round", "ms", []float64{selfDaemon * 1000 / float64(r.opts.Rounds)}, "direct client's round",
			[]float64{selfDirect * 1000 / float64(r.opts.Rounds)},
			"utime+stime of this process over a round: the daemon, its caller and the mock model; the direct client and the mock model"))
	return nil
}

// replayer is a direct client that unloads and resumes its thread before
// each turn, as today's daemon does.
type replayer struct {
	name    string
	overlay map[string]any
	c       *Direct
	thread  string
	t       timings
	reload  []float64 // ms of thread/unsubscribe + thread/resume
}

// round runs one turn; when measured, the thread is unloaded and resumed
// first (it has a rollout to resume only after its first turn) and the
// sample is kept.
func (rp *replayer) round(ctx context.Context, measured bool) error {
	ctx, cancel := context.WithTimeout(ctx, roundTimeout)
	defer cancel()
	start := time.Now()
	if measured {
		if err := rp.c.Unsubscribe(ctx, rp.thread); err != nil {
			return err
		}
		if err := rp.c.ResumeThread(ctx, rp.thread); err != nil {
			return err
		}
	}
	reloaded := time.Since(start)
	t, err := rp.c.Turn(ctx, rp.thread, text, start)
	if err != nil || !measured {
		return err
	}
	rp.t.add(t)
	rp.reload = append(rp.reload, float64(reloaded)/float64(time.Millisecond))
	return nil
}

// livePID is the pid of a user's live app-server.
func livePID(homes, user string) (int, error) {
	rec, err := procRecord(homes, user)
	if err != nil {
		return 0, err
	}
	pr, err := store.ReadProcRecord(rec)
	return pr.PID, err
}

// selfCPU is this process's user and system CPU in seconds.
func selfCPU() float64 {
	var ru syscall.Rusage
	if syscall.Getrusage(syscall.RUSAGE_SELF, &ru) != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano()).Seconds()
}

// cpuTime is a process's user and system CPU in seconds (0 for pid 0 or
// a process gone).
func cpuTime(pid int) float64 {
	if pid == 0 {
		return 0
	}
	p, err := procfs.NewProc(pid)
	if err != nil {
		return 0
	}
	st, err := p.Stat()
	if err != nil {
		return 0
	}
	return st.CPUTime()
}

func (r *run) directTurn(ctx context.Context, dc *Direct, thread string) (Timing, error) {
	ctx, cancel := context.WithTimeout(ctx, roundTimeout)
	defer cancel()
	return dc.Turn(ctx, thread, text, time.Time{})
}

// cold: a user the daemon never saw against a client started from
// nothing: spawn, initialize, thread/start, turn/start.
func (r *run) cold(ctx context.Context, c *client.Client, _ string) error {
	r.progress("  cold rounds: %d per side", r.opts.Cold)
	return r.newUsers(ctx, c, "cold round (new user)", "cold-%d", nil)
}

// warmedUp: a new user's first round after Options.WarmUp, against a
// direct client started from nothing (the warm-up is not timed: it runs
// while the person types).
func (r *run) warmedUp(ctx context.Context, c *client.Client, _ string) error {
	if r.opts.WarmUp == nil {
		return nil
	}
	r.progress("  first rounds after a warm-up: %d per side", r.opts.Cold)
	return r.newUsers(ctx, c, "first round after a warm-up", "warmup-%d", func(user string) error {
		if err := r.opts.WarmUp(ctx, c, user, "c"); err != nil {
			return fmt.Errorf("warming %s up: %w", user, err)
		}
		return nil
	})
}

// newUsers times the first round of Options.Cold new users (named by
// userFormat and a count; prepare, when set, runs untimed before each)
// against as many direct clients started from nothing, in turn (inTurn).
func (r *run) newUsers(ctx context.Context, c *client.Client, name, userFormat string, prepare func(user string) error) error {
	var daemon, direct timings
	for i := range r.opts.Cold {
		user := fmt.Sprintf(userFormat, i)
		if prepare != nil {
			if err := prepare(user); err != nil {
				return err
			}
		}
		err := r.inTurn(func() error {
			o, err := daemonRound(ctx, c, user, "c", text)
			daemon.add(o.Timing)
			return err
		}, func() error {
			t, err := r.directCold(ctx, "")
			direct.add(t)
			return err
		})
		if err != nil {
			return err
		}
	}
	r.pair(name, &daemon, &direct, "direct: spawn+init+thread/start+turn", "")
	return nil
}

// inTurn runs sides one after another in a new random order each call.
// A side runs while what the one before it left still runs: its CLI
// finishing the turn (the rollout, the state database), the daemon
// syncing its journal, a resume's work. Taking turns going first (a
// rotation) keeps who runs after whom, so one side paid for another's
// leftovers every round: the warm round's verdict p50 was ×1.06–1.07
// that way, with the daemon always after a replay's resume.
func (r *run) inTurn(sides ...func() error) error {
	for _, k := range r.rng.Perm(len(sides)) {
		if err := sides[k](); err != nil {
			return err
		}
	}
	return nil
}

// directCold times a client from its spawn: start (or resume threadID in
// home when set) a thread and run a turn; the client is closed untimed.
func (r *run) directCold(ctx context.Context, resume string, home ...string) (Timing, error) {
	ctx, cancel := context.WithTimeout(ctx, roundTimeout)
	defer cancel()
	cfg := r.directConfig()
	if len(home) > 0 {
		cfg.Home = home[0]
	}
	start := time.Now()
	dc, err := StartDirect(ctx, cfg)
	if err != nil {
		return Timing{}, err
	}
	defer dc.Close()
	thread := resume
	if resume != "" {
		err = dc.ResumeThread(ctx, resume)
	} else {
		thread, err = dc.StartThread(ctx)
	}
	if err != nil {
		return Timing{}, err
	}
	return dc.Turn(ctx, thread, text, start)
}

// evicted: a round on a thread whose app-server the idle timer stopped,
// against a client that spawns and resumes the thread.
func (r *run) evicted(ctx context.Context) (err error) {
	r.progress("  rounds after an idle eviction: %d per side", r.opts.Evict)
	cfg := r.daemonConfig("evict")
	cfg.IdleTimeout = time.Second
	d, c, err := r.startDaemon(cfg, quiet())
	if err != nil {
		return err
	}
	defer func() {
		c.Close()
		err = errors.Join(err, d.Stop())
	}()
	record, err := procRecord(cfg.Homes, "ev")
	if err != nil {
		return err
	}
	gone := func() bool { _, err := os.Stat(record); return errors.Is(err, os.ErrNotExist) }
	if _, err := daemonRound(ctx, c, "ev", "e", text); err != nil {
		return err
	}
	// The direct side's thread, made once and resumed by each sample.
	dcfg := r.directConfig()
	dc, err := StartDirect(ctx, dcfg)
	if err != nil {
		return err
	}
	thread, err := dc.StartThread(ctx)
	if err == nil {
		_, err = r.directTurn(ctx, dc, thread)
	}
	dc.Close()
	if err != nil {
		return err
	}
	var daemon, direct timings
	for range r.opts.Evict {
		if err := waitUntil(ctx, time.Minute, "the idle eviction", gone); err != nil {
			return err
		}
		err := r.inTurn(func() error {
			o, err := daemonRound(ctx, c, "ev", "e", text)
			if err == nil && !o.verdict.Resumed {
				err = errors.New("the round after the eviction did not resume its thread")
			}
			daemon.add(o.Timing)
			return err
		}, func() error {
			t, err := r.directCold(ctx, thread, dcfg.Home)
			direct.add(t)
			return err
		})
		if err != nil {
			return err
		}
	}
	r.pair("round after idle eviction", &daemon, &direct, "direct: spawn+init+thread/resume+turn", "daemon idle timeout 1s")
	return nil
}

// procRecord is the file that holds a user's live app-server's pid.
func procRecord(homes, user string) (string, error) {
	home, err := store.HomeDir(homes, user)
	if err != nil {
		return "", err
	}
	return actors.ProcRecordPath(home), nil
}

// rss is a process's resident set in bytes.
func rss(pid int) (float64, error) {
	p, err := procfs.NewProc(pid)
	if err != nil {
		return 0, err
	}
	st, err := p.Stat()
	if err != nil {
		return 0, err
	}
	return float64(st.ResidentMemory()), nil
}

// crowd: Users users at once, each with a warm thread, against as many
// direct clients; then the memory of the live app-servers.
func (r *run) crowd(ctx context.Context, c *client.Client, homes string) error {
	n := r.opts.Users
	r.progress("  %d users at once: %d batches per side", n, r.opts.Batches)
	user := func(i int) string { return fmt.Sprintf("crowd-%d", i) }
	heapBefore, _ := settledHeap()
	if err := parallel(n, func(i int) error { _, err := daemonRound(ctx, c, user(i), "c", text); return err }); err != nil {
		return err
	}
	heapDaemon, _ := settledHeap()
	cfgs := make([]DirectConfig, n)
	for i := range cfgs {
		cfgs[i] = r.directConfig()
	}
	clients, threads, err := r.startDirects(ctx, cfgs)
	defer closeDirects(clients)
	if err != nil {
		return err
	}
	heapDirect, _ := settledHeap()
	var daemon, direct timings
	for range r.opts.Batches {
		err := r.inTurn(func() error {
			return parallel(n, func(i int) error {
				o, err := daemonRound(ctx, c, user(i), "c", text)
				daemon.add(o.Timing)
				return err
			})
		}, func() error {
			return parallel(n, func(i int) error {
				t, err := r.directTurn(ctx, clients[i], threads[i])
				direct.add(t)
				return err
			})
		})
		if err != nil {
			return err
		}
	}
	r.pair(fmt.Sprintf("%d users at once", n), &daemon, &direct, fmt.Sprintf("%d direct clients", n), "")

	// What a live user costs: its app-server, and the daemon's own growth.
	var appDaemon, appDirect []float64
	for i := range n {
		pid, err := livePID(homes, user(i))
		if err != nil {
			return err
		}
		a, err := rss(pid)
		if err != nil {
			return err
		}
		b, err := rss(clients[i].PID())
		if err != nil {
			return err
		}
		appDaemon, appDirect = append(appDaemon, a/(1<<20)), append(appDirect, b/(1<<20))
	}
	r.rows = append(r.rows,
		row("app-server RSS per live user", "MiB", appDaemon, "direct client's CLI", appDirect, ""),
		row("daemon heap per live user", "KiB",
			[]float64{(float64(heapDaemon) - float64(heapBefore)) / float64(n) / 1024}, "direct client's Go heap",
			[]float64{(float64(heapDirect) - float64(heapDaemon)) / float64(n) / 1024},
			"the daemon runs inside the bench process: its heap growth as its users came alive, against the growth as the direct clients did; noisy below 10 users"))
	return nil
}

// uuid is a random version-4 UUID: a codex thread id that has no rollout.
func uuid() string {
	var b [16]byte
	_, _ = rand.Read(b[:])
	b[6], b[8] = b[6]&0x0f|0x40, b[8]&0x3f|0x80
	return fmt.Sprintf("%x-%x-%x-%x-%x", b[0:4], b[4:6], b[6:8], b[8:10], b[10:])
}

// userDir is the daemon's folder of a user (beside its CODEX_HOME), made
// before the daemon sees the user.
func userDir(homes, user string) (string, error) {
	home, err := store.HomeDir(homes, user)
	if err != nil {
		return "", err
	}
	dir := filepath.Dir(home)
	return dir, os.MkdirAll(dir, 0o700)
}

// registryGrowth: warm rounds of a user with RegistryThreads mesh threads
// recorded, against a user with one.
func (r *run) registryGrowth(ctx context.Context, c *client.Client, homes string) error {
	n := r.opts.RegistryThreads
	r.progress("  registry growth: %d mesh threads", n)
	dir, err := userDir(homes, "reg-big")
	if err != nil {
		return err
	}
	reg := store.NewRegistry(dir)
	for i := range n {
		if err := reg.Record(fmt.Sprintf("mesh/other-%d", i), uuid()); err != nil {
			return err
		}
	}
	var big, small timings
	rounds := max(r.opts.Rounds/2, 1)
	for i := range rounds + 1 {
		err := r.inTurn(func() error {
			o, err := daemonRound(ctx, c, "reg-big", "r", text)
			if i > 0 {
				big.add(o.Timing)
			}
			return err
		}, func() error {
			o, err := daemonRound(ctx, c, "reg-small", "r", text)
			if i > 0 {
				small.add(o.Timing)
			}
			return err
		})
		if err != nil {
			return err
		}
	}
	r.pair(fmt.Sprintf("warm round, %d mesh threads", n), &big, &small, "user with 1 mesh thread", "")
	return nil
}

// fallbackGrowth: rounds whose thread cannot be resumed (its rollout is
// gone) and start afresh with a transcript from the journal: a long one
// (the transcript's 32 KiB cap) against a one-turn one.
func (r *run) fallbackGrowth(ctx context.Context, c *client.Client, homes string) error {
	n := r.opts.Fallbacks
	r.progress("  fallback growth: %d rounds per size", n)
	dir, err := userDir(homes, "fb")
	if err != nil {
		return err
	}
	reg, jr := store.NewRegistry(dir), store.NewJournal(dir)
	long := strings.Repeat("a long remembered sentence of the earlier conversation. ", 18) // ~1 KiB
	for i := range n {
		for _, size := range []string{"s", "b"} {
			key := fmt.Sprintf("fb-%s-%d", size, i)
			if err := reg.Record(key, uuid()); err != nil {
				return err
			}
			turns := []store.Turn{{Role: "user", Text: "hi"}, {Role: "assistant", Text: "hello"}}
			if size == "b" {
				turns = nil
				for j := range 40 {
					role := "user"
					if j%2 == 1 {
						role = "assistant"
					}
					turns = append(turns, store.Turn{Role: role, Text: long})
				}
			}
			if err := jr.Append(key, turns...); err != nil {
				return err
			}
		}
	}
	var big, small timings
	for i := range n {
		for _, size := range []string{"b", "s"} {
			o, err := daemonRound(ctx, c, "fb", fmt.Sprintf("fb-%s-%d", size, i), text)
			if err != nil {
				return err
			}
			if !o.verdict.FellBack {
				return fmt.Errorf("round %s-%d did not fall back", size, i)
			}
			if size == "b" {
				big.add(o.Timing)
			} else {
				small.add(o.Timing)
			}
		}
	}
	r.pair("fallback round, 32 KiB transcript", &big, &small, "fallback, 1-turn transcript", "")
	return nil
}

// startDirects starts a direct client of each configuration at once, each
// with a thread and a first (untimed) turn; close the clients with
// closeDirects, also after an error.
func (r *run) startDirects(ctx context.Context, cfgs []DirectConfig) ([]*Direct, []string, error) {
	clients := make([]*Direct, len(cfgs))
	threads := make([]string, len(cfgs))
	err := parallel(len(cfgs), func(i int) error {
		dc, err := StartDirect(ctx, cfgs[i])
		if err != nil {
			return err
		}
		clients[i] = dc
		if threads[i], err = dc.StartThread(ctx); err != nil {
			return err
		}
		_, err = r.directTurn(ctx, dc, threads[i])
		return err
	})
	return clients, threads, err
}

// closeDirects closes the clients startDirects started.
func closeDirects(clients []*Direct) {
	for _, dc := range clients {
		if dc != nil {
			dc.Close()
		}
	}
}
