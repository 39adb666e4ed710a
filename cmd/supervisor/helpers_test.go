package main

import (
	"context"
	"fmt"
	"log/slog"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"google.golang.org/protobuf/proto"

	"github.com/meshweaver/supervisor/actors"
	"github.com/meshweaver/supervisor/demomodel"
	"github.com/meshweaver/supervisor/messages"
	"github.com/meshweaver/supervisor/store"
	"github.com/meshweaver/supervisor/testkit/codexhome"
	"github.com/meshweaver/supervisor/testkit/proctest"
	"github.com/meshweaver/supervisor/testkit/syncbuf"
	"github.com/meshweaver/supervisor/third_party/hollywood/remote"
)

// roundTimeout bounds the wait for one round's verdict. Real CLI turns take
// 0.1–1 s; the margin is for a loaded 2-core CI machine under -race.
const roundTimeout = 60 * time.Second

// waitTimeout bounds every other wait.
const waitTimeout = 30 * time.Second

// testEdge are the edge settings of the in-process daemons: these tests
// send faster than a peer may by default (20/s) and draw more refusals than
// are answered by default (5/s); TestHostileFrames covers the defaults.
var testEdge = edgeOptions{peerRate: 100000, peerBurst: 100000, replyRate: 100000, replyBurst: 100000}

// codexBin is the real codex CLI. The end-to-end tests need it: without it
// they fail (scripts/install-codex installs it), they never skip.
func codexBin(t testing.TB) string {
	t.Helper()
	bin, err := codexhome.CodexBin()
	if err != nil {
		t.Fatalf("the real codex CLI is required: %v", err)
	}
	abs, err := filepath.EvalSymlinks(bin)
	if err != nil {
		t.Fatalf("resolving %s: %v", bin, err)
	}
	abs, err = filepath.Abs(abs)
	if err != nil {
		t.Fatal(err)
	}
	return abs
}

// env is one end-to-end set-up: a mock model, a daemon started with
// startDaemon on a free loopback port (a real hollywood remote listener),
// and a caller in a second engine with its own remote (newRemoteClient), so
// every message between the two crosses the remote as an envelope.
type env struct {
	t         *testing.T
	bin       string
	root      string // the test's temporary folder; every CODEX_HOME is under it
	homes     string
	workspace string
	model     *demomodel.Server
	cfg       daemonSetup
	logs      *syncBuffer // the daemon's log at debug level, the app-servers' stderr included

	edge       edgeOptions                       // the daemon's edge settings
	clientWith func(remote.Config) remote.Config // adjusts the caller's remote; nil: none
	d          *daemon
	addr       string
	c          *remoteClient
	rounds     map[string][]any // replies of rounds not collected yet, by round id
	done       map[string]bool  // rounds whose verdict was collected
	other      []any            // replies that belong to no round
	nextID     int
}

// daemonSetup is what a test's daemon starts with: the tree's settings and
// its dependencies, which the tests' mutators set side by side.
type daemonSetup struct {
	actors.Config
	actors.Deps
}

// newEnv starts a mock model and a daemon (cfg adjusted by mutate) with a
// remote caller. The model catalog codexhome writes is passed to every
// app-server, so "mock-model" is known and the apply_patch tool exists.
// Cleanup stops the caller and the daemon and checks that no codex process
// of the test is left.
func newEnv(t *testing.T, mutate func(*daemonSetup)) *env {
	t.Helper()
	return newEnvEdge(t, mutate, testEdge, nil)
}

