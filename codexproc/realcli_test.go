package codexproc

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/meshweaver/supervisor/codexproto"
	"github.com/meshweaver/supervisor/codexrpc"
	"github.com/meshweaver/supervisor/demomodel"
	"github.com/meshweaver/supervisor/testkit/codexhome"
	"github.com/meshweaver/supervisor/testkit/proctest"
	"github.com/meshweaver/supervisor/testkit/schema"
	"github.com/meshweaver/supervisor/testkit/syncbuf"
	"go.uber.org/goleak"
)

// These tests run the real, pinned codex CLI (scripts/install-codex puts it
// in .codex-cli/) through Start and Client, with a CODEX_HOME that points it
// at the loopback mock model. They fail, never skip, when the CLI is missing.

// eventTimeout bounds every wait for something the CLI or the fake does. It
// is generous for slow CI; a passing test waits far less.
const eventTimeout = 30 * time.Second

// ---- helpers shared with fault_test.go ----

// notes records a connection's notifications and lets the test goroutine
// wait for one, without sleeping.
type notes struct {
	mu      sync.Mutex
	all     []*codexrpc.Notification
	changed chan struct{} // closed and replaced on every new notification
}

func newNotes() *notes { return &notes{changed: make(chan struct{})} }

// add is an Options.OnNotification: it never blocks.
func (n *notes) add(m *codexrpc.Notification) {
	n.mu.Lock()
	n.all = append(n.all, m)
	close(n.changed)
	n.changed = make(chan struct{})
	n.mu.Unlock()
}

func (n *notes) snapshot() []*codexrpc.Notification {
	n.mu.Lock()
	defer n.mu.Unlock()
	return append([]*codexrpc.Notification(nil), n.all...)
}

// wait returns the index and the first notification that matches, waiting
// up to eventTimeout for it.
func (n *notes) waitIdx(t testing.TB, what string, match func(*codexrpc.Notification) bool) (int, *codexrpc.Notification) {
	t.Helper()
	deadline := time.NewTimer(eventTimeout)
	defer deadline.Stop()
	for {
		n.mu.Lock()
		for i, m := range n.all {
			if match(m) {
				n.mu.Unlock()
				return i, m
			}
		}
		changed := n.changed
		n.mu.Unlock()
		select {
		case <-changed:
		case <-deadline.C:
			var methods []string
			for _, m := range n.snapshot() {
				methods = append(methods, m.Method)
			}
			t.Fatalf("timed out after %v waiting for %s; got %d notifications: %s", eventTimeout, what, len(methods), strings.Join(methods, ", "))
		}
	}
}

func (n *notes) wait(t testing.TB, what string, match func(*codexrpc.Notification) bool) *codexrpc.Notification {
	t.Helper()
	_, m := n.waitIdx(t, what, match)
	return m
}

// all returns every notification that matches, in order.
func (n *notes) filter(match func(*codexrpc.Notification) bool) []*codexrpc.Notification {
	var out []*codexrpc.Notification
	for _, m := range n.snapshot() {
		if match(m) {
			out = append(out, m)
		}
	}
	return out
}

func isMethod(method string) func(*codexrpc.Notification) bool {
	return func(n *codexrpc.Notification) bool { return n.Method == method }
}

// forThread matches a method whose params carry threadId.
func forThread(method, threadID string) func(*codexrpc.Notification) bool {
	return func(n *codexrpc.Notification) bool {
		if n.Method != method {
			return false
		}
		var p struct {
			ThreadID string `json:"threadId"`
		}
		return json.Unmarshal(n.Params, &p) == nil && p.ThreadID == threadID
	}
}

// itemEvent matches item/started or item/completed of an item type in a thread.
func itemEvent(method, threadID, itemType string) func(*codexrpc.Notification) bool {
	return func(n *codexrpc.Notification) bool {
		if n.Method != method {
			return false
		}
		var p codexproto.ItemNotification
		return json.Unmarshal(n.Params, &p) == nil && p.ThreadID == threadID && p.Item.Type == itemType
	}
}

func decode[T any](t testing.TB, raw json.RawMessage) T {
	t.Helper()
	var v T
	if err := json.Unmarshal(raw, &v); err != nil {
		t.Fatalf("decoding %T from %s: %v", v, head(raw, 200), err)
	}
	return v
}

// testLogger collects the log of a test (codexrpc's warnings and the relayed
// stderr) and prints it only when the test fails.
func testLogger(t testing.TB) *slog.Logger {
	t.Helper()
	buf := &syncbuf.Buffer{}
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("log:\n%s", buf.String())
		}
	})
	return slog.New(slog.NewTextHandler(buf, &slog.HandlerOptions{Level: slog.LevelDebug}))
}

