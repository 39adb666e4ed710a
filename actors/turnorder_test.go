package actors

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/meshweaver/supervisor/third_party/hollywood/actor"

	"github.com/meshweaver/supervisor/codexproto"
	"github.com/meshweaver/supervisor/codexrpc"
)

// Order of a turn's end and turn/start's answer.

// TestSupervisionTurnEndBeforeTurnStarted: the turn's notifications and
// turn/start's answer reach the round through the app-server actor, in
// wire order; a CLI may end a turn (the real one when a turn fails at
// once) before it answers turn/start. Here a stub app-server actor routes
// turn/completed before it answers turn/start: the order is certain. The
// round must still name
// its thread in the verdict, unsubscribe (or the user's app-server counts
// as busy forever: no idle eviction, never an LRU victim) and journal the
// user's message.
func TestSupervisionTurnEndBeforeTurnStarted(t *testing.T) {
	tree := runStubRound(t, "mesh/race", func(c *actor.Context, m subscribe) {
		params, _ := json.Marshal(map[string]any{"threadId": m.threadID,
			"turn": map[string]any{"id": "0199a0a0-0000-7000-8000-0000000000aa", "status": "completed", "items": []any{}}})
		c.Send(m.round, roundNote{note: &codexrpc.Notification{Method: codexproto.NoteTurnCompleted, Params: params}})
	})
	v := tree.verdict(t)
	thread := <-tree.threads
	var bugs []string
	if v.CodexThreadID != thread {
		bugs = append(bugs, fmt.Sprintf("the verdict names thread %q, not %q", v.CodexThreadID, thread))
	}
	// The round unsubscribes as it winds down, after its verdict: on a
	// loaded machine that took longer than a second. A round that never
	// does so stays silent for ever, so the wait is long.
	select {
	case <-tree.unsubs:
	case <-time.After(waitFor):
		bugs = append(bugs, "the round never unsubscribed from the thread")
	}
	select {
	case <-tree.journal:
	case <-time.After(waitFor):
		bugs = append(bugs, "the user's message was not journaled")
	}
	if len(bugs) > 0 {
		t.Fatalf("turn/completed routed before the driver's turnStarted (verdict %+v): %s",
			v, strings.Join(bugs, "; "))
	}
}
