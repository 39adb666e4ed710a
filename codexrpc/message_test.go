package codexrpc

import (
	"bytes"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"reflect"
	"strings"
	"testing"
	"unsafe"
)

func TestDecodeMessage(t *testing.T) {
	tests := []struct {
		in   string
		want string // type name, or "err"
	}{
		{`{"id":1,"result":{}}`, "response"},
		{`{"id":"a","result":null}`, "response"},
		{`{"jsonrpc":"2.0","id":1,"result":{}}`, "response"},
		{`{"id":1,"error":{"code":-32600,"message":"x"}}`, "response"},
		{`{"id":null,"error":{"code":-32700,"message":"parse"}}`, "response"},
		{`{"method":"turn/started","params":{},"emittedAtMs":1}`, "notification"},
		{`{"method":"item/tool/requestUserInput","id":0,"params":{}}`, "request"},
		{`{"id":1}`, "response"},
		{`{"id":true,"result":1}`, "err"},
		{`{}`, "err"},
		{`[]`, "err"},
		{`not json`, "err"},
		{`{"method":1}`, "err"},
		{``, "err"},
	}
	for _, tt := range tests {
		m, err := DecodeMessage([]byte(tt.in))
		got := "err"
		if err == nil {
			switch m.(type) {
			case *Response:
				got = "response"
			case *Notification:
				got = "notification"
			case *Request:
				got = "request"
			}
		} else if !errors.Is(err, ErrMalformed) {
			t.Errorf("%s: error %v does not wrap ErrMalformed", tt.in, err)
		}
		if got != tt.want {
			t.Errorf("DecodeMessage(%s) = %s, want %s", tt.in, got, tt.want)
		}
	}
}

// oddLines are lines the fast path must leave to encoding/json, or get
// exactly right: each is a seed of FuzzDecodeMessage and a case of
// TestDecodeFastAgrees.
var oddLines = []string{
	// Keys encoding/json matches case-insensitively, Unicode folding
	// included ("ı" is U+0131, "ſ" U+017F: they fold to I and S).
	`{"ID":1,"result":{}}`, `{"Method":"m","params":{}}`, `{"PARAMS":{},"method":"m"}`,
	`{"id":1,"Result":2}`, `{"id":1,"eRROR":{"code":1,"message":"x"}}`,
	`{"ıd":1}`, `{"method":"m","paramſ":{}}`,
	// Escaped and non-ASCII keys and methods.
	`{"m\u0065thod":"m"}`, `{"method":"a\u0062"}`, `{"method":"é"}`, `{"method":"a\/b"}`,
	"{\"method\":\"\xff\"}", "{\"method\":\"m\",\"params\":\"\xff\xfe\"}", "{\"\xffid\":1}",
	// Duplicates: the last wins, and an error object merges.
	`{"method":"a","method":"b"}`, `{"id":1,"result":1,"result":2}`, `{"id":1,"id":2,"result":0}`,
	`{"id":1,"error":{"code":1,"message":"a"},"error":{"code":2}}`,
	`{"id":1,"error":{"code":1},"error":null}`, `{"method":"m","method":null}`,
	// Nulls and empties.
	`{"method":null,"id":1}`, `{"error":null,"id":1}`, `{"method":"","id":1}`, `{"id":null}`,
	`{"method":"m","params":null}`, `{"id":1,"result":null}`, `{"":1,"method":"m"}`, `{}`, `{ }`,
	// Types encoding/json refuses or the union rejects.
	`{"method":5}`, `{"method":{}}`, `{"method":"m","params":5}`, `{"id":[1]}`, `{"id":{}}`,
	`{"id":true}`, `{"id":"x","error":[]}`, `{"id":1,"error":"x"}`,
	// Whitespace, order, nesting.
	` { "method" : "m" , "params" : { "a" : [ 1 , 2 ] } } `, "{\t\"id\"\r:\n1}",
	`{"id":1,"params":{},"method":"m"}`,
	`{"method":"m","params":[1,-2.5e+3,{"a":[true,false,null,"x"]},[],{}],"emittedAtMs":1}`,
	`{"method":"m","params":` + strings.Repeat("[", 300) + strings.Repeat("]", 300) + `}`,
	`{"method":"m","params":` + strings.Repeat(`{"a":`, 255) + `1` + strings.Repeat("}", 255) + `}`,
	`{"method":"m","params":` + strings.Repeat("[", 10001) + strings.Repeat("]", 10001) + `}`,
	// Numbers.
	`{"id":-0}`, `{"id":01}`, `{"id":1.}`, `{"id":1e}`, `{"id":1E+2}`, `{"id":-}`, `{"id":.5}`,
	`{"id":+1}`, `{"id":1.5e-07}`, `{"id":2,"result":-0.0e0}`,
	// Strings.
	"{\"method\":\"a\tb\"}", `{"method":"m","params":"\x"}`, `{"method":"m","params":"\u12"}`,
	`{"method":"m","params":"\uD800\u0041\"\\\/\b\f\n\r\t"}`, `{"id":"\ud800"}`, "{\"id\":\"a\x7f\"}",
	// Not one object.
	`{"method":"m"}x`, `{"method":"m"}{}`, `{"method":"m",}`, `{,}`, `{"a"}`, `{"a":}`, `{"a" 1}`,
	`{"method":"m"`, `{"method":"m","params":[1,]}`, `{"method":"m","params":[1}`, `{"method":"m","params":{"a":1]}`,
	`{"method":"m","params":{"a":1,}}`, `{"method":"m","params":{1:2}}`, `{"method":"m","params":tru}`,
	`{"method":"m","params":truex}`, `{"method":"m","params":[nul]}`, `{"method":"m","params":"unterminated}`,
	"\u00a0{\"method\":\"m\"}\u0085", "\ufeff{}",
}

