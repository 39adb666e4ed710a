package actors

// The user's token ledger (store.Ledger) and budget: the registry actor
// owns the ledger's file and is its only writer; the app-server actor
// sends it every usage report of the user's threads (chargeTokens), a
// round asks it before it opens a thread (lookupThread: a user at or over
// budget is refused there, before any model request), and a report that
// takes the user past the budget (and the overrun) sends the app-server
// actor budgetMet, through the user actor, to interrupt the running
// turns.

import (
	"encoding/json"
	"fmt"
	"maps"
	"path/filepath"
	"slices"
	"time"

	"golang.org/x/sys/unix"

	"github.com/meshweaver/supervisor/actors/budget"
	"github.com/meshweaver/supervisor/codexproto"
	"github.com/meshweaver/supervisor/codexrpc"
	"github.com/meshweaver/supervisor/messages"
	"github.com/meshweaver/supervisor/store"
	"github.com/meshweaver/supervisor/third_party/hollywood/actor"
)

// ledgerFlush is how long a charge may wait in memory before the ledger
// is written: writes are batched, at most one a second whatever the
// rounds, never one per report.
const ledgerFlush = time.Second

// chargeTokens is a usage report of one of the user's threads, for the
// ledger.
type chargeTokens struct {
	model, thread string
	last, total   store.Tokens
}

// budgetMet tells the app-server actor, and from it each running round,
// that the user's spend has reached the budget: running turns are
// interrupted, and the rounds' verdicts say why.
type budgetMet struct{ info *messages.ErrorInfo }

// usageTokens is a UsageResponse on its way from the app-server actor to
// its caller (to), for the registry to add the ledger to.
type usageTokens struct {
	resp messages.UsageResponse
	to   *actor.PID
}

// flushLedger is the registry actor's timer: write the ledger.
type flushLedger struct{}

// userLedger is the registry actor's ledger of the user: the ledger, its
// file, whether it holds charges not yet written, and the timer that
// writes them.
type userLedger struct {
	file  *store.LedgerFile
	l     *store.Ledger
	dirty bool
	timer *time.Timer
}

// tokensOf is codexproto's counts as the ledger's.
func tokensOf(u codexproto.TokenUsage) store.Tokens {
	return store.Tokens{Input: u.InputTokens, CachedInput: u.CachedInputTokens, Output: u.OutputTokens, Reasoning: u.ReasoningOutputTokens}
}

// usageReport is a thread/tokenUsage/updated as a charge, if it reads.
func usageReport(n *codexrpc.Notification, model string) (chargeTokens, bool) {
	var u codexproto.TokenUsageNotification
	if json.Unmarshal(n.Params, &u) != nil || u.ThreadID == "" {
		return chargeTokens{}, false
	}
	return chargeTokens{model: model, thread: u.ThreadID, last: tokensOf(u.TokenUsage.Last), total: tokensOf(u.TokenUsage.Total)}, true
}

// loadLedger reads the user's ledger at the registry's start. A damaged
// one counts as the whole budget for a window (store.Ledger.DamagedAt).
func (a *registryActor) loadLedger() {
	a.ledger.file = store.NewLedgerFile(a.dir)
	l, err := a.ledger.file.Load(time.Now())
	if err != nil {
		a.log.Error("the token ledger is damaged: the user counts as having spent the budget for a window", "err", err)
		a.ledger.dirty = true // the new ledger, with its mark, replaces it
	}
	a.ledger.l = l
}

// rules are the current budget rules: with none set, no budget, the
// default window, cached input counted.
func (a *registryActor) rules() *budget.Rules {
	if r := a.cfg.Budgets.Rules(); r != nil {
		return r
	}
	return &noBudgets
}

var noBudgets = budget.Rules{CachedInput: true}

// charge adds a usage report to the ledger; a report that puts the user
// past the budget and its overrun tells the app-server actor.
func (a *registryActor) charge(c *actor.Context, m chargeTokens) {
	r := a.rules()
	now := time.Now()
	got := a.ledger.l.Charge(now, r.WindowOr(), m.model, m.thread, m.last, m.total)
	if got.Zero() {
		return
	}
	a.cfg.Metrics.Tokens.WithLabelValues("input").Add(float64(got.Input))
	a.cfg.Metrics.Tokens.WithLabelValues("cached_input").Add(float64(got.CachedInput))
	a.cfg.Metrics.Tokens.WithLabelValues("output").Add(float64(got.Output))
	a.cfg.Metrics.Tokens.WithLabelValues("reasoning").Add(float64(got.Reasoning))
	a.ledger.dirty = true
	if a.ledger.timer == nil {
		e, self := c.Engine(), c.PID()
		a.ledger.timer = time.AfterFunc(ledgerFlush, func() { e.Send(self, flushLedger{}) })
	}
	if info := a.overBudget(now, r, r.Overrun); info != nil {
		c.Send(c.Parent(), budgetMet{info: info})
	}
}

