package remote

import (
	"fmt"
	"net"
	"net/netip"
	"strings"
	"testing"

	"github.com/meshweaver/supervisor/third_party/hollywood/actor"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/wrapperspb"
)

// hostileEnvelopes are the frames that crashed the upstream reader or lost
// a message, each with the refusal it must now get.
func hostileEnvelopes(target *actor.PID) []struct {
	name   string
	env    *Envelope
	reason string
} {
	data, _ := proto.Marshal(wrapperspb.String("x"))
	tn := string(proto.MessageName(wrapperspb.String("")))
	targets := []*actor.PID{target}
	return []struct {
		name   string
		env    *Envelope
		reason string
	}{
		{"negative type index", &Envelope{TypeNames: []string{tn}, Targets: targets,
			Messages: []*Message{{Data: data, TypeNameIndex: -1}}}, RefuseFrame},
		{"type index out of range", &Envelope{TypeNames: []string{tn}, Targets: targets,
			Messages: []*Message{{Data: data, TypeNameIndex: 1}}}, RefuseFrame},
		{"no type names", &Envelope{Targets: targets, Messages: []*Message{{Data: data}}}, RefuseFrame},
		{"negative target index", &Envelope{TypeNames: []string{tn}, Targets: targets,
			Messages: []*Message{{Data: data, TargetIndex: -5}}}, RefuseFrame},
		{"target index out of range", &Envelope{TypeNames: []string{tn}, Targets: targets,
			Messages: []*Message{{Data: data, TargetIndex: 7}}}, RefuseFrame},
		{"no targets", &Envelope{TypeNames: []string{tn}, Messages: []*Message{{Data: data}}}, RefuseFrame},
		{"negative sender index", &Envelope{TypeNames: []string{tn}, Targets: targets,
			Senders:  []*actor.PID{actor.NewPID("127.0.0.1:1", "x")},
			Messages: []*Message{{Data: data, SenderIndex: -1}}}, RefuseFrame},
		{"sender index out of range", &Envelope{TypeNames: []string{tn}, Targets: targets,
			Senders:  []*actor.PID{actor.NewPID("127.0.0.1:1", "x")},
			Messages: []*Message{{Data: data, SenderIndex: 3}}}, RefuseFrame},
		{"unknown type", &Envelope{TypeNames: []string{"no.such.Type"}, Targets: targets,
			Messages: []*Message{{Data: data}}}, RefuseType},
		{"undecodable data", &Envelope{TypeNames: []string{tn}, Targets: targets,
			Messages: []*Message{{Data: []byte{0xff, 0xff, 0xff}}}}, RefuseType},
		{"sender on another host", one(target, actor.NewPID("10.9.8.7:4000", "x"), wrapperspb.String("x")), RefuseSender},
		{"sender is this node", one(target, actor.NewPID(target.Address, "stream/127.0.0.1:1"), wrapperspb.String("x")), RefuseSender},
		{"sender address without port", one(target, actor.NewPID("127.0.0.1", "x"), wrapperspb.String("x")), RefuseSender},
		{"sender host is a name", one(target, actor.NewPID("example.com:80", "x"), wrapperspb.String("x")), RefuseSender},
	}
}

// TestHostileFramesKeepTheConnection sends every hostile frame, each
// followed by a good message on the same connection: the bad one is refused
// with its reason, the good one arrives.
func TestHostileFramesKeepTheConnection(t *testing.T) {
	n := newNode(t, NewConfig())
	c := dialRaw(t, n.addr, nil)
	for i, tc := range hostileEnvelopes(n.sink) {
		c.send(t, tc.env)
		if rf := n.ref.wait(t); rf.Reason != tc.reason {
			t.Errorf("%s: refusal %q (%v), want %q", tc.name, rf.Reason, rf.Err, tc.reason)
		}
		good := wrapperspb.Int64(int64(i))
		c.send(t, one(n.sink, nil, good))
		if got := n.recv(t); !proto.Equal(got.msg, good) {
			t.Fatalf("%s: next message %v, want %v", tc.name, got.msg, good)
		}
	}
	n.ref.none(t)
}

