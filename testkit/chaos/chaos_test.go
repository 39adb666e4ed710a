package chaos

import (
	"flag"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/meshweaver/supervisor/demomodel"
	"github.com/meshweaver/supervisor/messages"
	"github.com/meshweaver/supervisor/store"
	"github.com/meshweaver/supervisor/testkit/codexhome"
)

// The defaults are the CI size: about a minute on 2 cores under -race.
var (
	flagRounds      = flag.Int("chaos.rounds", 40, "rounds to send in all, spread over the mesh threads (the final round of each thread comes on top)")
	flagKills       = flag.Int("chaos.kills", 10, "app-server SIGKILLs to aim for (init mode makes two at once)")
	flagDaemonKills = flag.Int("chaos.daemon-kills", 1, "SIGKILLs of the daemon itself, each followed by a restart on the same homes")
	flagUsers       = flag.Int("chaos.users", 3, "mesh users")
	flagThreads     = flag.Int("chaos.threads", 2, "mesh threads per user")
	flagSeed        = flag.Uint64("chaos.seed", 0, "seed of the random choices (0: from the clock; the seed is logged)")
	flagDelay       = flag.Duration("chaos.delay", 25*time.Millisecond, "the mock model's pause before each streamed event")
	flagBudget      = flag.Int("chaos.user-budget", 3, "app-server kills per user per minute and daemon (the daemon's restart limit is 5)")
	flagReport      = flag.String("chaos.report", "", "also write the figures as Markdown to this `file`")
	flagLogs        = flag.String("chaos.logs", "", "keep the daemons' logs in `dir`/<test name> (default: the test's temporary folder)")
)

type config struct {
	rounds, kills, daemonKills, users, threads, userBudget int
	seed                                                   uint64
	delay                                                  time.Duration
}

// TestMain fails the package if a goroutine outlives the test: the caller's
// engine and remote, the mock model and the process waiters all stop.
func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "chaos-bin-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	binDir = dir
	code := m.Run()
	os.RemoveAll(dir)
	if code == 0 {
		if err := goleak.Find(); err != nil {
			fmt.Fprintf(os.Stderr, "goleak: %v\n", err)
			code = 1
		}
	}
	os.Exit(code)
}

// The supervisor binary, built once per test binary.
var (
	binDir    string
	buildOnce sync.Once
	builtBin  string
	buildErr  string
)

func supervisorBin(t *testing.T) string {
	t.Helper()
	buildOnce.Do(func() {
		var msg string
		builtBin, msg = buildSupervisor(binDir)
		buildErr = msg
		if builtBin != "" {
			t.Log(msg)
		}
	})
	if builtBin == "" {
		t.Fatal(buildErr)
	}
	return builtBin
}

