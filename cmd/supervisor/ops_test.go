package main

import (
	"bufio"
	"context"
	"crypto/tls"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/protobuf/types/known/anypb"

	"github.com/meshweaver/supervisor/actors"
	"github.com/meshweaver/supervisor/demomodel"
	"github.com/meshweaver/supervisor/messages"
	"github.com/meshweaver/supervisor/store"
	"github.com/meshweaver/supervisor/testkit/codexhome"
	"github.com/meshweaver/supervisor/testkit/proctest"
	"github.com/meshweaver/supervisor/testkit/syncbuf"
	"github.com/meshweaver/supervisor/third_party/hollywood/actor"
)

// This file holds the operations tests (metrics, health, --help, the
// SIGTERM drain of the built binary) and the small rig that tls_test.go and
// secrets_test.go share with them. Every name here starts with "ops" so as
// not to clash with the end-to-end helpers of helpers_test.go.

// opsRoundWait bounds the wait for one verdict; opsWait every other wait.
// Real CLI turns take 0.1–1 s; the margin is for a loaded 2-core machine
// under -race.
const (
	opsRoundWait = 60 * time.Second
	opsWait      = 30 * time.Second
)

// --- the rig: a mock model, a daemon on a real remote listener ---

// opsRig is one daemon started with startDaemon (plaintext or mutual TLS)
// on a free loopback port, the real codex CLI pointed at a mock model, its
// log (JSON, debug) in a buffer and its metrics in their own registry.
type opsRig struct {
	t         *testing.T
	bin       string // the codex binary the daemon runs
	root      string // the test's folder: homes, workspace, certificates
	homes     string
	workspace string
	model     *demomodel.Server
	logs      *syncbuf.Buffer
	reg       *prometheus.Registry
	cfg       daemonSetup
	tlsConf   *tls.Config
	d         *daemon
	addr      string
}

// opsNewRig starts a mock model and a daemon. mutate adjusts the
// configuration before the start. Cleanup stops the daemon, checks that no
// codex process of the rig is left, then closes the model.
func opsNewRig(t *testing.T, tlsConf *tls.Config, mutate func(*daemonSetup)) *opsRig {
	t.Helper()
	root := t.TempDir()
	r := &opsRig{
		t: t, bin: opsCodexBin(t), root: root,
		homes:     filepath.Join(root, "homes"),
		workspace: filepath.Join(root, "workspace"),
		logs:      &syncbuf.Buffer{},
		reg:       newRegistry(),
		tlsConf:   tlsConf,
	}
	if err := os.MkdirAll(r.workspace, 0o700); err != nil {
		t.Fatal(err)
	}
	model, err := demomodel.Start(demomodel.Options{})
	if err != nil {
		t.Fatal(err)
	}
	r.model = model
	t.Cleanup(model.Close) // registered first: runs after the daemon stopped
	r.cfg = daemonSetup{Config: actors.Config{
		Homes:     r.homes,
		Workspace: r.workspace,
		CodexBin:  r.bin,
		Overrides: opsOverrides(t, root, model.URL()),
		StopGrace: time.Second,
		CodexEnv:  testCodexEnv(t),
	}, Deps: actors.Deps{
		Logger:  slog.New(slog.NewJSONHandler(r.logs, &slog.HandlerOptions{Level: slog.LevelDebug})),
		Metrics: actors.NewMetrics(r.reg),
	}}
	if mutate != nil {
		mutate(&r.cfg)
	}
	addr, err := freeLoopbackAddr()
	if err != nil {
		t.Fatal(err)
	}
	d, _, err := startDaemonEdge(addr, tlsConf, r.cfg.Config, r.cfg.Deps, testEdge)
	if err != nil {
		t.Fatalf("startDaemon: %v", err)
	}
	r.d, r.addr = d, addr
	t.Cleanup(func() {
		r.stop()
		waitNoCodex(t, r.cfg.CodexBin, root)
		if t.Failed() || os.Getenv("TEST_LOG") != "" {
			t.Logf("daemon log:\n%s", r.logs.String())
		}
	})
	return r
}

// stop stops the daemon (idempotent).
func (r *opsRig) stop() {
	r.t.Helper()
	r.stopWithin(9 * time.Second)
}

// stopWithin stops the daemon with the given stop timeout: two thirds of
// it drain the rounds in flight, then the rest are interrupted.
func (r *opsRig) stopWithin(timeout time.Duration) {
	r.t.Helper()
	if r.d == nil {
		return
	}
	if err := r.d.stop(timeout); err != nil {
		r.t.Errorf("stopping the daemon: %v", err)
	}
	r.d = nil
}

// home is user's CODEX_HOME.
func (r *opsRig) home(user string) string {
	r.t.Helper()
	h, err := store.HomeDir(r.homes, user)
	if err != nil {
		r.t.Fatal(err)
	}
	return h
}

