package store

import (
	"errors"
	"os"
	"path/filepath"
	"testing"
	"time"
)

func tok(in, out int64) Tokens { return Tokens{Input: in, Output: out} }

// A report counts once: again (a resume re-sends it), it charges nothing;
// an older one charges nothing; one after lost reports charges them too;
// a total begun again charges its request.
func TestLedgerChargesEachReportOnce(t *testing.T) {
	now := time.Unix(1_800_000_000, 0)
	l := NewLedger(now)
	const w = time.Hour
	steps := []struct {
		name        string
		last, total Tokens
		want        Tokens
	}{
		{"first", tok(10, 3), tok(10, 3), tok(10, 3)},
		{"second", tok(10, 3), tok(20, 6), tok(10, 3)},
		{"the second again", tok(10, 3), tok(20, 6), Tokens{}},
		{"an older one", tok(10, 3), tok(10, 6), Tokens{}},
		{"after two lost", tok(10, 3), tok(50, 15), tok(30, 9)},
		{"begun again", tok(7, 1), tok(7, 1), tok(7, 1)},
		{"on from there", tok(7, 1), tok(14, 2), tok(7, 1)},
		{"negative", Tokens{Input: -5}, tok(1, 1), Tokens{}},
	}
	var sum Tokens
	for _, s := range steps {
		got := l.Charge(now, w, "m", "th1", s.last, s.total)
		if got != s.want {
			t.Errorf("%s: charged %+v, want %+v", s.name, got, s.want)
		}
		sum = sum.Add(got)
	}
	if c, _ := l.Cost(now, w, true); c != sum.Cost(true) {
		t.Errorf("cost %d, want %d", c, sum.Cost(true))
	}
	if sp := l.Spent(now, w, true); sp.Cost != sum.Cost(true) || sp.Models["m"] != sum || l.Totals["m"] != sum {
		t.Errorf("spent %+v, totals %+v; want %+v", sp, l.Totals, sum)
	}
}

// The window rolls: spend leaves it a bucket after its window, and
// FreesAt says when the spend falls below the budget, to the second.
func TestLedgerWindowRolls(t *testing.T) {
	t0 := time.Unix(1_800_000_000, 0) // a multiple of 60
	const w = time.Hour
	l := NewLedger(t0)
	l.Charge(t0, w, "a", "x", tok(30, 0), tok(30, 0))
	l.Charge(t0.Add(10*time.Minute), w, "b", "y", tok(30, 0), tok(30, 0))
	if c := l.Spent(t0.Add(10*time.Minute), w, true).Cost; c != 60 {
		t.Fatalf("spent %d, want 60", c)
	}
	now := t0.Add(20 * time.Minute)
	// Budget 60: the first charge must leave: at t0+1m (its bucket's end)+1h.
	if got, want := l.FreesAt(now, w, 60, true), t0.Add(time.Minute+w); !got.Equal(want) {
		t.Errorf("frees at %v, want %v", got, want)
	}
	// Budget 30: both must leave.
	if got, want := l.FreesAt(now, w, 30, true), t0.Add(11*time.Minute+w); !got.Equal(want) {
		t.Errorf("budget 30: frees at %v, want %v", got, want)
	}
	if got := l.FreesAt(now, w, 61, true); !got.Equal(now) {
		t.Errorf("under budget: frees at %v, want now", got)
	}
	at := t0.Add(time.Minute + w)
	if c := l.Spent(at.Add(-time.Second), w, true).Cost; c != 60 {
		t.Errorf("a second before the reset: spent %d, want 60", c)
	}
	if c := l.Spent(at, w, true).Cost; c != 30 {
		t.Errorf("at the reset: spent %d, want 30", c)
	}
}

// Cached input counts only when the budget counts it.
func TestLedgerCachedInput(t *testing.T) {
	u := Tokens{Input: 100, CachedInput: 40, Output: 10, Reasoning: 4}
	if u.Cost(true) != 110 || u.Cost(false) != 70 {
		t.Fatalf("cost %d cached, %d not; want 110 and 70", u.Cost(true), u.Cost(false))
	}
}

