package remote

import (
	"context"
	"crypto/tls"
	"fmt"
	"log/slog"
	"net"
	"sync"
	"time"

	"github.com/meshweaver/supervisor/third_party/hollywood/actor"
	"google.golang.org/protobuf/proto"
	"storj.io/drpc/drpcconn"
	"storj.io/drpc/drpcmanager"
	"storj.io/drpc/drpcwire"
)

// meshweaver patch: the stream writer is rewritten (issue 9). Upstream it
// was an actor process registered as "stream/<addr>" that dialled inside
// the router's goroutine (no timeout, 3 tries), type-asserted every message
// in its inbox unchecked (any proto sent to that id from the network killed
// the process) and closed after a fixed 10 minutes without a send. Now:
//   - it is not an actor: nothing can address it, so the unchecked assertion
//     is gone with the inbox (its queue holds only *streamDeliver);
//   - it dials on its own goroutine, each try within Limits.DialTimeout (TLS
//     handshake included), 3 tries within 2×DialTimeout in total; messages
//     queued meanwhile are sent once connected or dropped when it gives up;
//   - it closes after Limits.IdleTimeout without a send unless its address
//     is held (Remote.Hold), and then sends an empty envelope (which every
//     reader, stock hollywood's too, ignores) every KeepaliveInterval;
//   - an envelope never exceeds Limits.MaxFrame: a message that alone would
//     is not sent (TooLargeEvent) and the connection stays;
//   - a message that is not a proto is dropped with a log line instead of
//     panicking the writer's goroutine;
//   - messages without a sender never share an envelope with messages that
//     have one (the wire format has no "no sender" index, so upstream gave
//     them the batch's first sender).

const (
	dialTries = 3
	// dialRetryDelay is the pause after a failed try, times the try's index.
	dialRetryDelay = 500 * time.Millisecond
	// msgOverhead bounds the envelope bytes of one message besides its data,
	// type name and PIDs (field tags and varints), so that the sum of the
	// estimates never undercounts the marshalled envelope.
	msgOverhead = 64
)

// streamWriter owns the outbound connection to one address.
type streamWriter struct {
	r    *Remote
	addr string
	wake chan struct{} // capacity 1: something was queued, or a hold changed
	done chan struct{} // closed when run has returned

	// ready is closed when the dial has finished; then ident and dialErr are
	// set for good.
	ready   chan struct{}
	ident   string
	dialErr error

	mu     sync.Mutex
	queue  []*streamDeliver
	closed bool // no more sends: the caller must forget this writer
}

func newStreamWriter(r *Remote, addr string) *streamWriter {
	return &streamWriter{
		r:     r,
		addr:  addr,
		wake:  make(chan struct{}, 1),
		done:  make(chan struct{}),
		ready: make(chan struct{}),
	}
}

// send queues d, or reports false when the writer has closed.
func (w *streamWriter) send(d *streamDeliver) bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.closed {
		return false
	}
	w.queue = append(w.queue, d)
	w.poke()
	return true
}

func (w *streamWriter) poke() {
	select {
	case w.wake <- struct{}{}:
	default:
	}
}

// identity waits at most timeout for the dial and returns the identity the
// peer presented (Config.Identify of its TLS state; "" in plaintext).
func (w *streamWriter) identity(ctx context.Context, timeout time.Duration) (string, error) {
	t := time.NewTimer(timeout)
	defer t.Stop()
	select {
	case <-w.ready:
		if w.dialErr != nil {
			return "", w.dialErr
		}
		return w.ident, nil
	case <-t.C:
		return "", fmt.Errorf("dialling %s back: no handshake within %v", w.addr, timeout)
	case <-ctx.Done():
		return "", ctx.Err()
	}
}

// take empties the queue. With closeIfEmpty, an empty queue also closes the
// writer (under the same lock, so no send is lost in between).
func (w *streamWriter) take(closeIfEmpty bool) []*streamDeliver {
	w.mu.Lock()
	defer w.mu.Unlock()
	q := w.queue
	w.queue = nil
	if closeIfEmpty && len(q) == 0 {
		w.closed = true
	}
	return q
}

