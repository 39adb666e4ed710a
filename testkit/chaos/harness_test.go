package chaos

import (
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/meshweaver/supervisor/third_party/hollywood/actor"
	"github.com/meshweaver/supervisor/third_party/hollywood/remote"

	"github.com/meshweaver/supervisor/demomodel"
	"github.com/meshweaver/supervisor/messages"
	"github.com/meshweaver/supervisor/store"
	"github.com/meshweaver/supervisor/testkit/codexhome"
)

// Round kinds: what the mock model does in the round.
const (
	kindText    = "text"    // a slowly streamed answer
	kindApprove = "approve" // a command that needs approval (auto_approve: accepted and run), then the answer
	kindDecline = "decline" // the same command, declined (no auto_approve), then the answer
)

// Timeouts of the caller side.
const (
	// roundTimeout bounds the wait for a verdict from a live daemon: far
	// above any round's length, and twice the daemon's call timeout (60s).
	roundTimeout = 120 * time.Second
	// lostGrace is how long a round sent to a daemon that the suite then
	// killed may still get a verdict (one already on the wire) before it
	// counts as lost to the daemon kill.
	lostGrace = 3 * time.Second
)

// roundRec is the suite's book of one round.
type roundRec struct {
	id, user, thread, kind string
	final                  bool
	epoch                  int
	d                      *daemonProc // the daemon it was sent to
	sentAt                 time.Time

	// From the caller's inbox.
	events       int
	lastSeq      uint64
	seqErrors    int
	afterVerdict int
	text         strings.Builder
	verdicts     []messages.RoundFinished
	verdictAt    time.Time
	done         chan struct{} // closed on the first verdict
	lost         bool          // sent to a daemon the suite killed; no verdict came
	timedOut     bool

	// From the mock model.
	requests    int
	streamFrom  time.Time
	streamUntil time.Time
	callAt      time.Time // when the model finished asking for the command
}

func (r *roundRec) inFlight() bool { return len(r.verdicts) == 0 && !r.lost && !r.timedOut }

// harness is one chaos run.
type harness struct {
	t       *testing.T
	cfg     config
	bin     string // the supervisor
	codex   string // the codex CLI, symlinks resolved
	root    string
	homes   string
	work    string
	logDir  string
	homeDir string // HOME of the daemon and its app-servers
	marker  string // in every command the model asks for, to find leftovers
	// commandFor, if set, replaces command.
	commandFor func(id string) string
	model      *demomodel.Server
	args       []string // serve flags, the listen address first
	addr       string

	rngMu sync.Mutex
	rng   *rand.Rand

	// gate is held for writing while the daemon is being killed and
	// restarted: no round is sent then.
	gate   sync.RWMutex
	d      *daemonProc
	epoch  atomic.Int64 // h.d's epoch, readable without the gate
	epochs []*daemonProc

	caller      *caller
	closeCaller func()

	mu          sync.Mutex
	rounds      map[string]*roundRec
	order       []*roundRec
	threadKnown map[string]bool // mesh threads with a codex thread on record (a verdict named one)
	kills       []*killRec
	daemonKills []*daemonKillRec
	skipped     []string // kills the killer gave up on, and why
	stray       int      // replies of unknown rounds
	others      []string // replies that belong to no round
	broken      atomic.Bool
	sent        atomic.Int64
}

func (h *harness) rand(n int) int {
	h.rngMu.Lock()
	defer h.rngMu.Unlock()
	return h.rng.IntN(n)
}

func (h *harness) randDur(d time.Duration) time.Duration {
	if d <= 0 {
		return 0
	}
	h.rngMu.Lock()
	defer h.rngMu.Unlock()
	return time.Duration(h.rng.Int64N(int64(d)))
}

// users and threads of the run.
func (h *harness) users() []string {
	var out []string
	for i := range h.cfg.users {
		out = append(out, fmt.Sprintf("user%d", i+1))
	}
	return out
}

func (h *harness) threads(user string) []string {
	var out []string
	for i := range h.cfg.threads {
		out = append(out, fmt.Sprintf("mesh/%s/thread-%d", user, i+1))
	}
	return out
}

func (h *harness) home(user string) string {
	home, err := store.HomeDir(h.homes, user)
	if err != nil {
		h.t.Fatal(err)
	}
	return home
}

// --- the mock model ---

var tagRE = regexp.MustCompile(`\[chaos:(\w+):([A-Za-z0-9._-]+)\]`)

// roundText is what the user says in a round; the tag tells the model
// which round it answers (the last tag wins: a transcript that seeds a
// fresh thread quotes earlier rounds first).
func roundText(kind, id string) string {
	return fmt.Sprintf("Chaos round %s, please answer. [chaos:%s:%s]", id, kind, id)
}

