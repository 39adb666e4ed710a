package remote

import (
	"crypto/tls"
	"errors"
	"net"
	"net/netip"
	"os"
	"testing"
	"time"

	"google.golang.org/protobuf/types/known/wrapperspb"
)

// TestHalfOpenConnsClosed: 200 connections that never start the TLS
// handshake are all closed within HandshakeTimeout, each reported, and the
// goroutines and fds they cost come back.
func TestHalfOpenConnsClosed(t *testing.T) {
	const conns = 200
	p := newPKI(t)
	lim := Limits{HandshakeTimeout: 300 * time.Millisecond, MaxConnsPerIP: 1000}
	d := newNode(t, NewConfig().WithTLS(p.config(t, "spiffe://mesh/daemon")).WithLimits(lim))
	goroutines, fds := numGoroutines(), numFDs()

	start := time.Now()
	cs := make([]net.Conn, 0, conns)
	for range conns {
		c, err := net.Dial("tcp", d.addr)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		cs = append(cs, c)
	}
	deadline := start.Add(lim.HandshakeTimeout + 5*time.Second)
	for i, c := range cs {
		c.SetReadDeadline(deadline)
		_, err := c.Read(make([]byte, 1))
		var ne net.Error
		if errors.As(err, &ne) && ne.Timeout() {
			t.Fatalf("connection %d still open %v after it was made", i, time.Since(start))
		}
	}
	t.Logf("%d silent connections closed by the server within %v (HandshakeTimeout %v)", conns, time.Since(start), lim.HandshakeTimeout)
	for range conns {
		if rf := d.ref.wait(t); rf.Reason != RefuseHandshake {
			t.Fatalf("refusal %q (%v), want %q", rf.Reason, rf.Err, RefuseHandshake)
		}
	}
	for _, c := range cs {
		c.Close()
	}
	if !settle(t, 5*time.Second, func() bool { return numGoroutines() <= goroutines && numFDs() <= fds }) {
		t.Errorf("goroutines %d -> %d, fds %d -> %d", goroutines, numGoroutines(), fds, numFDs())
	}
	// The listener still serves.
	c := dialRaw(t, d.addr, p.config(t, "spiffe://mesh/caller"))
	c.send(t, one(d.sink, nil, wrapperspb.String("after")))
	d.recv(t)
}

// TestConnCapPerIP: connections over the cap are closed at once and
// reported; those under it keep working.
func TestConnCapPerIP(t *testing.T) {
	d := newNode(t, NewConfig().WithLimits(Limits{MaxConnsPerIP: 2}))
	a := dialRaw(t, d.addr, nil)
	b := dialRaw(t, d.addr, nil)
	a.send(t, one(d.sink, nil, wrapperspb.String("a")))
	b.send(t, one(d.sink, nil, wrapperspb.String("b")))
	d.recv(t)
	d.recv(t)

	over, err := net.Dial("tcp", d.addr)
	if err != nil {
		t.Fatal(err)
	}
	defer over.Close()
	if rf := d.ref.wait(t); rf.Reason != RefuseConnCap {
		t.Fatalf("refusal %q, want %q", rf.Reason, RefuseConnCap)
	}
	over.SetReadDeadline(time.Now().Add(5 * time.Second))
	if _, err := over.Read(make([]byte, 1)); err == nil || os.IsTimeout(err) {
		t.Fatalf("connection over the cap not closed: %v", err)
	}
	a.send(t, one(d.sink, nil, wrapperspb.String("a2")))
	d.recv(t)

	// A closed connection frees its slot.
	a.conn.Close()
	if !settle(t, 5*time.Second, func() bool { return connsFrom(d, "127.0.0.1") == 1 }) {
		t.Fatalf("%d connections counted after one closed", connsFrom(d, "127.0.0.1"))
	}
	c := dialRaw(t, d.addr, nil)
	c.send(t, one(d.sink, nil, wrapperspb.String("c")))
	d.recv(t)
}

func connsFrom(n *node, ip string) int {
	l := n.r.ln
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.perIP[netip.MustParseAddr(ip)]
}

