package actors

import (
	"context"
	"errors"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/meshweaver/supervisor/demomodel"
	"github.com/meshweaver/supervisor/messages"
	"github.com/meshweaver/supervisor/third_party/hollywood/actor"
)

// quietWindow is how long the mock model must hear nothing after a
// round's verdict for the tests below to find that no turn ran that no
// round asked for. A codex goal continues within milliseconds of its
// turn's end, and then sends about fourteen model requests a second.
const quietWindow = 3 * time.Second

// goalModel is a model that calls create_goal on its first request,
// offered or not (a model is not bound to the tools it is offered), and
// otherwise answers with text. It records what each request was offered.
type goalModel struct {
	mu      sync.Mutex
	offered []bool // per request: create_goal was offered
	outputs []string
}

func (g *goalModel) respond(req *demomodel.Request) demomodel.Script {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.offered = append(g.offered, req.HasTool("create_goal"))
	if out, ok := req.ToolOutput("call_goal"); ok {
		g.outputs = append(g.outputs, out)
	}
	if req.Seq == 0 {
		return demomodel.Respond(demomodel.FunctionCall("call_goal", "create_goal", `{"objective":"count to a million, one number per turn"}`))
	}
	return demomodel.Text("goal ", "noted")
}

// unaskedEvents collects the unasked turns the app-server actors broadcast.
func (h *harness) unaskedEvents() <-chan UnaskedTurn {
	h.t.Helper()
	ch := make(chan UnaskedTurn, 1024)
	pid := h.engine.SpawnFunc(func(c *actor.Context) {
		if ev, ok := c.Message().(UnaskedTurn); ok {
			select {
			case ch <- ev:
			default:
			}
		}
	}, "unasked-events")
	h.engine.Subscribe(pid)
	h.t.Cleanup(func() {
		h.engine.Unsubscribe(pid)
		<-h.engine.Poison(pid).Done()
	})
	return ch
}

// noRequestAfter fails t if the model hears a request past the n-th
// within quietWindow.
func noRequestAfter(t *testing.T, model *demomodel.Server, n int) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), quietWindow)
	defer cancel()
	if reqs, err := model.WaitRequests(ctx, n+1); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("the model heard %d requests where the rounds asked for %d (err %v): a turn ran that no round started", len(reqs), n, err)
	}
}

// With default settings the model is not offered codex's goal tools, and
// a model that calls create_goal anyway gets no goal: the round ends
// with one verdict and the model hears nothing more for that user. The
// bystander, bob, then runs a round of his own: it completes, and it too
// is followed by no request.
func TestGoalsOffByDefault(t *testing.T) {
	h := newHarness(t, nil)
	g := &goalModel{}
	h.model.SetResponder(g.respond)
	c := h.caller()
	res := h.round(c, messages.StartRound{User: "alice", Thread: "t1", Text: "set yourself a goal", RoundID: "alice-1"})
	if res.verdict.Status != messages.StatusCompleted {
		t.Fatalf("verdict %s (%s), want completed", res.verdict.Status, res.verdict.Error)
	}
	noRequestAfter(t, h.model, 2)
	bob := h.round(c, messages.StartRound{User: "bob", Thread: "t1", Text: "hello", RoundID: "bob-1"})
	if bob.verdict.Status != messages.StatusCompleted || bob.text() != "goal noted" {
		t.Fatalf("the bystander's round: %s %q", bob.verdict.Status, bob.text())
	}
	noRequestAfter(t, h.model, 3)
	g.mu.Lock()
	defer g.mu.Unlock()
	if slices.Contains(g.offered, true) {
		t.Errorf("create_goal offered to the model: %v", g.offered)
	}
	if len(g.outputs) != 1 || g.outputs[0] == "" || containsGoal(g.outputs[0]) {
		t.Errorf("create_goal's output %q: want a refusal, not a goal", g.outputs)
	}
	t.Logf("create_goal's output: %q", g.outputs)
	if n := testutil.ToFloat64(h.cfg.Metrics.UnaskedTurns.WithLabelValues("interrupted")); n != 0 {
		t.Errorf("%v unasked turns interrupted, want none", n)
	}
}

// containsGoal reports whether a tool output is a goal the CLI created.
func containsGoal(out string) bool {
	return strings.Contains(out, `"objective"`) || strings.Contains(out, `"status":"active"`)
}

