package actors

import (
	"context"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/meshweaver/supervisor/third_party/hollywood/actor"
	"github.com/meshweaver/supervisor/third_party/hollywood/remote"

	"github.com/meshweaver/supervisor/demomodel"
	"github.com/meshweaver/supervisor/messages"
	"github.com/meshweaver/supervisor/testkit/codexhome"
)

// A caller that goes away.

// remoteEngine is an engine with a remote on a free loopback port.
func remoteEngine(t *testing.T) (*actor.Engine, *remote.Remote) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	_ = ln.Close()
	rem := remote.New(addr, remote.NewConfig())
	e, err := actor.NewEngine(actor.NewEngineConfig().WithRemote(rem))
	if err != nil {
		t.Fatal(err)
	}
	return e, rem
}

// remoteCaller is a caller on its own engine and remote.
func remoteCaller(t *testing.T) (*caller, *actor.Engine, *remote.Remote) {
	e, rem := remoteEngine(t)
	c := &caller{ch: make(chan any, 4096)}
	c.pid = e.SpawnFunc(func(ctx *actor.Context) {
		switch m := ctx.Message().(type) {
		case actor.Initialized, actor.Started, actor.Stopped:
		default:
			if u, err := messages.Unwrap(m); err == nil {
				c.ch <- u
			} else {
				c.ch <- err
			}
		}
	}, "caller")
	t.Cleanup(func() {
		<-e.Poison(c.pid).Done()
		rem.Stop().Wait() // a no-op when the test stopped it
	})
	return c, e, rem
}

// TestCallerGoneInterruptsRound: when the caller's node becomes
// unreachable mid-round and nobody attaches within the caller grace, the
// round interrupts its turn, and the thread serves the next round from
// another caller.
func TestCallerGoneInterruptsRound(t *testing.T) {
	bin, err := codexhome.CodexBin()
	if err != nil {
		t.Fatalf("the real codex CLI is required: %v", err)
	}
	model, err := demomodel.Start(demomodel.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(model.Close)
	homes := t.TempDir()
	t.Cleanup(func() { checkNoAppServers(t, homes) })
	de, drem := remoteEngine(t)
	events := tapEvents(t, de)
	cfg := Config{
		Homes: homes, Workspace: t.TempDir(), CodexBin: bin,
		Overrides: append(codexhome.Overrides(model.URL()), "features.shell_snapshot=false"),
		StopGrace: time.Second, CallerGrace: 300 * time.Millisecond,
	}
	root, err := SpawnRoot(de, cfg, Deps{Logger: testLogger(t)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		<-de.PoisonCtx(ctx, root).Done()
		if ctx.Err() != nil {
			t.Errorf("stopping the tree timed out")
		}
		drem.Stop().Wait()
	})

	c1, e1, rem1 := remoteCaller(t)
	model.Enqueue(demomodel.Text("partial ").Hang())
	sendEncoded(t, e1, root, c1.pid, messages.StartRound{User: "alice", Thread: "mesh/gone", Text: "hang", RoundID: "g-1"})
	c1.waitFirstEvent(t, "g-1", 60*time.Second)
	from := events.mark()
	rem1.Stop().Wait()
	waitEvent(t, events, from, waitFor, "of the round noticing its caller is gone",
		func(e CallerGone) bool { return e.RoundID == "g-1" })
	waitEvent(t, events, from, waitFor, "of the grace running out",
		func(e CallerGraceOver) bool { return e.RoundID == "g-1" })
	fin := waitEvent(t, events, from, waitFor, "of the round finishing",
		func(e RoundEnded) bool { return e.RoundID == "g-1" })
	if fin.Status != messages.StatusInterrupted {
		t.Errorf("the round of a gone caller finished %q, want interrupted (its turn interrupted)", fin.Status)
	}
	if n := countEvents[AppServerDied](events, from, nil); n != 0 {
		t.Errorf("the app-server died instead of interrupting the turn")
	}

	c2, e2, _ := remoteCaller(t)
	model.Enqueue(demomodel.Text("back"))
	sendEncoded(t, e2, root, c2.pid, messages.StartRound{User: "alice", Thread: "mesh/gone", Text: "again", RoundID: "g-2"})
	r := c2.collect(t, "g-2", 60*time.Second)
	mustStatus(t, r, messages.StatusCompleted)
	if r.text() != "back" || !r.verdict.Resumed {
		t.Errorf("next round: text %q, verdict %+v", r.text(), r.verdict)
	}
	reqs := model.Requests()
	if !strings.Contains(strings.Join(reqs[len(reqs)-1].UserTexts(), "\n"), "hang") {
		t.Errorf("the resumed thread lost the interrupted turn's message")
	}
}
