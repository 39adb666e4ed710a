package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"runtime/pprof"
	"strconv"
	"strings"
	"time"

	"github.com/meshweaver/supervisor/actors"
	"github.com/meshweaver/supervisor/bench"
	"github.com/meshweaver/supervisor/client"
	"github.com/meshweaver/supervisor/codexproc"
	"github.com/meshweaver/supervisor/isolate"
	"github.com/meshweaver/supervisor/messages"
)

// benchFloodCommand is the hidden command the bench's daemon runs as its
// "codex" for the events row: this binary as bench.ServeFlood, with
// --deltas deltas a turn.
const benchFloodCommand = "bench-flood-appserver"

// benchCmd measures the daemon against a direct client of the same CLI
// (package bench) and prints the table.
func benchCmd(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("bench", flag.ContinueOnError)
	fs.SetOutput(stderr)
	quick := fs.Bool("quick", false, "every row with fewer samples (about a minute)")
	jsonFile := fs.String("json", "", "also write the result as JSON to `FILE`")
	markdown := fs.Bool("markdown", false, "print the table as Markdown")
	dir := fs.String("dir", "", "keep homes and workspace in `DIR`, which must be empty (default: a temporary folder, removed afterwards)")
	codex := fs.String("codex", "", "codex `PATH` (default: $CODEX_BIN, the project-local install, then PATH)")
	only := fs.String("only", "", "run only these comma-separated phases: rounds, events, mcp, memory, limits, deployed")
	cpuProfile := fs.String("cpuprofile", "", "write a CPU profile of the run (the daemon runs in this process) to `FILE`")
	counts := map[string]*int{}
	for _, c := range []struct{ name, usage string }{
		{"rounds", "warm rounds per side"},
		{"users", "users at once (and direct clients)"},
		{"cold", "cold rounds per side"},
		{"evict", "rounds after an idle eviction per side"},
		{"batches", "batches of --users rounds per side"},
		{"events", "deltas in one flood round"},
		{"floods", "flood rounds (and raw remote bursts)"},
		{"idle-users", "registered idle users for the memory row"},
		{"registry-threads", "mesh threads of the big registry"},
		{"fallbacks", "fallback rounds per transcript size"},
		{"mcp-calls", "MCP calls per side"},
	} {
		counts[c.name] = fs.Int(c.name, 0, c.usage+" (0: the default, or --quick's)")
	}
	if _, err := parseArgs(fs, args, noArgs); err != nil {
		return err
	}
	c := bench.DefaultCounts()
	if *quick {
		c = bench.QuickCounts()
	}
	for name, dst := range map[string]*int{
		"rounds": &c.Rounds, "users": &c.Users, "cold": &c.Cold, "evict": &c.Evict, "batches": &c.Batches,
		"events": &c.Events, "floods": &c.Floods, "idle-users": &c.IdleUsers, "registry-threads": &c.RegistryThreads,
		"fallbacks": &c.Fallbacks, "mcp-calls": &c.MCPCalls,
	} {
		if v := *counts[name]; v < 0 {
			fmt.Fprintf(stderr, "supervisor bench: --%s must not be negative\n", name)
			return errUsage
		} else if v > 0 {
			*dst = v
		}
	}
	bin, err := codexproc.ResolveBinary(*codex)
	if err != nil {
		return err
	}
	root := *dir
	if root == "" {
		if root, err = os.MkdirTemp("", "supervisor-bench-"); err != nil {
			return err
		}
		defer os.RemoveAll(root)
	}
	exe, err := os.Executable()
	if err != nil {
		return err
	}
	var phases []string
	if *only != "" {
		phases = strings.Split(*only, ",")
	}
	if *cpuProfile != "" {
		f, err := os.Create(*cpuProfile)
		if err != nil {
			return err
		}
		defer f.Close()
		if err := pprof.StartCPUProfile(f); err != nil {
			return err
		}
		defer pprof.StopCPUProfile()
	}
	opts := benchOptions(exe)
	opts.Counts, opts.Codex, opts.Dir, opts.Progress, opts.Only = c, bin, root, stderr, phases
	res, err := bench.Run(ctx, opts)
	if err != nil {
		return err
	}
	if *markdown {
		err = res.WriteMarkdown(stdout)
	} else {
		err = res.WriteTable(stdout)
	}
	if err != nil {
		return err
	}
	if *jsonFile != "" {
		f, err := os.Create(*jsonFile)
		if err != nil {
			return err
		}
		if err := res.WriteJSON(f); err != nil {
			f.Close()
			return err
		}
		return f.Close()
	}
	return nil
}

// benchOptions are the bench's ways to start this daemon, and this binary
// (exe) as the events row's app-server.
func benchOptions(exe string) bench.Options {
	return bench.Options{
		StartDaemon: func(cfg actors.Config, deps actors.Deps) (bench.Daemon, error) {
			listen, err := freeLoopbackAddr()
			if err != nil {
				return nil, err
			}
			// The bench's one caller sends thousands of messages a
			// second (the memory row's registrations): no rate limit.
			d, _, err := startDaemonEdge(listen, nil, cfg, deps, edgeOptions{peerRate: 1e9, peerBurst: 1 << 30})
			if err != nil {
				return nil, err
			}
			return benchDaemon{d: d, addr: listen}, nil
		},
		// The users' separation as serve builds it by default (its
		// flags' defaults: the uid range, bubblewrap from PATH).
		Isolate: func(homes, workspace string) (*isolate.Node, error) {
			var o isolationOptions
			fs := flag.NewFlagSet("bench-isolation", flag.ContinueOnError)
			o.register(fs)
			if err := fs.Parse(nil); err != nil {
				return nil, err
			}
			return o.node(homes, workspace, nil, slog.New(slog.DiscardHandler))
		},
		FloodLaunch: func(deltas int) (string, []string, []string, error) {
			return exe, []string{benchFloodCommand, "--deltas", strconv.Itoa(deltas)}, nil, nil
		},
		WarmUp: func(ctx context.Context, c *client.Client, user, thread string) error {
			ans, err := c.WarmUp(ctx, messages.WarmUp{User: user, Thread: thread})
			if err == nil && ans.Error != "" {
				err = errors.New(ans.Error)
			}
			return err
		},
	}
}

// benchDaemon is a daemon the bench started.
type benchDaemon struct {
	d    *daemon
	addr string
}

func (b benchDaemon) Addr() string { return b.addr }
func (b benchDaemon) Stop() error  { return b.d.stop(30 * time.Second) }

// benchFloodCmd is the hidden command benchFloodCommand: bench.ServeFlood
// on stdin and stdout until stdin closes. A signal ends it at once (the
// process's exit ends the read).
func benchFloodCmd(ctx context.Context, args []string, stdin io.Reader, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet(benchFloodCommand, flag.ContinueOnError)
	fs.SetOutput(stderr)
	deltas := fs.Int("deltas", 1, "deltas in each turn")
	var overrides stringList // the -c settings every app-server gets (features.goals=false): a flood has no features
	fs.Var(&overrides, "c", "a codex `key=value` setting, as every app-server is given them (ignored)")
	if _, err := parseArgs(fs, args, noArgs); err != nil {
		return err
	}
	served := make(chan error, 1)
	go func() { served <- bench.ServeFlood(stdin, stdout, *deltas) }()
	select {
	case err := <-served:
		return err
	case <-ctx.Done():
		return nil
	}
}
