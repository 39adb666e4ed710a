package actors

import (
	"encoding/json"
	"log/slog"
	"testing"
	"time"

	"github.com/meshweaver/supervisor/codexproto"
	"github.com/meshweaver/supervisor/codexrpc"
	"github.com/meshweaver/supervisor/messages"
	"github.com/meshweaver/supervisor/third_party/hollywood/actor"
)

// stubTree is one round actor between stand-ins for its user, app-server
// and registry actors. The stub app-server opens a fresh thread and, on
// turn/start, lets the test script what the thread says (onSubscribe)
// before it answers the call: the answer comes after those notifications,
// as a CLI that writes them first would have it.
type stubTree struct {
	verdicts chan messages.RoundFinished
	threads  chan string
	unsubs   chan unsubscribe
	journal  chan appendTurns
}

func runStubRound(t *testing.T, key string, onSubscribe func(c *actor.Context, m subscribe)) *stubTree {
	t.Helper()
	cfg, e := stubEngine(t)
	tree := &stubTree{
		verdicts: make(chan messages.RoundFinished, 1),
		threads:  make(chan string, 4),
		unsubs:   make(chan unsubscribe, 4),
		journal:  make(chan appendTurns, 4),
	}
	const threadID = "0199a0a0-0000-7000-8000-0000000000f0"
	codex := e.SpawnFunc(func(c *actor.Context) {
		switch m := c.Message().(type) {
		case openThread:
			c.Send(m.round, threadOpenResult{threadID: threadID})
		case appCall:
			if m.method != codexproto.MethodTurnStart {
				return
			}
			tree.threads <- threadID
			onSubscribe(c, subscribe{threadID: threadID, round: m.to})
			c.Send(m.to, appAnswer{tag: m.tag, result: json.RawMessage(`{"turn":{"id":"0199a0a0-0000-7000-8000-0000000000ff","status":"inProgress","items":[]}}`)})
		case unsubscribe:
			tree.unsubs <- m
		}
	}, "codex")
	registry := stubRegistry(e, tree.journal)
	callerPID := e.SpawnFunc(func(c *actor.Context) {
		if v, ok := c.Message().(messages.RoundFinished); ok {
			tree.verdicts <- v
		}
	}, "caller")
	req := roundRequest{StartRound: messages.StartRound{User: "alice", Thread: key, Text: "hi", RoundID: key + "-1"}, replyTo: callerPID}
	user := e.SpawnFunc(func(c *actor.Context) {
		if _, ok := c.Message().(actor.Started); ok {
			c.SpawnChild(newRoundActor(cfg, req, codex, registry), "round", spawnOpts("r1", cfg.Logger, roundPanicked)...)
		}
	}, "user")
	t.Cleanup(func() {
		for _, pid := range []*actor.PID{user, callerPID, registry, codex} {
			<-e.Poison(pid).Done()
		}
	})
	return tree
}

// stubEngine is a bare engine and a round's configuration, for a round
// actor run among stand-ins.
func stubEngine(t *testing.T) (*tree, *actor.Engine) {
	t.Helper()
	cfg := mustTree(t, Config{Homes: t.TempDir(), Workspace: t.TempDir(), CallTimeout: waitFor},
		Deps{Logger: slog.New(slog.DiscardHandler)})
	e, err := actor.NewEngine(actor.NewEngineConfig())
	if err != nil {
		t.Fatal(err)
	}
	return cfg, e
}

// stubRegistry stands in for the registry actor: no thread to resume, and
// every write saved; the journal's appends go to journal when it is not
// nil.
func stubRegistry(e *actor.Engine, journal chan<- appendTurns) *actor.PID {
	return e.SpawnFunc(func(c *actor.Context) {
		switch m := c.Message().(type) {
		case lookupThread:
			c.Send(m.round, threadLookup{key: m.key})
		case appendTurns:
			if journal != nil {
				journal <- m
			}
			c.Send(m.round, saved{what: "journal"})
		case recordThread:
			c.Send(m.round, saved{what: "thread record"})
		}
	}, "registry")
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
		c.Send(m.round, turnNote(codexproto.NoteTurnStarted, m.threadID, own, "inProgress"))
		c.Send(m.round, turnNote(codexproto.NoteTurnCompleted, m.threadID, earlier, "failed"))
		c.Send(m.round, turnNote(codexproto.NoteTurnCompleted, m.threadID, own, "completed"))
	})
	if v := tree.verdict(t); v.Status != messages.StatusCompleted {
		t.Fatalf("verdict = %+v, want completed (its own turn's end)", v)
	}
}
