package actors

import (
	"log/slog"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/meshweaver/supervisor/messages"
	"github.com/meshweaver/supervisor/third_party/hollywood/actor"
)

// The round's own clock, in a bubble: an app-server actor that never
// answers the opening (a wedged mailbox, a lost message) still gets the
// round a failed verdict, at openWait after its start and not before; the
// round's every wait is bounded by its own timers.
func TestRoundOpeningBoundedSynctest(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		cfg := *mustTree(t, Config{Homes: t.TempDir(), Workspace: t.TempDir(), CallTimeout: time.Second},
			Deps{Logger: slog.New(slog.DiscardHandler)})
		e, err := actor.NewEngine(actor.NewEngineConfig())
		if err != nil {
			t.Fatal(err)
		}
		opened := make(chan struct{}, 1)
		codex := e.SpawnFunc(func(c *actor.Context) {
			if _, ok := c.Message().(openThread); ok {
				opened <- struct{}{} // and never an answer
			}
		}, "codex")
		registry := e.SpawnFunc(func(c *actor.Context) {
			if m, ok := c.Message().(lookupThread); ok {
				c.Send(m.round, threadLookup{key: m.key})
			}
		}, "registry")
		verdicts := make(chan messages.RoundFinished, 1)
		caller := e.SpawnFunc(func(c *actor.Context) {
			if v, ok := c.Message().(messages.RoundFinished); ok {
				verdicts <- v
			}
		}, "caller")
		start := time.Now()
		req := roundRequest{StartRound: messages.StartRound{User: "sy", Thread: "mesh/sy", Text: "hi", RoundID: "sy-1"}, replyTo: caller}
		user := e.SpawnFunc(func(c *actor.Context) {
			if _, ok := c.Message().(actor.Started); ok {
				c.SpawnChild(newRoundActor(&cfg, req, codex, registry), "round", spawnOpts("r1", cfg.Logger, roundPanicked)...)
			}
		}, "user")
		<-opened
		v := <-verdicts
		took := time.Since(start)
		if v.Status != messages.StatusFailed || !strings.Contains(v.Error, "was not opened within") {
			t.Errorf("verdict %+v, want failed: not opened", v)
		}
		if d := openWait(&cfg); took < d || took > d+time.Second {
			t.Errorf("the verdict came %v after the start, want openWait (%v) within a tick", took, d)
		}
		for _, pid := range []*actor.PID{user, caller, registry, codex} {
			<-e.Poison(pid).Done()
		}
	})
}