// newEnvEdge is newEnv with the daemon's edge settings and an adjustment
// of the caller's remote (nil: none).
func newEnvEdge(t *testing.T, mutate func(*daemonSetup), eo edgeOptions, clientWith func(remote.Config) remote.Config) *env {
	t.Helper()
	bin := codexBin(t)
	root := t.TempDir()
	e := &env{
		t: t, bin: bin, root: root,
		homes:     filepath.Join(root, "homes"),
		workspace: filepath.Join(root, "workspace"),
		logs:      &syncBuffer{},
		edge:      eo, clientWith: clientWith,
		rounds: map[string][]any{},
		done:   map[string]bool{},
	}
	if err := os.MkdirAll(e.workspace, 0o700); err != nil {
		t.Fatal(err)
	}
	model, err := demomodel.Start(demomodel.Options{})
	if err != nil {
		t.Fatal(err)
	}
	e.model = model
	// Registered first, so it runs last: the daemon and codex go first.
	t.Cleanup(model.Close)
	catalog, err := codexhome.CatalogJSON(codexhome.LargeContextWindow, 0)
	if err != nil {
		t.Fatal(err)
	}
	catalogPath := filepath.Join(root, codexhome.CatalogFile)
	if err := os.WriteFile(catalogPath, catalog, 0o600); err != nil {
		t.Fatal(err)
	}
	e.cfg = daemonSetup{Config: actors.Config{
		Homes:     e.homes,
		Workspace: e.workspace,
		CodexBin:  bin,
		Overrides: append(codexhome.Overrides(model.URL()), "model_catalog_json="+strconv.Quote(catalogPath)),
		StopGrace: time.Second,
		CodexEnv:  testCodexEnv(t),
	}, Deps: actors.Deps{
		Logger:  slog.New(slog.NewTextHandler(e.logs, &slog.HandlerOptions{Level: slog.LevelDebug})),
		Metrics: actors.NewMetrics(nil), // the tests read the daemon's counters
	}}
	if mutate != nil {
		mutate(&e.cfg)
	}
	t.Cleanup(func() {
		e.stop()
		waitNoCodex(t, bin, root)
		if t.Failed() || os.Getenv("TEST_LOG") != "" {
			t.Logf("daemon log:\n%s", e.logs.filtered(os.Getenv("TEST_LOG") != ""))
		}
	})
	e.start()
	return e
}

// start starts the daemon on a fresh loopback port and a caller for it.
func (e *env) start() {
	e.t.Helper()
	addr, err := freeLoopbackAddr()
	if err != nil {
		e.t.Fatal(err)
	}
	d, _, err := startDaemonEdge(addr, nil, e.cfg.Config, e.cfg.Deps, e.edge)
	if err != nil {
		e.t.Fatalf("startDaemon: %v", err)
	}
	e.d, e.addr = d, addr
	var with []func(remote.Config) remote.Config
	if e.clientWith != nil {
		with = append(with, e.clientWith)
	}
	c, err := newRemoteClientWith(addr, "", nil, with...)
	if err != nil {
		e.t.Fatalf("newRemoteClient: %v", err)
	}
	e.c = c
	if c.engine.Address() == d.engine.Address() {
		e.t.Fatalf("the caller and the daemon share the address %s", addr)
	}
}

// allowMCP lets the daemon's MCP front reach the test's MCP server at
// rawURL, on loopback (--allow-destination), now and after a restart.
func (e *env) allowMCP(rawURL string) {
	e.t.Helper()
	u, err := url.Parse(rawURL)
	if err != nil {
		e.t.Fatal(err)
	}
	e.edge.allowDestinations = append(e.edge.allowDestinations, u.Host)
	e.d.front.SetAllowed(e.edge.allowDestinations)
}

// stop stops the caller, then the daemon (which stops every app-server).
func (e *env) stop() {
	e.t.Helper()
	if e.c != nil {
		e.c.close()
		e.c = nil
	}
	if e.d != nil {
		if err := e.d.stop(waitTimeout); err != nil {
			e.t.Errorf("stopping the daemon: %v", err)
		}
		e.d = nil
	}
}

// restart replaces the daemon by a new one on the same homes and
// workspace (and a new caller): a fresh app-server per user. between, if
// not nil, runs while nothing runs.
func (e *env) restart(between func()) {
	e.t.Helper()
	e.stop()
	waitNoCodex(e.t, e.bin, e.root)
	if between != nil {
		between()
	}
	e.rounds, e.other = map[string][]any{}, nil
	e.start()
}

// home is the CODEX_HOME of user.
func (e *env) home(user string) string {
	h, err := store.HomeDir(e.homes, user)
	if err != nil {
		e.t.Fatal(err)
	}
	return h
}