// streamLines are the recorded lines of testdata/stream.jsonl.
func streamLines(tb testing.TB) [][]byte {
	tb.Helper()
	data, err := os.ReadFile(streamFile)
	if err != nil {
		tb.Fatal(err)
	}
	return bytes.Split(bytes.TrimSuffix(data, []byte("\n")), []byte("\n"))
}

// checkAgrees fails when the decoder's answer for in differs from
// encoding/json's, or aliases in.
func checkAgrees(t *testing.T, in []byte) {
	t.Helper()
	orig := bytes.Clone(in)
	var want Message
	var wantErr error
	if trimmed := bytes.TrimSpace(orig); len(trimmed) > 0 && trimmed[0] == '{' {
		want, wantErr = decodeJSON(trimmed)
	}
	var d decoder
	got, err := d.decode(in)
	for i := range in {
		in[i] = 'x' // the LineReader reuses its buffer
	}
	if want == nil && wantErr == nil { // not an object: refused before either path
		if err == nil || !errors.Is(err, ErrMalformed) {
			t.Fatalf("decode(%q) = %v, %v; want ErrMalformed", orig, got, err)
		}
		return
	}
	if fmt.Sprint(err) != fmt.Sprint(wantErr) {
		t.Fatalf("decode(%q): error %v, encoding/json's %v", orig, err, wantErr)
	}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("decode(%q)\n got  %s\n want %s", orig, describe(got), describe(want))
	}
}

// describe shows a message with its raw fields as text.
func describe(m Message) string {
	switch m := m.(type) {
	case *Request:
		return fmt.Sprintf("Request{ID:%q Method:%q Params:%q}", m.ID, m.Method, m.Params)
	case *Notification:
		return fmt.Sprintf("Notification{Method:%q Params:%q}", m.Method, m.Params)
	case *Response:
		return fmt.Sprintf("Response{ID:%q Result:%q Error:%+v}", m.ID, m.Result, m.Error)
	}
	return fmt.Sprintf("%#v", m)
}

func TestDecodeFastAgrees(t *testing.T) {
	for _, line := range streamLines(t) {
		checkAgrees(t, bytes.Clone(line))
	}
	for _, line := range oddLines {
		checkAgrees(t, []byte(line))
	}
}

// TestDecodeFastTakes checks the fast path is the one taken for what the
// CLI writes: every recorded line but error answers, and a delta.
func TestDecodeFastTakes(t *testing.T) {
	lines := append(streamLines(t),
		[]byte(`{"method":"item/agentMessage/delta","params":{"threadId":"t","turnId":"u","itemId":"i","delta":"a \"quoted\" \u00e9 word\n"}}`))
	var d decoder
	for _, line := range lines {
		_, ok := d.fast(line)
		isError := bytes.Contains(line, []byte(`"error":{`)) && !bytes.Contains(line, []byte(`"method"`))
		if ok == isError {
			t.Errorf("fast path taken = %v for %s", ok, head(line, 100))
		}
	}
	for _, line := range []string{`{"ID":1}`, `{"method":"a","method":"b"}`, `{"method":"a\u0062"}`, `{"id":1,"error":{"code":1}}`} {
		if _, ok := d.fast([]byte(line)); ok {
			t.Errorf("fast path taken for %s, which is encoding/json's", line)
		}
	}
}

