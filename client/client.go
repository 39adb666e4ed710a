package client

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"strconv"
	"sync"

	"github.com/meshweaver/supervisor/messages"
	"github.com/meshweaver/supervisor/third_party/hollywood/actor"
	"github.com/meshweaver/supervisor/third_party/hollywood/remote"
)

// RootID is the id of the daemon's entry point, the one actor a caller
// may address: "<daemon address>/meshweaver/root".
const RootID = "meshweaver/root"

// ErrUnreachable is wrapped by the errors of calls the daemon could not be
// reached for.
var ErrUnreachable = errors.New("the daemon is unreachable")

// ErrClosed is returned by calls on a closed [Client], and ends the calls
// and rounds [Client.Close] cut short.
var ErrClosed = errors.New("client closed")

// RejectedError is the daemon's refusal of a message ([messages.Rejected]):
// unauthorized, invalid, over the rate, or not carried out.
type RejectedError struct {
	// Type is the wire name of the refused message, if the daemon knew it.
	Type string
	// Reason says why, for a human.
	Reason string
}

func (e *RejectedError) Error() string {
	return "the daemon rejected the request: " + e.Reason
}

// Client is a caller of one daemon: its own hollywood engine and remote,
// listening for the daemon's replies. Its methods are safe for concurrent
// use; each call gets its own reply address, so answers never mix.
type Client struct {
	engine *actor.Engine
	rem    *remote.Remote
	target *actor.PID
	log    *slog.Logger
	late   func(any)  // WithLateReplies; nil: logged
	watch  *actor.PID // subscribed to the engine's events: unreachable daemons, late replies

	mu      sync.Mutex
	closed  bool
	next    uint64
	pending map[*mailbox]struct{}

	closeOnce sync.Once
}

// Dial starts a client of the daemon at addr (HOST:PORT). It listens for
// the daemon's replies at once but does not contact the daemon: an
// unreachable daemon shows in the first call. ctx bounds the start.
func Dial(ctx context.Context, addr string, opts ...Option) (*Client, error) {
	if _, _, err := net.SplitHostPort(addr); err != nil {
		return nil, fmt.Errorf("dialing the daemon: address %q: %w", addr, err)
	}
	var o options
	for _, opt := range opts {
		opt(&o)
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	if o.log == nil {
		o.log = slog.Default()
	}
	if o.tlsFiles != nil {
		conf, err := LoadTLSFiles(o.tlsFiles[0], o.tlsFiles[1], o.tlsFiles[2])
		if err != nil {
			return nil, err
		}
		o.tls = conf
	}
	if o.serverID != "" {
		if o.tls == nil {
			return nil, errors.New("dialing the daemon: a server identity needs TLS")
		}
		conf := o.tls.Clone()
		// The host-name check is replaced by the identity check, which
		// verifies the chain itself.
		conf.InsecureSkipVerify = true
		conf.VerifyConnection = remote.VerifyIdentity(o.serverID, conf.RootCAs)
		o.tls = conf
	}
	if o.listen == "" {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return nil, fmt.Errorf("picking a listen port: %w", err)
		}
		o.listen = ln.Addr().String()
		if err := ln.Close(); err != nil {
			return nil, err
		}
	}
	// Answers: a daemon that cannot dial this client back sends its
	// refusal over the connection the message came on.
	rc := remote.NewConfig().WithAnswers()
	if o.tls != nil {
		rc = rc.WithTLS(o.tls)
	}
	rem := remote.New(o.listen, rc)
	e, err := actor.NewEngine(actor.NewEngineConfig().WithRemote(rem))
	if err != nil {
		return nil, fmt.Errorf("listening on %s: %w", o.listen, err)
	}
	c := &Client{
		engine: e, rem: rem, log: o.log, late: o.late,
		target:  actor.NewPID(addr, RootID),
		pending: map[*mailbox]struct{}{},
	}
	c.watch = e.SpawnFunc(c.receiveEvent, "caller", actor.WithID("events"))
	e.Subscribe(c.watch)
	return c, nil
}

// Addr is the daemon's address.
func (c *Client) Addr() string { return c.target.Address }

// ListenAddr is the address the daemon dials back.
func (c *Client) ListenAddr() string { return c.rem.Address() }

// receiveEvent fails every pending call when the daemon is unreachable,
// and hands on the replies that came after their call ended.
func (c *Client) receiveEvent(ctx *actor.Context) {
	switch ev := ctx.Message().(type) {
	case actor.RemoteUnreachableEvent:
		if ev.ListenAddr == c.target.Address {
			c.unreachable(ev)
		}
	case actor.DeadLetterEvent:
		c.lateReply(ev)
	}
}

// lateReply is a message the remote delivered to a reply address already
// released: its call or round had ended. Call and round addresses are
// never reused, so this is never a later call's reply.
func (c *Client) lateReply(ev actor.DeadLetterEvent) {
	if ev.Target == nil || ev.Target.Address != c.rem.Address() || !messages.IsEnvelope(ev.Message) {
		return // not a daemon's reply (a poison pill to a stopped address)
	}
	m, err := decodeReply(ev.Message)
	if err != nil {
		c.log.Warn("dropped a late reply that does not decode", "to", ev.Target.ID, "err", err)
		return
	}
	if m != nil {
		c.handLate(ev.Target, m)
	}
}

// decodeReply is the daemon's reply raw, decoded; nil (and no error) for
// a message this client does not know, which it drops.
func decodeReply(raw any) (any, error) {
	m, err := messages.Unwrap(raw)
	if err != nil {
		return nil, err
	}
	if _, known := messages.Name(m); !known {
		return nil, nil
	}
	return m, nil
}