// stopOnCleanup stops p when the test ends and then checks that its process
// group is gone. Tests that stop p themselves get the same checks again
// (Stop is idempotent).
func stopOnCleanup(t testing.TB, p *Process) {
	t.Helper()
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		if err := p.Stop(ctx); err != nil {
			t.Errorf("stop: %v", err)
		}
		requireGroupGone(t, p.PID())
	})
}

// requireGroupGone checks that no live process is left in the process group
// pgid. kill(-pgid, 0) failing with ESRCH is the plain answer. Members the
// Process SIGKILLed on its way out may still be dying, or be zombies that
// init has not reaped yet; so until a deadline the group is re-read from
// /proc, and zombies (already dead) do not count.
func requireGroupGone(t testing.TB, pgid int) {
	t.Helper()
	proctest.WaitGroupGone(t, pgid, 5*time.Second, 5*time.Millisecond)
}

// cli is one real codex app-server under test.
type cli struct {
	t      testing.TB
	mock   *demomodel.Server
	home   string
	work   string // a workspace directory for thread cwd
	proc   *Process
	client *codexproto.Client
	notes  *notes
}

type cliOptions struct {
	onRequest codexrpc.RequestHandler
	env       []string // extra environment (KEY=VALUE)
	// home, when set, is used as CODEX_HOME as it is (it may not exist yet),
	// and the mock provider is selected with -c overrides instead of a
	// config.toml.
	home string
	// stopGrace is Config.StopGrace (default 1s).
	stopGrace time.Duration
}

// codexBin finds the pinned CLI or fails the test.
func codexBin(t testing.TB) string {
	t.Helper()
	bin, err := codexhome.CodexBin()
	if err != nil {
		t.Fatalf("the real codex CLI is required (run scripts/install-codex): %v", err)
	}
	return bin
}

