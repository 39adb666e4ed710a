package remote

import (
	"bytes"
	"fmt"
	"net"
	"sync"
	"testing"
	"time"

	"github.com/meshweaver/supervisor/third_party/hollywood/actor"
	"google.golang.org/protobuf/types/known/wrapperspb"
)

// TestFrameTooLargeClosesOnlyThatConnection: a frame over MaxFrame closes
// the connection it came on, reported; other connections go on.
func TestFrameTooLargeClosesOnlyThatConnection(t *testing.T) {
	d := newNode(t, NewConfig().WithLimits(Limits{MaxFrame: 1 << 20}))
	big := dialRaw(t, d.addr, nil)
	other := dialRaw(t, d.addr, nil)
	other.send(t, one(d.sink, nil, wrapperspb.String("before")))
	d.recv(t)

	_ = big.stream.Send(one(d.sink, nil, wrapperspb.Bytes(make([]byte, 2<<20))))
	if rf := d.ref.wait(t); rf.Reason != RefuseTooLarge {
		t.Fatalf("refusal %q (%v), want %q", rf.Reason, rf.Err, RefuseTooLarge)
	}
	big.closed(t)
	other.send(t, one(d.sink, nil, wrapperspb.String("after")))
	if got := d.recv(t).msg.(*wrapperspb.StringValue).GetValue(); got != "after" {
		t.Fatalf("got %q", got)
	}
}

// TestWriterRefusesTooLarge: the writer does not send a message over its
// MaxFrame; the sender side hears TooLargeEvent and the connection stays.
func TestWriterRefusesTooLarge(t *testing.T) {
	d := newNode(t, NewConfig())
	caller := newNode(t, NewConfig().WithLimits(Limits{MaxFrame: 64 << 10}))
	events := subscribe(t, caller.e)
	caller.e.Send(d.sink, wrapperspb.String("before"))
	d.recv(t)
	caller.e.SendWithSender(d.sink, wrapperspb.Bytes(make([]byte, 100<<10)), caller.sink)
	caller.e.Send(d.sink, wrapperspb.String("after"))
	ev := waitEvent(t, events, func(ev any) bool { _, ok := ev.(TooLargeEvent); return ok }).(TooLargeEvent)
	if ev.Limit != 64<<10 || ev.Size <= ev.Limit || ev.Target.String() != d.sink.String() || ev.Sender.String() != caller.sink.String() {
		t.Errorf("event %+v", ev)
	}
	if got := d.recv(t).msg.(*wrapperspb.StringValue).GetValue(); got != "after" {
		t.Fatalf("got %q", got)
	}
	select {
	case ev := <-events:
		if _, ok := ev.(actor.RemoteUnreachableEvent); ok {
			t.Fatal("the connection was dropped")
		}
	default:
	}
}

// TestDefaultFrameCarriesLargestBody: with the defaults, a 16 MiB body (the
// project's largest legal one) gets through; upstream's 4 MiB did not.
func TestDefaultFrameCarriesLargestBody(t *testing.T) {
	d := newNode(t, NewConfig())
	caller := newNode(t, NewConfig())
	body := bytes.Repeat([]byte{7}, 16<<20)
	caller.e.Send(d.sink, wrapperspb.Bytes(body))
	if got := d.recv(t).msg.(*wrapperspb.BytesValue).GetValue(); !bytes.Equal(got, body) {
		t.Fatalf("got %d bytes", len(got))
	}
}

// TestBatchSplitsAtMaxFrame: many messages that fit one by one but not
// together all arrive (several envelopes, none over the limit).
func TestBatchSplitsAtMaxFrame(t *testing.T) {
	lim := Limits{MaxFrame: 256 << 10}
	d := newNode(t, NewConfig().WithLimits(lim))
	caller := newNode(t, NewConfig().WithLimits(lim))
	const n = 40
	for i := range n {
		caller.e.Send(d.sink, wrapperspb.Bytes(bytes.Repeat([]byte{byte(i)}, 100<<10)))
	}
	for i := range n {
		if got := d.recv(t).msg.(*wrapperspb.BytesValue).GetValue(); got[0] != byte(i) {
			t.Fatalf("message %d: got %d", i, got[0])
		}
	}
	d.ref.none(t)
}

