package store

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"time"
)

// Tokens are the token counts of one or more model requests, as codex
// reports them: Input includes CachedInput, Output includes Reasoning (the
// Responses API's own convention).
type Tokens struct {
	Input       int64 `json:"in"`
	CachedInput int64 `json:"cached,omitempty"`
	Output      int64 `json:"out"`
	Reasoning   int64 `json:"reasoning,omitempty"`
}

// Add is t and u together.
func (t Tokens) Add(u Tokens) Tokens {
	return Tokens{t.Input + u.Input, t.CachedInput + u.CachedInput, t.Output + u.Output, t.Reasoning + u.Reasoning}
}

// Sub is t less u.
func (t Tokens) Sub(u Tokens) Tokens {
	return Tokens{t.Input - u.Input, t.CachedInput - u.CachedInput, t.Output - u.Output, t.Reasoning - u.Reasoning}
}

// Zero reports whether t counts nothing.
func (t Tokens) Zero() bool { return t == Tokens{} }

// valid reports whether every count is non-negative.
func (t Tokens) valid() bool {
	return t.Input >= 0 && t.CachedInput >= 0 && t.Output >= 0 && t.Reasoning >= 0
}

// Cost is what t counts against a budget: input and output tokens, the
// cached part of the input only with cached (cached input is part of
// Input as the API reports it).
func (t Tokens) Cost(cached bool) int64 {
	in := t.Input
	if !cached {
		in -= min(t.CachedInput, in)
	}
	return in + t.Output
}

// Bucket is the tokens charged in [Start, Start+Width) for one model.
type Bucket struct {
	Start int64  `json:"start"` // Unix seconds
	Width int64  `json:"width"` // seconds
	Model string `json:"model"`
	Tokens
}

// ends is when b stops counting in a window of window.
func (b Bucket) ends(window time.Duration) time.Time {
	return time.Unix(b.Start+b.Width, 0).Add(window)
}

// threadMark is the highest thread total of a codex thread charged: a
// usage report whose thread total is not above it was charged already.
type threadMark struct {
	Total Tokens `json:"total"`
	At    int64  `json:"at"` // Unix seconds of its last charge
}

// Ledger is a user's token spend: per model, in time buckets, and the
// thread totals that make a repeated usage report count once. It is a
// plain value; the file it is kept in has one writer (the user's registry
// actor), which holds it in memory and writes it with Save.
//
// A usage report of codex (thread/tokenUsage/updated) carries the last
// request's usage and the thread's total. Charge counts a report once: a
// report whose thread total is the last one charged for the thread is a
// repeat (a resume re-sends the last turn's report; an adopted
// app-server's reports may come again), one below it is an older report,
// unless it is a total begun again (its first request: total equals
// last); one whose total is above it by more than its last request
// charges the difference, so that reports lost between a read and a save
// (a daemon killed before it wrote the ledger) are charged by the
// thread's next report.
type Ledger struct {
	Version int                   `json:"version"`
	Buckets []Bucket              `json:"buckets"`
	Threads map[string]threadMark `json:"threads"`
	Totals  map[string]Tokens     `json:"totals"` // per model, since the ledger began
	// DamagedAt is when a damaged ledger file was replaced: until a window
	// has passed, the user counts as having spent the whole budget (never
	// as zero).
	DamagedAt int64 `json:"damaged_at,omitempty"`
	// Since is when the ledger began.
	Since int64 `json:"since"`
}

const ledgerVersion = 1

// Bounds of a ledger, so that its file stays small whatever a user runs.
const (
	maxLedgerThreads = 4096                // thread marks kept, the least recently charged dropped
	maxLedgerBuckets = 64 << 10            // buckets kept, the oldest dropped
	maxLedgerBytes   = 16 << 20            // a larger file is damaged
	ledgerKeep       = 31 * 24 * time.Hour // buckets older than this (and than the window) go
)

// NewLedger is an empty ledger begun at now.
func NewLedger(now time.Time) *Ledger {
	return &Ledger{Version: ledgerVersion, Threads: map[string]threadMark{}, Totals: map[string]Tokens{}, Since: now.Unix()}
}

// bucketWidth is the width of the buckets charged under window: a
// sixtieth of it, between a second and a minute. A charge stops counting
// at most that long after it left the window.
func bucketWidth(window time.Duration) int64 {
	return int64(min(max(window/60, time.Second), time.Minute) / time.Second)
}