// startCLI starts a mock model and the real CLI pointed at it, and
// initializes the connection.
func startCLI(t *testing.T, o cliOptions) *cli {
	t.Helper()
	bin := codexBin(t)
	mock, err := demomodel.Start(demomodel.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(mock.Close)
	dir := t.TempDir()
	c := &cli{t: t, mock: mock, work: filepath.Join(dir, "work"), notes: newNotes()}
	if err := os.Mkdir(c.work, 0o755); err != nil {
		t.Fatal(err)
	}
	cfg := Config{
		Binary:    bin,
		Logger:    testLogger(t),
		StopGrace: o.stopGrace,
		Conn:      traced(t, codexrpc.Options{OnNotification: c.notes.add, OnRequest: o.onRequest}),
	}
	if cfg.StopGrace == 0 {
		cfg.StopGrace = time.Second
	}
	if o.home != "" {
		c.home = o.home
		cfg.Overrides = codexhome.Overrides(mock.URL())
	} else {
		c.home = filepath.Join(dir, "home")
		if err := codexhome.WriteConfig(c.home, mock.URL()); err != nil {
			t.Fatal(err)
		}
	}
	cfg.Home = c.home
	if o.env != nil {
		cfg.Env = AllowedEnv(os.Environ(), o.env)
	}
	p, err := Start(cfg)
	if err != nil {
		t.Fatal(err)
	}
	c.proc = p
	stopOnCleanup(t, p)
	c.client = codexproto.NewClient(p.Conn())
	ctx, cancel := context.WithTimeout(context.Background(), eventTimeout)
	defer cancel()
	if _, err := c.client.Initialize(ctx, codexproto.ClientInfo{Name: "meshweaver-test", Version: "0.0.1"}); err != nil {
		t.Fatalf("initialize: %v", err)
	}
	return c
}

func (c *cli) ctx() context.Context { return ctxFor(c.t) }

// thread starts a thread in the workspace.
func (c *cli) thread(approval, sandbox string) string {
	c.t.Helper()
	res, err := c.client.ThreadStart(c.ctx(), codexproto.ThreadStartParams{Cwd: c.work, ApprovalPolicy: approval, Sandbox: sandbox})
	if err != nil {
		c.t.Fatalf("thread/start: %v", err)
	}
	if res.Thread.ID == "" {
		c.t.Fatal("thread/start: no thread id")
	}
	return res.Thread.ID
}

// turn starts a turn and waits for its turn/completed.
func (c *cli) turn(threadID, text string) (codexproto.Turn, codexproto.TurnNotification) {
	c.t.Helper()
	turn, err := c.client.TurnStart(c.ctx(), codexproto.TurnStartParams{ThreadID: threadID, Input: codexproto.TextInput(text), Summary: "auto"})
	if err != nil {
		c.t.Fatalf("turn/start: %v", err)
	}
	if turn.ID == "" || turn.Status != codexproto.TurnInProgress {
		c.t.Fatalf("turn/start answered %+v, want an inProgress turn", turn)
	}
	done := c.notes.wait(c.t, "turn/completed of "+turn.ID, func(n *codexrpc.Notification) bool {
		return n.Method == codexproto.NoteTurnCompleted && decode[codexproto.TurnNotification](c.t, n.Params).Turn.ID == turn.ID
	})
	return turn, decode[codexproto.TurnNotification](c.t, done.Params)
}

// ---- the tests ----

func TestRealCLITextTurn(t *testing.T) {
	c := startCLI(t, cliOptions{})
	deltas := []string{"Hel", "lo", ", ", "wor", "ld", "!"}
	c.mock.Enqueue(demomodel.Respond(demomodel.Message(deltas...).WithID("msg-1")))
	th := c.thread(codexproto.ApprovalNever, codexproto.SandboxReadOnly)
	turn, done := c.turn(th, "say hello")

	if done.Turn.Status != codexproto.TurnCompleted || done.Turn.Error != nil {
		t.Fatalf("turn/completed = %+v, want completed without error", done.Turn)
	}
	var got []string
	for _, n := range c.notes.filter(forThread(codexproto.NoteAgentMessageDelta, th)) {
		d := decode[codexproto.Delta](t, n.Params)
		if d.TurnID != turn.ID || d.ItemID != "msg-1" {
			t.Errorf("delta %+v: want turn %s item msg-1", d, turn.ID)
		}
		got = append(got, d.Delta)
	}
	if strings.Join(got, "|") != strings.Join(deltas, "|") {
		t.Errorf("deltas = %q, want %q in order", got, deltas)
	}
	// Order: turn/started, item/started agentMessage, deltas, item/completed, turn/completed.
	iStarted, _ := c.notes.waitIdx(t, "turn/started", forThread(codexproto.NoteTurnStarted, th))
	iItem, _ := c.notes.waitIdx(t, "agentMessage started", itemEvent(codexproto.NoteItemStarted, th, codexproto.ItemAgentMessage))
	iDelta, _ := c.notes.waitIdx(t, "first delta", forThread(codexproto.NoteAgentMessageDelta, th))
	iDone, item := c.notes.waitIdx(t, "agentMessage completed", itemEvent(codexproto.NoteItemCompleted, th, codexproto.ItemAgentMessage))
	iTurn, _ := c.notes.waitIdx(t, "turn/completed", forThread(codexproto.NoteTurnCompleted, th))
	if !(iStarted < iItem && iItem < iDelta && iDelta < iDone && iDone < iTurn) {
		t.Errorf("order: turn/started %d, item/started %d, delta %d, item/completed %d, turn/completed %d", iStarted, iItem, iDelta, iDone, iTurn)
	}
	if text := decode[codexproto.ItemNotification](t, item.Params).Item.Text; text != "Hello, world!" {
		t.Errorf("completed text = %q", text)
	}
	if reqs := c.mock.Requests(); len(reqs) != 1 || reqs[0].LastUserText() != "say hello" {
		t.Errorf("model requests = %d, want 1 carrying %q", len(reqs), "say hello")
	}
}

func TestRealCLIReasoningTurn(t *testing.T) {
	c := startCLI(t, cliOptions{})
	c.mock.Enqueue(demomodel.Respond(
		demomodel.Reasoning("Think ", "hard").WithRaw("raw ", "thought").WithID("rs-1"),
		demomodel.Message("done"),
	))
	th := c.thread(codexproto.ApprovalNever, codexproto.SandboxReadOnly)
	_, done := c.turn(th, "think")
	if done.Turn.Status != codexproto.TurnCompleted {
		t.Fatalf("turn = %+v", done.Turn)
	}
	join := func(method string) string {
		var b strings.Builder
		for _, n := range c.notes.filter(forThread(method, th)) {
			d := decode[codexproto.Delta](t, n.Params)
			if d.ItemID != "rs-1" {
				t.Errorf("%s for item %q, want rs-1", method, d.ItemID)
			}
			b.WriteString(d.Delta)
		}
		return b.String()
	}
	if got := join(codexproto.NoteReasoningSummary); got != "Think hard" {
		t.Errorf("summaryTextDelta = %q, want %q", got, "Think hard")
	}
	if got := join(codexproto.NoteReasoningText); got != "raw thought" {
		t.Errorf("textDelta = %q, want %q", got, "raw thought")
	}
	item := decode[codexproto.ItemNotification](t, c.notes.wait(t, "reasoning completed", itemEvent(codexproto.NoteItemCompleted, th, codexproto.ItemReasoning)).Params).Item
	if strings.Join(item.Summary, "|") != "Think hard" || strings.Join(item.ReasoningContent(), "|") != "raw thought" {
		t.Errorf("reasoning item: summary %q content %q", item.Summary, item.ReasoningContent())
	}
}

// execCall is an exec_command call of cmd in a non-login shell: a login
// shell reads the machine's profile, which costs seconds on some hosts and
// adds its noise to the output.
func execCall(callID, cmd string) demomodel.Item {
	args, _ := json.Marshal(map[string]any{"cmd": cmd, "login": false})
	return demomodel.FunctionCall(callID, "exec_command", string(args))
}

// sandboxFullAccess runs commands unsandboxed. Under a sandbox, each command
// of 0.169.0 costs seconds on hosts without bubblewrap (the CLI sets up its
// bundled copy every time); the approval test keeps workspace-write.
const sandboxFullAccess = "danger-full-access"

func TestRealCLIExecCommand(t *testing.T) {
	c := startCLI(t, cliOptions{})
	c.mock.Enqueue(
		demomodel.Respond(execCall("call-ok", "printf 'out-%s\\n' 42")),
		demomodel.Respond(execCall("call-fail", "echo to-stderr >&2; exit 3")),
		demomodel.Text("ran ", "both"),
	)
	th := c.thread(codexproto.ApprovalNever, sandboxFullAccess)
	_, done := c.turn(th, "run commands")
	if done.Turn.Status != codexproto.TurnCompleted {
		t.Fatalf("turn = %+v", done.Turn)
	}
	items := map[string][2]*codexproto.Item{} // id → started, completed
	for _, n := range c.notes.snapshot() {
		if n.Method != codexproto.NoteItemStarted && n.Method != codexproto.NoteItemCompleted {
			continue
		}
		p := decode[codexproto.ItemNotification](t, n.Params)
		if p.Item.Type != codexproto.ItemCommandExecution {
			continue
		}
		pair := items[p.Item.ID]
		it := p.Item
		if n.Method == codexproto.NoteItemStarted {
			pair[0] = &it
		} else {
			pair[1] = &it
		}
		items[p.Item.ID] = pair
	}
	for _, tc := range []struct {
		id, command, status, output string
		exit                        int
	}{
		{"call-ok", "printf", "completed", "out-42", 0},
		{"call-fail", "exit 3", "failed", "to-stderr", 3},
	} {
		pair := items[tc.id]
		if pair[0] == nil || pair[1] == nil {
			t.Errorf("%s: item/started %v, item/completed %v", tc.id, pair[0] != nil, pair[1] != nil)
			continue
		}
		if pair[0].Status != "inProgress" || !strings.Contains(pair[0].Command, tc.command) {
			t.Errorf("%s started: status %q command %q", tc.id, pair[0].Status, pair[0].Command)
		}
		end := pair[1]
		if end.Status != tc.status || end.ExitCode == nil || *end.ExitCode != tc.exit {
			t.Errorf("%s completed: status %q exit %v, want %s %d", tc.id, end.Status, end.ExitCode, tc.status, tc.exit)
		}
		if end.AggregatedOutput == nil || !strings.Contains(*end.AggregatedOutput, tc.output) {
			t.Errorf("%s aggregatedOutput = %v, want it to contain %q", tc.id, end.AggregatedOutput, tc.output)
		}
		if end.Cwd != c.work {
			t.Errorf("%s cwd = %q, want %q", tc.id, end.Cwd, c.work)
		}
	}
	// The model saw both outputs.
	reqs := c.mock.Requests()
	if out, ok := reqs[len(reqs)-1].ToolOutput("call-fail"); !ok || !strings.Contains(out, "exited with code 3") {
		t.Errorf("tool output for call-fail = %q (%v)", out, ok)
	}
}

func TestRealCLIApprovals(t *testing.T) {
	var mu sync.Mutex
	var asked []codexproto.ApprovalParams
	c := startCLI(t, cliOptions{onRequest: func(ctx context.Context, r *codexrpc.Request) (any, error) {
		if r.Method != codexproto.ReqCommandApproval {
			return nil, &codexrpc.WireError{Code: codexrpc.CodeMethodNotFound, Message: "unexpected " + r.Method}
		}
		var p codexproto.ApprovalParams
		if err := json.Unmarshal(r.Params, &p); err != nil {
			return nil, err
		}
		mu.Lock()
		asked = append(asked, p)
		mu.Unlock()
		if p.ItemID == "call-accept" {
			return codexproto.ApprovalAnswer{Decision: codexproto.DecisionAccept}, nil
		}
		return codexproto.ApprovalAnswer{Decision: codexproto.DecisionDecline}, nil
	}})
	th := c.thread(codexproto.ApprovalUntrusted, codexproto.SandboxWorkspaceWrite)

	c.mock.Enqueue(demomodel.Respond(execCall("call-accept", "touch approved.txt")), demomodel.Text("accepted"))
	_, done := c.turn(th, "needs approval 1")
	if done.Turn.Status != codexproto.TurnCompleted {
		t.Fatalf("accept turn = %+v", done.Turn)
	}
	c.mock.Enqueue(demomodel.Respond(execCall("call-decline", "touch declined.txt")), demomodel.Text("declined"))
	_, done = c.turn(th, "needs approval 2")
	if done.Turn.Status != codexproto.TurnCompleted {
		t.Fatalf("decline turn = %+v", done.Turn)
	}

	mu.Lock()
	if len(asked) != 2 || asked[0].ItemID != "call-accept" || asked[1].ItemID != "call-decline" || asked[0].ThreadID != th {
		t.Errorf("approval requests = %+v", asked)
	}
	for _, a := range asked {
		if !strings.Contains(a.Command, "touch") || a.Cwd != c.work {
			t.Errorf("approval request %s: command %q cwd %q", a.ItemID, a.Command, a.Cwd)
		}
	}
	mu.Unlock()

	completed := map[string]codexproto.Item{}
	for _, n := range c.notes.filter(itemEvent(codexproto.NoteItemCompleted, th, codexproto.ItemCommandExecution)) {
		it := decode[codexproto.ItemNotification](t, n.Params).Item
		completed[it.ID] = it
	}
	if it := completed["call-accept"]; it.Status != "completed" || it.ExitCode == nil || *it.ExitCode != 0 {
		t.Errorf("accepted command: status %q exit %v", it.Status, it.ExitCode)
	}
	if _, err := os.Stat(filepath.Join(c.work, "approved.txt")); err != nil {
		t.Errorf("accepted command did not run: %v", err)
	}
	if it := completed["call-decline"]; it.Status != "declined" || it.ExitCode != nil {
		t.Errorf("declined command: status %q exit %v, want declined with no exit code", it.Status, it.ExitCode)
	}
	if _, err := os.Stat(filepath.Join(c.work, "declined.txt")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("declined command ran: %v", err)
	}
	if n := len(c.notes.filter(isMethod(codexproto.NoteServerRequestSolved))); n != 2 {
		t.Errorf("serverRequest/resolved seen %d times, want 2", n)
	}
}

func TestRealCLIFailedTurns(t *testing.T) {
	c := startCLI(t, cliOptions{})
	for _, tc := range []struct {
		name   string
		script demomodel.Script
		want   []string // acceptable codexErrorInfo values (JSON)
	}{
		{"http 500", demomodel.InternalServerError(), []string{`"internalServerError"`}},
		// NOTES §6: with no retries a 429 is responseTooManyFailedAttempts;
		// a rate limit inside the stream would be rateLimitExceeded.
		{"http 429", demomodel.RateLimited(), []string{`{"responseTooManyFailedAttempts":{"httpStatusCode":429}}`, `"rateLimitExceeded"`}},
		{"context window", demomodel.ContextLengthExceeded(), []string{`"contextWindowExceeded"`}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c.t = t
			th := c.thread(codexproto.ApprovalNever, codexproto.SandboxReadOnly) // a fresh thread each: a failure can change the next turn
			c.mock.Enqueue(tc.script)
			_, done := c.turn(th, "fail please")
			if done.Turn.Status != codexproto.TurnFailed || done.Turn.Error == nil {
				t.Fatalf("turn/completed = %+v, want failed with an error", done.Turn)
			}
			info := compactJSON(t, done.Turn.Error.CodexErrorInfo)
			if !containsStr(tc.want, info) {
				t.Errorf("codexErrorInfo = %s, want one of %v", info, tc.want)
			}
			if done.Turn.Error.Message == "" {
				t.Error("failed turn has no error message")
			}
			// The error notification came first, final, with the same error.
			en := decode[codexproto.ErrorNotification](t, c.notes.wait(t, "error notification", forThread(codexproto.NoteError, th)).Params)
			if en.WillRetry || compactJSON(t, en.Error.CodexErrorInfo) != info || en.Error.Message != done.Turn.Error.Message {
				t.Errorf("error notification = %+v, want willRetry false and the turn's error", en)
			}
		})
	}
}