// TestNilSenderNotGivenAnother: upstream put a message without a sender in
// the same envelope as one with a sender, and it arrived with that sender.
func TestNilSenderNotGivenAnother(t *testing.T) {
	d := newNode(t, NewConfig())
	caller := newNode(t, NewConfig())
	for i := range 100 {
		if i%2 == 0 {
			caller.e.SendWithSender(d.sink, wrapperspb.Int64(int64(i)), caller.sink)
		} else {
			caller.e.Send(d.sink, wrapperspb.Int64(int64(i)))
		}
	}
	for range 100 {
		got := d.recv(t)
		i := got.msg.(*wrapperspb.Int64Value).GetValue()
		if (i%2 == 0) != (got.sender != nil) {
			t.Fatalf("message %d arrived with sender %v", i, got.sender)
		}
	}
}

// TestNonProtoDropped: a non-proto value sent to a remote PID is dropped
// (upstream panicked the process).
func TestNonProtoDropped(t *testing.T) {
	d := newNode(t, NewConfig())
	caller := newNode(t, NewConfig())
	caller.e.Send(d.sink, struct{ X int }{1})
	caller.e.Send(d.sink, wrapperspb.String("after"))
	if got := d.recv(t).msg.(*wrapperspb.StringValue).GetValue(); got != "after" {
		t.Fatalf("got %q", got)
	}
}

// TestHoldKeepsStreamAlive: a held stream outlives IdleTimeout many times
// over (keepalives keep both ends open); released, it closes.
func TestHoldKeepsStreamAlive(t *testing.T) {
	// Keepalives come 10× as often as the reader's idle limit: margin for a
	// loaded machine.
	lim := Limits{IdleTimeout: 200 * time.Millisecond, KeepaliveInterval: 20 * time.Millisecond, ReadIdleTimeout: 200 * time.Millisecond}
	d := newNode(t, NewConfig().WithLimits(lim))
	caller := newNode(t, NewConfig().WithLimits(lim))
	events := subscribe(t, caller.e)

	release := caller.r.Hold(d.addr)
	release2 := caller.r.Hold(d.addr) // holds nest
	caller.e.Send(d.sink, wrapperspb.String("start"))
	d.recv(t)
	caller.r.mu.Lock()
	w := caller.r.writers[d.addr]
	caller.r.mu.Unlock()

	// Nothing may happen for 5×IdleTimeout: no unreachable, same writer.
	quiet := time.After(5 * lim.IdleTimeout)
	release2() // one hold left
	release2() // releasing twice counts once
wait:
	for {
		select {
		case ev := <-events:
			if u, ok := ev.(actor.RemoteUnreachableEvent); ok {
				t.Fatalf("held stream to %s closed", u.ListenAddr)
			}
		case <-quiet:
			break wait
		}
	}
	caller.r.mu.Lock()
	same := caller.r.writers[d.addr] == w
	caller.r.mu.Unlock()
	if !same {
		t.Fatal("the held writer was replaced")
	}
	caller.e.Send(d.sink, wrapperspb.String("still"))
	d.recv(t)

	start := time.Now()
	release()
	waitEvent(t, events, func(ev any) bool {
		u, ok := ev.(actor.RemoteUnreachableEvent)
		return ok && u.ListenAddr == d.addr
	})
	t.Logf("released stream closed %v after release (IdleTimeout %v)", time.Since(start), lim.IdleTimeout)
}

// TestUnheldStreamIdlesOut: without a hold the writer closes after
// IdleTimeout without sends, and the next send dials again.
func TestUnheldStreamIdlesOut(t *testing.T) {
	lim := Limits{IdleTimeout: 100 * time.Millisecond}
	d := newNode(t, NewConfig())
	caller := newNode(t, NewConfig().WithLimits(lim))
	events := subscribe(t, caller.e)
	start := time.Now()
	caller.e.Send(d.sink, wrapperspb.String("one"))
	d.recv(t)
	waitEvent(t, events, func(ev any) bool {
		u, ok := ev.(actor.RemoteUnreachableEvent)
		return ok && u.ListenAddr == d.addr
	})
	if took := time.Since(start); took < lim.IdleTimeout {
		t.Errorf("closed after %v, before IdleTimeout %v", took, lim.IdleTimeout)
	}
	caller.e.Send(d.sink, wrapperspb.String("two"))
	d.recv(t)
}