// send sends msg to the daemon's root over the remote, with the caller as
// the sender.
func (e *env) send(msg any) {
	e.t.Helper()
	if err := e.c.send(msg); err != nil {
		e.t.Fatalf("sending %T: %v", msg, err)
	}
}

// sendRaw sends a protobuf message as it is, with the caller as sender.
func (e *env) sendRaw(msg proto.Message) {
	e.c.engine.SendWithSender(e.c.target, msg, e.c.pid)
}

// startRound sends m (with a fresh round id if it has none) and returns
// the round id.
func (e *env) startRound(m messages.StartRound) string {
	e.t.Helper()
	if m.RoundID == "" {
		e.nextID++
		m.RoundID = fmt.Sprintf("%s-%d", e.t.Name(), e.nextID)
	}
	e.send(m)
	return m.RoundID
}

// round runs m and returns everything it sent.
func (e *env) round(m messages.StartRound) roundResult {
	e.t.Helper()
	return e.await(e.startRound(m))
}

// roundResult is what one round sent: its events, in arrival order, then
// its verdict.
type roundResult struct {
	id      string
	events  []messages.RoundEvent
	verdict messages.RoundFinished
	// at is when the verdict arrived.
	at time.Time
}

func (r roundResult) text() string {
	var b strings.Builder
	for _, ev := range r.events {
		if ev.Kind == messages.KindText {
			b.WriteString(ev.Text)
		}
	}
	return b.String()
}

func (r roundResult) kind(k messages.EventKind) []messages.RoundEvent {
	var out []messages.RoundEvent
	for _, ev := range r.events {
		if ev.Kind == k {
			out = append(out, ev)
		}
	}
	return out
}

func (r roundResult) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "round %s: verdict %+v; events:", r.id, r.verdict)
	for _, ev := range r.events {
		fmt.Fprintf(&b, "\n  #%d %s %q", ev.Seq, ev.Kind, ev.Text)
		if ev.Tool != nil {
			fmt.Fprintf(&b, " tool=%+v", *ev.Tool)
		}
		if ev.Result != nil {
			fmt.Fprintf(&b, " result=%+v", *ev.Result)
		}
		if ev.Usage != nil {
			fmt.Fprintf(&b, " usage=%+v", *ev.Usage)
		}
	}
	return b.String()
}

// mustComplete fails the test unless the round completed.
func (r roundResult) mustComplete(t testing.TB) roundResult {
	t.Helper()
	if r.verdict.Status != messages.StatusCompleted {
		t.Fatalf("want a completed round; %v", r)
	}
	return r
}

// pump moves one message from the caller's inbox into the env's books; it
// reports false when the deadline passed first.
func (e *env) pump(deadline <-chan time.Time) bool {
	select {
	case m := <-e.c.inbox:
		switch m := m.(type) {
		case messages.RoundEvent, messages.RoundFinished:
			if id := roundIDOf(m); e.done[id] {
				e.t.Errorf("round %s: a reply after its verdict: %+v", id, m)
				return true
			}
		}
		switch m := m.(type) {
		case messages.RoundEvent:
			e.rounds[m.RoundID] = append(e.rounds[m.RoundID], m)
		case messages.RoundFinished:
			e.rounds[m.RoundID] = append(e.rounds[m.RoundID], verdictAt{m, time.Now()})
		default:
			e.other = append(e.other, m)
		}
		return true
	case <-deadline:
		return false
	}
}

// await collects round id's events and verdict. The events must be
// numbered 1, 2, 3, … in arrival order, and nothing of the round may
// arrive after its verdict (checked here for what is already queued, and
// by pump for what comes later).
func (e *env) await(id string) roundResult {
	e.t.Helper()
	timer := time.NewTimer(roundTimeout)
	defer timer.Stop()
	res := roundResult{id: id}
	for {
		got := e.rounds[id]
		for i, m := range got {
			switch m := m.(type) {
			case messages.RoundEvent:
				if want := uint64(len(res.events) + 1); m.Seq != want {
					e.t.Errorf("round %s: event seq %d, want %d (contiguous from 1)", id, m.Seq, want)
				}
				res.events = append(res.events, m)
			case verdictAt:
				res.verdict, res.at = m.v, m.at
				if rest := got[i+1:]; len(rest) > 0 {
					e.t.Errorf("round %s: %d replies after the verdict", id, len(rest))
				}
				delete(e.rounds, id)
				e.done[id] = true
				return res
			}
		}
		e.rounds[id] = nil
		if !e.pump(timer.C) {
			e.t.Fatalf("round %s: no verdict within %v; so far %v", id, roundTimeout, res)
		}
	}
}