func compactJSON(t testing.TB, raw json.RawMessage) string {
	t.Helper()
	var b bytes.Buffer
	if err := json.Compact(&b, raw); err != nil {
		t.Fatalf("compacting %s: %v", raw, err)
	}
	return b.String()
}

func containsStr(xs []string, x string) bool {
	for _, y := range xs {
		if x == y {
			return true
		}
	}
	return false
}

// uuidV7 returns a random UUIDv7 for the current time.
func uuidV7(t testing.TB) string {
	var b [16]byte
	if _, err := rand.Read(b[:]); err != nil {
		t.Fatal(err)
	}
	ms := uint64(time.Now().UnixMilli())
	for i := 0; i < 6; i++ {
		b[i] = byte(ms >> (40 - 8*i))
	}
	b[6] = b[6]&0x0f | 0x70
	b[8] = b[8]&0x3f | 0x80
	h := hex.EncodeToString(b[:])
	return h[0:8] + "-" + h[8:12] + "-" + h[12:16] + "-" + h[16:20] + "-" + h[20:]
}

func TestRealCLIResumeErrors(t *testing.T) {
	c := startCLI(t, cliOptions{})
	id := uuidV7(t)
	_, err := c.client.ThreadResume(c.ctx(), codexproto.ThreadResumeParams{ThreadID: id})
	if got := codexrpc.Classify(err); got != codexrpc.ClassNoRollout {
		t.Errorf("resume of unknown %s: class %v (%v), want %v", id, got, err, codexrpc.ClassNoRollout)
	}
	var we *codexrpc.WireError
	if !errors.As(err, &we) || we.Code != codexrpc.CodeInvalidRequest || !strings.Contains(we.Message, id) {
		t.Errorf("resume of unknown id: %v, want a -32600 naming the id", err)
	}
	_, err = c.client.ThreadResume(c.ctx(), codexproto.ThreadResumeParams{ThreadID: "not-a-uuid"})
	if got := codexrpc.Classify(err); got != codexrpc.ClassInvalidSessionID {
		t.Errorf("resume of not-a-uuid: class %v (%v), want %v", got, err, codexrpc.ClassInvalidSessionID)
	}
	// turn/start on an unknown thread is ClassThreadNotFound.
	_, err = c.client.TurnStart(c.ctx(), codexproto.TurnStartParams{ThreadID: id, Input: codexproto.TextInput("x")})
	if got := codexrpc.Classify(err); got != codexrpc.ClassThreadNotFound {
		t.Errorf("turn/start on unknown thread: class %v (%v), want %v", got, err, codexrpc.ClassThreadNotFound)
	}
}