// Charge counts a usage report of model on codex thread at now (last: the
// request's usage; total: the thread's) and returns what it charged:
// zero for a repeat.
func (l *Ledger) Charge(now time.Time, window time.Duration, model, thread string, last, total Tokens) Tokens {
	if !last.valid() || !total.valid() {
		return Tokens{}
	}
	charge := last
	if m, ok := l.Threads[thread]; ok && thread != "" {
		switch {
		case total == m.Total:
			return Tokens{} // charged already: the same report again
		case total.Cost(true) > m.Total.Cost(true):
			if d := total.Sub(m.Total); d.valid() && d.Cost(true) > last.Cost(true) {
				charge = d // and reports lost since the last charge
			}
		case total != last:
			return Tokens{} // an older report of the thread
		default:
			// The thread's total began again (its first request in a
			// process that did not carry it over): a new report.
		}
	}
	if charge.Zero() {
		return Tokens{}
	}
	if thread != "" {
		l.Threads[thread] = threadMark{Total: total, At: now.Unix()}
		l.boundThreads()
	}
	w := bucketWidth(window)
	start := now.Unix() / w * w
	// The current bucket is among the last (one per model): look from the end.
	i := -1
	for j := len(l.Buckets) - 1; j >= 0 && l.Buckets[j].Start >= start; j-- {
		if b := l.Buckets[j]; b.Start == start && b.Width == w && b.Model == model {
			i = j
			break
		}
	}
	if i < 0 {
		l.Buckets = append(l.Buckets, Bucket{Start: start, Width: w, Model: model})
		i = len(l.Buckets) - 1
	}
	l.Buckets[i].Tokens = l.Buckets[i].Add(charge)
	l.Totals[model] = l.Totals[model].Add(charge)
	l.prune(now, window)
	return charge
}

// boundThreads drops the least recently charged thread marks past the
// bound.
func (l *Ledger) boundThreads() {
	for len(l.Threads) > maxLedgerThreads {
		oldest, at := "", int64(0)
		for id, m := range l.Threads {
			if oldest == "" || m.At < at {
				oldest, at = id, m.At
			}
		}
		delete(l.Threads, oldest)
	}
}

// prune drops the buckets that no longer count in window nor in the
// usage kept (ledgerKeep), and the oldest past the bound.
func (l *Ledger) prune(now time.Time, window time.Duration) {
	keep := max(window, ledgerKeep)
	// Buckets are appended in time order, so the expired ones lead; one
	// out of order (a clock set back) stays until the leading ones go.
	n := 0
	for n < len(l.Buckets) && !l.Buckets[n].ends(keep).After(now) {
		n++
	}
	if n > 0 {
		l.Buckets = slices.Delete(l.Buckets, 0, n)
	}
	if n := len(l.Buckets) - maxLedgerBuckets; n > 0 {
		l.Buckets = l.Buckets[n:]
	}
}

// Spend is what counts in a window at now: the tokens per model, and the
// cost of them all under cached.
type Spend struct {
	Models map[string]Tokens
	Cost   int64
	// Damaged says the ledger's file was damaged less than a window ago:
	// the spend counts as the whole budget.
	Damaged bool
}

// counts reports whether b counts at now in window (the arithmetic of
// ends, in nanoseconds: no time.Time per bucket).
func counts(b Bucket, nowNs int64, window time.Duration) bool {
	return (b.Start+b.Width)*int64(time.Second)+int64(window) > nowNs
}

// Cost is the cost of the spend that counts at now in window, and whether
// the ledger counts as damaged: Spent without the models, for the checks
// made at every report and admission.
func (l *Ledger) Cost(now time.Time, window time.Duration, cached bool) (cost int64, damaged bool) {
	nowNs := now.UnixNano()
	for _, b := range l.Buckets {
		if counts(b, nowNs, window) {
			cost += b.Tokens.Cost(cached)
		}
	}
	return cost, l.DamagedAt != 0 && time.Unix(l.DamagedAt, 0).Add(window).After(now)
}