func roundIDOf(m any) string {
	switch m := m.(type) {
	case messages.RoundEvent:
		return m.RoundID
	case messages.RoundFinished:
		return m.RoundID
	}
	return ""
}

// verdictAt is a verdict with its arrival time.
type verdictAt struct {
	v  messages.RoundFinished
	at time.Time
}

// waitEvent waits until round id has sent an event satisfying ok, without
// consuming anything: await still returns every event.
func (e *env) waitEvent(id string, what string, ok func(messages.RoundEvent) bool) messages.RoundEvent {
	e.t.Helper()
	timer := time.NewTimer(roundTimeout)
	defer timer.Stop()
	for {
		for _, m := range e.rounds[id] {
			switch m := m.(type) {
			case messages.RoundEvent:
				if ok(m) {
					return m
				}
			case verdictAt:
				e.t.Fatalf("round %s ended before %s: %+v", id, what, m.v)
			}
		}
		if !e.pump(timer.C) {
			e.t.Fatalf("round %s: no %s within %v", id, what, roundTimeout)
		}
	}
}

// awaitOther waits for a reply that belongs to no round and satisfies ok.
func (e *env) awaitOther(what string, ok func(any) bool) any {
	e.t.Helper()
	timer := time.NewTimer(waitTimeout)
	defer timer.Stop()
	for {
		for i, m := range e.other {
			if ok(m) {
				e.other = append(e.other[:i:i], e.other[i+1:]...)
				return m
			}
		}
		if !e.pump(timer.C) {
			e.t.Fatalf("no %s within %v; other replies: %#v", what, waitTimeout, e.other)
		}
	}
}

