package actors

import (
	"encoding/json"
	"log/slog"
	"testing"
	"time"

	"github.com/meshweaver/supervisor/codexrpc"
	"github.com/meshweaver/supervisor/messages"
	"github.com/meshweaver/supervisor/testkit/fakeappserver"
	"github.com/meshweaver/supervisor/third_party/hollywood/actor"
)

// stubTree is one round actor between stand-ins for its user, codex and
// registry actors; the round talks to an in-process fake app-server whose
// turn/start is held until the stub codex actor has routed what the test
// scripts on subscribe.
type stubTree struct {
	verdicts chan messages.RoundFinished
	threads  chan string
	unsubs   chan unsubscribe
	journal  chan appendTurns
}

func runStubRound(t *testing.T, key string, onSubscribe func(c *actor.Context, m subscribe)) *stubTree {
	t.Helper()
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
	tree := &stubTree{
		verdicts: make(chan messages.RoundFinished, 1),
		threads:  make(chan string, 4),
		unsubs:   make(chan unsubscribe, 4),
		journal:  make(chan appendTurns, 4),
	}
	codex := e.SpawnFunc(func(c *actor.Context) {
		switch m := c.Message().(type) {
		case acquireClient:
			m.reply <- clientReady{client: client, gen: 1}
		case subscribe:
			tree.threads <- m.threadID
			onSubscribe(c, m)
			close(routed)
		case unsubscribe:
			tree.unsubs <- m
		}
	}, "codex")
	registry := e.SpawnFunc(func(c *actor.Context) {
		switch m := c.Message().(type) {
		case lookupThread:
			m.reply <- threadLookup{}
		case appendTurns:
			tree.journal <- m
			c.Send(m.round, saved{what: "journal"})
		case recordThread:
			c.Send(m.round, saved{what: "thread record"})
		}
	}, "registry")
	callerPID := e.SpawnFunc(func(c *actor.Context) {
		if v, ok := c.Message().(messages.RoundFinished); ok {
			tree.verdicts <- v
		}
	}, "caller")
	req := roundRequest{StartRound: messages.StartRound{User: "alice", Thread: key, Text: "hi", RoundID: key + "-1"}, replyTo: callerPID}
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
	return tree
}

func (tree *stubTree) verdict(t *testing.T) messages.RoundFinished {
	t.Helper()
	select {
	case v := <-tree.verdicts:
		return v
	case <-time.After(waitFor):
		t.Fatal("no verdict")
		return messages.RoundFinished{}
	}
}

// Once a round knows its own turn, the end of another turn of the same
// thread (an earlier round's, still running in the CLI when this one
// started) is not its verdict.
func TestRoundIgnoresAnotherTurnsEnd(t *testing.T) {
	turnNote := func(method, thread, turn, status string) roundNote {
		params, _ := json.Marshal(map[string]any{"threadId": thread,
			"turn": map[string]any{"id": turn, "status": status, "items": []any{},
				"error": map[string]any{"message": "the earlier turn failed"}}})
		return roundNote{note: &codexrpc.Notification{Method: method, Params: params}}
	}
	tree := runStubRound(t, "mesh/other", func(c *actor.Context, m subscribe) {
		const own, earlier = "0199a0a0-0000-7000-8000-0000000000b2", "0199a0a0-0000-7000-8000-0000000000b1"
		c.Send(m.round, turnNote(codexrpc.NoteTurnStarted, m.threadID, own, "inProgress"))
		c.Send(m.round, turnNote(codexrpc.NoteTurnCompleted, m.threadID, earlier, "failed"))
		c.Send(m.round, turnNote(codexrpc.NoteTurnCompleted, m.threadID, own, "completed"))
	})
	if v := tree.verdict(t); v.Status != messages.StatusCompleted {
		t.Fatalf("verdict = %+v, want completed (its own turn's end)", v)
	}
}