// opsOverrides are the -c settings that point codex at the mock model, with
// the model catalog (so "mock-model" is known) written into dir.
func opsOverrides(t *testing.T, dir, modelURL string) []string {
	t.Helper()
	catalog, err := codexhome.CatalogJSON(codexhome.LargeContextWindow, 0)
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(dir, codexhome.CatalogFile)
	if err := os.WriteFile(path, catalog, 0o600); err != nil {
		t.Fatal(err)
	}
	return append(codexhome.Overrides(modelURL), "model_catalog_json="+strconv.Quote(path))
}

// opsCodexBin is the real codex CLI, symlinks resolved (so that /proc's
// exe links compare equal). Without it the test fails: it never skips.
func opsCodexBin(t testing.TB) string {
	t.Helper()
	bin, err := codexhome.CodexBin()
	if err != nil {
		t.Fatalf("the real codex CLI is required (scripts/install-codex): %v", err)
	}
	abs, err := filepath.EvalSymlinks(bin)
	if err != nil {
		t.Fatal(err)
	}
	if abs, err = filepath.Abs(abs); err != nil {
		t.Fatal(err)
	}
	return abs
}

// --- the caller: a second engine with its own remote ---

// opsCaller is a remote caller that keeps every message it received, in
// order, so that a test can both wait for replies and scan all of them.
type opsCaller struct {
	t    *testing.T
	c    *remoteClient
	got  []any        // everything received, in order
	used map[int]bool // indices handed out by awaitOther
	n    int
}

// opsNewCaller starts a caller for the daemon at addr (mutual TLS when
// conf is set); cleanup closes it.
func opsNewCaller(t *testing.T, addr string, conf *tls.Config) *opsCaller {
	t.Helper()
	c, err := newRemoteClientTLS(addr, "", conf)
	if err != nil {
		t.Fatalf("newRemoteClientTLS: %v", err)
	}
	oc := &opsCaller{t: t, c: c, used: map[int]bool{}}
	t.Cleanup(oc.close)
	return oc
}

func (oc *opsCaller) close() {
	if oc.c != nil {
		oc.c.close()
		oc.c = nil
	}
}

// send sends msg to the daemon's root, the caller as sender.
func (oc *opsCaller) send(msg any) {
	oc.t.Helper()
	if err := oc.c.send(msg); err != nil {
		oc.t.Fatalf("sending %T: %v", msg, err)
	}
}

// sendRaw sends an envelope as it is.
func (oc *opsCaller) sendRaw(a *anypb.Any) {
	oc.c.engine.SendWithSender(oc.c.target, a, oc.c.pid)
}

// start sends m with a fresh round id (unless it has one) and returns it.
func (oc *opsCaller) start(m messages.StartRound) string {
	oc.t.Helper()
	if m.RoundID == "" {
		oc.n++
		m.RoundID = fmt.Sprintf("%s-%d", strings.ReplaceAll(oc.t.Name(), "/", "."), oc.n)
	}
	oc.send(m)
	return m.RoundID
}

// pump moves one message of the inbox into got; false when the deadline
// passed first.
func (oc *opsCaller) pump(deadline <-chan time.Time) bool {
	select {
	case m := <-oc.c.inbox:
		oc.got = append(oc.got, m)
		return true
	case <-deadline:
		return false
	}
}

// opsRound is what one round sent.
type opsRound struct {
	id      string
	events  []messages.RoundEvent
	verdict messages.RoundFinished
}

func (r opsRound) text() string {
	var b strings.Builder
	for _, ev := range r.events {
		if ev.Kind == messages.KindText {
			b.WriteString(ev.Text)
		}
	}
	return b.String()
}

// round runs m and returns its events and verdict.
func (oc *opsCaller) round(m messages.StartRound) opsRound {
	oc.t.Helper()
	return oc.await(oc.start(m))
}

// await waits for round id's verdict and returns it with its events.
func (oc *opsCaller) await(id string) opsRound {
	oc.t.Helper()
	timer := time.NewTimer(opsRoundWait)
	defer timer.Stop()
	for {
		res := opsRound{id: id}
		for _, m := range oc.got {
			switch m := m.(type) {
			case messages.RoundEvent:
				if m.RoundID == id {
					res.events = append(res.events, m)
				}
			case messages.RoundFinished:
				if m.RoundID == id {
					res.verdict = m
					return res
				}
			}
		}
		if !oc.pump(timer.C) {
			oc.t.Fatalf("round %s: no verdict within %v; got %d events", id, opsRoundWait, len(res.events))
		}
	}
}

// waitText waits until round id has streamed some answer text.
func (oc *opsCaller) waitText(id string) {
	oc.t.Helper()
	timer := time.NewTimer(opsRoundWait)
	defer timer.Stop()
	for {
		for _, m := range oc.got {
			switch m := m.(type) {
			case messages.RoundEvent:
				if m.RoundID == id && m.Kind == messages.KindText {
					return
				}
			case messages.RoundFinished:
				if m.RoundID == id {
					oc.t.Fatalf("round %s ended before any text: %+v", id, m)
				}
			}
		}
		if !oc.pump(timer.C) {
			oc.t.Fatalf("round %s: no text within %v", id, opsRoundWait)
		}
	}
}