func TestDecodeInternsMethods(t *testing.T) {
	line := []byte(`{"method":"item/agentMessage/delta","params":{"threadId":"t","turnId":"u","itemId":"i","delta":"hi"}}`)
	var d decoder
	first, err := d.decode(line)
	if err != nil {
		t.Fatal(err)
	}
	second, err := d.decode(line)
	if err != nil {
		t.Fatal(err)
	}
	a, b := first.(*Notification).Method, second.(*Notification).Method
	if unsafe.StringData(a) != unsafe.StringData(b) {
		t.Errorf("the method of two equal lines is two strings; want one interned")
	}
	// A notification costs the message and one copy of its params.
	if n := testing.AllocsPerRun(100, func() { _, _ = d.decode(line) }); n > 2 {
		t.Errorf("decoding a delta allocates %v times, want at most 2", n)
	}
	// The table is bounded: a peer inventing names cannot grow it forever.
	for i := range maxInterned + 10 {
		if _, err := d.decode(fmt.Appendf(nil, `{"method":"m%d"}`, i)); err != nil {
			t.Fatal(err)
		}
	}
	if len(d.methods) > maxInterned {
		t.Errorf("%d interned methods, over the bound %d", len(d.methods), maxInterned)
	}
}

func TestDecodeRawNotExtensible(t *testing.T) {
	// Params and ID share one copy: appending to one must not write over
	// the other.
	var d decoder
	m, err := d.decode([]byte(`{"id":7,"method":"m","params":{"a":1},"x":0}`))
	if err != nil {
		t.Fatal(err)
	}
	req := m.(*Request)
	_ = append(req.ID, 'Z')
	_ = append(req.Params[:len(req.Params):len(req.Params)], 'Z')
	if string(req.ID) != "7" || string(req.Params) != `{"a":1}` {
		t.Errorf("got ID %q params %q", req.ID, req.Params)
	}
	if cap(req.ID) != len(req.ID) || cap(req.Params) != len(req.Params) {
		t.Errorf("raw fields have room to grow into each other: caps %d, %d", cap(req.ID), cap(req.Params))
	}
}

// FuzzDecodeMessage checks the fast path agrees with encoding/json on every
// input (the same message or the same error), never aliases its input, and
// that what is decoded is a well-formed message.
func FuzzDecodeMessage(f *testing.F) {
	for _, line := range streamLines(f) {
		f.Add(line)
	}
	for _, s := range oddLines {
		f.Add([]byte(s))
	}
	f.Add([]byte(`{"id":1,"result":{"thread":{"id":"x"}}}`))
	f.Add([]byte(`{"method":"item/commandExecution/requestApproval","id":0,"params":{}}`))
	f.Add([]byte(`{"id":2,"error":{"code":-32001,"message":"overloaded"}}`))
	f.Add([]byte(`garbage`))
	f.Add([]byte(`{"id":1e99}`))
	f.Fuzz(func(t *testing.T, in []byte) {
		checkAgrees(t, bytes.Clone(in))
		m, err := DecodeMessage(in)
		if err != nil {
			if m != nil || !errors.Is(err, ErrMalformed) {
				t.Fatalf("error %v with message %v", err, m)
			}
			return
		}
		switch m := m.(type) {
		case *Request:
			if m.Method == "" || len(m.ID) == 0 {
				t.Fatalf("request without method or id: %+v", m)
			}
		case *Notification:
			if m.Method == "" {
				t.Fatalf("notification without method")
			}
		case *Response:
			if m.Error == nil && len(m.Result) == 0 {
				t.Fatalf("response with neither result nor error")
			}
		default:
			t.Fatalf("unexpected type %T", m)
		}
	})
}

func TestNextSpecial(t *testing.T) {
	isSpecial := func(c byte) bool { return c == '"' || c == '\\' || c < 0x20 || c >= 0x80 }
	naive := func(b []byte, j int) int {
		for ; j < len(b) && !isSpecial(b[j]); j++ {
		}
		return j
	}
	check := func(b []byte) {
		t.Helper()
		for j := 0; j <= len(b); j++ {
			if got, want := nextSpecial(b, j), naive(b, j); got != want {
				t.Fatalf("nextSpecial(%q, %d) = %d, want %d", b, j, got, want)
			}
		}
	}
	// Every byte at every place of a word, after and before others.
	for c := range 256 {
		for p := range 8 {
			b := []byte("abcdefghijklmnopq")
			b[p] = byte(c)
			check(b)
			b[p+8] = 0 // a borrow below must not hide it
			check(b)
		}
	}
	// Mixes of ordinary and special bytes.
	r := rand.New(rand.NewPCG(1, 2))
	alphabet := []byte("a~ \x7f\x00\x1f\x20\"\\\x80\xff\x21\x5b\x5d")
	for range 20000 {
		b := make([]byte, r.IntN(24))
		for i := range b {
			b[i] = alphabet[r.IntN(len(alphabet))]
		}
		check(b)
	}
}