// overBudget is the refusal of a user whose spend is at or past the
// budget plus slack, nil when under it or with no budget.
func (a *registryActor) overBudget(now time.Time, r *budget.Rules, slack int64) *messages.ErrorInfo {
	b := r.Of(a.user)
	if b <= 0 {
		return nil
	}
	w := r.WindowOr()
	cost, damaged := a.ledger.l.Cost(now, w, r.CachedInput)
	if cost < b+slack && !damaged {
		return nil
	}
	spent := cost
	if damaged {
		spent = max(spent, b)
	}
	frees := a.ledger.l.FreesAt(now, w, b, r.CachedInput)
	return &messages.ErrorInfo{Class: messages.ErrorBudget, Spent: spent, Budget: b, ResetsAtUnix: frees.Unix()}
}

// admit is the refusal of a round of a user at or over budget, nil when
// it may run.
func (a *registryActor) admit() *messages.ErrorInfo {
	info := a.overBudget(time.Now(), a.rules(), 0)
	if info != nil {
		a.cfg.Metrics.BudgetRefusals.Inc()
		a.log.Info("round refused: the token budget is spent", "spent", info.Spent, "budget", info.Budget,
			"frees_at", time.Unix(info.ResetsAtUnix, 0).UTC().Format(time.RFC3339))
	}
	return info
}

// flush writes the ledger if it holds charges not yet written. A failed
// write (a full disk) keeps them for the next flush: the file on disk
// stays whole, with what it acknowledged.
func (a *registryActor) flush() {
	if a.ledger.timer != nil {
		a.ledger.timer.Stop()
		a.ledger.timer = nil
	}
	if !a.ledger.dirty {
		return
	}
	if err := a.ledger.file.Save(a.ledger.l); err != nil {
		a.log.Warn("writing the token ledger; kept in memory and retried", "err", err)
		return
	}
	a.ledger.dirty = false
}

// tokenUsage is the ledger and the budget, for a UsageResponse.
func (a *registryActor) tokenUsage() *messages.TokenUsage {
	r, now := a.rules(), time.Now()
	w := r.WindowOr()
	s := a.ledger.l.Spent(now, w, r.CachedInput)
	u := &messages.TokenUsage{WindowSeconds: int64(w / time.Second), Budget: r.Of(a.user), Spent: s.Cost,
		Damaged: s.Damaged, SinceUnix: a.ledger.l.Since, Window: modelTokens(s.Models), Total: modelTokens(a.ledger.l.Totals)}
	if u.Budget > 0 && (s.Cost >= u.Budget || s.Damaged) {
		u.FreesAtUnix = a.ledger.l.FreesAt(now, w, u.Budget, r.CachedInput).Unix()
	}
	return u
}

// modelTokens is per-model counts as the message's, by model name.
func modelTokens(m map[string]store.Tokens) []messages.ModelTokens {
	out := make([]messages.ModelTokens, 0, len(m))
	for _, model := range slices.Sorted(maps.Keys(m)) {
		t := m[model]
		out = append(out, messages.ModelTokens{Model: model, Input: t.Input, CachedInput: t.CachedInput, Output: t.Output, Reasoning: t.Reasoning})
	}
	return out
}

// diskLow is the refusal of a round when the file system of the user's
// records (the homes') has less than MinFreeDisk free, "" otherwise: the
// round's agent must not fill what the journal, the thread records and
// the ledger are written to. An unreadable file system is not refused.
func (a *registryActor) diskLow() string {
	if a.cfg.MinFreeDisk <= 0 {
		return ""
	}
	var st unix.Statfs_t
	read := false
	for p := a.dir; !read && p != filepath.Dir(p); p = filepath.Dir(p) {
		read = unix.Statfs(p, &st) == nil // the first folder there is (the user's comes with its first start)
	}
	if !read {
		return ""
	}
	free := int64(st.Bavail) * st.Bsize
	if free >= a.cfg.MinFreeDisk {
		return ""
	}
	a.cfg.Metrics.LimitHits.WithLabelValues("disk").Inc()
	a.log.Warn("round refused: the records' disk is nearly full", "free_bytes", free, "floor_bytes", a.cfg.MinFreeDisk)
	return fmt.Sprintf("%d bytes free where the daemon keeps its records, under the floor of %d (--min-free-disk)", free, a.cfg.MinFreeDisk)
}

// budgetText is the verdict's text of a budget refusal or interruption.
func budgetText(info *messages.ErrorInfo) string {
	return fmt.Sprintf("the user's token budget is spent: %d of %d tokens in the window; the next round may run at %s",
		info.Spent, info.Budget, time.Unix(info.ResetsAtUnix, 0).UTC().Format(time.RFC3339))
}
