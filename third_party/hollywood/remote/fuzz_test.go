package remote

import (
	"net"
	"sync/atomic"
	"testing"

	"github.com/meshweaver/supervisor/third_party/hollywood/actor"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/wrapperspb"
)

// FuzzEnvelope feeds arbitrary bytes through what the reader does with a
// frame: decode the envelope, then check, bind and dispatch each message.
// Nothing may panic; the per-message recover would hide a panic, so any
// RefusePanic fails the run. The seeds are every frame that crashed the
// upstream reader. Run: go test -run '^$' -fuzz FuzzEnvelope ./third_party/hollywood/remote/
func FuzzEnvelope(f *testing.F) {
	const self = "127.0.0.1:4100"
	target := actor.NewPID(self, "sink/sink")
	for _, tc := range hostileEnvelopes(target) {
		b, err := proto.Marshal(tc.env)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
	}
	good, _ := proto.Marshal(one(target, actor.NewPID("127.0.0.1:4200", "caller/1"), wrapperspb.String("hi")))
	f.Add(good)
	// A proto to the (former) stream writer's id: it crashed upstream.
	toWriter, _ := proto.Marshal(one(actor.NewPID(self, "stream/127.0.0.1:4200"), nil, wrapperspb.String("boom")))
	f.Add(toWriter)
	empty, _ := proto.Marshal(&Envelope{}) // a keepalive
	f.Add(empty)
	f.Add([]byte{0x22, 0x00})             // one empty Message: all indices 0, nothing to index
	f.Add([]byte{0x22, 0x02, 0x10, 0x7f}) // TargetIndex 127

	e, err := actor.NewEngine(actor.NewEngineConfig())
	if err != nil {
		f.Fatal(err)
	}
	var panics atomic.Int64
	var lastPanic atomic.Value
	r := New(self, NewConfig().WithOnRefuse(func(rf Refusal) {
		if rf.Reason == RefusePanic {
			panics.Add(1)
			lastPanic.Store(rf.Err.Error())
		}
	}))
	r.engine = e
	rd := newStreamReader(r)
	peer := Peer{Addr: &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1), Port: 5555}}

	f.Fuzz(func(t *testing.T, frame []byte) {
		var env Envelope
		if err := proto.Unmarshal(frame, &env); err != nil {
			return
		}
		for _, m := range env.Messages {
			rd.handle(peer, map[string]struct{}{}, &env, m, nil)
		}
		if n := panics.Load(); n > 0 {
			t.Fatalf("%d panics handling messages, last: %v", n, lastPanic.Load())
		}
	})
}
