package client_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/meshweaver/supervisor/third_party/hollywood/actor"
	"github.com/meshweaver/supervisor/third_party/hollywood/remote"

	"github.com/meshweaver/supervisor/client"
	"github.com/meshweaver/supervisor/messages"
)

// lateVerdicts is a WithLateReplies observer that passes on the verdicts.
func lateVerdicts() (client.Option, <-chan messages.RoundFinished) {
	ch := make(chan messages.RoundFinished, 16)
	return client.WithLateReplies(func(m any) {
		if v, ok := m.(messages.RoundFinished); ok {
			ch <- v
		}
	}), ch
}

func awaitLate(t *testing.T, ch <-chan messages.RoundFinished, roundID string) messages.RoundFinished {
	t.Helper()
	select {
	case v := <-ch:
		if v.RoundID != roundID {
			t.Fatalf("a late verdict of round %q, want %q", v.RoundID, roundID)
		}
		return v
	case <-time.After(20 * time.Second):
		t.Fatalf("no late verdict of round %s", roundID)
	}
	return messages.RoundFinished{}
}

// A verdict that comes after Wait gave up on its context is handed to
// WithLateReplies, not lost or mistaken for another call's reply.
func TestVerdictAfterWaitGaveUp(t *testing.T) {
	addr := holdingDaemon(t)
	opt, late := lateVerdicts()
	c := dial(t, addr, opt)
	ctx, cancel := context.WithCancel(testCtx(t))
	r, err := c.Round(ctx, messages.StartRound{User: "late", Thread: "t1", Text: "hold on"})
	if err != nil {
		t.Fatal(err)
	}
	firstText(t, r)
	cancel()
	if _, err := r.Wait(); !errors.Is(err, context.Canceled) {
		t.Fatalf("Wait after cancel = %v, want context.Canceled", err)
	}
	if _, err := c.Interrupt(testCtx(t), messages.InterruptRound{User: "late", Thread: "t1", RoundID: r.ID()}); err != nil {
		t.Fatal(err)
	}
	if v := awaitLate(t, late, r.ID()); v.Status != messages.StatusInterrupted {
		t.Errorf("the late verdict: %+v, want interrupted", v)
	}
}

// A daemon that sends a round two verdicts: Wait returns the first, the
// second is handed to WithLateReplies, where a caller can count it.
func TestSecondVerdictIsALateReply(t *testing.T) {
	addr, err := freeAddr()
	if err != nil {
		t.Fatal(err)
	}
	rem := remote.New(addr, remote.NewConfig())
	e, err := actor.NewEngine(actor.NewEngineConfig().WithRemote(rem))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { rem.Stop().Wait() })
	root := e.SpawnFunc(func(ctx *actor.Context) {
		m, err := messages.Unwrap(ctx.Message())
		if err != nil {
			return
		}
		req, ok := m.(messages.StartRound)
		if !ok {
			return
		}
		for _, text := range []string{"first", "second"} {
			env, err := messages.Encode(messages.RoundFinished{RoundID: req.RoundID, Status: messages.StatusCompleted, CodexThreadID: text})
			if err != nil {
				t.Error(err)
				return
			}
			ctx.Engine().Send(ctx.Sender(), env)
		}
	}, "meshweaver", actor.WithID("root"))
	t.Cleanup(func() { <-e.Poison(root).Done() })

	opt, late := lateVerdicts()
	c := dial(t, addr, opt)
	r, err := c.Round(testCtx(t), messages.StartRound{User: "twice", Thread: "t1", Text: "hi"})
	if err != nil {
		t.Fatal(err)
	}
	v, err := r.Wait()
	if err != nil || v.CodexThreadID != "first" {
		t.Fatalf("Wait = %+v, %v; want the first verdict", v, err)
	}
	if v := awaitLate(t, late, r.ID()); v.CodexThreadID != "second" {
		t.Errorf("the late verdict: %+v, want the second", v)
	}
}
