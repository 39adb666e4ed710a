package eventmap

import (
	"encoding/json"
	"testing"

	"github.com/meshweaver/supervisor/codexproto"
)

func TestThreadOf(t *testing.T) {
	for _, tt := range []struct {
		params string
		want   string
		ok     bool
	}{
		{`{"threadId":"t1","turnId":"u"}`, "t1", true},
		{`{"turnId":"u"}`, "", true},
		{`{}`, "", true},
		{`[1]`, "", false},
		{``, "", false},
	} {
		if got, ok := ThreadOf([]byte(tt.params)); got != tt.want || ok != tt.ok {
			t.Errorf("ThreadOf(%s) = %q, %v; want %q, %v", tt.params, got, ok, tt.want, tt.ok)
		}
	}
}

// threadOfDecoded is ThreadOf by a full decode: what the scan must agree
// with.
func threadOfDecoded(params []byte) (string, bool) {
	var head struct {
		ThreadID string `json:"threadId"`
	}
	if json.Unmarshal(params, &head) != nil {
		return "", false
	}
	return head.ThreadID, true
}

var threadOfSeeds = []string{
	`{"threadId":"t1","turnId":"u"}`,
	`{"turnId":"u","threadId":"t2"}`,
	` { "threadId" : "t3" } `,
	`{"item":{"threadId":"nested","text":"a \"threadId\":\"x\" b"},"threadId":"t4"}`,
	`{"delta":"x\\\"threadId\":\"no","threadId":"t5"}`,
	`{"a":[1,{"b":[]},"]"],"n":-1.5e3,"t":true,"z":null,"threadId":"t6"}`,
	`{"threadId":null}`,
	`{"threadId":7}`,
	`{"threadId":"esc\u0041aped"}`,
	`{"thread\u0049d":"escaped key"}`,
	`{"turnId":"u"}`,
	`{}`,
	`[1]`,
	``,
	`null`,
	`{"threadId":"a","threadId":"b"}`,
}

// The scan agrees with a full decode on every valid JSON input (the Conn's
// reader hands the actor nothing else), the tricky ones above included.
func TestThreadOfAgreesWithDecode(t *testing.T) {
	for _, s := range threadOfSeeds {
		if !json.Valid([]byte(s)) {
			continue
		}
		id, ok := ThreadOf([]byte(s))
		wid, wok := threadOfDecoded([]byte(s))
		if id != wid || ok != wok {
			t.Errorf("ThreadOf(%s) = %q, %v; a decode says %q, %v", s, id, ok, wid, wok)
		}
	}
}

func FuzzThreadOf(f *testing.F) {
	for _, s := range threadOfSeeds {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		b := []byte(s)
		id, ok := ThreadOf(b) // never panics, on any input
		if !json.Valid(b) {
			return
		}
		if wid, wok := threadOfDecoded(b); id != wid || ok != wok {
			t.Errorf("ThreadOf(%s) = %q, %v; a decode says %q, %v", s, id, ok, wid, wok)
		}
	})
}

// A delta notification's params, as the CLI writes them.
var deltaParams = []byte(`{"threadId":"019a0c4e-7d1b-7c12-9e55-2f3c8b7a1d20","turnId":"019a0c4e-8a2f-7e01-b3c4-5d6e7f809a1b","itemId":"msg_0a1b2c3d4e5f","delta":" weather"}`)

func BenchmarkThreadOf(b *testing.B) {
	b.Run("scan", func(b *testing.B) {
		for b.Loop() {
			ThreadOf(deltaParams)
		}
	})
	b.Run("decode", func(b *testing.B) {
		for b.Loop() {
			threadOfDecoded(deltaParams)
		}
	})
}

var noteHeadSeeds = []string{
	string(deltaParams),
	`{"threadId":"t","turnId":"u","itemId":"i","delta":"line\nwith \"quotes\" and \u00e9\ud83d\ude00"}`,
	`{"threadId":"t","itemId":"i","delta":"café — ok"}`,
	`{"threadId":"t","delta":"bad \ud800 surrogate"}`,
	"{\"threadId\":\"t\",\"delta\":\"invalid \xff utf-8\"}",
	`{"delta":null,"itemId":"i"}`,
	`{"Delta":"case","threadId":"t"}`,
	`{"delta":5}`,
	`{"item":{"delta":"nested"},"turn":{"id":"x"},"threadId":"t"}`,
	`{"turnId":"u","threadId":"t","extra":[{"itemId":"no"}],"itemId":"i","delta":"d","after":1}`,
	`{}`,
	`[]`,
	`"delta"`,
}

// noteHead's scan agrees with a full decode into codexproto.Delta on
// every valid JSON input: the same members, and an error exactly when the
// decode fails.
func FuzzNoteHead(f *testing.F) {
	for _, s := range noteHeadSeeds {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		b := []byte(s)
		got, gerr := noteHead(b) // never panics, on any input
		if !json.Valid(b) {
			return
		}
		var want codexproto.Delta
		werr := json.Unmarshal(b, &want)
		if got != want || (gerr == nil) != (werr == nil) {
			t.Errorf("noteHead(%s) = %+v, %v; a decode says %+v, %v", s, got, gerr, want, werr)
		}
	})
}

func BenchmarkNoteHead(b *testing.B) {
	b.Run("scan", func(b *testing.B) {
		for b.Loop() {
			_, _ = noteHead(deltaParams)
		}
	})
	b.Run("scan-after", func(b *testing.B) {
		prev, _ := noteHead(deltaParams)
		for b.Loop() {
			_, _ = NoteHeadAfter(deltaParams, &prev)
		}
	})
	b.Run("decode", func(b *testing.B) {
		for b.Loop() {
			var d codexproto.Delta
			_ = json.Unmarshal(deltaParams, &d)
		}
	})
}
