package actors

import (
	"context"
	"errors"
	"fmt"
	"os"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/meshweaver/supervisor/actors/budget"
	"github.com/meshweaver/supervisor/demomodel"
	"github.com/meshweaver/supervisor/messages"
	"github.com/meshweaver/supervisor/store"
)

// thirteen is what the mock model reports for each response in the
// budget tests: 10 input and 3 output tokens.
var thirteen = demomodel.Usage{InputTokens: 10, OutputTokens: 3}

func textOf13(*demomodel.Request) demomodel.Script {
	return demomodel.Text("ok").WithUsage(thirteen)
}

// budgetHarness is a tree with the rules in holder, on homes, whose model
// reports 13 tokens a response.
func budgetHarness(t *testing.T, homes string, holder *budget.Holder) *harness {
	t.Helper()
	h := newHarness(t, func(c *tree) { c.Homes, c.Budgets = homes, holder })
	h.model.SetResponder(textOf13)
	return h
}

// A user's rounds run until the ledger passes the budget (60 tokens in an
// hour, 13 a round); the next is refused before any model request, with
// the budget's class, the spend, the budget and when it frees up; the
// bystander, bob, runs on; a daemon started again on the same homes still
// refuses alice; raising the budget lets her next round run.
func TestBudgetRefusesBeforeTheModel(t *testing.T) {
	homes := t.TempDir()
	holder := budget.NewHolder(budget.Rules{Tokens: 60, Window: time.Hour, CachedInput: true})
	h := budgetHarness(t, homes, holder)
	c := h.caller()
	start := time.Now()
	for i := 1; i <= 5; i++ { // 13, 26, 39, 52: under 60, so the fifth runs too
		res := h.round(c, messages.StartRound{User: "alice", Thread: "t1", Text: "hi", RoundID: fmt.Sprint("a", i)})
		if res.verdict.Status != messages.StatusCompleted {
			t.Fatalf("round %d: %s %s", i, res.verdict.Status, res.verdict.Error)
		}
	}
	heard := len(h.model.Requests())
	res := h.round(c, messages.StartRound{User: "alice", Thread: "t1", Text: "one more", RoundID: "a6"})
	checkBudgetRefusal(t, res.verdict, 65, 60, start)
	if n := len(h.model.Requests()); n != heard {
		t.Errorf("the refused round reached the model: %d requests, were %d", n, heard)
	}
	if n := testutil.ToFloat64(h.cfg.Metrics.BudgetRefusals); n != 1 {
		t.Errorf("%v refusals counted, want 1", n)
	}
	if n := testutil.ToFloat64(h.cfg.Metrics.Tokens.WithLabelValues("output")); n != 15 {
		t.Errorf("%v output tokens counted, want 15", n)
	}
	bob := h.round(c, messages.StartRound{User: "bob", Thread: "t1", Text: "hi", RoundID: "b1"})
	if bob.verdict.Status != messages.StatusCompleted {
		t.Fatalf("the bystander's round: %s %s", bob.verdict.Status, bob.verdict.Error)
	}
	noRequestAfter(t, h.model, heard+1)
	h.stop()

	// The daemon again, on the same homes: the ledger was kept.
	h2 := budgetHarness(t, homes, holder)
	c2 := h2.caller()
	res = h2.round(c2, messages.StartRound{User: "alice", Thread: "t1", Text: "after a restart", RoundID: "a7"})
	checkBudgetRefusal(t, res.verdict, 65, 60, start)
	if n := len(h2.model.Requests()); n != 0 {
		t.Errorf("the refused round reached the model: %d requests", n)
	}
	holder.Set(budget.Rules{Tokens: 100, Window: time.Hour, CachedInput: true}) // a reload
	res = h2.round(c2, messages.StartRound{User: "alice", Thread: "t1", Text: "with more budget", RoundID: "a8"})
	if res.verdict.Status != messages.StatusCompleted || !res.verdict.Resumed {
		t.Fatalf("after raising the budget: %s %s (resumed %v)", res.verdict.Status, res.verdict.Error, res.verdict.Resumed)
	}
	noRequestAfter(t, h2.model, 1)
	h2.stop()
	l, err := store.NewLedgerFile(homes + "/alice").Load(time.Now())
	if err != nil {
		t.Fatal(err)
	}
	// Six requests, each counted once: the resume's repeat of the last
	// turn's report is not charged again.
	if got := l.Spent(time.Now(), time.Hour, true); got.Cost != 78 {
		t.Errorf("alice's ledger: %d tokens, want 78 (six requests of 13)", got.Cost)
	}
}

