package actors

import (
	"context"
	"path/filepath"
	"testing"
	"time"

	"github.com/meshweaver/supervisor/messages"
	"github.com/meshweaver/supervisor/testkit/fakeappserver"
)

// A round stopped while its turn/interrupt goes unanswered stops at once,
// not after a call timeout: interrupt and steer are calls of the
// app-server actor's, which the round does not wait for.
func TestStoppingRoundDoesNotWaitOutInterrupt(t *testing.T) {
	const callTimeout = 30 * time.Second
	record := filepath.Join(t.TempDir(), "received.jsonl")
	h := supHarness(t, heldFake(t, fakeappserver.Config{HangOnMethod: "turn/interrupt", RecordPath: record}),
		func(c *tree) { c.CallTimeout = callTimeout })
	c := h.caller()
	h.roundAsync(c, messages.StartRound{User: "alice", Thread: "mesh/c", Text: "hi", RoundID: "c-1"})
	c.waitFirstEvent(t, "c-1", waitFor)
	h.engine.SendWithSender(h.root, messages.InterruptRound{User: "alice", Thread: "mesh/c", RoundID: "c-1"}, c.pid)
	poll(t, waitFor, "turn/interrupt to reach the app-server", func() bool {
		return countMethod(recordedRequests(t, record), "turn/interrupt") == 1
	})

	start := time.Now()
	ctx, cancel := context.WithTimeout(context.Background(), callTimeout)
	defer cancel()
	<-h.engine.PoisonCtx(ctx, h.childPID("user/alice/log/r1/round/r1")).Done()
	took := time.Since(start)
	if ctx.Err() != nil || took > 5*time.Second {
		t.Errorf("stopping the round took %v (ctx %v), want at once", took, ctx.Err())
	}
	r := c.collect(t, "c-1", waitFor)
	mustStatus(t, r, messages.StatusInterrupted)
}