func lastTag(s string) (kind, id string) {
	m := tagRE.FindAllStringSubmatch(s, -1)
	if len(m) == 0 {
		return "", ""
	}
	last := m[len(m)-1]
	return last[1], last[2]
}

// answerDeltas is the answer the model streams for round id: 20 deltas.
func answerDeltas(id string) []string {
	d := []string{"Answer to " + id + ":"}
	for i := 1; i < 20; i++ {
		d = append(d, fmt.Sprintf(" w%02d", i))
	}
	return d
}

func (h *harness) callID(id string) string { return "call-" + id }

// command is the shell command of an approval round: slow enough to be
// running when a kill lands, marked so a leftover is found, and never a
// known-safe command, so the untrusted policy asks for approval.
func (h *harness) command(id string) string {
	if h.commandFor != nil {
		return h.commandFor(id)
	}
	return fmt.Sprintf("sleep 0.2 && touch %s-%s.txt", h.marker, id)
}

// respond is the mock model: answers stream slowly (kills land
// mid-stream); approval rounds first ask for the command.
func (h *harness) respond(req *demomodel.Request) demomodel.Script {
	if req.IsCompaction() {
		return demomodel.Text("Summary: chaos rounds.")
	}
	kind, id := lastTag(req.LastUserText())
	var sc demomodel.Script
	isCall := false
	switch kind {
	case kindApprove, kindDecline:
		if _, ok := req.ToolOutput(h.callID(id)); ok {
			sc = demomodel.Text(answerDeltas(id)...)
		} else {
			sc = demomodel.Respond(demomodel.ExecCommand(h.callID(id), h.command(id)))
			isCall = true
		}
	default:
		sc = demomodel.Text(answerDeltas(id)...)
	}
	sc = sc.WithDelay(h.cfg.delay)
	now := time.Now()
	until := now.Add(time.Duration(len(sc.Events)) * sc.Delay)
	h.mu.Lock()
	if r := h.rounds[id]; r != nil {
		r.requests++
		r.streamFrom, r.streamUntil = now, until
		if isCall {
			r.callAt = until
		}
	}
	h.mu.Unlock()
	return sc
}

// --- the caller ---

// caller is the mesh side: an engine with its own remote and one actor
// that receives every reply.
type caller struct {
	engine *actor.Engine
	rem    *remote.Remote
	pid    *actor.PID
}

type callerActor struct{ h *harness }

func (c *callerActor) Receive(ctx *actor.Context) {
	switch ctx.Message().(type) {
	case actor.Initialized, actor.Started, actor.Stopped:
		return
	}
	m, err := messages.Unwrap(ctx.Message())
	if err != nil {
		m = err
	}
	c.h.onReply(m)
}

func newCaller(h *harness) (*caller, error) {
	addr, err := freeAddr()
	if err != nil {
		return nil, err
	}
	rem := remote.New(addr, remote.NewConfig())
	e, err := actor.NewEngine(actor.NewEngineConfig().WithRemote(rem))
	if err != nil {
		return nil, fmt.Errorf("starting the caller's remote on %s: %w", addr, err)
	}
	c := &caller{engine: e, rem: rem}
	c.pid = e.Spawn(func() actor.Receiver { return &callerActor{h: h} }, "chaos", actor.WithID("caller"))
	return c, nil
}

func (c *caller) send(daemonAddr string, msg any) error {
	env, err := messages.Encode(msg)
	if err != nil {
		return err
	}
	c.engine.SendWithSender(actor.NewPID(daemonAddr, "meshweaver/root"), env, c.pid)
	return nil
}

func (c *caller) close() {
	<-c.engine.Poison(c.pid).Done()
	c.rem.Stop().Wait()
}

func (h *harness) onReply(m any) {
	now := time.Now()
	h.mu.Lock()
	defer h.mu.Unlock()
	switch m := m.(type) {
	case messages.RoundEvent:
		r := h.rounds[m.RoundID]
		if r == nil {
			h.stray++
			return
		}
		if len(r.verdicts) > 0 {
			r.afterVerdict++
		}
		r.events++
		if m.Seq != r.lastSeq+1 {
			r.seqErrors++
		}
		r.lastSeq = m.Seq
		if m.Kind == messages.KindText {
			r.text.WriteString(m.Text)
		}
	case messages.RoundFinished:
		r := h.rounds[m.RoundID]
		if r == nil {
			h.stray++
			return
		}
		r.verdicts = append(r.verdicts, m)
		if len(r.verdicts) == 1 {
			r.verdictAt = now
			if m.CodexThreadID != "" {
				h.threadKnown[r.thread] = true
			}
			close(r.done)
		}
	default:
		h.others = append(h.others, fmt.Sprintf("%T %+v", m, m))
	}
}

// --- rounds ---