// With goals on, the goal the model creates makes the CLI start a turn of
// its own after the round's verdict: the daemon counts it, broadcasts it
// and interrupts it, so the model hears at most the continuation's first
// request, and then nothing. The bystander's round completes meanwhile.
func TestUnaskedTurnInterrupted(t *testing.T) {
	h := newHarness(t, func(c *tree) { c.Goals = true })
	events := h.unaskedEvents()
	g := &goalModel{}
	h.model.SetResponder(g.respond)
	c := h.caller()
	res := h.round(c, messages.StartRound{User: "alice", Thread: "t1", Text: "set yourself a goal", RoundID: "alice-1"})
	if res.verdict.Status != messages.StatusCompleted {
		t.Fatalf("verdict %s (%s), want completed", res.verdict.Status, res.verdict.Error)
	}
	var ev UnaskedTurn
	select {
	case ev = <-events:
	case <-time.After(30 * time.Second):
		t.Fatal("no unasked turn reported: did the goal continue?")
	}
	if ev.User != "alice" || ev.ThreadID == "" || ev.TurnID == "" || !ev.Interrupted {
		t.Fatalf("unasked turn %+v: want alice's, interrupted", ev)
	}
	seen := len(h.model.Requests())
	noRequestAfter(t, h.model, seen)
	bob := h.round(c, messages.StartRound{User: "bob", Thread: "t1", Text: "hello", RoundID: "bob-1"})
	if bob.verdict.Status != messages.StatusCompleted {
		t.Fatalf("the bystander's round: %s %s", bob.verdict.Status, bob.verdict.Error)
	}
	noRequestAfter(t, h.model, seen+1)
	if n := testutil.ToFloat64(h.cfg.Metrics.UnaskedTurns.WithLabelValues("interrupted")); n < 1 {
		t.Errorf("%v unasked turns counted, want at least 1", n)
	}
	t.Logf("model requests %d, unasked turns %d", seen, 1+len(events))
	g.mu.Lock()
	defer g.mu.Unlock()
	if !g.offered[0] {
		t.Error("with goals on, create_goal was not offered")
	}
}

// With --unasked-turns allow, the goal's continuation is counted and
// reported, and left to run: the model hears it.
func TestUnaskedTurnAllowed(t *testing.T) {
	h := newHarness(t, func(c *tree) { c.Goals, c.UnaskedTurns = true, UnaskedAllow })
	events := h.unaskedEvents()
	h.model.SetResponder((&goalModel{}).respond)
	c := h.caller()
	res := h.round(c, messages.StartRound{User: "alice", Thread: "t1", Text: "set yourself a goal", RoundID: "alice-1"})
	if res.verdict.Status != messages.StatusCompleted {
		t.Fatalf("verdict %s (%s), want completed", res.verdict.Status, res.verdict.Error)
	}
	select {
	case ev := <-events:
		if ev.Interrupted || ev.User != "alice" {
			t.Fatalf("unasked turn %+v: want alice's, allowed", ev)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("no unasked turn reported")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if _, err := h.model.WaitRequests(ctx, 4); err != nil {
		t.Fatalf("the allowed continuation sent the model no request: %v", err)
	}
	if n := testutil.ToFloat64(h.cfg.Metrics.UnaskedTurns.WithLabelValues("allowed")); n < 1 {
		t.Errorf("%v allowed unasked turns counted, want at least 1", n)
	}
}

// askedTurns matches turn/started to the calls that asked for a turn, in
// either order of a call's answer and its turn/started, and forgets a
// call that failed.
func TestAskedTurns(t *testing.T) {
	var a askedTurns
	if a.started("t") {
		t.Fatal("a turn no call asked for was taken for asked")
	}
	a.asked("t", 1)
	a.asked("t", 2)
	a.asked("u", 3)
	a.failed("t", 1) // no turn comes of call 1
	if !a.started("t") {
		t.Fatal("call 2's turn not taken for asked")
	}
	if a.started("t") {
		t.Fatal("a second turn on t taken for asked: one call, one turn")
	}
	a.failed("t", 2) // its turn/started took it already: nothing to undo
	if !a.started("u") || a.started("u") {
		t.Fatal("u's one call is one asked turn")
	}
	a.asked("t", 4)
	a.reset()
	if a.started("t") {
		t.Fatal("a call of a process that is gone was kept")
	}
	if len(a.pending) != 0 {
		t.Fatalf("left behind: %v", a.pending)
	}
}
