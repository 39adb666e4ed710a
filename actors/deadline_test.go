package actors

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/meshweaver/supervisor/demomodel"
	"github.com/meshweaver/supervisor/messages"
	"github.com/meshweaver/supervisor/testkit/fakeappserver"
)

// Deadlines.

// TestStallInterruptsTurn: a turn without progress for StallTimeout is
// interrupted and failed with a verdict naming the stall; the thread then
// serves the next round.
func TestStallInterruptsTurn(t *testing.T) {
	// The second round must make progress more often than this: the real
	// CLI, descheduled on a loaded machine, can be silent for a second
	// between two notifications of a normal turn.
	const stall = 3 * time.Second
	h := supHarness(t, realCLI, func(c *tree) { c.StallTimeout = stall })
	c := h.caller()
	h.model.Enqueue(demomodel.Text("thinking ").Hang())
	start := time.Now()
	r1 := h.round(c, messages.StartRound{User: "alice", Thread: "mesh/stall", Text: "hang"})
	took := time.Since(start)
	mustStatus(t, r1, messages.StatusFailed)
	if !strings.Contains(r1.verdict.Error, "no progress for "+stall.String()) {
		t.Errorf("verdict error %q does not name the stall", r1.verdict.Error)
	}
	if took < stall || took > stall+10*time.Second {
		t.Errorf("the stalled round ended after %v, StallTimeout %v", took, stall)
	}
	if got := r1.text(); got != "thinking " {
		t.Errorf("text before the stall = %q", got)
	}
	h.model.Enqueue(demomodel.Text("done"))
	r2 := h.round(c, messages.StartRound{User: "alice", Thread: "mesh/stall", Text: "again"})
	mustStatus(t, r2, messages.StatusCompleted)
	if r2.text() != "done" || !r2.verdict.Resumed || r2.verdict.CodexThreadID != r1.verdict.CodexThreadID {
		t.Errorf("round after the stall: text %q, verdict %+v", r2.text(), r2.verdict)
	}
}

// TestDeadlineOnHungRPC: an RPC the app-server never answers ends at
// CallTimeout with a failed verdict naming the deadline.
func TestDeadlineOnHungRPC(t *testing.T) {
	// Long enough for the fake's start and initialize, bounded by it too,
	// on a loaded machine: with 1s the round failed initializing instead.
	const callTimeout = hungCallTimeout
	h := supHarness(t, withFake(t, fakeappserver.Config{HangOnMethod: "thread/start"}),
		func(c *tree) { c.CallTimeout = callTimeout })
	c := h.caller()
	start := time.Now()
	h.roundAsync(c, messages.StartRound{User: "alice", Thread: "mesh/d", Text: "hi", RoundID: "d-1"})
	r := c.collect(t, "d-1", callTimeout+waitFor)
	took := time.Since(start)
	mustStatus(t, r, messages.StatusFailed)
	if !strings.Contains(r.verdict.Error, "starting a codex thread") ||
		!strings.Contains(r.verdict.Error, context.DeadlineExceeded.Error()) {
		t.Errorf("verdict error %q does not name the thread/start deadline", r.verdict.Error)
	}
	if took < callTimeout {
		t.Errorf("failed after %v, before the %v deadline", took, callTimeout)
	}
}