// The file survives a save and a load; a damaged one is kept aside and
// counts as the whole budget for a window, never as zero.
func TestLedgerFile(t *testing.T) {
	dir := t.TempDir()
	f := NewLedgerFile(dir)
	now := time.Unix(1_800_000_000, 0)
	l, err := f.Load(now)
	if err != nil || len(l.Buckets) != 0 {
		t.Fatalf("a missing file: %v, %+v", err, l)
	}
	l.Charge(now, time.Hour, "m", "th", tok(10, 3), tok(10, 3))
	if err := f.Save(l); err != nil {
		t.Fatal(err)
	}
	back, err := f.Load(now)
	if err != nil {
		t.Fatal(err)
	}
	if back.Spent(now, time.Hour, true).Cost != 13 || back.Charge(now, time.Hour, "m", "th", tok(10, 3), tok(10, 3)) != (Tokens{}) {
		t.Fatalf("reloaded: %+v", back)
	}
	for name, junk := range map[string]string{
		"garbage":  "not json",
		"version":  `{"version":9,"buckets":[],"threads":{},"totals":{},"since":1}`,
		"negative": `{"version":1,"buckets":[{"start":1,"width":60,"model":"m","in":-5,"out":0}],"threads":{},"totals":{},"since":1}`,
		"unknown":  `{"version":1,"extra":1}`,
	} {
		if err := os.WriteFile(f.Path(), []byte(junk), 0o600); err != nil {
			t.Fatal(err)
		}
		l, err := f.Load(now)
		if !errors.Is(err, ErrCorrupt) || l == nil {
			t.Fatalf("%s: %v", name, err)
		}
		if s := l.Spent(now.Add(59*time.Minute), time.Hour, true); !s.Damaged {
			t.Errorf("%s: a damaged ledger counts as nothing spent", name)
		}
		if s := l.Spent(now.Add(time.Hour), time.Hour, true); s.Damaged {
			t.Errorf("%s: still damaged after a window", name)
		}
		if got, want := l.FreesAt(now, time.Hour, 60, true), now.Add(time.Hour); !got.Equal(want) {
			t.Errorf("%s: frees at %v, want %v", name, got, want)
		}
		if _, err := os.Stat(f.Path() + ".damaged"); err != nil {
			t.Errorf("%s: the damaged file was not kept: %v", name, err)
		}
	}
	if filepath.Dir(f.Path()) != filepath.Join(dir, "meshweaver") {
		t.Errorf("ledger at %s, want beside the thread records", f.Path())
	}
}

// The ledger stays bounded whatever a user runs.
func TestLedgerBounded(t *testing.T) {
	now := time.Unix(1_800_000_000, 0)
	l := NewLedger(now)
	for i := range maxLedgerThreads + 10 {
		l.Charge(now.Add(time.Duration(i)*time.Second), time.Hour, "m", string(rune('a'+i%26))+time.Duration(i).String(), tok(1, 1), tok(1, 1))
	}
	if len(l.Threads) > maxLedgerThreads {
		t.Errorf("%d thread marks kept, max %d", len(l.Threads), maxLedgerThreads)
	}
	l.Charge(now.Add(ledgerKeep+2*time.Hour), time.Hour, "m", "late", tok(1, 1), tok(1, 1))
	if len(l.Buckets) != 1 {
		t.Errorf("%d buckets kept after a month, want 1", len(l.Buckets))
	}
}

// BenchmarkLedgerCharge: one usage report charged to a ledger holding a
// day of minute buckets for 3 models and 1,000 threads, and the spend
// read as an admission reads it.
func BenchmarkLedgerCharge(b *testing.B) {
	now := time.Unix(1_800_000_000, 0)
	l := NewLedger(now)
	for i := range 1440 * 3 {
		th := "t" + time.Duration(i%1000).String()
		l.Charge(now.Add(time.Duration(i/3)*time.Minute), 24*time.Hour, "m"+string(rune('a'+i%3)), th, tok(10, 3), tok(int64(10*(i+1)), int64(3*(i+1))))
	}
	at := now.Add(24 * time.Hour)
	b.ReportAllocs()
	for i := 0; b.Loop(); i++ {
		l.Charge(at, 24*time.Hour, "ma", "bench", tok(10, 3), tok(int64(10*(i+1)), int64(3*(i+1))))
		_, _ = l.Cost(at, 24*time.Hour, true)
	}
}