// checkBudgetRefusal checks a budget refusal's verdict.
func checkBudgetRefusal(t *testing.T, v messages.RoundFinished, spent, budget int64, firstCharge time.Time) {
	t.Helper()
	if v.Status != messages.StatusRejected || v.ErrorInfo == nil || v.ErrorInfo.Class != messages.ErrorBudget {
		t.Fatalf("verdict %s %q %+v: want rejected, class budget", v.Status, v.Error, v.ErrorInfo)
	}
	e := v.ErrorInfo
	if e.Spent != spent || e.Budget != budget {
		t.Errorf("spent %d of %d, want %d of %d", e.Spent, e.Budget, spent, budget)
	}
	// The first round's tokens leave the window at the end of their
	// bucket (a minute wide under an hour) plus the hour.
	resets := time.Unix(e.ResetsAtUnix, 0)
	lo, hi := firstCharge.Add(time.Hour).Truncate(time.Second), firstCharge.Add(time.Hour+2*time.Minute)
	if resets.Before(lo) || resets.After(hi) {
		t.Errorf("resets at %v, want between %v and %v", resets, lo, hi)
	}
}

// stop stops the tree at once (its cleanup then finds it stopped).
func (h *harness) stop() {
	h.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	<-h.engine.PoisonCtx(ctx, h.root).Done()
	if ctx.Err() != nil {
		h.t.Fatal("the tree did not stop")
	}
}

// A turn that crosses the budget while it runs finishes the model request
// that crossed it and is then interrupted; its verdict says so.
func TestBudgetInterruptsARunningTurn(t *testing.T) {
	holder := budget.NewHolder(budget.Rules{Tokens: 30, Window: time.Hour, CachedInput: true})
	h := budgetHarness(t, t.TempDir(), holder)
	// A model that runs a command each request, for ever.
	h.model.SetResponder(func(req *demomodel.Request) demomodel.Script {
		return demomodel.Respond(demomodel.ExecCommand(fmt.Sprint("call_", req.Seq), "true")).WithUsage(thirteen)
	})
	c := h.caller()
	res := h.round(c, messages.StartRound{User: "alice", Thread: "t1", Text: "loop", RoundID: "a1"})
	v := res.verdict
	if v.Status != messages.StatusInterrupted || v.ErrorInfo == nil || v.ErrorInfo.Class != messages.ErrorBudget {
		t.Fatalf("verdict %s %q %+v: want interrupted, class budget", v.Status, v.Error, v.ErrorInfo)
	}
	if v.ErrorInfo.Spent < 39 {
		t.Errorf("spent %d: the turn was stopped before it crossed the budget", v.ErrorInfo.Spent)
	}
	// The third report crossed it; the request on its way then may end.
	t.Logf("model requests %d, spent %d", len(h.model.Requests()), v.ErrorInfo.Spent)
	if n := len(h.model.Requests()); n > 4 {
		t.Errorf("%d model requests: the turn ran on past the budget", n)
	}
	noRequestAfter(t, h.model, len(h.model.Requests()))
}