// run dials, then writes until the connection is lost, the writer idles
// out, or the remote stops. It is the writer's only goroutine.
func (w *streamWriter) run(ctx context.Context) {
	defer w.r.wg.Done()
	defer close(w.done)
	reason := "stopped"
	var cause error // why the peer is unreachable, for RemoteUnreachableEvent
	defer func() { w.shutdown(ctx, reason, cause) }()

	rawconn, err := w.dial(ctx)
	if err != nil {
		w.dialErr = err
		close(w.ready)
		reason, cause = "unreachable", err
		return
	}
	if tc, ok := rawconn.(*tls.Conn); ok {
		cs := tc.ConnectionState()
		if w.ident, err = w.r.identifyChecked(&cs); err != nil {
			_ = rawconn.Close()
			w.dialErr = fmt.Errorf("dialling %s: %w", w.addr, err)
			close(w.ready)
			reason, cause = "unreachable", w.dialErr
			return
		}
	}
	close(w.ready)

	// The first read error is the connection's end as the peer made it
	// (under TLS 1.3 a refused certificate shows only here, as the alert
	// the peer sent), before drpc's own errors about its closing.
	rec := &readErrConn{Conn: rawconn}
	rawconn = rec
	// The remote's stop cuts the connection at once: with a Recv pending,
	// drpc's own cancel first waits for the write lock, which a peer that
	// stopped reading holds until the write deadline.
	defer context.AfterFunc(ctx, func() { _ = rec.Close() })()
	lim := w.r.limits
	conn := drpcconn.NewWithOptions(rawconn, drpcconn.Options{
		Manager: drpcmanager.Options{
			Reader: drpcwire.ReaderOptions{MaximumBufferSize: lim.MaxFrame},
		},
	})
	defer conn.Close()
	stream, err := NewDRPCRemoteClient(conn).Receive(ctx)
	if err != nil {
		slog.Debug("remote stream", "remote", w.addr, "err", err)
		reason, cause = "unreachable", err
		return
	}
	slog.Debug("connected", "remote", w.addr)
	// The peer's answers on this connection (a refusal it could not send
	// otherwise), read on a goroutine of this writer's, joined at its end.
	recvDone := make(chan struct{})
	go func() { defer close(recvDone); _ = w.receive(stream) }()
	defer func() {
		_ = conn.Close()
		<-recvDone
		if cause == nil && reason == "lost" {
			cause = rec.err()
		}
	}()

	last := time.Now()
	timer := time.NewTimer(lim.IdleTimeout)
	defer timer.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-conn.Closed():
			reason = "lost"
			return
		case <-w.wake:
		case <-timer.C:
		case <-w.r.draining:
			// Stop: send what is queued, then end (Send queues no more).
			if batch := w.take(true); len(batch) > 0 {
				if err := w.write(rawconn, stream, batch); err != nil {
					slog.Debug("remote write", "remote", w.addr, "err", err)
				}
			}
			return
		}
		held := w.r.held(w.addr)
		idle, keepalive := idleStep(held, last, time.Now(), lim)
		if batch := w.take(idle); len(batch) > 0 {
			if err := w.write(rawconn, stream, batch); err != nil {
				slog.Debug("remote write", "remote", w.addr, "err", err)
				reason = "lost"
				return
			}
			last = time.Now()
		} else if idle {
			reason = "idle"
			return
		} else if keepalive {
			if err := w.sendEnvelope(rawconn, stream, &Envelope{}); err != nil {
				slog.Debug("remote keepalive", "remote", w.addr, "err", err)
				reason = "lost"
				return
			}
			last = time.Now()
		}
		timer.Reset(nextWake(held, last, time.Now(), lim))
	}
}

// readErrConn keeps the first error a Read returned.
type readErrConn struct {
	net.Conn
	mu    sync.Mutex
	first error
}

func (c *readErrConn) Read(b []byte) (int, error) {
	n, err := c.Conn.Read(b)
	if err != nil {
		c.mu.Lock()
		if c.first == nil {
			c.first = err
		}
		c.mu.Unlock()
	}
	return n, err
}

func (c *readErrConn) err() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.first
}

// receive reads what the peer sends back on this connection until it
// ends, and returns the error that ended it. With Config.WithAnswers each
// message addressed to this node is delivered (checked as the reader checks
// its frames; a bad one is dropped); without, every one is dropped.
func (w *streamWriter) receive(stream DRPCRemote_ReceiveStream) error {
	for {
		env, err := stream.Recv()
		if err != nil {
			return err
		}
		for _, msg := range env.Messages {
			w.answer(env, msg)
		}
	}
}