// TestBatchWithBadMessageDeliversTheRest: one bad message in a batch costs
// only itself (upstream dropped the rest and the connection).
func TestBatchWithBadMessageDeliversTheRest(t *testing.T) {
	n := newNode(t, NewConfig())
	c := dialRaw(t, n.addr, nil)
	a, _ := proto.Marshal(wrapperspb.String("a"))
	b, _ := proto.Marshal(wrapperspb.String("b"))
	c.send(t, &Envelope{
		TypeNames: []string{"google.protobuf.StringValue", "no.such.Type"},
		Targets:   []*actor.PID{n.sink},
		Messages:  []*Message{{Data: a}, {Data: a, TypeNameIndex: 1}, {Data: b, TargetIndex: 9}, {Data: b}},
	})
	for _, want := range []string{"a", "b"} {
		if got := n.recv(t).msg.(*wrapperspb.StringValue).GetValue(); got != want {
			t.Fatalf("got %q, want %q", got, want)
		}
	}
	for _, want := range []string{RefuseType, RefuseFrame} {
		if rf := n.ref.wait(t); rf.Reason != want {
			t.Errorf("refusal %q, want %q", rf.Reason, want)
		}
	}
}

// TestProtoToInternalIDsIsHarmless: upstream, any proto sent to the stream
// writer's id ("stream/<addr>") panicked the process; and a sender naming
// that id made the reply go there.
func TestProtoToInternalIDsIsHarmless(t *testing.T) {
	d := newNode(t, NewConfig())
	caller := newNode(t, NewConfig())
	// Make d open a writer to caller, so that "stream/<caller>" would exist.
	d.e.Send(caller.sink, wrapperspb.String("hello"))
	caller.recv(t)
	writerID := actor.NewPID(d.addr, "stream/"+caller.addr)
	caller.e.Send(writerID, wrapperspb.String("boom"))
	caller.e.Send(actor.NewPID(d.addr, "router"), wrapperspb.String("boom"))
	caller.e.SendWithSender(d.echo, wrapperspb.String("reply to your own writer"), writerID)
	if rf := d.ref.wait(t); rf.Reason != RefuseSender {
		t.Errorf("refusal %q (%v), want %q", rf.Reason, rf.Err, RefuseSender)
	}
	caller.e.Send(d.sink, wrapperspb.String("still alive"))
	if got := d.recv(t).msg.(*wrapperspb.StringValue).GetValue(); got != "still alive" {
		t.Fatalf("got %q", got)
	}
}

// TestGate: the gate sees peer, target, bound sender and message; it may
// replace or drop; a panic in it drops one message.
func TestGate(t *testing.T) {
	seen := make(chan Inbound, 16)
	gate := func(in Inbound) (any, bool) {
		seen <- in
		switch in.Msg.(*wrapperspb.StringValue).GetValue() {
		case "drop":
			return nil, false
		case "panic":
			panic("gate bug")
		case "replace":
			return wrapperspb.String("replaced"), true
		}
		return in.Msg, true
	}
	n := newNode(t, NewConfig().WithGate(gate))
	caller := newNode(t, NewConfig())
	for _, s := range []string{"drop", "panic", "replace", "pass"} {
		caller.e.SendWithSender(n.sink, wrapperspb.String(s), caller.sink)
	}
	for _, want := range []string{"drop", "panic", "replace", "pass"} {
		in := <-seen
		if got := in.Msg.(*wrapperspb.StringValue).GetValue(); got != want {
			t.Fatalf("gate saw %q, want %q", got, want)
		}
		if in.Target.ID != n.sink.ID || in.Sender.String() != caller.sink.String() {
			t.Errorf("gate saw target %v sender %v", in.Target, in.Sender)
		}
		if ip := addrIP(in.Peer.Addr); !ip.IsLoopback() || in.Peer.TLS != nil || in.Peer.Identity != "" {
			t.Errorf("gate saw peer %+v", in.Peer)
		}
	}
	if rf := n.ref.wait(t); rf.Reason != RefusePanic {
		t.Errorf("refusal %q, want %q", rf.Reason, RefusePanic)
	}
	for _, want := range []string{"replaced", "pass"} {
		got := n.recv(t)
		if v := got.msg.(*wrapperspb.StringValue).GetValue(); v != want {
			t.Fatalf("delivered %q, want %q", v, want)
		}
		if got.sender.String() != caller.sink.String() {
			t.Errorf("sender %v", got.sender)
		}
	}
}

