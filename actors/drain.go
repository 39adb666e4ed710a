package actors

import (
	"context"
	"sync"

	"github.com/meshweaver/supervisor/third_party/hollywood/actor"
)

// gate counts the rounds admitted and not yet given a verdict, so that a
// shutdown can wait for them.
type gate struct {
	mu      sync.Mutex
	n       int
	waiters []chan struct{}
}

func (g *gate) enter() {
	g.mu.Lock()
	g.n++
	g.mu.Unlock()
}

func (g *gate) leave() {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.n--
	if g.n <= 0 {
		g.n = 0
		for _, w := range g.waiters {
			close(w)
		}
		g.waiters = nil
	}
}

// idle is closed once no round is in flight.
func (g *gate) idle() <-chan struct{} {
	g.mu.Lock()
	defer g.mu.Unlock()
	ch := make(chan struct{})
	if g.n == 0 {
		close(ch)
	} else {
		g.waiters = append(g.waiters, ch)
	}
	return ch
}

// DrainStarted is broadcast on the engine's event stream when the root
// stops admitting rounds (see Drain).
type DrainStarted struct{}

// drainRequest tells the root to stop admitting rounds.
type drainRequest struct{ reply chan (<-chan struct{}) }

// Drain stops the tree under root from admitting rounds (new ones get an
// unavailable verdict) and waits until every round already admitted, queued
// ones included, has its verdict, or ctx ends. A shutdown then poisons the
// root, which interrupts whatever still runs.
func Drain(ctx context.Context, e *actor.Engine, root *actor.PID) error {
	reply := make(chan (<-chan struct{}), 1)
	e.Send(root, drainRequest{reply: reply})
	var idle <-chan struct{}
	select {
	case idle = <-reply:
	case <-ctx.Done():
		return ctx.Err()
	}
	select {
	case <-idle:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}