// TestReadIdleTimeout: an established connection that sends nothing for
// ReadIdleTimeout is closed; one that sends keepalives is not.
func TestReadIdleTimeout(t *testing.T) {
	lim := Limits{ReadIdleTimeout: 300 * time.Millisecond}
	d := newNode(t, NewConfig().WithLimits(lim))
	silent := dialRaw(t, d.addr, nil)
	silent.send(t, one(d.sink, nil, wrapperspb.String("once")))
	d.recv(t)
	talker := dialRaw(t, d.addr, nil)
	talker.send(t, one(d.sink, nil, wrapperspb.String("first")))
	d.recv(t)

	start := time.Now()
	tick := time.NewTicker(lim.ReadIdleTimeout / 10)
	defer tick.Stop()
	for time.Since(start) < 3*lim.ReadIdleTimeout {
		<-tick.C
		talker.send(t, &Envelope{}) // keepalive
	}
	silent.closed(t)
	select {
	case <-talker.conn.Closed():
		t.Fatal("a connection sending keepalives was idle-closed")
	default:
	}
	talker.send(t, one(d.sink, nil, wrapperspb.String("still")))
	d.recv(t)
	d.ref.none(t) // keepalives and an idle close are not refusals
}

// TestHandshakeFailureRefused: a client whose certificate is not of the
// CA is refused at the handshake; others go on.
func TestHandshakeFailureRefused(t *testing.T) {
	p := newPKI(t)
	d := newNode(t, NewConfig().WithTLS(p.config(t, "spiffe://mesh/daemon")))
	stranger := newPKI(t).config(t, "spiffe://elsewhere/x")
	stranger.RootCAs = p.pool // it trusts the daemon; the daemon does not trust it
	c, err := tls.Dial("tcp", d.addr, stranger)
	if err == nil {
		// TLS 1.3: the client learns of the rejection on its first read.
		c.SetReadDeadline(time.Now().Add(5 * time.Second))
		_, err = c.Read(make([]byte, 1))
		c.Close()
	}
	if err == nil || os.IsTimeout(err) {
		t.Fatalf("a stranger's handshake: %v", err)
	}
	if rf := d.ref.wait(t); rf.Reason != RefuseHandshake {
		t.Fatalf("refusal %q (%v), want %q", rf.Reason, rf.Err, RefuseHandshake)
	}
	ok := dialRaw(t, d.addr, p.config(t, "spiffe://mesh/ok"))
	ok.send(t, one(d.sink, nil, wrapperspb.String("fine")))
	d.recv(t)
}

// TestConnCapEvictsSilent: at the cap, a new connection closes the
// address's oldest connection that has sent no frame, so that one local
// process holding silent connections cannot lock the other callers of
// its address out; established ones are kept.
func TestConnCapEvictsSilent(t *testing.T) {
	d := newNode(t, NewConfig().WithLimits(Limits{MaxConnsPerIP: 3, HandshakeTimeout: time.Minute}))
	est := dialRaw(t, d.addr, nil)
	est.send(t, one(d.sink, nil, wrapperspb.String("established")))
	d.recv(t)
	var silent []net.Conn
	for range 2 {
		c, err := net.Dial("tcp", d.addr)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		silent = append(silent, c)
	}
	if !settle(t, 5*time.Second, func() bool { return connsFrom(d, "127.0.0.1") == 3 }) {
		t.Fatalf("%d connections counted, want 3", connsFrom(d, "127.0.0.1"))
	}
	// A caller of the same address: admitted, the oldest silent one closed.
	late := dialRaw(t, d.addr, nil)
	late.send(t, one(d.sink, nil, wrapperspb.String("late")))
	d.recv(t)
	if rf := d.ref.wait(t); rf.Reason != RefuseConnCap {
		t.Fatalf("refusal %q, want %q", rf.Reason, RefuseConnCap)
	}
	silent[0].SetReadDeadline(time.Now().Add(5 * time.Second))
	if _, err := silent[0].Read(make([]byte, 1)); err == nil || os.IsTimeout(err) {
		t.Fatalf("the oldest silent connection was not closed: %v", err)
	}
	est.send(t, one(d.sink, nil, wrapperspb.String("still")))
	d.recv(t)
}