// awaitOther waits for a message (not a round's) that ok accepts, each
// message handed out once.
func (oc *opsCaller) awaitOther(what string, within time.Duration, ok func(any) bool) any {
	oc.t.Helper()
	timer := time.NewTimer(within)
	defer timer.Stop()
	for {
		for i, m := range oc.got {
			if !oc.used[i] && ok(m) {
				oc.used[i] = true
				return m
			}
		}
		if !oc.pump(timer.C) {
			oc.t.Fatalf("no %s within %v; received %#v", what, within, oc.got)
		}
	}
}

// --- processes ---

// opsAppServer is the one live app-server whose CODEX_HOME is home.
func opsAppServer(t *testing.T, bin, home string) proctest.Proc {
	t.Helper()
	var homed []proctest.Proc
	pids := map[int]bool{}
	for _, p := range codexProcs(bin, home) {
		if p.Home() == home {
			homed = append(homed, p)
			pids[p.PID] = true
		}
	}
	// A child the app-server has forked and not yet exec'd (its shell, a
	// sandboxed command) is still the codex binary with its environment:
	// the app-server is the one whose parent is not one of them.
	var found []proctest.Proc
	for _, p := range homed {
		if !pids[p.PPID] {
			found = append(found, p)
		}
	}
	if len(found) != 1 {
		t.Fatalf("want one app-server with CODEX_HOME %s, found %+v", home, homed)
	}
	return found[0]
}

// --- logs and metrics ---

// opsLogRecords parses JSON log lines; lines that are not JSON are skipped.
func opsLogRecords(s string) []map[string]any {
	var out []map[string]any
	for _, line := range strings.Split(s, "\n") {
		var rec map[string]any
		if json.Unmarshal([]byte(line), &rec) == nil {
			out = append(out, rec)
		}
	}
	return out
}

// opsHTTP GETs url and returns the status and body.
func opsHTTP(t *testing.T, url string) (int, string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), opsWait)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		t.Fatal(err)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("GET %s: %v", url, err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("GET %s: %v", url, err)
	}
	return resp.StatusCode, string(body)
}

// opsMetric returns the value of the sample named name with exactly the
// given labels (`status="completed"`, or "" for none) in a Prometheus text
// exposition, and whether it is there.
func opsMetric(text, name, labels string) (float64, bool) {
	want := name
	if labels != "" {
		want += "{" + labels + "}"
	}
	for _, line := range strings.Split(text, "\n") {
		if strings.HasPrefix(line, "#") {
			continue
		}
		f := strings.Fields(line)
		if len(f) != 2 || f[0] != want {
			continue
		}
		v, err := strconv.ParseFloat(f[1], 64)
		return v, err == nil
	}
	return 0, false
}

// opsWaitMetric polls /metrics until ok holds for the sample (a counter
// moves on an event the test cannot subscribe to), with a deadline.
func opsWaitMetric(t *testing.T, url, name, labels string, what string, ok func(float64) bool) string {
	t.Helper()
	deadline := time.Now().Add(opsWait)
	for {
		_, body := opsHTTP(t, url)
		if v, found := opsMetric(body, name, labels); found && ok(v) {
			return body
		}
		if time.Now().After(deadline) {
			v, found := opsMetric(body, name, labels)
			t.Fatalf("%s{%s}: %v (present %v), want %s within %v", name, labels, v, found, what, opsWait)
		}
		time.Sleep(25 * time.Millisecond)
	}
}

// --- tests ---

