package remote

import (
	"context"
	"testing"
	"testing/synctest"
	"time"
)

// TestIdentityWaitsAtMostTimeout: the sender check gives up on a dial
// that has not finished after the timeout, and no sooner.
func TestIdentityWaitsAtMostTimeout(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		w := newStreamWriter(New("127.0.0.1:1", NewConfig()), "127.0.0.1:2")
		start := time.Now()
		if _, err := w.identity(context.Background(), 5*time.Second); err == nil {
			t.Fatal("identity of an unfinished dial")
		}
		if took := time.Since(start); took != 5*time.Second {
			t.Errorf("gave up after %v, want 5s", took)
		}
		w.ident = "spiffe://x"
		close(w.ready)
		if id, err := w.identity(context.Background(), time.Second); err != nil || id != "spiffe://x" {
			t.Errorf("identity %q, %v", id, err)
		}
	})
}

// TestDialRetriesBounded: a refused address is tried 3 times with the
// pauses between (0, then 1s), well within the 2×DialTimeout budget; a
// stop ends the dial at once.
func TestDialRetriesBounded(t *testing.T) {
	dead := freeAddr(t)
	synctest.Test(t, func(t *testing.T) {
		r := New("127.0.0.1:1", NewConfig().WithLimits(Limits{DialTimeout: 5 * time.Second}))
		defer r.cancel()
		w := newStreamWriter(r, dead)
		start := time.Now()
		if _, err := w.dial(r.ctx); err == nil {
			t.Fatal("dialled a closed port")
		}
		if took := time.Since(start); took != 2*dialRetryDelay {
			t.Errorf("gave up after %v, want %v", took, 2*dialRetryDelay)
		}
		r.cancel()
		start = time.Now()
		if _, err := w.dial(r.ctx); err == nil {
			t.Fatal("dialled after stop")
		}
		if took := time.Since(start); took != 0 {
			t.Errorf("a stopped dial took %v", took)
		}
	})
}
