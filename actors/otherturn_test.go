package actors

import (
	"encoding/json"
	"log/slog"
	"testing"
	"time"

	"github.com/anthdm/hollywood/actor"
	"github.com/meshweaver/supervisor/codexrpc"
	"github.com/meshweaver/supervisor/messages"
	"github.com/meshweaver/supervisor/testkit/fakeappserver"
)

// Once a round knows its own turn, the end of another turn of the same
// thread (an earlier round's, still running in the CLI when this one
// started) is not its verdict.
func TestRoundIgnoresAnotherTurnsEnd(t *testing.T) {
	cfg := Config{Homes: t.TempDir(), Workspace: t.TempDir(), Logger: slog.New(slog.DiscardHandler), CallTimeout: waitFor}
	if err := cfg.setDefaults(); err != nil {
		t.Fatal(err)
	}
	routed := make(chan struct{})
	client := inProcessFake(t, fakeappserver.Config{}, "turn/start", routed)
	e, err := actor.NewEngine(actor.NewEngineConfig())
	if err != nil {
		t.Fatal(err)
	}
	turnNote := func(method, thread, turn, status string) roundNote {
		params, _ := json.Marshal(map[string]any{"threadId": thread,
			"turn": map[string]any{"id": turn, "status": status, "items": []any{},
				"error": map[string]any{"message": "the earlier turn failed"}}})
		return roundNote{note: &codexrpc.Notification{Method: method, Params: params}}
	}
	codex := e.SpawnFunc(func(c *actor.Context) {
		switch m := c.Message().(type) {
		case acquireClient:
			m.reply <- clientReady{client: client, gen: 1}
		case subscribe:
			const own, earlier = "0199a0a0-0000-7000-8000-0000000000b2", "0199a0a0-0000-7000-8000-0000000000b1"
			c.Send(m.round, turnNote(codexrpc.NoteTurnStarted, m.threadID, own, "inProgress"))
			c.Send(m.round, turnNote(codexrpc.NoteTurnCompleted, m.threadID, earlier, "failed"))
			c.Send(m.round, turnNote(codexrpc.NoteTurnCompleted, m.threadID, own, "completed"))
			close(routed)
		}
	}, "codex")
	registry := e.SpawnFunc(func(c *actor.Context) {
		if m, ok := c.Message().(lookupThread); ok {
			m.reply <- threadLookup{}
		}
	}, "registry")
	verdicts := make(chan messages.RoundFinished, 1)
	callerPID := e.SpawnFunc(func(c *actor.Context) {
		if v, ok := c.Message().(messages.RoundFinished); ok {
			verdicts <- v
		}
	}, "caller")
	req := roundRequest{StartRound: messages.StartRound{User: "alice", Thread: "mesh/other", Text: "hi", RoundID: "other-1"}, replyTo: callerPID}
	user := e.SpawnFunc(func(c *actor.Context) {
		if _, ok := c.Message().(actor.Started); ok {
			c.SpawnChild(newRoundActor(&cfg, req, "r1", codex, registry), "round", spawnOpts("r1", cfg.Logger, roundPanicked)...)
		}
	}, "user")
	t.Cleanup(func() {
		for _, pid := range []*actor.PID{user, callerPID, registry, codex} {
			<-e.Poison(pid).Done()
		}
	})
	select {
	case v := <-verdicts:
		if v.Status != messages.StatusCompleted {
			t.Fatalf("verdict = %+v, want completed (its own turn's end)", v)
		}
	case <-time.After(waitFor):
		t.Fatal("no verdict")
	}
}