func TestIdleStep(t *testing.T) {
	lim := Limits{IdleTimeout: 10 * time.Second, KeepaliveInterval: 3 * time.Second}
	t0 := time.Unix(1000, 0)
	for _, tc := range []struct {
		held            bool
		quiet           time.Duration
		idle, keepalive bool
		wake            time.Duration
	}{
		{false, 0, false, false, 10 * time.Second},
		{false, 9 * time.Second, false, false, time.Second},
		{false, 10 * time.Second, true, false, 0},
		{false, time.Hour, true, false, 0},
		{true, 0, false, false, 3 * time.Second},
		{true, 2 * time.Second, false, false, time.Second},
		{true, 3 * time.Second, false, true, 0},
		{true, time.Hour, false, true, 0}, // held: never idle
	} {
		idle, keepalive := idleStep(tc.held, t0, t0.Add(tc.quiet), lim)
		wake := nextWake(tc.held, t0, t0.Add(tc.quiet), lim)
		if idle != tc.idle || keepalive != tc.keepalive || wake != tc.wake {
			t.Errorf("held %v quiet %v: idle %v keepalive %v wake %v, want %v %v %v",
				tc.held, tc.quiet, idle, keepalive, wake, tc.idle, tc.keepalive, tc.wake)
		}
	}
}

func TestLimitsDefaults(t *testing.T) {
	got := Limits{}.withDefaults()
	want := Limits{MaxFrame: DefaultMaxFrame, DialTimeout: 5 * time.Second, HandshakeTimeout: 10 * time.Second,
		IdleTimeout: 10 * time.Minute, KeepaliveInterval: 30 * time.Second, ReadIdleTimeout: 20 * time.Minute, MaxConnsPerIP: 64,
		StopFlush: 5 * time.Second}
	if got != want {
		t.Errorf("got %+v, want %+v", got, want)
	}
	if got := New("127.0.0.1:1", NewConfig().WithBufferSize(8<<20)).limits.MaxFrame; got != 8<<20 {
		t.Errorf("WithBufferSize: MaxFrame %d", got)
	}
	if got := (Limits{IdleTimeout: time.Minute}).withDefaults().ReadIdleTimeout; got != 2*time.Minute {
		t.Errorf("ReadIdleTimeout %v, want 2×IdleTimeout", got)
	}
}

// stalledPeer accepts connections and never reads from them.
func stalledPeer(t testing.TB) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var conns []net.Conn
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			conns = append(conns, c)
		}
	}()
	t.Cleanup(func() {
		ln.Close()
		<-done
		for _, c := range conns {
			c.Close()
		}
	})
	return ln.Addr().String()
}

// TestStalledPeerCostsOnlyItsWriter: a peer that stops reading blocks only
// its own writer, which gives up after IdleTimeout (its write deadline);
// another peer is served meanwhile, and Stop waits on the stall no longer
// than StopFlush.
func TestStalledPeerCostsOnlyItsWriter(t *testing.T) {
	lim := Limits{IdleTimeout: 2 * time.Second, StopFlush: 100 * time.Millisecond} // room for a loaded machine between the two
	d := newNode(t, NewConfig())
	caller := newNode(t, NewConfig().WithLimits(lim))
	events := subscribe(t, caller.e)
	stalled := stalledPeer(t)
	big := wrapperspb.Bytes(make([]byte, 8<<20))
	for range 4 { // more than the socket buffers hold
		caller.e.Send(actor.NewPID(stalled, "x"), big)
	}
	for i := range 50 {
		caller.e.Send(d.sink, wrapperspb.Int64(int64(i)))
		d.recv(t)
	}
	waitEvent(t, events, func(ev any) bool {
		u, ok := ev.(actor.RemoteUnreachableEvent)
		return ok && u.ListenAddr == stalled
	})
	// Stall it again, then stop with the write pending.
	caller.e.Send(actor.NewPID(stalled, "x"), big)
	caller.e.Send(actor.NewPID(stalled, "x"), big)
	start := time.Now()
	caller.r.Stop().Wait()
	if took := time.Since(start); took > lim.StopFlush+lim.IdleTimeout/2 {
		t.Errorf("Stop took %v with a stalled write (StopFlush %v)", took, lim.StopFlush)
	}
}