// A goal that continues on its own is charged, and interrupted at the
// budget like a round's turn: then the model hears nothing more.
func TestBudgetStopsAGoal(t *testing.T) {
	holder := budget.NewHolder(budget.Rules{Tokens: 60, Window: time.Hour, CachedInput: true})
	h := newHarness(t, func(c *tree) { c.Goals, c.UnaskedTurns, c.Budgets = true, UnaskedAllow, holder })
	g := &goalModel{}
	h.model.SetResponder(func(req *demomodel.Request) demomodel.Script { return g.respond(req).WithUsage(thirteen) })
	c := h.caller()
	res := h.round(c, messages.StartRound{User: "alice", Thread: "t1", Text: "set yourself a goal", RoundID: "a1"})
	if res.verdict.Status != messages.StatusCompleted {
		t.Fatalf("verdict %s %s", res.verdict.Status, res.verdict.Error)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if _, err := h.model.WaitRequests(ctx, 5); err != nil {
		t.Fatalf("the goal did not continue past the budget: %v", err)
	}
	n := waitQuiet(t, h.model)
	t.Logf("the goal's model requests: %d", n)
	if n > 8 {
		t.Errorf("%d model requests: the goal ran on past its budget of 60 (13 a request)", n)
	}
	res = h.round(c, messages.StartRound{User: "alice", Thread: "t2", Text: "hi", RoundID: "a2"})
	if res.verdict.ErrorInfo == nil || res.verdict.ErrorInfo.Class != messages.ErrorBudget {
		t.Errorf("after the goal spent the budget: %s %q", res.verdict.Status, res.verdict.Error)
	}
}

// waitQuiet waits until the model heard nothing for quietWindow, and
// returns how many requests it heard.
func waitQuiet(t *testing.T, model *demomodel.Server) int {
	t.Helper()
	deadline := time.Now().Add(60 * time.Second)
	for time.Now().Before(deadline) {
		n := len(model.Requests())
		ctx, cancel := context.WithTimeout(context.Background(), quietWindow)
		_, err := model.WaitRequests(ctx, n+1)
		cancel()
		if errors.Is(err, context.DeadlineExceeded) {
			return n
		}
	}
	t.Fatal("the model never went quiet")
	return 0
}

// A user's agent cannot write the ledger: it is beside the thread
// records, outside CODEX_HOME, in the daemon's own folder of the user.
func TestLedgerOutsideTheHome(t *testing.T) {
	homes := t.TempDir()
	h := budgetHarness(t, homes, nil)
	c := h.caller()
	if res := h.round(c, messages.StartRound{User: "alice", Thread: "t1", Text: "hi", RoundID: "a1"}); res.verdict.Status != messages.StatusCompleted {
		t.Fatalf("verdict %s", res.verdict.Status)
	}
	h.stop()
	f := store.NewLedgerFile(homes + "/alice")
	fi, err := os.Stat(f.Path())
	if err != nil {
		t.Fatalf("no ledger after a round: %v", err)
	}
	if fi.Mode().Perm() != 0o600 {
		t.Errorf("ledger mode %v, want 0600", fi.Mode().Perm())
	}
	home, _ := store.HomeDir(homes, "alice")
	if rel := f.Path(); len(rel) > len(home) && rel[:len(home)] == home {
		t.Errorf("the ledger %s is inside CODEX_HOME %s", f.Path(), home)
	}
}

// The usage answer carries the ledger and the budget: the spend in the
// window per model, the totals, and when a spent budget frees up.
func TestUsageCarriesTheLedger(t *testing.T) {
	holder := budget.NewHolder(budget.Rules{Tokens: 20, Window: time.Hour, CachedInput: true})
	h := budgetHarness(t, t.TempDir(), holder)
	c := h.caller()
	for i := 1; i <= 2; i++ {
		h.round(c, messages.StartRound{User: "alice", Thread: "t1", Text: "hi", RoundID: fmt.Sprint("a", i)})
	}
	h.engine.SendWithSender(h.root, messages.UsageRequest{User: "alice"}, c.pid)
	deadline := time.After(30 * time.Second)
	for {
		select {
		case m := <-c.ch:
			u, ok := m.(messages.UsageResponse)
			if !ok {
				continue
			}
			tk := u.Tokens
			if tk == nil || tk.Spent != 26 || tk.Budget != 20 || tk.WindowSeconds != 3600 || tk.FreesAtUnix == 0 {
				t.Fatalf("tokens %+v: want 26 of 20 in an hour, with a reset", tk)
			}
			if len(tk.Window) != 1 || tk.Window[0].Model != demomodel.Model || tk.Window[0].Input != 20 || tk.Window[0].Output != 6 {
				t.Errorf("per model %+v: want the mock model's 20 in and 6 out", tk.Window)
			}
			if len(tk.Total) != 1 || tk.Total[0] != tk.Window[0] {
				t.Errorf("totals %+v, want the window's", tk.Total)
			}
			return
		case <-deadline:
			t.Fatal("no usage answer")
		}
	}
}

// The usage answer carries the codex account's own rate-limit windows
// beside the budget, as the real CLI last reported them (from the model's
// response headers).
func TestUsageCarriesTheRateLimits(t *testing.T) {
	h := budgetHarness(t, t.TempDir(), nil)
	reset := time.Now().Add(3 * time.Hour).Unix()
	h.model.SetResponder(func(*demomodel.Request) demomodel.Script {
		return demomodel.Text("ok").WithUsage(thirteen).
			WithHeader("x-codex-primary-used-percent", "42").
			WithHeader("x-codex-primary-window-minutes", "300").
			WithHeader("x-codex-primary-reset-at", fmt.Sprint(reset))
	})
	c := h.caller()
	h.round(c, messages.StartRound{User: "alice", Thread: "t1", Text: "hi", RoundID: "a1"})
	h.engine.SendWithSender(h.root, messages.UsageRequest{User: "alice"}, c.pid)
	u := expect[messages.UsageResponse](t, c)
	if len(u.RateLimits) != 1 || u.RateLimits[0].Primary == nil {
		t.Fatalf("rate limits %+v: want the primary window the model's headers gave", u.RateLimits)
	}
	if p := *u.RateLimits[0].Primary; p.UsedPercent != 42 || p.WindowMinutes != 300 || p.ResetsAtUnix != reset {
		t.Errorf("primary window %+v, want 42%% of 300 minutes, resetting at %d", p, reset)
	}
	if u.Tokens == nil || u.Tokens.Spent != 13 {
		t.Errorf("tokens %+v beside them, want 13 spent", u.Tokens)
	}
}