// TestChaos: many rounds for several users at once against the real
// daemon binary, the real codex CLI and the mock model, while app-servers
// are SIGKILLed at chosen moments and the daemon is SIGKILLed and
// restarted; then every promise is checked (see docs/RELIABILITY.md).
func TestChaos(t *testing.T) {
	cfg := config{
		rounds: *flagRounds, kills: *flagKills, daemonKills: *flagDaemonKills,
		users: *flagUsers, threads: *flagThreads, userBudget: *flagBudget,
		seed: *flagSeed, delay: *flagDelay,
	}
	if cfg.seed == 0 {
		cfg.seed = uint64(time.Now().UnixNano())
	}
	if cfg.users < 1 || cfg.threads < 1 || cfg.rounds < 1 {
		t.Fatal("-chaos.users, -chaos.threads and -chaos.rounds must be positive")
	}
	t.Logf("chaos: %d rounds, %d users × %d threads, %d app-server kills, %d daemon kills, seed %d",
		cfg.rounds, cfg.users, cfg.threads, cfg.kills, cfg.daemonKills, cfg.seed)

	h := newHarness(t, cfg)

	// The plan: kills spread over the first 85% of the rounds, the daemon
	// kill(s) in between, the tail left for recovery.
	var killPlan, daemonPlan []int64
	for i := range cfg.kills {
		killPlan = append(killPlan, 1+int64(i*cfg.rounds*85/100/max(cfg.kills, 1)))
	}
	for i := range cfg.daemonKills {
		daemonPlan = append(daemonPlan, int64((i+1)*cfg.rounds/(cfg.daemonKills+1)))
	}

	loadStart := loadAvg()
	start := time.Now()
	stop := make(chan struct{})
	var killers sync.WaitGroup
	killers.Go(func() { h.killer(stop, killPlan) })
	killers.Go(func() { h.daemonKiller(stop, daemonPlan) })
	var threads sync.WaitGroup
	nThreads := cfg.users * cfg.threads
	i := 0
	for _, u := range h.users() {
		for tn, th := range h.threads(u) {
			n := cfg.rounds / nThreads
			if i < cfg.rounds%nThreads {
				n++
			}
			i++
			threads.Go(func() { h.runThread(u, th, n, tn+1) })
		}
	}
	threads.Wait()
	close(stop)
	killers.Wait()
	chaosDur := time.Since(start)

	// The next round on every mesh thread completes.
	var finals []*roundRec
	if !h.broken.Load() {
		var wg sync.WaitGroup
		var mu sync.Mutex
		for _, u := range h.users() {
			for tn, th := range h.threads(u) {
				wg.Go(func() {
					r := h.startRound(u, th, kindText, fmt.Sprintf("%s.t%d.final", u, tn+1), true)
					if r == nil {
						return
					}
					h.await(r)
					mu.Lock()
					finals = append(finals, r)
					mu.Unlock()
				})
			}
		}
		wg.Wait()
	}
	total := time.Since(start)

	h.checkVerdicts()
	contained := 0
	for _, k := range h.kills {
		if k.cgroup == "" {
			continue
		}
		contained++
		if k.left > 0 {
			t.Errorf("%d processes of %s outlived their app-server (pid %d, killed %s) in %s", k.left, k.user, k.pid, k.mode, k.cgroup)
		}
	}
	t.Logf("chaos: %d of %d killed app-servers had a cgroup of their own; each was empty within 10 s of the kill, or is named above", contained, len(h.kills))
	for _, r := range finals {
		if len(r.verdicts) == 0 || r.verdicts[0].Status != messages.StatusCompleted {
			t.Errorf("final round %s on %s did not complete: %+v", r.id, r.thread, r.verdicts)
		}
	}
	// A SIGTERM stops the daemon cleanly (exit 0) and with it every
	// app-server; nothing of the run is left.
	h.gate.Lock()
	if h.d == nil { // a restart failed; the run is broken already
		h.gate.Unlock()
		return
	}
	code, stopDur, err := h.d.terminate(45 * time.Second)
	h.gate.Unlock()
	if err != nil || code != 0 {
		t.Errorf("stopping the daemon with SIGTERM: exit code %d, err %v", code, err)
	}
	if recs := pidRecords(h.homes); len(recs) > 0 {
		t.Errorf("pid records left after a clean stop: %v", recs)
	}
	// The journal is appended after a verdict is sent: the files are
	// checked once the daemon has stopped.
	h.checkFiles(true)
	if left := waitGone(runProcs(h.root, h.codex, h.marker), 10*time.Second); len(left) > 0 {
		for _, p := range left {
			t.Errorf("left running after the daemon stopped: pid %d ppid %d pgid %d exe %s home %s cmd %.200q",
				p.pid, p.ppid, p.pgid, p.exe, p.home, p.cmd)
		}
	}
	h.checkLogs()
	h.closeCaller()

	f := h.figures(chaosDur, total, stopDur)
	f.loadStart, f.loadEnd = loadStart, loadAvg()
	for _, line := range strings.Split(f.text(), "\n") {
		t.Log(line)
	}
	if *flagReport != "" {
		if err := os.WriteFile(*flagReport, []byte(f.markdown()), 0o644); err != nil {
			t.Error(err)
		}
	}
}

