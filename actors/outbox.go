package actors

import (
	"time"

	"github.com/meshweaver/supervisor/actors/eventmap"
	"github.com/meshweaver/supervisor/messages"
)

// outbox holds a round's events on their way to its caller. Up to
// OutboxBurst events go out per OutboxWindow as they come; past that the
// caller is taken to be slow and events wait for the next window,
// adjacent text (and reasoning) deltas of one item merged into one event:
// content and order are kept, the message rate is bounded. Hollywood's
// mailboxes are unbounded, so the bound is kept here: past OutboxLimit
// held events the outbox overflows, and the round is interrupted.
//
// It is a plain value: the round sends what take hands it, and arms the
// timer take asks for.
type outbox struct {
	state       outboxState
	pending     []messages.RoundEvent
	tail        []byte // text coalesced into the last pending event, not yet in it (see seal)
	seq         uint64 // the last event's number
	windowStart time.Time
	sentInWin   int
	armed       bool // a flush timer is on its way
	dropped     int  // events dropped after the overflow
}

// outboxState is what the outbox still takes.
type outboxState uint8

const (
	outboxOpen       outboxState = iota // everything
	outboxOverflowed                    // the caller could not keep up: events are dropped and counted
	outboxClosed                        // the caller is unreachable: nothing more goes to it
)

// add queues ev, merged into the last pending event when it continues it
// (a delta of the same item). Queued says ev is a new pending event, to
// be flushed; overflowed says that it took the outbox past limit, which
// it does once: every event after that is dropped and counted.
func (o *outbox) add(ev messages.RoundEvent, limit int) (queued, overflowed bool) {
	if o.state == outboxClosed {
		return false, false
	}
	if n := len(o.pending); n > 0 {
		if eventmap.Coalesces(o.pending[n-1], ev) {
			o.tail = append(o.tail, ev.Text...) // += on the string would copy it whole for every delta
			return false, false
		}
	}
	o.seal()
	if o.state == outboxOverflowed {
		o.dropped++ // the round is being interrupted; what it still says is not kept
		return false, false
	}
	o.pending = append(o.pending, ev)
	if len(o.pending) > limit {
		o.state = outboxOverflowed
		return true, true
	}
	return true, false
}

// take numbers and hands over what the window allows at now (everything
// when all is set). When events are left and no timer is on its way, arm
// says to flush again after wait.
func (o *outbox) take(now time.Time, all bool, window time.Duration, burst int) (out []messages.RoundEvent, arm bool, wait time.Duration) {
	o.seal()
	if now.Sub(o.windowStart) >= window {
		o.windowStart, o.sentInWin = now, 0
	}
	n := 0
	for n < len(o.pending) && (all || o.sentInWin < burst) {
		o.seq++
		o.pending[n].Seq = o.seq
		o.sentInWin++
		n++
	}
	out = o.pending[:n:n]
	o.pending = o.pending[n:]
	if len(o.pending) == 0 {
		o.pending = nil
	} else if !o.armed {
		o.armed = true
		return out, true, window - now.Sub(o.windowStart)
	}
	return out, false, 0
}

// fired notes that the flush timer went off.
func (o *outbox) fired() { o.armed = false }

// close drops what is held: the caller is unreachable.
func (o *outbox) close() {
	o.state = outboxClosed
	o.pending, o.tail = nil, nil
}

// seal moves the coalesced tail into the last pending event.
func (o *outbox) seal() {
	if len(o.tail) > 0 {
		last := &o.pending[len(o.pending)-1]
		last.Text += string(o.tail)
		o.tail = o.tail[:0]
	}
}