func TestRealCLIVersion(t *testing.T) {
	c := startCLI(t, cliOptions{})
	// The pin lives in codexproto/cli-version (schema.PinnedVersion).
	want, err := codexproto.ParseUserAgent("pin/" + schema.PinnedVersion)
	if err != nil {
		t.Fatal(err)
	}
	if got := c.client.Version; got != want || got.String() != schema.PinnedVersion {
		t.Errorf("version = %v, want the pinned %v", got, want)
	}
	if !c.client.Version.SupportsAdditionalContext() {
		t.Errorf("%v should support additionalContext (since %v)", c.client.Version, codexproto.AdditionalContextSince)
	}
}

func TestRealCLIMissingHomeCreated(t *testing.T) {
	home := filepath.Join(t.TempDir(), "not", "there", "home")
	c := startCLI(t, cliOptions{home: home}) // initializes, or fails
	fi, err := os.Stat(home)
	if err != nil || !fi.IsDir() {
		t.Fatalf("home %s: %v", home, err)
	}
	if perm := fi.Mode().Perm(); perm != 0o700 {
		t.Errorf("home mode = %o, want 700", perm)
	}
	// The CLI uses it: a turn through the -c overrides works.
	c.mock.Enqueue(demomodel.Text("ok"))
	if _, done := c.turn(c.thread(codexproto.ApprovalNever, codexproto.SandboxReadOnly), "hi"); done.Turn.Status != codexproto.TurnCompleted {
		t.Errorf("turn = %+v", done.Turn)
	}
}