// startRound sends one round to the live daemon; it waits while the daemon
// is being restarted, and returns nil once the run is broken.
func (h *harness) startRound(user, thread, kind, id string, final bool) *roundRec {
	return h.send(messages.StartRound{
		RoundID: id, User: user, Thread: thread, Text: roundText(kind, id),
		AutoApprove: kind == kindApprove,
	}, kind, final)
}

// startRoundWith sends m as it is (a "final" round: outside the figures).
func (h *harness) startRoundWith(m messages.StartRound) *roundRec {
	return h.send(m, "custom", true)
}

func (h *harness) send(m messages.StartRound, kind string, final bool) *roundRec {
	id, user, thread := m.RoundID, m.User, m.Thread
	h.gate.RLock()
	defer h.gate.RUnlock()
	if h.broken.Load() {
		return nil
	}
	d := h.d
	select {
	case <-d.dead:
		h.breakRun("a round was to be sent, but the daemon (epoch %d) is gone: %v", d.epoch, d.state)
		return nil
	default:
	}
	r := &roundRec{
		id: id, user: user, thread: thread, kind: kind, final: final,
		epoch: d.epoch, d: d, sentAt: time.Now(), done: make(chan struct{}),
	}
	h.mu.Lock()
	h.rounds[id] = r
	h.order = append(h.order, r)
	h.mu.Unlock()
	if err := h.caller.send(h.addr, m); err != nil {
		h.breakRun("sending round %s: %v", id, err)
		return nil
	}
	if !final {
		h.sent.Add(1)
	}
	return r
}

// await waits for r's verdict. A round whose daemon the suite SIGKILLed
// gets lostGrace more, then counts as lost; a daemon that died on its own
// breaks the run.
func (h *harness) await(r *roundRec) {
	timeout := time.NewTimer(roundTimeout)
	defer timeout.Stop()
	select {
	case <-r.done:
		return
	case <-r.d.dead:
		if !r.d.killed.Load() {
			// Stopped by the suite (SIGTERM) or died on its own: wait a
			// moment for a verdict already on the wire.
			select {
			case <-r.done:
				return
			case <-time.After(lostGrace):
			}
			if r.d.unexpected.Load() {
				h.breakRun("the daemon (epoch %d) died on its own: %v; round %s got no verdict", r.d.epoch, r.d.state, r.id)
			} else {
				h.t.Errorf("round %s: no verdict before the daemon stopped", r.id)
			}
			h.mu.Lock()
			r.timedOut = true
			h.mu.Unlock()
			return
		}
		grace := time.NewTimer(lostGrace)
		defer grace.Stop()
		select {
		case <-r.done:
		case <-grace.C:
			h.mu.Lock()
			if len(r.verdicts) == 0 {
				r.lost = true
			}
			h.mu.Unlock()
		}
	case <-timeout.C:
		h.mu.Lock()
		r.timedOut = true
		h.mu.Unlock()
		h.t.Errorf("round %s (%s, %s on %s, sent to epoch %d): no verdict within %v",
			r.id, r.kind, r.user, r.thread, r.epoch, roundTimeout)
	}
}

func (h *harness) breakRun(format string, args ...any) {
	if h.broken.CompareAndSwap(false, true) {
		h.t.Errorf("chaos run broken: "+format, args...)
	}
}

// pickKind: mostly text rounds, a fifth each of accepted and declined
// commands.
func (h *harness) pickKind() string {
	switch n := h.rand(10); {
	case n < 6:
		return kindText
	case n < 8:
		return kindApprove
	default:
		return kindDecline
	}
}

// runThread runs n rounds on one mesh thread, one after the other.
func (h *harness) runThread(user, thread string, n int, tn int) {
	for i := 1; i <= n; i++ {
		if h.broken.Load() {
			return
		}
		id := fmt.Sprintf("%s.t%d.r%d", user, tn, i)
		r := h.startRound(user, thread, h.pickKind(), id, false)
		if r == nil {
			return
		}
		h.await(r)
	}
}

// --- set-up ---

// writeCatalog writes the mock model's catalog (unified exec, known
// context window) for the -c model_catalog_json override.
func writeCatalog(dir string) (string, error) {
	catalog, err := codexhome.CatalogJSON(codexhome.LargeContextWindow, 0)
	if err != nil {
		return "", err
	}
	path := filepath.Join(dir, codexhome.CatalogFile)
	return path, os.WriteFile(path, catalog, 0o644) // the users' uids read it
}

func serveArgs(addr, homes, work, codex string, overrides []string) []string {
	args := []string{
		"--listen", addr, "--homes", homes, "--workspace", work, "--codex", codex,
		"--approval-policy", "untrusted", "--sandbox", "workspace-write",
		"--stop-timeout", "30s",
		"--log-format", "json", "--log-level", "debug",
		"--metrics-listen", "", // off: runs in parallel must not fight over its port
	}
	for _, o := range overrides {
		args = append(args, "--codex-override", o)
	}
	return args
}

func quoteTOML(s string) string { return strconv.Quote(s) }
