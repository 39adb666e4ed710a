package actors

import (
	"sync"
	"testing"
	"time"

	"github.com/meshweaver/supervisor/third_party/hollywood/actor"
)

// eventTap records what the tree broadcasts on its engine's event stream
// (events.go), so that tests wait for what the actors did instead of for
// a log line.
type eventTap struct {
	mu      sync.Mutex
	evs     []any
	changed chan struct{} // closed and replaced on every event
}

// tapEvents subscribes a recorder to e's event stream until the test ends.
func tapEvents(t *testing.T, e *actor.Engine) *eventTap {
	t.Helper()
	et := &eventTap{changed: make(chan struct{})}
	ready := make(chan struct{})
	pid := e.SpawnFunc(func(c *actor.Context) {
		switch c.Message().(type) {
		case actor.Started:
			close(ready)
			return
		case actor.Stopped, actor.Initialized:
			return
		}
		et.mu.Lock()
		defer et.mu.Unlock()
		et.evs = append(et.evs, c.Message())
		close(et.changed)
		et.changed = make(chan struct{})
	}, "eventtap")
	<-ready
	e.Subscribe(pid)
	t.Cleanup(func() { e.Unsubscribe(pid); <-e.Poison(pid).Done() })
	return et
}

// mark is the number of events so far, to wait for later ones only.
func (et *eventTap) mark() int {
	et.mu.Lock()
	defer et.mu.Unlock()
	return len(et.evs)
}

// waitEvent returns the first event of type T from index from on that
// match accepts (nil: any), waiting up to d for it.
func waitEvent[T any](t testing.TB, et *eventTap, from int, d time.Duration, what string, match func(T) bool) T {
	t.Helper()
	deadline := time.NewTimer(d)
	defer deadline.Stop()
	for {
		et.mu.Lock()
		for _, e := range et.evs[from:] {
			if v, ok := e.(T); ok && (match == nil || match(v)) {
				et.mu.Unlock()
				return v
			}
		}
		from = len(et.evs)
		ch := et.changed
		et.mu.Unlock()
		select {
		case <-ch:
		case <-deadline.C:
			var zero T
			t.Fatalf("no %T event %s within %v", zero, what, d)
			return zero
		}
	}
}

// countEvents is how many events of type T from index from on match
// accepts (nil: any).
func countEvents[T any](et *eventTap, from int, match func(T) bool) int {
	et.mu.Lock()
	defer et.mu.Unlock()
	n := 0
	for _, e := range et.evs[from:] {
		if v, ok := e.(T); ok && (match == nil || match(v)) {
			n++
		}
	}
	return n
}

// waitEventN waits for n events of type T from index from on.
func waitEventN[T any](t testing.TB, et *eventTap, from, n int, d time.Duration, what string) {
	t.Helper()
	deadline := time.NewTimer(d)
	defer deadline.Stop()
	for {
		et.mu.Lock()
		got := 0
		for _, e := range et.evs[from:] {
			if _, ok := e.(T); ok {
				got++
			}
		}
		ch := et.changed
		et.mu.Unlock()
		if got >= n {
			return
		}
		select {
		case <-ch:
		case <-deadline.C:
			var zero T
			t.Fatalf("%d of %d %T events %s within %v", got, n, zero, what, d)
		}
	}
}
