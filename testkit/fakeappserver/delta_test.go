package fakeappserver

import (
	"bytes"
	"io"
	"testing"
)

// A flood's deltas written without encoding/json are the bytes
// notificationLine writes, and words it cannot write plainly take that
// path.
func TestWriteDeltaSameBytes(t *testing.T) {
	for _, word := range []string{"w ", "Hello ", "", "a,b.", "tab\there", `q"uote`, `back\slash`, "<b>&", "é", "\x7f"} {
		var out bytes.Buffer
		s := newSession(&Fake{}, &out, io.Discard)
		tr := &turn{th: &thread{id: "019a0c4e-7d1b-7c12-9e55-2f3c8b7a1d20"}, id: "019a0c4e-8a2f-7e01-b3c4-5d6e7f809a1b"}
		s.writeDelta(tr, "msg-1", word, 1796217969576)
		s.flush()
		want := append(notificationLine("item/agentMessage/delta", deltaParams{ThreadID: tr.th.id, TurnID: tr.id, ItemID: "msg-1", Delta: word}, 1796217969576), '\n')
		if !bytes.Equal(out.Bytes(), want) {
			t.Errorf("word %q:\n got %s\nwant %s", word, out.Bytes(), want)
		}
	}
}