// newHarness builds the daemon, starts the mock model (answering with
// h.respond), a caller and the first daemon (serve flags plus extra), and
// registers the clean-up: whatever happens, nothing of the run survives the
// test.
func newHarness(t *testing.T, cfg config, extra ...string) *harness {
	t.Helper()
	codex, err := codexhome.CodexBin()
	if err != nil {
		t.Fatalf("the real codex CLI is required (scripts/install-codex): %v", err)
	}
	if codex, err = filepath.EvalSymlinks(codex); err == nil {
		codex, err = filepath.Abs(codex)
	}
	if err != nil {
		t.Fatal(err)
	}
	root := t.TempDir()
	h := &harness{
		t: t, cfg: cfg, codex: codex, root: root,
		homes:       filepath.Join(root, "homes"),
		work:        filepath.Join(root, "workspace"),
		logDir:      filepath.Join(root, "logs"),
		homeDir:     filepath.Join(root, "home"),
		marker:      fmt.Sprintf("chaosmark%08x", rand.Uint32()),
		rng:         rand.New(rand.NewPCG(cfg.seed, cfg.seed^0x9e3779b97f4a7c15)),
		rounds:      map[string]*roundRec{},
		threadKnown: map[string]bool{},
	}
	if *flagLogs != "" {
		h.logDir = filepath.Join(*flagLogs, t.Name())
	}
	for _, dir := range []string{h.homes, h.work, h.logDir, h.homeDir} {
		if err := os.MkdirAll(dir, 0o700); err != nil {
			t.Fatal(err)
		}
	}
	// Run as root, the daemon gives every user a uid of their own and a
	// bubblewrap sandbox (serve's defaults): the users' uids must pass
	// through the test's folders to their homes, and write the shared
	// workspace, as on an operator's machine.
	for _, dir := range []string{filepath.Dir(root), root} {
		if err := os.Chmod(dir, 0o711); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Chmod(h.work, 0o777); err != nil {
		t.Fatal(err)
	}
	h.bin = supervisorBin(t)

	model, err := demomodel.Start(demomodel.Options{Responder: h.respond})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(model.Close) // registered first: runs last
	h.model = model
	catalog, err := writeCatalog(root)
	if err != nil {
		t.Fatal(err)
	}
	if h.addr, err = freeAddr(); err != nil {
		t.Fatal(err)
	}
	h.args = append(serveArgs(h.addr, h.homes, h.work, codex,
		append(codexhome.Overrides(model.URL()), "model_catalog_json="+quoteTOML(catalog))), extra...)
	h.args = append(h.args, "--sandbox-ro", catalog, "--workspace-writable")

	c, err := newCaller(h)
	if err != nil {
		t.Fatal(err)
	}
	h.caller = c
	var closeCaller sync.Once
	h.closeCaller = func() { closeCaller.Do(c.close) }
	t.Cleanup(h.closeCaller)

	d, err := startDaemon(h.bin, 1, filepath.Join(h.logDir, "daemon-1.log"), h.homeDir, h.args)
	if err != nil {
		t.Fatal(err)
	}
	h.d = d
	h.epoch.Store(1)
	h.epochs = append(h.epochs, d)
	// Whatever happens, nothing of the run survives the test.
	t.Cleanup(func() {
		h.gate.Lock()
		defer h.gate.Unlock()
		if h.d != nil {
			select {
			case <-h.d.dead:
			default:
				h.d.kill()
			}
		}
		for _, p := range runProcs(root, codex, h.marker) {
			killGroup(p)
		}
		if t.Failed() {
			for _, d := range h.epochs {
				t.Logf("daemon epoch %d log (tail): %s\n%s", d.epoch, d.logPath, tailOf(d.logPath, 6000))
			}
		}
	})

	return h
}

// checkVerdicts: every round sent to a live daemon got exactly one
// verdict, with a cause when it did not complete, in a known status, with
// its events numbered 1, 2, 3, … and none after the verdict; a completed
// round carries the whole answer; every failure is explained by a kill.
func (h *harness) checkVerdicts() {
	t := h.t
	h.mu.Lock()
	defer h.mu.Unlock()
	for _, r := range h.order {
		switch {
		case len(r.verdicts) > 1:
			t.Errorf("round %s: %d verdicts, want one: %+v", r.id, len(r.verdicts), r.verdicts)
		case r.lost && !r.d.killed.Load():
			t.Errorf("round %s: lost, but its daemon was not killed", r.id)
		}
		if r.seqErrors > 0 {
			t.Errorf("round %s: %d events out of sequence (of %d)", r.id, r.seqErrors, r.events)
		}
		if r.afterVerdict > 0 && !r.lost {
			t.Errorf("round %s: %d events after its verdict", r.id, r.afterVerdict)
		}
		if len(r.verdicts) == 0 {
			continue
		}
		v := r.verdicts[0]
		switch v.Status {
		case messages.StatusCompleted:
			if want := strings.Join(answerDeltas(r.id), ""); r.text.String() != want {
				t.Errorf("round %s completed with text %q, want %q", r.id, r.text.String(), want)
			}
		case messages.StatusFailed, messages.StatusUnavailable:
			if strings.TrimSpace(v.Error) == "" {
				t.Errorf("round %s: verdict %s names no cause: %+v", r.id, v.Status, v)
			}
			if r.final {
				break
			}
			if k := h.explainLocked(r); k == nil {
				t.Errorf("round %s (%s on %s, sent %s, verdict %s): %s %q, with no kill of %s around it",
					r.id, r.kind, r.thread, r.sentAt.Format("15:04:05.000"), r.verdictAt.Format("15:04:05.000"),
					v.Status, v.Error, r.user)
			}
		default:
			t.Errorf("round %s: unexpected verdict %s: %+v", r.id, v.Status, v)
		}
		if v.Thread != r.thread || v.RoundID != r.id {
			t.Errorf("round %s: verdict names round %q thread %q", r.id, v.RoundID, v.Thread)
		}
	}
	if h.stray > 0 {
		t.Errorf("%d replies named no round the suite sent", h.stray)
	}
	for _, o := range h.others {
		t.Errorf("unexpected reply: %s", o)
	}
}

// explainSlack: a round sent shortly after a kill may still be handed the
// dead app-server's client (the daemon learns of the death once the exit
// status and stderr are drained, up to a second, more on a loaded machine).
const explainSlack = 5 * time.Second

// explainLocked finds the kill of r's user that made r fail: one between
// shortly before r was sent and its verdict.
func (h *harness) explainLocked(r *roundRec) *killRec {
	for _, k := range h.kills {
		if k.user == r.user && k.at.After(r.sentAt.Add(-explainSlack)) && k.at.Before(r.verdictAt) {
			return k
		}
	}
	return nil
}

// checkFiles: every thread record, journal and pid record parses; at the
// end (final) every mesh thread has a codex thread on record and a journal.
// Temporary files of writes a daemon kill interrupted are only reported:
// nothing reads them, and nothing removes them either (see
// TestStaleTempFilesAreRemoved).
func (h *harness) checkFiles(final bool) {
	t := h.t
	for _, u := range h.users() {
		home := h.home(u)
		reg, journal := store.NewRegistry(filepath.Dir(home)), store.NewJournal(filepath.Dir(home))
		for _, th := range h.threads(u) {
			if id, err := reg.Lookup(th); err != nil {
				t.Errorf("registry of %s %s: %v", u, th, err)
			} else if id == "" && final {
				t.Errorf("registry of %s %s: no codex thread recorded after a completed round", u, th)
			}
			if turns, err := journal.Turns(th); err != nil {
				t.Errorf("journal of %s %s: %v", u, th, err)
			} else if len(turns) == 0 && final {
				t.Errorf("journal of %s %s: empty after completed rounds", u, th)
			}
		}
	}
	for _, p := range pidRecords(h.homes) {
		if _, err := store.ReadProcRecord(p); err != nil {
			t.Errorf("pid record: %v", err)
		}
	}
	if tmp := h.tempFiles(); len(tmp) > 0 {
		t.Logf("temporary files of interrupted writes left behind: %v", tmp)
	}
}

// tempFiles lists leftovers of WriteFileAtomic under the meshweaver
// folders of every home.
func (h *harness) tempFiles() []string {
	var out []string
	for _, u := range h.users() {
		_ = filepath.WalkDir(filepath.Join(filepath.Dir(h.home(u)), "meshweaver"), func(path string, d os.DirEntry, err error) error {
			if err == nil && !d.IsDir() && strings.Contains(d.Name(), ".tmp") {
				out = append(out, path)
			}
			return nil
		})
	}
	return out
}

// checkLogs: no data race and no contained panic in any daemon's log.
func (h *harness) checkLogs() {
	for _, d := range h.epochs {
		d.log.scan()
		d.log.mu.Lock()
		if d.log.races > 0 {
			h.t.Errorf("daemon epoch %d: %d data races; see %s", d.epoch, d.log.races, d.logPath)
		}
		for _, p := range d.log.panics {
			h.t.Errorf("daemon epoch %d: an actor panicked: %s", d.epoch, p)
		}
		d.log.mu.Unlock()
	}
}
