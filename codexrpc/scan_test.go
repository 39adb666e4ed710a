package codexrpc

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"
)

// deltaShape is what ScanStrings is checked against: the fields of a
// delta notification's params (codexproto.Delta).
type deltaShape struct {
	ThreadID string `json:"threadId"`
	TurnID   string `json:"turnId"`
	ItemID   string `json:"itemId"`
	Delta    string `json:"delta"`
}

var deltaNames = []string{"threadId", "turnId", "itemId", "delta"}

// checkScanStrings fails when ScanStrings is sure of obj and disagrees
// with json.Unmarshal, or aliases obj; it reports whether it was sure.
func checkScanStrings(t *testing.T, obj []byte) bool {
	t.Helper()
	var want deltaShape
	wantErr := json.Unmarshal(obj, &want)
	out := []string{"stale", "stale", "stale", "stale"}
	sure := ScanStrings(obj, deltaNames, out)
	for i := range obj {
		obj[i] = 'x'
	}
	if !sure {
		return false
	}
	if wantErr != nil {
		t.Fatalf("ScanStrings is sure of %q, which encoding/json refuses: %v", obj, wantErr)
	}
	if got := (deltaShape{out[0], out[1], out[2], out[3]}); got != want {
		t.Fatalf("ScanStrings: got %+v, encoding/json %+v", got, want)
	}
	return true
}

func TestScanStrings(t *testing.T) {
	for _, tt := range []struct {
		obj  string
		sure bool
	}{
		{`{"threadId":"t","turnId":"u","itemId":"i","delta":"hi"}`, true},
		{` { "delta" : "a" , "other" : [1, {"threadId": 2}] } `, true},
		{`{}`, true},
		{`{"delta":null}`, true},
		{`{"delta":"a\nb\u00e9 \"q\" \ud83d\ude00"}`, true},
		{`{"delta":"é"}`, true},
		{"{\"delta\":\"\xff\"}", true}, // encoding/json replaces it with U+FFFD
		{`{"delta":"\ud800"}`, true},
		{`{"DELTA":"a"}`, false},
		{`{"threadID":"a"}`, false},
		{`{"d\u0065lta":"a"}`, false},
		{`{"delta":"a","delta":"b"}`, false},
		{`{"delta":1}`, false},
		{`{"delta":{}}`, false},
		{`{"delta":"a"`, false},
		{`{"delta":"a"} x`, false},
		{`null`, false},
		{`[]`, false},
		{``, false},
	} {
		if got := checkScanStrings(t, []byte(tt.obj)); got != tt.sure {
			t.Errorf("ScanStrings(%s): sure = %v, want %v", tt.obj, got, tt.sure)
		}
	}
	// Every recorded notification's params is read without encoding/json.
	for _, line := range streamLines(t) {
		m, err := DecodeMessage(line)
		if err != nil {
			t.Fatal(err)
		}
		if n, ok := m.(*Notification); ok && !checkScanStrings(t, bytes.Clone(n.Params)) {
			t.Errorf("ScanStrings is unsure of the params of %s", head(line, 100))
		}
	}
	if ScanStrings([]byte(`{}`), deltaNames, make([]string, 3)) {
		t.Errorf("ScanStrings is sure with out shorter than names")
	}
	if ScanStrings([]byte(`{}`), make([]string, 65), make([]string, 65)) {
		t.Errorf("ScanStrings is sure with 65 names")
	}
}

func FuzzScanStrings(f *testing.F) {
	for _, line := range streamLines(f) {
		if m, err := DecodeMessage(line); err == nil {
			if n, ok := m.(*Notification); ok {
				f.Add([]byte(n.Params))
			}
		}
	}
	f.Add([]byte(`{"threadId":"t","turnId":"u","itemId":"i","delta":"a\nb"}`))
	f.Add([]byte(`{"DELTA":"a","delta":null,"threadId":"` + strings.Repeat("é", 3) + `"}`))
	f.Fuzz(func(t *testing.T, obj []byte) {
		checkScanStrings(t, obj)
	})
}

func BenchmarkScanStrings(b *testing.B) {
	m, err := DecodeMessage([]byte(deltaLine))
	if err != nil {
		b.Fatal(err)
	}
	params := m.(*Notification).Params
	out := make([]string, len(deltaNames))
	b.Run("scan", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if !ScanStrings(params, deltaNames, out) {
				b.Fatal("unsure")
			}
		}
	})
	b.Run("json", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			var d deltaShape
			if err := json.Unmarshal(params, &d); err != nil {
				b.Fatal(err)
			}
		}
	})
}

// ScanStringsReusing answers as ScanStrings does, whatever prev holds
// (the values it reads, others, escapes, invalid UTF-8), and reuses prev's
// strings for the values it repeats.
func FuzzScanStringsReusing(f *testing.F) {
	f.Add([]byte(`{"threadId":"t","turnId":"u","itemId":"i","delta":"a"}`), "t", "u", "i", "a")
	f.Add([]byte(`{"threadId":"t\u0041","turnId":"u","itemId":"i","delta":"a"}`), "tA", `u`, "x", "")
	f.Add([]byte("{\"threadId\":\"\xff\",\"delta\":\"a\"}"), "\xff", "", "", "a")
	f.Fuzz(func(t *testing.T, obj []byte, p0, p1, p2, p3 string) {
		prev := []string{p0, p1, p2, p3}
		want := make([]string, len(deltaNames))
		got := make([]string, len(deltaNames))
		wsure := ScanStrings(obj, deltaNames, want)
		gsure := ScanStringsReusing(obj, deltaNames, got, prev)
		if wsure != gsure {
			t.Fatalf("sure %v, ScanStrings says %v", gsure, wsure)
		}
		if !wsure {
			return
		}
		for i := range want {
			if got[i] != want[i] {
				t.Errorf("%s = %q, ScanStrings says %q", deltaNames[i], got[i], want[i])
			}
		}
	})
}

func TestScanStringsReusingAllocates(t *testing.T) {
	obj := []byte(`{"threadId":"019a0c4e-7d1b-7c12-9e55-2f3c8b7a1d20","turnId":"019a0c4e-8a2f-7e01-b3c4-5d6e7f809a1b","itemId":"msg-1","delta":"w "}`)
	prev := make([]string, len(deltaNames))
	if !ScanStrings(obj, deltaNames, prev) {
		t.Fatal("unsure")
	}
	out := make([]string, len(deltaNames))
	if n := testing.AllocsPerRun(100, func() { ScanStringsReusing(obj, deltaNames, out, prev) }); n > 1 {
		t.Errorf("%v allocations with the three ids repeated, want at most 1 (the delta)", n)
	}
}
