package actor

import (
	"context"
	"testing"
	"time"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// done fails the test unless ctx ends within a deadline.
func done(t *testing.T, what string, ctx context.Context) {
	t.Helper()
	select {
	case <-ctx.Done():
	case <-time.After(10 * time.Second):
		t.Fatalf("%s: the poison's context never ended", what)
	}
}

// A pill that reaches an actor while it stops (a second Poison while it
// waits for its own child to stop) ends when the actor is gone. Upstream
// left it in an inbox never read again, and its sender waited for ever.
func TestPoisonWhileStoppingEnds(t *testing.T) {
	e, err := NewEngine(NewEngineConfig())
	if err != nil {
		t.Fatal(err)
	}
	stopping, release := make(chan struct{}), make(chan struct{})
	pid := e.SpawnFunc(func(c *Context) {
		if _, ok := c.Message().(Initialized); ok {
			c.SpawnChildFunc(func(c *Context) {
				if _, ok := c.Message().(Stopped); ok {
					close(stopping)
					<-release
				}
			}, "child")
		}
	}, "parent")

	first := e.Poison(pid)
	<-stopping // the parent waits for its child; it is still registered
	second := e.Poison(pid)
	close(release)
	done(t, "the first", first)
	done(t, "the second", second)
}

// Two pills in one batch of an actor's inbox both end.
func TestTwoPillsInOneBatchEnd(t *testing.T) {
	e, err := NewEngine(NewEngineConfig())
	if err != nil {
		t.Fatal(err)
	}
	busy, release := make(chan struct{}), make(chan struct{})
	pid := e.SpawnFunc(func(c *Context) {
		if c.Message() == "block" {
			close(busy)
			<-release
		}
	}, "busy")
	e.Send(pid, "block")
	<-busy // both pills queue behind the message being handled
	a, b := e.Poison(pid), e.Stop(pid)
	close(release)
	done(t, "the first", a)
	done(t, "the second", b)
}

// A pill for an actor that has stopped ends at once.
func TestPoisonAfterStopEnds(t *testing.T) {
	e, err := NewEngine(NewEngineConfig())
	if err != nil {
		t.Fatal(err)
	}
	pid := e.SpawnFunc(func(*Context) {}, "short")
	proc := e.Registry.get(pid)
	done(t, "the stop", e.Poison(pid))
	ctx, cancel := context.WithCancel(context.Background())
	proc.Send(pid, poisonPill{cancel: cancel, graceful: true}, nil) // a sender that found it just before
	done(t, "the late pill", ctx)
}

// A message that reaches an actor's inbox while it stops (here while it
// waits for its child) is never handled; it is a dead letter, as a send
// after the stop is. Upstream dropped it unseen.
func TestMessageWhileStoppingIsADeadLetter(t *testing.T) {
	e, err := NewEngine(NewEngineConfig())
	if err != nil {
		t.Fatal(err)
	}
	letters := make(chan DeadLetterEvent, 8)
	watch := e.SpawnFunc(func(c *Context) {
		if ev, ok := c.Message().(DeadLetterEvent); ok {
			letters <- ev
		}
	}, "watch")
	e.Subscribe(watch)
	defer func() { e.Unsubscribe(watch); <-e.Poison(watch).Done() }()

	stopping, release := make(chan struct{}), make(chan struct{})
	pid := e.SpawnFunc(func(c *Context) {
		if _, ok := c.Message().(Initialized); ok {
			c.SpawnChildFunc(func(c *Context) {
				if _, ok := c.Message().(Stopped); ok {
					close(stopping)
					<-release
				}
			}, "child")
		}
	}, "parent")
	stopped := e.Poison(pid)
	<-stopping // the parent is stopping and still registered
	e.Send(pid, "late")
	close(release)
	done(t, "the stop", stopped)
	select {
	case ev := <-letters:
		if ev.Message != "late" || !ev.Target.Equals(pid) {
			t.Errorf("dead letter %+v, want \"late\" to %v", ev, pid)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the message sent while the actor stopped is no dead letter")
	}
}
