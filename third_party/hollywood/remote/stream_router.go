package remote

import (
	"github.com/meshweaver/supervisor/third_party/hollywood/actor"
)

type streamDeliver struct {
	sender *actor.PID
	target *actor.PID
	msg    any
}

// meshweaver patch: upstream routed every outbound message through a
// "router" actor that spawned the stream writers and dialled new peers on
// its own (single) goroutine, so one slow or black-holed address delayed the
// sends to every other peer. The writers now live in Remote.writers under
// Remote.mu; a writer dials on its own goroutine, and the reader can ask it
// for its peer's identity (sender binding) without going through an actor.

// writerFor returns the writer to addr, creating (and starting) it if
// needed; nil once the remote is stopping.
func (r *Remote) writerFor(addr string) *streamWriter {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.stopping {
		return nil
	}
	if w, ok := r.writers[addr]; ok {
		return w
	}
	w := newStreamWriter(r, addr)
	r.writers[addr] = w
	r.wg.Add(1)
	go w.run(r.ctx)
	return w
}

// forget removes w from the writers if it is still the writer to its
// address.
func (r *Remote) forget(w *streamWriter) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.writers[w.addr] == w {
		delete(r.writers, w.addr)
	}
}

// held reports whether some Hold on addr is not released yet.
func (r *Remote) held(addr string) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.holds[addr] > 0
}