// repoRoot is the module root, found from the package directory.
func repoRoot(t testing.TB) string {
	t.Helper()
	dir, err := os.Getwd()
	if err != nil {
		t.Fatal(err)
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			return dir
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			t.Fatal("no go.mod above the working directory")
		}
		dir = parent
	}
}

func TestRealCLIResolveBinaryFromShim(t *testing.T) {
	codexBin(t) // the install must exist
	install := filepath.Join(repoRoot(t), LocalInstallDir)
	shim := filepath.Join(install, "node_modules", ".bin", "codex")
	if _, err := os.Lstat(shim); err != nil {
		t.Fatalf("npm shim missing (run scripts/install-codex): %v", err)
	}
	got, err := ResolveBinary(shim)
	if err != nil {
		t.Fatal(err)
	}
	// The install may be reached through a symlink (a worktree's
	// .codex-cli); the shim is resolved through it, so compare real paths.
	want, err := filepath.EvalSymlinks(NativeInInstall(install))
	if err != nil {
		t.Fatal(err)
	}
	if real, err := filepath.EvalSymlinks(got); err != nil || real != want {
		t.Errorf("ResolveBinary(%s) = %s (%s, %v), want %s", shim, got, real, err, want)
	}
	if isNodeShim(got) {
		t.Errorf("%s is still a node script", got)
	}
	// Given the native binary it returns it as it is.
	if again, err := ResolveBinary(got); err != nil || again != got {
		t.Errorf("ResolveBinary(native) = %s, %v", again, err)
	}
}