// TestOpsMetricsAndHealth runs rounds against the real CLI with the
// daemon's registry behind startOps, and reads /metrics, /healthz and
// /readyz: rounds by verdict, first-delta and round latency, live
// app-servers, starts, deaths, restarts, idle evictions, rejected remote
// messages by reason; no label carries a user id or a thread key; every
// round's log lines name the user by its hash, the thread by its key
// prefix, and the round.
func TestOpsMetricsAndHealth(t *testing.T) {
	const user, thread = "ops-alice-7f3c", "ops/mesh/thread-9d2e"
	r := opsNewRig(t, nil, func(c *daemonSetup) {
		c.IdleTimeout = 3 * time.Second
		c.RestartBackoff = time.Millisecond
	})
	ops, err := startOps("127.0.0.1:0", r.reg, r.cfg.Logger)
	if err != nil {
		t.Fatal(err)
	}
	defer ops.stop()
	base := "http://" + ops.Addr()
	metricsURL := base + "/metrics"

	// Health: live at once; ready only once serve says so, and no longer
	// while draining.
	if code, body := opsHTTP(t, base+"/healthz"); code != http.StatusOK || strings.TrimSpace(body) != "ok" {
		t.Errorf("/healthz = %d %q, want 200 ok", code, body)
	}
	if code, _ := opsHTTP(t, base+"/readyz"); code != http.StatusServiceUnavailable {
		t.Errorf("/readyz before ready = %d, want 503", code)
	}
	ops.ready.Store(true)
	if code, body := opsHTTP(t, base+"/readyz"); code != http.StatusOK || strings.TrimSpace(body) != "ready" {
		t.Errorf("/readyz when ready = %d %q, want 200 ready", code, body)
	}

	// Before any event every labelled counter shows each of its label
	// sets at zero, so that rate() and alerts have a series to look at.
	_, body0 := opsHTTP(t, metricsURL)
	for _, m := range []struct{ name, labels string }{
		{"supervisor_rounds_total", `status="completed"`}, {"supervisor_rounds_total", `status="failed"`},
		{"supervisor_rounds_total", `status="interrupted"`}, {"supervisor_rounds_total", `status="busy"`},
		{"supervisor_rounds_total", `status="unavailable"`}, {"supervisor_rounds_total", `status="rejected"`},
		{"supervisor_app_server_evictions_total", `reason="idle"`}, {"supervisor_app_server_evictions_total", `reason="cap"`},
		{"supervisor_logins_total", `outcome="success"`}, {"supervisor_logins_total", `outcome="failure"`},
		{"supervisor_remote_rejected_total", `reason="unknown"`}, {"supervisor_remote_rejected_total", `reason="malformed"`},
		{"supervisor_remote_rejected_total", `reason="invalid"`}, {"supervisor_rounds_in_flight", ""}, {"supervisor_draining", ""},
	} {
		if v, ok := opsMetric(body0, m.name, m.labels); !ok || v != 0 {
			t.Errorf("at the start %s{%s} = %v (present %v), want 0", m.name, m.labels, v, ok)
		}
	}

	c := opsNewCaller(t, r.addr, nil)

	// A completed round.
	r.model.Enqueue(demomodel.Text("Hello", " from", " ops"))
	if v := c.round(messages.StartRound{User: user, Thread: thread, Text: "hi"}); v.verdict.Status != messages.StatusCompleted || v.text() != "Hello from ops" {
		t.Fatalf("first round: %+v, text %q; want completed", v.verdict, v.text())
	}
	body := opsWaitMetric(t, metricsURL, "supervisor_rounds_total", `status="completed"`, "1", func(v float64) bool { return v == 1 })
	for _, m := range []struct{ name, labels string }{
		{"supervisor_round_first_delta_seconds_count", ""},
		{"supervisor_round_duration_seconds_count", ""},
		{"supervisor_app_server_starts_total", ""},
		{"supervisor_live_app_servers", ""},
		{"supervisor_users", ""},
	} {
		if v, ok := opsMetric(body, m.name, m.labels); !ok || v != 1 {
			t.Errorf("%s{%s} = %v (present %v), want 1", m.name, m.labels, v, ok)
		}
	}
	for _, name := range []string{"go_goroutines", "process_open_fds",
		"supervisor_app_server_deaths_total", "supervisor_app_server_restarts_total"} {
		if _, ok := opsMetric(body, name, ""); !ok {
			t.Errorf("/metrics lacks %s", name)
		}
	}
	if v, _ := opsMetric(body, "supervisor_round_first_delta_seconds_sum", ""); v <= 0 {
		t.Errorf("first-delta sum %v, want > 0", v)
	}

	// A death, then a restart.
	victim := opsAppServer(t, r.bin, r.home(user))
	if err := syscall.Kill(-victim.PID, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	opsWaitMetric(t, metricsURL, "supervisor_app_server_deaths_total", "", "1", func(v float64) bool { return v == 1 })
	r.model.Enqueue(demomodel.Text("back"))
	if v := c.round(messages.StartRound{User: user, Thread: thread, Text: "again"}); v.verdict.Status != messages.StatusCompleted {
		t.Fatalf("round after the death: %+v", v.verdict)
	}
	body = opsWaitMetric(t, metricsURL, "supervisor_app_server_restarts_total", "", "1", func(v float64) bool { return v == 1 })
	if v, _ := opsMetric(body, "supervisor_app_server_starts_total", ""); v != 2 {
		t.Errorf("starts = %v, want 2", v)
	}

	// An interrupted round: the app-server is live (and not idle) while it
	// runs; once it ended the idle app-server is evicted.
	r.model.Enqueue(demomodel.Respond(demomodel.Message("partial ")).Hang())
	id := c.start(messages.StartRound{User: user, Thread: thread, Text: "hang"})
	c.waitText(id)
	_, body = opsHTTP(t, metricsURL)
	if v, _ := opsMetric(body, "supervisor_live_app_servers", ""); v != 1 {
		t.Errorf("live app-servers during a round = %v, want 1", v)
	}
	if v, _ := opsMetric(body, "supervisor_rounds_in_flight", ""); v != 1 {
		t.Errorf("rounds in flight during a round = %v, want 1", v)
	}
	c.send(messages.InterruptRound{User: user, Thread: thread, RoundID: id})
	if v := c.await(id); v.verdict.Status != messages.StatusInterrupted {
		t.Errorf("interrupted round: %+v", v.verdict)
	}
	opsWaitMetric(t, metricsURL, "supervisor_app_server_evictions_total", `reason="idle"`, "1", func(v float64) bool { return v == 1 })
	body = opsWaitMetric(t, metricsURL, "supervisor_live_app_servers", "", "0", func(v float64) bool { return v == 0 })
	if v, _ := opsMetric(body, "supervisor_rounds_total", `status="interrupted"`); v != 1 {
		t.Errorf("interrupted rounds = %v, want 1", v)
	}
	if v, ok := opsMetric(body, "supervisor_rounds_in_flight", ""); !ok || v != 0 {
		t.Errorf("rounds in flight after the verdicts = %v (present %v), want 0", v, ok)
	}
	waitNoCodex(t, r.bin, r.home(user))

	// Refused input: a hostile user id (a rejected verdict), an unknown and
	// an undecodable envelope (decode errors, by reason).
	if v := c.round(messages.StartRound{User: "../" + user, Thread: thread, Text: "x"}); v.verdict.Status != messages.StatusRejected {
		t.Errorf("hostile round: %+v, want rejected", v.verdict)
	}
	c.sendRaw(&anypb.Any{TypeUrl: messages.TypeURLPrefix + "no_such.v1", Value: []byte{0x80}})
	c.sendRaw(&anypb.Any{TypeUrl: messages.TypeURLPrefix + "start_round.v1", Value: []byte("\xc1 garbage")})
	for range 2 {
		c.awaitOther("Rejected", opsWait, func(m any) bool { _, ok := m.(messages.Rejected); return ok })
	}
	_, body = opsHTTP(t, metricsURL)
	for _, m := range []struct{ name, labels string }{
		{"supervisor_rounds_total", `status="rejected"`},
		{"supervisor_remote_rejected_total", `reason="unknown"`},
		{"supervisor_remote_rejected_total", `reason="malformed"`},
	} {
		if v, ok := opsMetric(body, m.name, m.labels); !ok || v != 1 {
			t.Errorf("%s{%s} = %v (present %v), want 1", m.name, m.labels, v, ok)
		}
	}
	if v, _ := opsMetric(body, "supervisor_rounds_total", `status="completed"`); v != 2 {
		t.Errorf("completed rounds = %v, want 2", v)
	}
	if v, _ := opsMetric(body, "supervisor_round_duration_seconds_count", ""); v != 3 {
		t.Errorf("round durations observed = %v, want 3 (2 completed, 1 interrupted)", v)
	}

	// Labels are fixed vocabularies: no user id, no thread key, no key
	// prefix, no round id.
	for _, s := range []string{user, thread, store.KeyPrefix(thread), id} {
		if strings.Contains(body, s) {
			t.Errorf("/metrics holds %q", s)
		}
	}

	// Every log line of a round names the user's hash, the thread's key
	// prefix and the round id; none holds the raw user id or thread key.
	logs := r.logs.String()
	var finished int
	for _, rec := range opsLogRecords(logs) {
		if rec["msg"] != "round finished" {
			continue
		}
		finished++
		u, _ := rec["user"].(string)
		if !regexp.MustCompile(`^u-[0-9a-f]{8}$`).MatchString(u) || rec["thread"] != store.KeyPrefix(thread) ||
			!strings.HasPrefix(fmt.Sprint(rec["round"]), strings.ReplaceAll(t.Name(), "/", ".")+"-") {
			t.Errorf("round log line %v: want user u-<hash>, thread %s and the round id", rec, store.KeyPrefix(thread))
		}
	}
	if finished != 3 {
		t.Errorf("%d \"round finished\" log lines, want 3", finished)
	}
	// The raw user id does show inside paths (codex's stderr names its
	// CODEX_HOME), but no attribute is the id itself, and the thread key
	// never shows at all.
	if strings.Contains(logs, thread) {
		t.Errorf("the daemon's log holds the raw thread key %q", thread)
	}
	for _, rec := range opsLogRecords(logs) {
		for k, v := range rec {
			if v == user {
				t.Errorf("log line %v: %s is the raw user id", rec, k)
			}
		}
	}

	ops.ready.Store(false)
	if code, _ := opsHTTP(t, base+"/readyz"); code != http.StatusServiceUnavailable {
		t.Errorf("/readyz when not ready = %d, want 503", code)
	}
	if code, _ := opsHTTP(t, base+"/healthz"); code != http.StatusOK {
		t.Errorf("/healthz while not ready = %d, want 200", code)
	}
}

// TestOpsEveryVerdictIsCounted: supervisor_rounds_total counts rounds by
// verdict, so every verdict a caller gets is counted exactly once under its
// status, whoever sends it: a round actor (interrupted), the user actor (a
// busy thread; a queued round when the daemon stops) or the root (a round
// refused while draining).
func TestOpsEveryVerdictIsCounted(t *testing.T) {
	r := opsNewRig(t, nil, func(c *daemonSetup) { c.QueueLimit = 1 })
	c := opsNewCaller(t, r.addr, nil)
	const user = "count-alice"

	r.model.Enqueue(demomodel.Respond(demomodel.Message("partial ")).Hang())
	running := c.start(messages.StartRound{User: user, Thread: "t", Text: "hang"})
	c.waitText(running)
	queued := c.start(messages.StartRound{User: user, Thread: "t", Text: "queued"})
	if v := c.round(messages.StartRound{User: user, Thread: "t", Text: "one too many"}).verdict; v.Status != messages.StatusBusy {
		t.Errorf("a round past the queue limit: %+v, want busy", v)
	}

	// Draining: new rounds are refused.
	started := make(chan struct{}, 1)
	watcher := r.d.engine.SpawnFunc(func(c *actor.Context) {
		if _, ok := c.Message().(actors.DrainStarted); ok {
			started <- struct{}{}
		}
	}, "drain-watch")
	r.d.engine.Subscribe(watcher)
	drainCtx, cancelDrain := context.WithCancel(context.Background())
	drained := make(chan error, 1)
	go func() { drained <- actors.Drain(drainCtx, r.d.engine, r.d.root) }()
	select {
	case <-started:
	case <-time.After(opsWait):
		t.Fatal("the root never started draining")
	}
	r.d.engine.Unsubscribe(watcher)
	<-r.d.engine.Poison(watcher).Done()
	if v := c.round(messages.StartRound{User: user, Thread: "other", Text: "late"}).verdict; v.Status != messages.StatusUnavailable {
		t.Errorf("a round while draining: %+v, want unavailable", v)
	}
	cancelDrain()
	<-drained

	// Stopping: the running round and the queued one are interrupted (after
	// a drain of two thirds of the bound; the rest stops the tree and its
	// app-server, which takes more than a second on a loaded machine).
	r.stopWithin(9 * time.Second)
	for _, id := range []string{running, queued} {
		if v := c.await(id).verdict; v.Status != messages.StatusInterrupted {
			t.Errorf("round %s at the stop: %+v, want interrupted", id, v)
		}
	}

	got := map[messages.VerdictStatus]int{}
	for _, m := range c.got {
		if v, ok := m.(messages.RoundFinished); ok {
			got[v.Status]++
		}
	}
	_, body := tlsGather(t, r)
	for status, n := range got {
		if v, _ := opsMetric(body, "supervisor_rounds_total", fmt.Sprintf("status=%q", status)); v != float64(n) {
			t.Errorf("supervisor_rounds_total{status=%q} = %v; the caller got %d such verdicts", status, v, n)
		}
	}
}

// TestHelpServeDocumentsEveryFlag: `supervisor serve --help` exits 0 and
// names every flag of serve with its description and its default.
func TestHelpServeDocumentsEveryFlag(t *testing.T) {
	code, stdout, stderr := tlsRunCLI(t, "serve", "--help")
	if code != 0 {
		t.Fatalf("serve --help exited %d; stderr:\n%s", code, stderr)
	}
	help := stdout + stderr
	fs := flag.NewFlagSet("serve", flag.ContinueOnError)
	serveFlags(fs)
	n := 0
	fs.VisitAll(func(f *flag.Flag) {
		n++
		// flag prints "  -name TYPE\n    \tusage (default ...)".
		re := regexp.MustCompile(`(?m)^  -` + regexp.QuoteMeta(f.Name) + `( \S+)?\n((?:    \t.*\n?)+)`)
		m := re.FindStringSubmatch(help)
		if m == nil {
			t.Errorf("--help does not document -%s", f.Name)
			return
		}
		doc := m[2]
		if len(strings.TrimSpace(doc)) < 15 {
			t.Errorf("-%s: the description %q says too little", f.Name, doc)
		}
		switch f.DefValue {
		case "", "false", "[]", "0": // zero defaults are not printed
		default:
			if !strings.Contains(doc, "(default "+f.DefValue+")") && !strings.Contains(doc, "(default "+strconv.Quote(f.DefValue)+")") {
				t.Errorf("-%s: the description %q does not show the default %q", f.Name, doc, f.DefValue)
			}
		}
	})
	if n < 20 {
		t.Errorf("serve has %d flags, want the full set", n)
	}
	// The top-level usage lists the command.
	if code, stdout, _ := tlsRunCLI(t, "--help"); code != 0 || !strings.Contains(stdout, "serve") {
		t.Errorf("supervisor --help = %d %q", code, stdout)
	}
}

// --- the built binary ---

// opsBuild builds the supervisor command into dir and returns its path.
func opsBuild(t *testing.T, dir string) string {
	t.Helper()
	exe := filepath.Join(dir, "supervisor")
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	if out, err := exec.CommandContext(ctx, "go", "build", "-o", exe, ".").CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	return exe
}

// opsServe is a running `supervisor serve` process with its JSON log.
type opsServe struct {
	t       *testing.T
	cmd     *exec.Cmd
	logs    *syncbuf.Buffer
	changed chan struct{} // a line was logged
	eof     chan struct{} // stderr closed: the process is ending
	exited  chan error    // its exit, once
	err     error
	done    bool
}

// opsStartServe runs exe with args (a serve command line with
// --log-format json). Cleanup kills it if it is still running and, on
// failure, shows its log.
func opsStartServe(t *testing.T, exe string, args ...string) *opsServe {
	t.Helper()
	s := &opsServe{t: t, cmd: exec.Command(exe, args...), logs: &syncbuf.Buffer{},
		changed: make(chan struct{}, 1), eof: make(chan struct{}), exited: make(chan error, 1)}
	stderr, err := s.cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := s.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() {
		sc := bufio.NewScanner(stderr)
		sc.Buffer(make([]byte, 64<<10), 4<<20)
		for sc.Scan() {
			_, _ = s.logs.Write(append(sc.Bytes(), '\n'))
			select {
			case s.changed <- struct{}{}:
			default:
			}
		}
		_, _ = io.Copy(io.Discard, stderr)
		close(s.eof)
		s.exited <- s.cmd.Wait()
	}()
	t.Cleanup(func() {
		if !s.done {
			_ = s.cmd.Process.Kill()
			s.wait(opsWait)
		}
		if t.Failed() || os.Getenv("TEST_LOG") != "" {
			t.Logf("serve's log:\n%s", s.logs.String())
		}
	})
	return s
}

// wait waits for the process to exit; false if it did not within d.
func (s *opsServe) wait(d time.Duration) bool {
	if s.done {
		return true
	}
	select {
	case s.err = <-s.exited:
		s.done = true
		return true
	case <-time.After(d):
		return false
	}
}

// running reports whether the process has not exited.
func (s *opsServe) running() bool {
	select {
	case <-s.eof:
		return !s.wait(opsWait)
	default:
		return true
	}
}

// find returns the first log record ok accepts.
func (s *opsServe) find(ok func(map[string]any) bool) (map[string]any, bool) {
	for _, rec := range opsLogRecords(s.logs.String()) {
		if ok(rec) {
			return rec, true
		}
	}
	return nil, false
}

// count is how many log records ok accepts.
func (s *opsServe) count(ok func(map[string]any) bool) int {
	n := 0
	for _, rec := range opsLogRecords(s.logs.String()) {
		if ok(rec) {
			n++
		}
	}
	return n
}

// waitCount waits until n log records satisfy ok; false when the process
// ended first. It fails the test at the deadline.
func (s *opsServe) waitCount(what string, n int, ok func(map[string]any) bool) bool {
	s.t.Helper()
	timer := time.NewTimer(opsRoundWait)
	defer timer.Stop()
	for {
		if s.count(ok) >= n {
			return true
		}
		select {
		case <-s.changed:
		case <-s.eof:
			return s.count(ok) >= n
		case <-timer.C:
			s.t.Fatalf("serve never logged %s (%d times)", what, n)
		}
	}
}

// waitMsg waits for the log line with message msg and fails the test if
// the process ends first.
func (s *opsServe) waitMsg(msg string) map[string]any {
	s.t.Helper()
	is := func(rec map[string]any) bool { return rec["msg"] == msg }
	if !s.waitCount(fmt.Sprintf("%q", msg), 1, is) {
		s.t.Fatalf("serve exited before logging %q", msg)
	}
	rec, _ := s.find(is)
	return rec
}

// crash is the Go panic at the end of the process's output, if any.
func (s *opsServe) crash() string {
	out := s.logs.String()
	if i := strings.Index(out, "\npanic: "); i >= 0 {
		return out[i+1 : min(len(out), i+1+1200)]
	}
	return ""
}

// TestDrainOnSIGTERM runs the built binary: `supervisor serve` with two
// rounds in flight, one whose model stream ends shortly and one whose
// stream hangs, and a third queued behind the hanging one. On SIGTERM the
// daemon stops admitting rounds (a new one gets an unavailable verdict at
// once), lets the short round complete, then at the drain deadline
// interrupts the hanging one and the one queued behind it; every caller
// gets its verdict, the process exits 0 and no codex process is left.
func TestDrainOnSIGTERM(t *testing.T) {
	bin := opsCodexBin(t)
	root := t.TempDir()
	homes, workspace := filepath.Join(root, "homes"), filepath.Join(root, "workspace")
	if err := os.MkdirAll(workspace, 0o700); err != nil {
		t.Fatal(err)
	}
	exe := opsBuild(t, root)

	model, err := demomodel.Start(demomodel.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(model.Close) // last: after serve and its app-servers are gone
	model.SetResponder(func(req *demomodel.Request) demomodel.Script {
		switch req.LastUserText() {
		case "hang":
			return demomodel.Respond(demomodel.Message("partial ")).Hang()
		case "slow":
			// About 1.5 s of streaming: well inside the drain window.
			return demomodel.Text("one ", "two ", "three ", "four ", "five").WithDelay(300 * time.Millisecond)
		}
		return demomodel.Text("ok")
	})

	addr, err := freeLoopbackAddr()
	if err != nil {
		t.Fatal(err)
	}
	const stopTimeout = 9 * time.Second // the drain gets two thirds: 6 s
	args := []string{"serve", "--listen", addr, "--homes", homes, "--workspace", workspace, "--codex", bin,
		"--metrics-listen", "127.0.0.1:0", "--stop-timeout", stopTimeout.String(),
		"--log-format", "json", "--log-level", "debug"}
	for _, o := range opsOverrides(t, root, model.URL()) {
		args = append(args, "--codex-override", o)
	}
	args = append(args, servable(t, root, workspace, filepath.Join(root, codexhome.CatalogFile))...)
	t.Cleanup(func() { waitNoCodex(t, bin, root) }) // runs after serve's cleanup
	srv := opsStartServe(t, exe, args...)
	metrics := srv.waitMsg("metrics serving")
	readyz := fmt.Sprintf("http://%s/readyz", metrics["listen"])
	if code, _ := opsHTTP(t, readyz); code != http.StatusOK {
		t.Fatalf("/readyz = %d before the stop, want 200", code)
	}

	c := opsNewCaller(t, addr, nil)
	slow := c.start(messages.StartRound{User: "drain-alice", Thread: "slow", Text: "slow"})
	hang := c.start(messages.StartRound{User: "drain-bob", Thread: "hang", Text: "hang"})
	// Queued behind the hanging round on its mesh thread: admitted, never
	// started. The root takes it right after the hanging one (one stream,
	// in order), long before that one streams any text.
	queued := c.start(messages.StartRound{User: "drain-bob", Thread: "hang", Text: "queued"})
	c.waitText(slow)
	c.waitText(hang)

	sigAt := time.Now()
	if err := syscall.Kill(srv.cmd.Process.Pid, syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	opsWaitMetric(t, fmt.Sprintf("http://%s/metrics", metrics["listen"]), "supervisor_draining", "", "the drain's start",
		func(v float64) bool { return v == 1 })
	late := c.round(messages.StartRound{User: "drain-carol", Thread: "late", Text: "too late"})
	if late.verdict.Status != messages.StatusUnavailable || len(late.events) != 0 {
		t.Errorf("a round sent while draining: %+v with %d events, want unavailable at once", late.verdict, len(late.events))
	}

	s := c.await(slow)
	if s.verdict.Status != messages.StatusCompleted || s.text() != "one two three four five" {
		t.Errorf("the round in flight at SIGTERM: %+v, text %q; want it drained to completion", s.verdict, s.text())
	}
	h := c.await(hang)
	if h.verdict.Status != messages.StatusInterrupted || h.text() != "partial " {
		t.Errorf("the hanging round: %+v, text %q; want interrupted at the drain deadline", h.verdict, h.text())
	}
	if took := time.Since(sigAt); took < stopTimeout*2/3-time.Second {
		t.Errorf("the hanging round was interrupted %v after SIGTERM, before the drain deadline (%v)", took, stopTimeout*2/3)
	}
	if q := c.await(queued); q.verdict.Status != messages.StatusInterrupted || len(q.events) != 0 {
		t.Errorf("the queued round: %+v with %d events, want interrupted without running", q.verdict, len(q.events))
	}

	if !srv.wait(stopTimeout + 10*time.Second) {
		t.Fatalf("serve did not exit within %v of SIGTERM", stopTimeout+10*time.Second)
	}
	if srv.err != nil {
		t.Errorf("serve exited with %v, want 0", srv.err)
	}
	if took := time.Since(sigAt); took > stopTimeout+5*time.Second {
		t.Errorf("serve took %v to stop, more than --stop-timeout %v and a margin", took, stopTimeout)
	}
	waitNoCodex(t, bin, homes)
	// Rounds log their start and their end with its duration, in Go's form.
	if n := srv.count(func(rec map[string]any) bool { return rec["msg"] == "round started" }); n != 2 {
		t.Errorf("%d \"round started\" lines, want 2 (slow and hang; the queued one never started)", n)
	}
	if fin, ok := srv.find(func(rec map[string]any) bool { return rec["msg"] == "round finished" && rec["status"] == "completed" }); !ok {
		t.Error("no \"round finished\" line for the completed round")
	} else if s, _ := fin["duration"].(string); !opsDurationIn(s, time.Second, time.Minute) {
		t.Errorf("round finished with duration %#v, want the ~1.5 s of the round as a Go duration", fin["duration"])
	}
	if rec, ok := srv.find(func(rec map[string]any) bool { return rec["msg"] == "stopping" }); !ok || rec["timeout"] != "9s" {
		t.Errorf("the stopping line %v, want timeout \"9s\"", rec)
	}
	// A log on a pipe has no colour; at debug, users are named by their
	// tag only, hollywood's lifecycle lines (PIDs) included.
	logs := srv.logs.String()
	if strings.Contains(logs, "\x1b") {
		t.Error("serve's log on a pipe holds ESC bytes")
	}
	if !strings.Contains(logs, `"msg":"Actor started"`) {
		t.Error("serve's debug log has no hollywood lifecycle line")
	}
	for _, user := range []string{"drain-alice", "drain-bob", "drain-carol"} {
		if strings.Contains(logs, user) {
			t.Errorf("serve's debug log names %s raw", user)
		}
		if user != "drain-carol" && !strings.Contains(logs, messages.UserTag(user)) { // carol's round was refused unlogged
			t.Errorf("serve's debug log never names %s by its tag %s", user, messages.UserTag(user))
		}
	}
	for _, want := range []string{`"msg":"stopping"`, `"msg":"stopped"`, "rounds still running at the drain deadline"} {
		if !strings.Contains(srv.logs.String(), want) {
			t.Errorf("serve's log lacks %s", want)
		}
	}
}

// opsDurationIn reports whether s is a Go duration within [lo, hi].
func opsDurationIn(s string, lo, hi time.Duration) bool {
	d, err := time.ParseDuration(s)
	return err == nil && d >= lo && d <= hi
}