func TestCheckMessageNil(t *testing.T) {
	if _, _, _, err := checkMessage(&Envelope{}, nil); err == nil {
		t.Fatal("nil message passed")
	}
	env := &Envelope{TypeNames: []string{"t"}, Targets: []*actor.PID{nil}}
	if _, _, _, err := checkMessage(env, &Message{}); err == nil {
		t.Fatal("nil target passed")
	}
}

func TestSameHost(t *testing.T) {
	for _, tc := range []struct {
		host, conn string
		want       bool
	}{
		{"127.0.0.1", "127.0.0.1", true},
		{"127.0.0.2", "127.0.0.1", true},
		{"localhost", "127.0.0.1", true},
		{"LOCALHOST", "::1", true},
		{"::1", "127.0.0.1", true},
		{"10.0.0.5", "10.0.0.5", true},
		{"::ffff:10.0.0.5", "10.0.0.5", true},
		{"10.0.0.5", "10.0.0.6", false},
		{"127.0.0.1", "10.0.0.5", false},
		{"localhost", "10.0.0.5", false},
		{"example.com", "10.0.0.5", false},
		{"", "10.0.0.5", false},
		{"fe80::1%eth0", "fe80::1", true},
	} {
		ip := addrIP(&net.TCPAddr{IP: net.ParseIP(tc.conn), Port: 1})
		if got := sameHost(tc.host, ip); got != tc.want {
			t.Errorf("sameHost(%q, %s) = %v, want %v", tc.host, tc.conn, got, tc.want)
		}
	}
	if sameHost("127.0.0.1", netip.Addr{}) {
		t.Error("matched the zero address")
	}
}

// TestCanonicalHost: a sender address has one spelling (its listener's),
// so that spellings of one address cannot each cost the node a writer.
func TestCanonicalHost(t *testing.T) {
	for _, tc := range []struct {
		addr string
		ok   bool
	}{
		{"127.0.0.1:4100", true},
		{"10.0.0.5:1", true},
		{"[::1]:4100", true},
		{"localhost:4100", true},
		{"127.0.0.1:04100", false},
		{"127.0.0.1:0", false},
		{"127.0.0.1:65536", false},
		{"127.0.0.1:+4100", false},
		{"LOCALHOST:4100", false},
		{"[::ffff:127.0.0.1]:4100", false},
		{"[fe80::1%eth0]:4100", false},
		{"[0:0::1]:4100", false},
		{"example.com:4100", false},
		{"127.0.0.1", false},
	} {
		if _, err := canonicalHost(tc.addr); (err == nil) != tc.ok {
			t.Errorf("canonicalHost(%q) = %v, want ok %v", tc.addr, err, tc.ok)
		}
	}
}

// TestSendersPerConnectionCapped: one connection may name only a few
// sender addresses; the ones it has bound keep working; long PIDs are
// refused as frames.
func TestSendersPerConnectionCapped(t *testing.T) {
	n := newNode(t, NewConfig())
	c := dialRaw(t, n.addr, nil)
	sender := func(i int) *actor.PID { return actor.NewPID(fmt.Sprintf("127.0.0.1:%d", 20000+i), "caller") }
	for i := range maxSendersPerConn {
		c.send(t, one(n.sink, sender(i), wrapperspb.Int64(int64(i))))
		if got := n.recv(t); got.sender.Address != sender(i).Address {
			t.Fatalf("message %d from %v", i, got.sender)
		}
	}
	c.send(t, one(n.sink, sender(maxSendersPerConn), wrapperspb.Int64(99)))
	if rf := n.ref.wait(t); rf.Reason != RefuseSender {
		t.Fatalf("sender %d: refusal %q (%v), want %q", maxSendersPerConn, rf.Reason, rf.Err, RefuseSender)
	}
	c.send(t, one(n.sink, sender(0), wrapperspb.Int64(100))) // bound: still fine
	if got := n.recv(t); got.sender.Address != sender(0).Address {
		t.Fatalf("a bound sender refused after the cap: %v", got.sender)
	}
	long := actor.NewPID("127.0.0.1:20000", strings.Repeat("x", maxPIDID+1))
	c.send(t, one(n.sink, long, wrapperspb.Int64(101)))
	if rf := n.ref.wait(t); rf.Reason != RefuseFrame {
		t.Fatalf("long sender id: refusal %q (%v), want %q", rf.Reason, rf.Err, RefuseFrame)
	}
	n.ref.none(t)
}