// hangingIssuer is a login issuer whose device-code endpoint never answers,
// which keeps account/login/start {chatgptDeviceCode} pending in the real
// CLI for as long as the test likes.
func hangingIssuer(t *testing.T) (url string, asked <-chan struct{}) {
	t.Helper()
	ch := make(chan struct{}, 1)
	release := make(chan struct{})
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		select {
		case ch <- struct{}{}:
		default:
		}
		select {
		case <-r.Context().Done():
		case <-release:
		}
	}))
	t.Cleanup(func() {
		close(release)
		srv.Close()
	})
	return srv.URL, ch
}

// pendingLogin starts the real CLI with a hanging issuer and a device-code
// login that is pending in it, and returns the call's outcome channel.
func pendingLogin(t *testing.T, stopGrace time.Duration) (*cli, <-chan error) {
	t.Helper()
	issuer, asked := hangingIssuer(t)
	c := startCLI(t, cliOptions{env: []string{"CODEX_APP_SERVER_LOGIN_ISSUER=" + issuer}, stopGrace: stopGrace})
	done := make(chan error, 1)
	go func() {
		_, err := c.client.LoginStart(context.Background(), codexproto.LoginStartParams{Type: codexproto.LoginDeviceCode})
		done <- err
	}()
	select {
	case <-asked: // the CLI is inside the call, waiting for the issuer
	case err := <-done:
		t.Fatalf("login returned early: %v", err)
	case <-time.After(eventTimeout):
		t.Fatal("the CLI never asked the issuer")
	}
	if n := c.proc.Conn().Pending(); n != 1 {
		t.Fatalf("pending = %d, want 1", n)
	}
	return c, done
}

