package cluster

import (
	"testing"
	"testing/synctest"
	"time"
)

func TestDeadline(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	d := NewDeadline(10*time.Second, 3*time.Second, t0)
	if got, want := d.FenceAt(), t0.Add(7*time.Second); !got.Equal(want) {
		t.Fatalf("FenceAt = %v, want %v", got, want)
	}
	if got, want := d.Expiry(), t0.Add(10*time.Second); !got.Equal(want) {
		t.Fatalf("Expiry = %v, want %v", got, want)
	}
	if !d.Valid(t0.Add(6999*time.Millisecond)) || d.Valid(t0.Add(7*time.Second)) {
		t.Fatal("Valid must hold strictly before FenceAt only")
	}
	d.Renewed(t0.Add(2 * time.Second))
	if got, want := d.FenceAt(), t0.Add(9*time.Second); !got.Equal(want) {
		t.Fatalf("after a renewal FenceAt = %v, want %v", got, want)
	}
	d.Renewed(t0.Add(time.Second)) // a late answer to an older keepalive
	if got, want := d.FenceAt(), t0.Add(9*time.Second); !got.Equal(want) {
		t.Fatalf("an older renewal moved FenceAt to %v, want %v", got, want)
	}
	if got, want := d.RenewEvery(), 7*time.Second/6; got != want {
		t.Fatalf("RenewEvery = %v, want %v", got, want)
	}
	if got := NewDeadline(2*time.Second, 1999*time.Millisecond, t0).RenewEvery(); got != 50*time.Millisecond {
		t.Fatalf("RenewEvery floor = %v, want 50ms", got)
	}
	for _, c := range []struct{ ttl, margin, want time.Duration }{
		{10 * time.Second, 4 * time.Second, time.Second},
		{5 * time.Second, 2 * time.Second, 500 * time.Millisecond},
		{60 * time.Second, 10 * time.Second, time.Second},                  // at most 1s
		{2 * time.Second, 1900 * time.Millisecond, 100 * time.Millisecond}, // at least 100ms
	} {
		if got := NewDeadline(c.ttl, c.margin, t0).Attempt(); got != c.want {
			t.Errorf("Attempt(TTL %v, margin %v) = %v, want %v", c.ttl, c.margin, got, c.want)
		}
	}
}

// TestCheckTimings: a fence window must hold a renewal interval, two
// election timeouts and a quarter attempt.
func TestCheckTimings(t *testing.T) {
	for _, c := range []struct {
		ttl, margin, election time.Duration
		ok                    bool
	}{
		{5 * time.Second, 2 * time.Second, time.Second, true},       // 3s ≥ 0.5+2+0.125
		{10 * time.Second, 4 * time.Second, time.Second, true},      // the serve defaults
		{5 * time.Second, 2 * time.Second, 2 * time.Second, false},  // the old embedded timings
		{5 * time.Second, 3 * time.Second, time.Second, false},      // 2s < 0.33+2+0.08
		{30 * time.Second, 10 * time.Second, 5 * time.Second, true}, // a slow WAN etcd
	} {
		err := CheckTimings(c.ttl, c.margin, c.election)
		if (err == nil) != c.ok {
			t.Errorf("CheckTimings(%v, %v, %v) = %v, want ok %v", c.ttl, c.margin, c.election, err, c.ok)
		}
	}
}

// TestDeadlineFencesBeforeExpiry drives a member's renew schedule on the
// fake clock: keepalives every RenewEvery, then etcd stops answering. The
// member must be fenced (Valid false) by FenceAt, Margin before the lease
// could expire, and never while the lease is renewed.
func TestDeadlineFencesBeforeExpiry(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ttl, margin := 5*time.Second, 2*time.Second
		d := NewDeadline(ttl, margin, time.Now())
		for range 10 { // etcd answers
			time.Sleep(d.RenewEvery())
			if !d.Valid(time.Now()) {
				t.Fatal("fenced while the lease was renewed")
			}
			d.Renewed(time.Now())
		}
		lastSent := time.Now()
		var fencedAt time.Time
		for fencedAt.IsZero() { // etcd is gone: the member checks every 10ms
			time.Sleep(10 * time.Millisecond)
			if !d.Valid(time.Now()) {
				fencedAt = time.Now()
			}
		}
		if got, want := fencedAt.Sub(lastSent), ttl-margin; got < want || got > want+10*time.Millisecond {
			t.Fatalf("fenced %v after the last keepalive, want %v", got, want)
		}
		if expiry := lastSent.Add(ttl); !fencedAt.Add(margin).After(expiry.Add(-time.Millisecond)) || !fencedAt.Before(expiry) {
			t.Fatalf("fenced at %v, lease could expire at %v: the margin is not kept", fencedAt, expiry)
		}
	})
}