// Spent is the spend that counts at now in window.
func (l *Ledger) Spent(now time.Time, window time.Duration, cached bool) Spend {
	s := Spend{Models: map[string]Tokens{}}
	for _, b := range l.Buckets {
		if b.ends(window).After(now) {
			s.Models[b.Model] = s.Models[b.Model].Add(b.Tokens)
			s.Cost += b.Cost(cached)
		}
	}
	s.Damaged = l.DamagedAt != 0 && time.Unix(l.DamagedAt, 0).Add(window).After(now)
	return s
}

// FreesAt is the first time after now at which the spend in window is
// below budget: now when it is already (budget 0: no budget), else when
// enough of the oldest buckets have left the window.
func (l *Ledger) FreesAt(now time.Time, window time.Duration, budget int64, cached bool) time.Time {
	s := l.Spent(now, window, cached)
	if budget <= 0 || (s.Cost < budget && !s.Damaged) {
		return now
	}
	frees := now
	if s.Damaged {
		frees = time.Unix(l.DamagedAt, 0).Add(window)
	}
	live := slices.DeleteFunc(slices.Clone(l.Buckets), func(b Bucket) bool { return !b.ends(window).After(now) })
	slices.SortFunc(live, func(a, b Bucket) int { return a.ends(window).Compare(b.ends(window)) })
	cost := s.Cost
	for _, b := range live {
		if cost < budget {
			break
		}
		cost -= b.Cost(cached)
		frees = later(frees, b.ends(window))
	}
	return frees
}

func later(a, b time.Time) time.Time {
	if b.After(a) {
		return b
	}
	return a
}

// LedgerFile is a user's ledger file, {dir}/meshweaver/usage.json, beside
// the thread records: out of the user's app-server's reach.
type LedgerFile struct{ path string }

// NewLedgerFile is the ledger file of the user folder dir.
func NewLedgerFile(dir string) *LedgerFile {
	return &LedgerFile{path: filepath.Join(dir, "meshweaver", "usage.json")}
}

// Path is the file's path.
func (f *LedgerFile) Path() string { return f.path }

// Load reads the ledger. A missing file is a new ledger begun at now. A
// damaged one (unreadable, too large, not this format, negative counts)
// yields a new ledger marked damaged at now, and an error wrapping
// [ErrCorrupt] that names the path; the damaged file is kept beside it
// (usage.json.damaged) for the operator.
func (f *LedgerFile) Load(now time.Time) (*Ledger, error) {
	data, err := readSmall(f.path, maxLedgerBytes)
	if errors.Is(err, fs.ErrNotExist) {
		return NewLedger(now), nil
	}
	if err == nil {
		var l *Ledger
		if l, err = parseLedger(data); err == nil {
			return l, nil
		}
	}
	l := NewLedger(now)
	l.DamagedAt = now.Unix()
	if errors.Is(err, ErrCorrupt) {
		_ = os.Rename(f.path, f.path+".damaged")
	}
	return l, fmt.Errorf("reading the token ledger %s: %w", f.path, err)
}

func parseLedger(data []byte) (*Ledger, error) {
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	var l Ledger
	if err := dec.Decode(&l); err != nil {
		return nil, corruptf("not a token ledger")
	}
	if dec.More() {
		return nil, corruptf("data after the ledger")
	}
	if l.Version != ledgerVersion {
		return nil, corruptf("version %d, want %d", l.Version, ledgerVersion)
	}
	for _, b := range l.Buckets {
		if !b.valid() || b.Width <= 0 {
			return nil, corruptf("a bucket with negative counts or no width")
		}
	}
	for _, t := range l.Totals {
		if !t.valid() {
			return nil, corruptf("a total with negative counts")
		}
	}
	if l.Threads == nil {
		l.Threads = map[string]threadMark{}
	}
	if l.Totals == nil {
		l.Totals = map[string]Tokens{}
	}
	return &l, nil
}

// Save writes the ledger atomically (a temporary file, synced, renamed):
// a failed save leaves the previous file whole.
func (f *LedgerFile) Save(l *Ledger) error {
	c := *l
	c.Threads, c.Totals = maps.Clone(l.Threads), maps.Clone(l.Totals)
	data, err := json.Marshal(&c)
	if err != nil {
		return fmt.Errorf("writing the token ledger %s: %w", f.path, err)
	}
	return WriteFileAtomic(f.path, data, 0o600)
}