// handLate passes a reply that came after its call ended to
// WithLateReplies' observer, or logs it.
func (c *Client) handLate(to *actor.PID, m any) {
	if c.late != nil {
		c.late(m)
		return
	}
	c.log.Debug("a reply after its call ended", "to", to.ID, "type", fmt.Sprintf("%T", m))
}

// unreachable fails every pending call.
func (c *Client) unreachable(ev actor.RemoteUnreachableEvent) {
	err := fmt.Errorf("%w at %s", ErrUnreachable, ev.ListenAddr)
	if ev.Err != nil {
		err = fmt.Errorf("%w at %s: %v", ErrUnreachable, ev.ListenAddr, ev.Err)
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	for mb := range c.pending {
		mb.fail(err)
	}
}

// Close ends every pending call and round with [ErrClosed], stops the
// engine's actors and the remote, and waits for them. It is idempotent.
func (c *Client) Close() error {
	c.closeOnce.Do(func() {
		c.mu.Lock()
		c.closed = true
		pending := make([]*mailbox, 0, len(c.pending))
		for mb := range c.pending {
			pending = append(pending, mb)
		}
		c.mu.Unlock()
		for _, mb := range pending {
			mb.fail(ErrClosed)
			c.release(mb)
		}
		c.engine.Unsubscribe(c.watch)
		<-c.engine.Poison(c.watch).Done()
		c.rem.Stop().Wait()
	})
	return nil
}

// open spawns a reply address of its own for one call or round.
func (c *Client) open() (*mailbox, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		return nil, ErrClosed
	}
	c.next++
	mb := &mailbox{ready: make(chan struct{}, 1), log: c.log}
	mb.pid = c.engine.SpawnFunc(mb.receive, "caller", actor.WithID(strconv.FormatUint(c.next, 10)))
	c.pending[mb] = struct{}{}
	return mb, nil
}

// release stops mb's actor; once per mailbox.
func (c *Client) release(mb *mailbox) {
	mb.releaseOnce.Do(func() {
		c.mu.Lock()
		delete(c.pending, mb)
		c.mu.Unlock()
		<-c.engine.Poison(mb.pid).Done()
		// What came between the call's end and the address's stop
		// (later replies are the engine's dead letters: lateReply).
		for _, m := range mb.drain() {
			c.handLate(mb.pid, m)
		}
	})
}

// send encodes msg and sends it to the daemon's root from mb's address.
func (c *Client) send(mb *mailbox, msg any) error {
	env, err := messages.Encode(msg)
	if err != nil {
		return err
	}
	c.engine.SendWithSender(c.target, env, mb.pid)
	return nil
}

// request sends msg and returns the first reply accept takes. A Rejected
// ends it with a *RejectedError.
func (c *Client) request(ctx context.Context, msg any, accept func(any) bool) (any, error) {
	mb, err := c.open()
	if err != nil {
		return nil, err
	}
	defer c.release(mb)
	if err := c.send(mb, msg); err != nil {
		return nil, err
	}
	for {
		m, err := mb.next(ctx)
		if err != nil {
			return nil, err
		}
		if r, ok := m.(messages.Rejected); ok {
			return nil, &RejectedError{Type: r.Type, Reason: r.Reason}
		}
		if accept(m) {
			return m, nil
		}
	}
}

// mailbox is the inbox of one call's actor as a queue the caller's
// goroutine pulls from; the actor never blocks on it.
type mailbox struct {
	pid         *actor.PID
	log         *slog.Logger
	ready       chan struct{} // a token when queue or err changed
	releaseOnce sync.Once

	mu    sync.Mutex
	queue []any
	err   error // terminal; reported after the queue is drained
}

// receive queues what the daemon sends, decoded.
func (mb *mailbox) receive(ctx *actor.Context) {
	raw := ctx.Message()
	switch raw.(type) {
	case actor.Initialized, actor.Started, actor.Stopped:
		return
	}
	m, err := decodeReply(raw)
	if err != nil {
		mb.log.Warn("dropped a reply that does not decode", "from", ctx.Sender(), "err", err)
		return
	}
	if m == nil {
		return
	}
	mb.mu.Lock()
	mb.queue = append(mb.queue, m)
	mb.mu.Unlock()
	mb.signal()
}

func (mb *mailbox) signal() {
	select {
	case mb.ready <- struct{}{}:
	default:
	}
}

// drain empties the queue and returns what it held.
func (mb *mailbox) drain() []any {
	mb.mu.Lock()
	defer mb.mu.Unlock()
	q := mb.queue
	mb.queue = nil
	return q
}

// fail ends the mailbox with err (the first error wins).
func (mb *mailbox) fail(err error) {
	mb.mu.Lock()
	if mb.err == nil {
		mb.err = err
	}
	mb.mu.Unlock()
	mb.signal()
}

// next is the next reply, or the terminal error once the replies are
// drained, or ctx's error.
func (mb *mailbox) next(ctx context.Context) (any, error) {
	for {
		mb.mu.Lock()
		if len(mb.queue) > 0 {
			m := mb.queue[0]
			mb.queue[0] = nil
			mb.queue = mb.queue[1:]
			mb.mu.Unlock()
			return m, nil
		}
		err := mb.err
		mb.mu.Unlock()
		if err != nil {
			return nil, err
		}
		select {
		case <-mb.ready:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
}
