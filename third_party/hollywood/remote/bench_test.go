package remote

import (
	"net"
	"testing"
	"time"

	"github.com/meshweaver/supervisor/third_party/hollywood/actor"
	"google.golang.org/protobuf/types/known/wrapperspb"
)

// BenchmarkRoundTrip is one remote request and its reply over loopback
// (plaintext), sequentially. It uses only upstream's API so that it runs
// unchanged against the unpatched copy for comparison.
func BenchmarkRoundTrip(b *testing.B) {
	start := func(addr string) (*actor.Engine, *Remote) {
		r := New(addr, NewConfig())
		e, err := actor.NewEngine(actor.NewEngineConfig().WithRemote(r))
		if err != nil {
			b.Fatal(err)
		}
		return e, r
	}
	addr := func() string {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			b.Fatal(err)
		}
		defer ln.Close()
		return ln.Addr().String()
	}
	de, dr := start(addr())
	defer func() { dr.Stop().Wait() }()
	echo := de.SpawnFunc(func(c *actor.Context) {
		if m, ok := c.Message().(*wrapperspb.StringValue); ok && c.Sender() != nil {
			c.Engine().Send(c.Sender(), m)
		}
	}, "echo", actor.WithID("echo"))
	ce, cr := start(addr())
	defer func() { cr.Stop().Wait() }()
	got := make(chan struct{}, 1)
	sink := ce.SpawnFunc(func(c *actor.Context) {
		if _, ok := c.Message().(*wrapperspb.StringValue); ok {
			got <- struct{}{}
		}
	}, "sink", actor.WithID("sink"))
	msg := wrapperspb.String("ping")
	roundTrip := func() {
		ce.SendWithSender(echo, msg, sink)
		select {
		case <-got:
		case <-time.After(10 * time.Second):
			b.Fatal("no reply within 10s")
		}
	}
	roundTrip() // connect both ways
	b.ResetTimer()
	for b.Loop() {
		roundTrip()
	}
	b.StopTimer()
	<-ce.Poison(sink).Done()
	<-de.Poison(echo).Done()
}
