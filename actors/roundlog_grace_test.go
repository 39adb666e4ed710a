package actors

import (
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/meshweaver/supervisor/messages"
	"github.com/meshweaver/supervisor/third_party/hollywood/actor"
)

// spawnGraceLog starts, inside a synctest bubble, a round log for round
// id of user u, thread t, whose caller is replyTo, under a stand-in user
// actor that answers the log's dropQueued with the interrupted verdict, as
// the user actor does, and passes each dropQueued and logFinished it gets
// on parentGot.
func spawnGraceLog(e *actor.Engine, cfg *tree, id string, replyTo *actor.PID) (parent, log *actor.PID, parentGot chan any) {
	parentGot = make(chan any, 16)
	parent = e.SpawnFunc(func(c *actor.Context) {
		switch m := c.Message().(type) {
		case actor.Started:
			log = c.SpawnChild(newRoundLog(cfg, roundRequest{StartRound: messages.StartRound{User: "u", Thread: "t", RoundID: id},
				replyTo: replyTo}, "r1", nil, nil), "log", spawnOpts("r1", cfg.Logger, nil)...)
		case dropQueued:
			parentGot <- m
			e.Send(log, messages.RoundFinished{RoundID: m.roundID, Thread: m.thread, Status: messages.StatusInterrupted})
		case logFinished:
			parentGot <- m
		}
	}, "user")
	synctest.Wait()
	return parent, log, parentGot
}

// The caller grace, on a fake clock: a round log whose caller stopped
// asks for nothing until CallerGrace has passed with nobody attached; an
// attach within the grace cancels it; after the grace a round that never
// ran is dropped from its queue (dropQueued to the user actor), and the
// verdict names the grace.
func TestCallerGraceOnFakeClock(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		e, err := actor.NewEngine(actor.NewEngineConfig())
		if err != nil {
			t.Fatal(err)
		}
		const grace = 30 * time.Second
		cfg := *mustTree(t, Config{Homes: t.TempDir(), Workspace: t.TempDir(), CallerGrace: grace}, Deps{})
		cfg.rounds.enter()
		spawnCaller := func(name string) (*actor.PID, chan any) {
			got := make(chan any, 64)
			return e.SpawnFunc(func(c *actor.Context) { got <- c.Message() }, name), got
		}
		c1, _ := spawnCaller("c1")
		parent, log, parentGot := spawnGraceLog(e, &cfg, "g-1", c1)

		// The caller goes; it comes back within the grace: nothing happens.
		<-e.Poison(c1).Done()
		synctest.Wait()
		time.Sleep(grace / 2)
		c2, _ := spawnCaller("c2")
		e.Send(log, attachLog{to: c2})
		time.Sleep(grace)
		synctest.Wait()
		if len(parentGot) != 0 {
			t.Fatalf("the log gave up on a caller that came back: %#v", <-parentGot)
		}

		// It goes again and stays away: at the grace, not before, the
		// queued round is dropped, and the verdict names the grace.
		<-e.Poison(c2).Done()
		synctest.Wait()
		time.Sleep(grace - time.Second)
		synctest.Wait()
		if len(parentGot) != 0 {
			t.Fatalf("given up before the grace: %#v", <-parentGot)
		}
		time.Sleep(time.Second)
		synctest.Wait()
		if len(parentGot) != 2 {
			t.Fatalf("after the grace the user actor got %d messages, want dropQueued then logFinished", len(parentGot))
		}
		if d, ok := (<-parentGot).(dropQueued); !ok || d.roundID != "g-1" {
			t.Errorf("first %#v, want dropQueued g-1", d)
		}
		c3, got3 := spawnCaller("c3")
		e.Send(log, attachLog{to: c3})
		synctest.Wait()
		var last any
		for len(got3) > 0 {
			last = <-got3
		}
		v, ok := last.(messages.RoundFinished)
		if !ok || v.Status != messages.StatusInterrupted || !strings.Contains(v.Error, "caller grace") {
			t.Errorf("verdict after the grace %#v, want interrupted naming the grace", last)
		}
		<-e.Poison(parent).Done()
		<-e.Poison(c3).Done()
	})
}

// A DetachRound is a caller's departure, on a fake clock: from a sender
// that is not attached (a hostile peer, or another member's relay) it
// detaches nobody and starts no grace; from the attached caller (the relay
// whose own caller left) it starts the grace, and at the grace, not
// before, the round is given up.
func TestDetachRoundOnFakeClock(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		e, err := actor.NewEngine(actor.NewEngineConfig())
		if err != nil {
			t.Fatal(err)
		}
		const grace = 30 * time.Second
		cfg := *mustTree(t, Config{Homes: t.TempDir(), Workspace: t.TempDir(), CallerGrace: grace}, Deps{})
		cfg.rounds.enter()
		spawn := func(name string) *actor.PID {
			return e.SpawnFunc(func(*actor.Context) {}, name)
		}
		relay, stranger := spawn("relay"), spawn("stranger")
		parent, log, parentGot := spawnGraceLog(e, &cfg, "d-1", relay)

		// A stranger's detach, naming the round: nothing, ever.
		e.SendWithSender(log, messages.DetachRound{User: "u", RoundID: "d-1"}, stranger)
		e.Send(log, messages.DetachRound{User: "u", RoundID: "d-1"}) // no sender at all
		synctest.Wait()
		time.Sleep(2 * grace)
		synctest.Wait()
		if len(parentGot) != 0 {
			t.Fatalf("a stranger's detach gave the round up: %#v", <-parentGot)
		}

		// The relay's own detach: the grace runs, then the round is given up.
		e.SendWithSender(log, messages.DetachRound{User: "u", RoundID: "d-1"}, relay)
		synctest.Wait()
		time.Sleep(grace - time.Second)
		synctest.Wait()
		if len(parentGot) != 0 {
			t.Fatalf("given up before the grace: %#v", <-parentGot)
		}
		time.Sleep(time.Second)
		synctest.Wait()
		if len(parentGot) != 2 {
			t.Fatalf("after the grace the user actor got %d messages, want dropQueued then logFinished", len(parentGot))
		}
		if d, ok := (<-parentGot).(dropQueued); !ok || d.roundID != "d-1" {
			t.Errorf("first %#v, want dropQueued d-1", d)
		}
		for _, p := range []*actor.PID{parent, relay, stranger} {
			<-e.Poison(p).Done()
		}
	})
}
