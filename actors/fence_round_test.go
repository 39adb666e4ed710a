package actors

import (
	"strings"
	"testing"

	"github.com/meshweaver/supervisor/messages"
	"github.com/meshweaver/supervisor/testkit/fakeappserver"
)

// TestFenceRoundFailedRetryable: a round running when the member is
// fenced ends failed and retryable, its error naming the fence, not
// "interrupted: the daemon is stopping"; the next round after the fence
// (a new user actor) completes and is not marked.
func TestFenceRoundFailedRetryable(t *testing.T) {
	p := &fakePlacement{owner: func(string, int) (bool, string, error) { return true, "", nil }}
	h := supHarness(t, heldFake(t, fakeappserver.Config{ReplyText: "ok"}), func(c *tree) { c.Placement = p })
	c := h.caller()
	m := messages.StartRound{User: "alice", Thread: "t1", Text: "hi", RoundID: newRoundID()}
	h.roundAsync(c, m)
	c.waitFirstEvent(t, m.RoundID, waitFor)
	h.engine.Send(h.root, Fence{})
	r := c.collect(t, m.RoundID, waitFor)
	if r.verdict.Status != messages.StatusFailed || !r.verdict.Retryable || !strings.Contains(r.verdict.Error, "fenced") {
		t.Fatalf("verdict %+v, want failed, retryable, naming the fence", r.verdict)
	}

	// After the fence the member serves again with a fresh actor: a round
	// it stops is not taken for a fenced one.
	poll(t, waitFor, "alice released", func() bool {
		p.mu.Lock()
		defer p.mu.Unlock()
		return len(p.released) == 1
	})
	m2 := messages.StartRound{User: "alice", Thread: "t1", Text: "again", RoundID: newRoundID()}
	r2 := h.heldRound(c, m2)
	if r2.verdict.Retryable || strings.Contains(r2.verdict.Error, "fenced") {
		t.Fatalf("a round after the fence: verdict %+v, want a plain interrupted one", r2.verdict)
	}
}