func TestRealCLIKilledMidCall(t *testing.T) {
	ignore := goleak.IgnoreCurrent()
	c, done := pendingLogin(t, 0)
	killed := time.Now()
	if err := syscall.Kill(-c.proc.PID(), syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	var err error
	select {
	case err = <-done:
	case <-time.After(eventTimeout):
		t.Fatal("the pending call never returned")
	}
	if d := time.Since(killed); d > time.Second {
		t.Errorf("the pending call failed %v after the kill, want within 1s", d)
	}
	var ee *codexrpc.ExitError
	if !errors.As(err, &ee) {
		t.Fatalf("err = %v (%T), want *ExitError", err, err)
	}
	if ee.Method != codexproto.MethodLoginStart || ee.Exit.Signal != "SIGKILL" || !ee.Exit.Known {
		t.Errorf("ExitError = %+v, want method %s and signal SIGKILL", ee, codexproto.MethodLoginStart)
	}
	if !strings.Contains(err.Error(), "killed by signal SIGKILL while awaiting "+codexproto.MethodLoginStart) {
		t.Errorf("error text = %q", err)
	}
	if errors.Is(err, codexrpc.ErrClosed) {
		t.Error("an unexpected death must not look like ErrClosed")
	}
	// Kill cleans up like Stop; then nothing of the process is left.
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := c.proc.Kill(ctx); err != nil {
		t.Fatalf("kill: %v", err)
	}
	requireGroupGone(t, c.proc.PID())
	if c.proc.Conn().Pending() != 0 {
		t.Errorf("pending = %d after the death", c.proc.Conn().Pending())
	}
	if st := c.proc.ExitStatus(); st.Signal != "SIGKILL" {
		t.Errorf("exit status = %+v", st)
	}
	// No goroutine of the Process is left. The HTTP servers of the mock
	// model and the issuer belong to the test and end in its cleanup.
	goleak.VerifyNone(t, ignore,
		goleak.IgnoreAnyFunction("net/http.(*Server).Serve"),
		goleak.IgnoreAnyFunction("net/http.(*conn).serve"))
}

func TestRealCLIStopMidCallIsQuiet(t *testing.T) {
	// With a login in flight, 0.169.0 ignores stdin EOF and SIGTERM (it
	// waits for the issuer), so this Stop goes all the way to SIGKILL; a
	// short grace keeps the test quick.
	const grace = 200 * time.Millisecond
	c, done := pendingLogin(t, grace)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	start := time.Now()
	if err := c.proc.Stop(ctx); err != nil {
		t.Fatalf("stop: %v", err)
	}
	t.Logf("stop took %v; the CLI %v", time.Since(start), c.proc.ExitStatus())
	if time.Since(start) > 10*time.Second {
		t.Errorf("stop took %v with a grace of %v", time.Since(start), grace)
	}
	select {
	case err := <-done:
		if !errors.Is(err, codexrpc.ErrClosed) {
			t.Errorf("pending call after Stop: %v, want ErrClosed", err)
		}
		var ee *codexrpc.ExitError
		if errors.As(err, &ee) {
			t.Errorf("a stop must not report an exit error: %v", err)
		}
	case <-time.After(eventTimeout):
		t.Fatal("the pending call never returned")
	}
	requireGroupGone(t, c.proc.PID())
	if err := c.proc.Conn().Call(context.Background(), codexproto.MethodAccountRead, nil, nil); !errors.Is(err, codexrpc.ErrClosed) {
		t.Errorf("call after Stop: %v, want ErrClosed", err)
	}
	if !errors.Is(c.proc.Conn().Err(), codexrpc.ErrClosed) {
		t.Errorf("Conn.Err() = %v, want ErrClosed", c.proc.Conn().Err())
	}
}

// A turn/start while a turn runs does not fail: 0.169.0 answers with the
// running turn and folds the input into it, like turn/steer.
func TestRealCLITurnStartDuringTurnSteers(t *testing.T) {
	c := startCLI(t, cliOptions{})
	// Both model streams hang, so the turn is still running when it is
	// interrupted, whatever the CLI re-requests in between.
	hang := demomodel.Respond(demomodel.Message("thinking")).Hang()
	c.mock.Enqueue(hang, hang)
	th := c.thread(codexproto.ApprovalNever, codexproto.SandboxReadOnly)
	first, err := c.client.TurnStart(c.ctx(), codexproto.TurnStartParams{ThreadID: th, Input: codexproto.TextInput("first")})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.mock.WaitRequests(c.ctx(), 1); err != nil {
		t.Fatal(err)
	}
	second, err := c.client.TurnStart(c.ctx(), codexproto.TurnStartParams{ThreadID: th, Input: codexproto.TextInput("second")})
	if err != nil {
		t.Fatalf("turn/start during a turn: %v", err)
	}
	if second.ID != first.ID {
		t.Errorf("second turn/start answered turn %s, want the running %s", second.ID, first.ID)
	}
	msg := c.notes.wait(t, "the second user message", func(n *codexrpc.Notification) bool {
		if !itemEvent(codexproto.NoteItemStarted, th, codexproto.ItemUserMessage)(n) {
			return false
		}
		return strings.Contains(string(n.Params), `"second"`)
	})
	if got := decode[codexproto.ItemNotification](t, msg.Params).TurnID; got != first.ID {
		t.Errorf("the second input landed in turn %s, want %s", got, first.ID)
	}
	if err := c.client.TurnInterrupt(c.ctx(), th, first.ID); err != nil {
		t.Fatalf("turn/interrupt: %v", err)
	}
	done := decode[codexproto.TurnNotification](t, c.notes.wait(t, "turn/completed", forThread(codexproto.NoteTurnCompleted, th)).Params)
	if done.Turn.ID != first.ID || done.Turn.Status != codexproto.TurnInterrupted {
		t.Errorf("turn/completed = %+v, want %s interrupted", done.Turn, first.ID)
	}
	if n := len(c.notes.filter(forThread(codexproto.NoteTurnStarted, th))); n != 1 {
		t.Errorf("turn/started %d times, want 1", n)
	}
}

// A relative thread cwd is resolved against the server's working directory,
// which Start sets to CODEX_HOME unless Config.Dir says otherwise.
func TestRealCLIRelativeCwd(t *testing.T) {
	c := startCLI(t, cliOptions{})
	res, err := c.client.ThreadStart(c.ctx(), codexproto.ThreadStartParams{Cwd: "rel/dir", ApprovalPolicy: codexproto.ApprovalNever, Sandbox: codexproto.SandboxReadOnly})
	if err != nil {
		t.Fatal(err)
	}
	if want := filepath.Join(c.home, "rel", "dir"); res.Thread.Cwd != want {
		t.Errorf("thread cwd = %q, want %q", res.Thread.Cwd, want)
	}
}