// TestSendsRaceIdleClose: senders racing a writer that idles out between
// their bursts lose nothing (a closing writer takes no more sends; they go
// to its successor). IdleTimeout also bounds each write, so it is not made
// so short that a write under the race detector outlasts it.
func TestSendsRaceIdleClose(t *testing.T) {
	const senders, each = 8, 200
	lim := Limits{IdleTimeout: 50 * time.Millisecond}
	d := newNode(t, NewConfig())
	caller := newNode(t, NewConfig().WithLimits(lim))
	events := subscribe(t, caller.e)
	var wg sync.WaitGroup
	for s := range senders {
		wg.Go(func() {
			for i := range each {
				caller.e.Send(d.sink, wrapperspb.Int64(int64(s*each+i)))
				if i%50 == 0 {
					time.Sleep(lim.IdleTimeout * 6 / 5) // let the writer idle out
				}
			}
		})
	}
	seen := map[int64]bool{}
	for range senders * each {
		seen[d.recv(t).msg.(*wrapperspb.Int64Value).GetValue()] = true
	}
	wg.Wait()
	if len(seen) != senders*each {
		t.Fatalf("%d distinct messages, want %d", len(seen), senders*each)
	}
	// The race was real: the writer did idle out meanwhile.
	waitEvent(t, events, func(ev any) bool {
		u, ok := ev.(actor.RemoteUnreachableEvent)
		return ok && u.ListenAddr == d.addr
	})
}

// TestSendAfterStopIsDropped: sends after Stop neither panic nor start
// anything.
func TestSendAfterStopIsDropped(t *testing.T) {
	caller := newNode(t, NewConfig())
	caller.r.Stop().Wait()
	caller.e.Send(actor.NewPID(freeAddr(t), "x"), wrapperspb.String("late"))
	if release := caller.r.Hold("127.0.0.1:1"); release != nil {
		release()
	}
	caller.r.mu.Lock()
	n := len(caller.r.writers)
	caller.r.mu.Unlock()
	if n != 0 {
		t.Fatalf("%d writers after Stop", n)
	}
}

// TestStopSendsWhatWasQueued: what was sent before Stop (a daemon's last
// verdicts) reaches the peer, on a connected writer and on one still
// dialling; nothing sent after Stop goes out.
func TestStopSendsWhatWasQueued(t *testing.T) {
	d := newNode(t, NewConfig())
	other := newNode(t, NewConfig())
	caller := newNode(t, NewConfig())
	caller.e.Send(d.sink, wrapperspb.String("connect"))
	d.recv(t)

	const n = 200
	for i := range n {
		caller.e.Send(d.sink, wrapperspb.String(fmt.Sprint(i)))
	}
	caller.e.Send(other.sink, wrapperspb.String("dialling")) // a new writer
	caller.r.Stop().Wait()
	caller.e.Send(d.sink, wrapperspb.String("late"))

	for i := range n {
		got := d.recv(t).msg.(*wrapperspb.StringValue).GetValue()
		if want := fmt.Sprint(i); got != want {
			t.Fatalf("message %d: got %q, want %q", i, got, want)
		}
	}
	if got := other.recv(t).msg.(*wrapperspb.StringValue).GetValue(); got != "dialling" {
		t.Fatalf("the writer that was dialling sent %q", got)
	}
	select {
	case r := <-d.got:
		t.Fatalf("received %v after Stop", r.msg)
	default:
	}
}

// TestStopFlushIsBounded: a writer whose TLS handshake never gets an
// answer holds Stop no longer than StopFlush, well below its dial budget.
func TestStopFlushIsBounded(t *testing.T) {
	p := newPKI(t)
	lim := Limits{DialTimeout: 5 * time.Second, StopFlush: 300 * time.Millisecond}
	caller := newNode(t, NewConfig().WithTLS(p.config(t, "spiffe://mesh/caller")).WithLimits(lim))
	caller.e.Send(actor.NewPID(blackHole(t), "x"), wrapperspb.String("never sent"))
	start := time.Now()
	caller.r.Stop().Wait()
	if took := time.Since(start); took > 2*time.Second {
		t.Fatalf("Stop took %v with StopFlush %v (dial budget %v)", took, lim.StopFlush, 2*lim.DialTimeout)
	}
}