func (w *streamWriter) answer(env *Envelope, msg *Message) {
	defer func() {
		if v := recover(); v != nil {
			slog.Warn("remote: an answer panicked; dropped", "remote", w.addr, "panic", fmt.Sprintf("%.200v", v))
		}
	}()
	if !w.r.config.answers {
		slog.Debug("remote: dropped a message sent back on an outbound connection", "remote", w.addr)
		return
	}
	target, sender, tname, err := checkMessage(env, msg)
	if err == nil && target.Address != w.r.addr {
		err = fmt.Errorf("target %.100q is not this node", target.Address)
	}
	var payload any
	if err == nil {
		payload, err = ProtoSerializer{}.Deserialize(msg.Data, tname)
	}
	if err != nil {
		slog.Debug("remote: dropped an answer", "remote", w.addr, "err", err)
		return
	}
	w.r.engine.SendLocal(target, payload, sender)
}

// idleStep decides, at now, whether a writer that last sent at last idles
// out (nothing held) or owes a keepalive (held).
func idleStep(held bool, last, now time.Time, lim Limits) (idle, keepalive bool) {
	quiet := now.Sub(last)
	return !held && quiet >= lim.IdleTimeout, held && quiet >= lim.KeepaliveInterval
}

// nextWake is how long a writer that last sent at last waits before its
// next idleStep.
func nextWake(held bool, last, now time.Time, lim Limits) time.Duration {
	period := lim.IdleTimeout
	if held {
		period = lim.KeepaliveInterval
	}
	return max(last.Add(period).Sub(now), 0)
}

// shutdown closes the writer for good: later sends go to a new writer.
// Queued messages are dropped. Except when the remote stops, the engine
// hears RemoteUnreachableEvent as upstream.
func (w *streamWriter) shutdown(ctx context.Context, reason string, cause error) {
	w.mu.Lock()
	w.closed = true
	dropped := len(w.queue)
	w.queue = nil
	w.mu.Unlock()
	w.r.forget(w)
	// Upstream's router logged this line; operators (and tests) know it.
	slog.Debug("stream terminated", "remote", w.addr, "reason", reason, "dropped", dropped)
	if ctx.Err() == nil && reason != "stopped" { // a stop is not the peer's loss
		w.r.engine.BroadcastEvent(actor.RemoteUnreachableEvent{ListenAddr: w.addr, Err: cause})
	}
}

// dial connects to the writer's address: dialTries tries, each within
// DialTimeout (TLS handshake included), all within 2×DialTimeout.
func (w *streamWriter) dial(ctx context.Context) (net.Conn, error) {
	lim := w.r.limits
	ctx, cancel := context.WithTimeout(ctx, 2*lim.DialTimeout)
	defer cancel()
	var err error
	for i := range dialTries {
		if i > 0 {
			t := time.NewTimer(time.Duration(i-1) * 2 * dialRetryDelay)
			select {
			case <-t.C:
			case <-ctx.Done():
				t.Stop()
			}
		}
		if ctx.Err() != nil {
			break
		}
		var conn net.Conn
		conn, err = w.dialOnce(ctx, lim.DialTimeout)
		if err == nil {
			return conn, nil
		}
		slog.Debug("remote dial", "remote", w.addr, "try", i+1, "of", dialTries, "err", err)
	}
	if err == nil {
		err = ctx.Err()
	}
	if w.r.ctx.Err() == nil {
		// Sampled: a peer can name many unreachable addresses (each a
		// refused sender), and each would be a Warn line.
		w.r.unreachableLog.Do(func() {
			slog.Warn("remote unreachable, giving up", "remote", fmt.Sprintf("%.100s", w.addr), "tries", dialTries, "err", err)
		})
	}
	return nil, fmt.Errorf("dialling %s: %w", w.addr, err)
}

