package client

import (
	"context"
	"crypto/rand"
	"errors"
	"iter"
	"sync"

	"github.com/meshweaver/supervisor/messages"
)

// Round is one chat round started by [Client.Round]: its events, then
// exactly one verdict. One goroutine consumes it: ranging over
// [Round.Events], then (or instead) calling [Round.Wait].
//
// Events come as an iterator rather than a channel: a round is a finite
// sequence with one consumer that ends with the verdict, which a range
// over a func states directly. The consumer pulls at its own pace from
// the round's queue, a break is all it takes to stop, and there is no
// channel left to drain and no goroutine in the package to feed one; the
// verdict and the errors come from Wait, not from a sentinel element.
type Round struct {
	c       *Client
	id      string
	ctx     context.Context
	mb      *mailbox
	release func() // the hold on the daemon's address

	mu      sync.Mutex // one consumer at a time
	done    bool
	verdict messages.RoundFinished
	err     error
}

// Round sends req (a StartRound) to the daemon and returns the round
// under way. If req.RoundID is empty, Round mints one ([Round.ID]), so
// that the round can be steered and interrupted by id. req.ReplyTo must
// be nil: the replies come to this client.
//
// A span in ctx (OpenTelemetry) becomes req's W3C trace context, unless
// req.Traceparent is set: the daemon's spans of the round are its children.
//
// ctx bounds the whole round: when it ends first, [Round.Wait] returns
// its error. That stops the waiting, not the round: use
// [Client.Interrupt] to stop the round and still get its verdict. The
// link to the daemon is held open (keepalives) until the verdict, however
// long the round runs.
func (c *Client) Round(ctx context.Context, req messages.StartRound) (*Round, error) {
	if req.ReplyTo != nil {
		return nil, errors.New("starting a round: ReplyTo must be nil, the replies come to the client")
	}
	if req.RoundID == "" {
		req.RoundID = "go-" + rand.Text()
	}
	injectTrace(ctx, &req)
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	mb, err := c.open()
	if err != nil {
		return nil, err
	}
	r := &Round{c: c, id: req.RoundID, ctx: ctx, mb: mb, release: c.rem.Hold(c.target.Address)}
	if err := c.send(mb, req); err != nil {
		r.finish(err)
		return nil, err
	}
	return r, nil
}

// Attach follows a round that runs, or ended within the daemon's
// retention, from another connection or after this one was lost: the
// returned Round yields the round's events with a seq after afterSeq (0:
// from the start), then the ones still to come, and its verdict. A round
// the daemon does not know ends with status not_found. A round whose
// caller went away is interrupted only after the daemon's caller grace
// (serve --caller-grace), which is the time there is to attach again.
func (c *Client) Attach(ctx context.Context, user, roundID string, afterSeq uint64) (*Round, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	mb, err := c.open()
	if err != nil {
		return nil, err
	}
	r := &Round{c: c, id: roundID, ctx: ctx, mb: mb, release: c.rem.Hold(c.target.Address)}
	if err := c.send(mb, messages.AttachRound{User: user, RoundID: roundID, AfterSeq: afterSeq}); err != nil {
		r.finish(err)
		return nil, err
	}
	return r, nil
}

// ID is the round's id.
func (r *Round) ID() string { return r.id }

// Events yields the round's events in order and ends at the verdict (or
// at an error, which [Round.Wait] then returns). Breaking out of the loop
// stops the iteration, not the round; events nobody iterates over are
// dropped by Wait.
func (r *Round) Events() iter.Seq[messages.RoundEvent] {
	return func(yield func(messages.RoundEvent) bool) {
		for {
			e, ok := r.nextEvent()
			if !ok || !yield(e) {
				return
			}
		}
	}
}

// Wait returns the round's verdict once it has come, skipping the events
// not yet consumed. The error is non-nil when there is no verdict: the
// daemon unreachable ([ErrUnreachable]) or refusing the message
// ([*RejectedError]), the round's context ended, or the client closed. A
// verdict of any status (failed, busy, rejected, …) comes with a nil
// error.
func (r *Round) Wait() (messages.RoundFinished, error) {
	for range r.Events() {
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.verdict, r.err
}

// nextEvent is the next event, or false once the round is done.
func (r *Round) nextEvent() (messages.RoundEvent, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for !r.done {
		m, err := r.mb.next(r.ctx)
		if err != nil {
			r.finishLocked(err)
			break
		}
		switch m := m.(type) {
		case messages.RoundEvent:
			if m.RoundID == r.id {
				return m, true
			}
		case messages.RoundFinished:
			if m.RoundID == r.id {
				r.verdict = m
				r.finishLocked(nil)
			}
		case messages.Rejected:
			r.finishLocked(&RejectedError{Type: m.Type, Reason: m.Reason})
		}
	}
	return messages.RoundEvent{}, false
}

func (r *Round) finish(err error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.finishLocked(err)
}

// finishLocked records the end and lets go of the reply address and the
// hold.
func (r *Round) finishLocked(err error) {
	if r.done {
		return
	}
	r.done, r.err = true, err
	r.release()
	r.c.release(r.mb)
}
