package messages

import (
	"testing"

	"github.com/vmihailenco/msgpack/v5"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/anypb"
)

// benchEvent is a typical streamed text delta.
var benchEvent = RoundEvent{RoundID: "r-0123456789", Seq: 42, Kind: KindText, Text: "Here is the next part of the answer, ", ItemID: "msg_0123456789abcdef"}

// BenchmarkEncodeDecodeRoundEvent measures the full remote path of one
// event: Encode, proto.Marshal, proto.Unmarshal, Decode.
func BenchmarkEncodeDecodeRoundEvent(b *testing.B) {
	b.ReportAllocs()
	for b.Loop() {
		a, err := Encode(benchEvent)
		if err != nil {
			b.Fatal(err)
		}
		raw, err := proto.Marshal(a)
		if err != nil {
			b.Fatal(err)
		}
		var got anypb.Any
		if err := proto.Unmarshal(raw, &got); err != nil {
			b.Fatal(err)
		}
		v, err := Decode(&got)
		if err != nil {
			b.Fatal(err)
		}
		if v.(RoundEvent).Seq != benchEvent.Seq {
			b.Fatal("wrong event")
		}
	}
}

// BenchmarkMsgpackOnly is the baseline: msgpack alone, with no envelope,
// limits or catalog.
func BenchmarkMsgpackOnly(b *testing.B) {
	b.ReportAllocs()
	for b.Loop() {
		body, err := msgpack.Marshal(benchEvent)
		if err != nil {
			b.Fatal(err)
		}
		var got RoundEvent
		if err := msgpack.Unmarshal(body, &got); err != nil {
			b.Fatal(err)
		}
		if got.Seq != benchEvent.Seq {
			b.Fatal("wrong event")
		}
	}
}