func (w *streamWriter) dialOnce(ctx context.Context, timeout time.Duration) (net.Conn, error) {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	nd := &net.Dialer{Timeout: timeout}
	if w.r.config.TLSConfig == nil {
		return nd.DialContext(ctx, "tcp", w.addr)
	}
	conf := w.r.config.TLSConfig
	if pick := w.r.config.dialVerify; pick != nil { // meshweaver patch: WithDialVerify
		if v := pick(w.addr); v != nil {
			conf = conf.Clone()
			conf.VerifyConnection = v
		}
	}
	td := &tls.Dialer{NetDialer: nd, Config: conf}
	return td.DialContext(ctx, "tcp", w.addr)
}

// write sends batch in as few envelopes as MaxFrame allows.
func (w *streamWriter) write(rawconn net.Conn, stream DRPCRemote_ReceiveStream, batch []*streamDeliver) error {
	limit := w.r.limits.MaxFrame
	var (
		b       envelopeBuilder
		size    int
		nilSend bool
	)
	flush := func() error {
		if b.env == nil {
			return nil
		}
		env := b.env
		b = envelopeBuilder{}
		size = 0
		return w.sendEnvelope(rawconn, stream, env)
	}
	for _, d := range batch {
		pm, ok := d.msg.(proto.Message)
		if !ok {
			slog.Warn("remote: dropped a message that is not a proto", "remote", w.addr, "type", fmt.Sprintf("%T", d.msg))
			continue
		}
		data, err := proto.Marshal(pm)
		if err != nil {
			slog.Warn("remote: serialize", "remote", w.addr, "err", err)
			continue
		}
		tname := string(proto.MessageName(pm))
		cost := len(data) + len(tname) + pidCost(d.target) + pidCost(d.sender) + msgOverhead
		if cost > limit {
			slog.Warn("remote: message over the frame limit not sent", "remote", w.addr,
				"type", tname, "size", cost, "limit", limit)
			w.r.engine.BroadcastEvent(TooLargeEvent{Target: d.target, Sender: d.sender, Msg: d.msg, Size: cost, Limit: limit})
			continue
		}
		if b.env != nil && (size+cost > limit || nilSend != (d.sender == nil)) {
			if err := flush(); err != nil {
				return err
			}
		}
		nilSend = d.sender == nil
		size += cost
		b.add(d, tname, data)
	}
	return flush()
}

func (w *streamWriter) sendEnvelope(rawconn net.Conn, stream DRPCRemote_ReceiveStream, env *Envelope) error {
	// A peer that stops reading blocks only this writer, and not for ever.
	if err := rawconn.SetWriteDeadline(time.Now().Add(w.r.limits.IdleTimeout)); err != nil {
		return err
	}
	return stream.Send(env)
}

func pidCost(p *actor.PID) int {
	if p == nil {
		return 0
	}
	return len(p.Address) + len(p.ID) + 16
}

// envelopeBuilder interns the type names and PIDs of one envelope.
type envelopeBuilder struct {
	env     *Envelope
	types   map[string]int32
	targets map[uint64]int32
	senders map[uint64]int32
}

func (b *envelopeBuilder) add(d *streamDeliver, tname string, data []byte) {
	if b.env == nil {
		b.env = &Envelope{}
		b.types = map[string]int32{}
		b.targets = map[uint64]int32{}
		b.senders = map[uint64]int32{}
	}
	var typeID, senderID, targetID int32
	typeID, b.env.TypeNames = lookupTypeName(b.types, tname, b.env.TypeNames)
	senderID, b.env.Senders = lookupPIDs(b.senders, d.sender, b.env.Senders)
	targetID, b.env.Targets = lookupPIDs(b.targets, d.target, b.env.Targets)
	b.env.Messages = append(b.env.Messages, &Message{
		Data:          data,
		TypeNameIndex: typeID,
		SenderIndex:   senderID,
		TargetIndex:   targetID,
	})
}

func lookupPIDs(m map[uint64]int32, pid *actor.PID, pids []*actor.PID) (int32, []*actor.PID) {
	if pid == nil {
		return 0, pids
	}
	max := int32(len(m))
	key := pid.LookupKey()
	id, ok := m[key]
	if !ok {
		m[key] = max
		id = max
		pids = append(pids, pid)
	}
	return id, pids

}

func lookupTypeName(m map[string]int32, name string, types []string) (int32, []string) {
	max := int32(len(m))
	id, ok := m[name]
	if !ok {
		m[name] = max
		id = max
		types = append(types, name)
	}
	return id, types
}