// waitCount waits until the counter c reaches n.
func (e *env) waitCount(what string, c prometheus.Collector, n float64) {
	e.t.Helper()
	deadline := time.Now().Add(waitTimeout)
	for testutil.ToFloat64(c) < n {
		if time.Now().After(deadline) {
			e.t.Fatalf("%s: %v, want %v", what, testutil.ToFloat64(c), n)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// waitModelRequests waits until the model received n requests in all.
func (e *env) waitModelRequests(n int) []demomodel.Request {
	e.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), waitTimeout)
	defer cancel()
	reqs, err := e.model.WaitRequests(ctx, n)
	if err != nil {
		e.t.Fatalf("model requests: %v", err)
	}
	return reqs
}

// lastRequest is the model's latest request.
func (e *env) lastRequest() demomodel.Request {
	e.t.Helper()
	reqs := e.model.Requests()
	if len(reqs) == 0 {
		e.t.Fatal("the model received no request")
	}
	return reqs[len(reqs)-1]
}

// --- codex processes ---

// codexProcs lists the live (not zombie) processes whose executable is bin
// and whose CODEX_HOME is dir or under it.
func codexProcs(bin, dir string) []proctest.Proc {
	return proctest.List(proctest.ExeIs(bin), proctest.UnderHome(dir))
}

// waitNoCodex fails the test if a codex process with a CODEX_HOME under
// dir is still alive after a short grace (a SIGKILLed process group takes
// a moment to disappear from /proc; there is no event to wait for), and
// kills what is left.
func waitNoCodex(t testing.TB, bin, dir string) {
	t.Helper()
	proctest.WaitGone(t, 5*time.Second, 20*time.Millisecond, proctest.ExeIs(bin), proctest.UnderHome(dir))
}

// appServer returns the app-server process of user: the codex process
// started by this test process with exactly that CODEX_HOME.
func (e *env) appServer(user string) proctest.Proc {
	e.t.Helper()
	home := e.home(user)
	var found []proctest.Proc
	for _, p := range codexProcs(e.bin, home) {
		if p.PPID == os.Getpid() && p.Home() == home {
			found = append(found, p)
		}
	}
	if len(found) != 1 {
		e.t.Fatalf("want one app-server for %s, found %+v", user, found)
	}
	return found[0]
}

// --- files ---

// registryThread reads the thread record of key in user's home.
func (e *env) registryThread(user, key string) string {
	e.t.Helper()
	path := filepath.Join(filepath.Dir(e.home(user)), "meshweaver", "threads", store.KeyPrefix(key)+".txt")
	data, err := os.ReadFile(path)
	if err != nil {
		e.t.Fatalf("registry record: %v", err)
	}
	for _, line := range strings.Split(string(data), "\n") {
		if id, ok := strings.CutPrefix(line, "thread "); ok {
			return id
		}
	}
	e.t.Fatalf("registry record %s holds no thread line: %q", path, data)
	return ""
}

// rollouts lists the rollout files of threadID in user's home.
func (e *env) rollouts(user, threadID string) []string {
	e.t.Helper()
	var out []string
	root := filepath.Join(e.home(user), "sessions")
	_ = filepath.WalkDir(root, func(path string, d os.DirEntry, err error) error {
		if err == nil && !d.IsDir() && strings.HasPrefix(d.Name(), "rollout-") &&
			strings.HasSuffix(d.Name(), "-"+threadID+".jsonl") {
			out = append(out, path)
		}
		return nil
	})
	return out
}

// syncBuffer is a logger's buffer written from many goroutines.
type syncBuffer struct{ syncbuf.Buffer }

// filtered is the log without its debug lines (the app-servers' relayed
// stderr), unless all.
func (b *syncBuffer) filtered(all bool) string {
	s := b.String()
	if all {
		return s
	}
	var out []string
	for _, line := range strings.Split(s, "\n") {
		if !strings.Contains(line, "level=DEBUG") {
			out = append(out, line)
		}
	}
	return strings.Join(out, "\n")
}

// testCodexEnv is what the tests' app-servers get on top of the daemon's
// allow-listed environment. The homes are under /tmp, and the CLI makes no
// helper links (codex-linux-sandbox, which its own sandbox needs) in a
// CODEX_HOME under its TMPDIR. HOME is an empty folder: the CLI's
// login-shell snapshot must not read the machine's own ~/.bashrc (here a
// pyenv init whose rehash lock outlived the tests by a minute, as orphans).
func testCodexEnv(t *testing.T) []string {
	t.Helper()
	return []string{"TMPDIR=/var/tmp", "HOME=" + t.TempDir()}
}

// binaryServe is what a test of the supervisor binary starts from: the
// binary built into root, the mock model, the homes and workspace folders,
// a free loopback address and the `serve` arguments for them (a free
// metrics port, the CLI's overrides toward the model), to which a test
// adds its own.
type binaryServe struct {
	bin, root, exe, homes, workspace, addr string
	model                                  *demomodel.Server
	args                                   []string
}

func newBinaryServe(t *testing.T) binaryServe {
	t.Helper()
	b := binaryServe{bin: codexBin(t), root: t.TempDir()}
	b.exe = opsBuild(t, b.root)
	model, err := demomodel.Start(demomodel.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(model.Close)
	b.model = model
	b.homes, b.workspace = filepath.Join(b.root, "homes"), filepath.Join(b.root, "workspace")
	if err := os.MkdirAll(b.workspace, 0o700); err != nil {
		t.Fatal(err)
	}
	if b.addr, err = freeLoopbackAddr(); err != nil {
		t.Fatal(err)
	}
	b.args = []string{"serve", "--listen", b.addr, "--homes", b.homes, "--workspace", b.workspace, "--codex", b.bin,
		"--log-format", "json", "--stop-timeout", "20s",
		"--metrics-listen", "127.0.0.1:0"} // not the default port: another daemon may hold it
	b.args = append(b.args, servable(t, b.root, b.workspace)...)
	for _, kv := range codexhome.Overrides(model.URL()) {
		b.args = append(b.args, "--codex-override", kv)
	}
	return b
}
