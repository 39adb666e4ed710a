package actors

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/meshweaver/supervisor/codexproto"
	"github.com/meshweaver/supervisor/codexrpc"
	"github.com/meshweaver/supervisor/messages"
	"github.com/meshweaver/supervisor/third_party/hollywood/actor"
)

// A round tells its parent it is done, and drops its subscription, before
// it sends its verdict: a caller's next command on the thread, sent when
// the verdict came, must find the thread free. (Sent after the verdict,
// roundDone raced the caller's next command to the user actor, and under
// load a compaction asked at once was refused: "a round runs on the
// thread", TestWireCompactThreadRealCLI in cmd/supervisor.)
//
// One stand-in actor here is the round's parent, its caller and its
// app-server actor: everything the round sends it lands in one mailbox,
// in the order the round sent it, so the order checked is certain.
func TestRoundDoneBeforeVerdict(t *testing.T) {
	cfg, e := stubEngine(t)
	const threadID, turnID = "0199a0a0-0000-7000-8000-0000000000d0", "0199a0a0-0000-7000-8000-0000000000d1"
	turnNote := func(method, status string) roundNote {
		params, _ := json.Marshal(map[string]any{"threadId": threadID,
			"turn": map[string]any{"id": turnID, "status": status, "items": []any{}}})
		return roundNote{note: &codexrpc.Notification{Method: method, Params: params}}
	}
	registry := stubRegistry(e, nil)
	seen := make(chan string, 16)
	hub := e.SpawnFunc(func(c *actor.Context) {
		switch m := c.Message().(type) {
		case actor.Started:
			req := roundRequest{StartRound: messages.StartRound{User: "alice", Thread: "mesh/done", Text: "hi", RoundID: "done-1"},
				replyTo: c.PID()}
			c.SpawnChild(newRoundActor(cfg, req, c.PID(), registry), "round", spawnOpts("r1", cfg.Logger, roundPanicked)...)
		case openThread:
			c.Send(m.round, threadOpenResult{threadID: threadID})
		case appCall:
			if m.method != codexproto.MethodTurnStart {
				return
			}
			c.Send(m.to, appAnswer{tag: m.tag, result: json.RawMessage(`{"turn":{"id":"` + turnID + `","status":"inProgress","items":[]}}`)})
			c.Send(m.to, turnNote(codexproto.NoteTurnStarted, "inProgress"))
			c.Send(m.to, turnNote(codexproto.NoteTurnCompleted, "completed"))
		case unsubscribe:
			seen <- "unsubscribe"
		case roundDone:
			seen <- "roundDone"
		case messages.RoundFinished:
			seen <- "verdict " + string(m.Status)
		}
	}, "hub")
	t.Cleanup(func() {
		<-e.Poison(hub).Done()
		<-e.Poison(registry).Done()
	})
	var order []string
	deadline := time.After(waitFor)
	for len(order) < 3 {
		select {
		case s := <-seen:
			order = append(order, s)
		case <-deadline:
			t.Fatalf("the round sent only %v", order)
		}
	}
	if got, want := strings.Join(order, ", "), "unsubscribe, roundDone, verdict completed"; got != want {
		t.Fatalf("the round sent %s; want %s (the thread freed before the verdict goes)", got, want)
	}
}
