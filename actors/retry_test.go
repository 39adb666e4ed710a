package actors

import (
	"strings"
	"testing"
	"time"

	"github.com/meshweaver/supervisor/messages"
	"github.com/meshweaver/supervisor/testkit/fakeappserver"
)

// A model that never answers while the CLI retries its upstream: every
// retried error reaches the caller as a retry event, and the retries are
// not progress, so the stall deadline still ends the round (before, it
// never did: each retry reset the deadline).
func TestRetriedErrorsAreNoticesNotProgress(t *testing.T) {
	const stall = time.Second
	h := supHarness(t, withFake(t, fakeappserver.Config{UpstreamRetryMs: 100}),
		func(c *tree) { c.StallTimeout = stall })
	c := h.caller()
	start := time.Now()
	h.roundAsync(c, messages.StartRound{User: "alice", Thread: "mesh/r", Text: "hi", RoundID: "r-1"})
	r := c.collect(t, "r-1", 30*time.Second)
	took := time.Since(start)
	t.Logf("verdict after %v, %d retry events", took, len(r.kinds(messages.KindRetry)))
	mustStatus(t, r, messages.StatusFailed)
	if !strings.Contains(r.verdict.Error, "no progress for "+stall.String()) {
		t.Errorf("verdict error %q does not name the stall", r.verdict.Error)
	}
	// The stall (from the last real progress, the turn's start) plus a
	// tick and the interrupt's answer, and the fake's start, which is
	// counted here too and takes seconds on a loaded machine. Retries
	// taken for progress would hold the round past the 30 s collect.
	if limit := stall + 15*time.Second; took > limit {
		t.Errorf("the round ended after %v, want within %v", took, limit)
	}
	retries := r.kinds(messages.KindRetry)
	if len(retries) < 3 {
		t.Fatalf("retry events = %+v, want one per retried error (at least 3 in %v)", retries, stall)
	}
	if want := "Reconnecting... 1/5: stream disconnected before completion: fake upstream"; retries[0].Text != want {
		t.Errorf("first retry event %q, want %q", retries[0].Text, want)
	}
}
