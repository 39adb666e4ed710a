package gateway

import (
	"bytes"
	"encoding/json"
	"testing"
)

// hasDupKey is dupKey's reference: encoding/json's tokens, one map of
// keys per open object.
func hasDupKey(b []byte) bool {
	dec := json.NewDecoder(bytes.NewReader(b))
	var stack []map[string]bool
	wantKey := []bool{}
	for {
		tok, err := dec.Token()
		if err != nil {
			return false
		}
		switch tok {
		case json.Delim('{'):
			stack = append(stack, map[string]bool{})
			wantKey = append(wantKey, true)
			continue
		case json.Delim('['):
			stack = append(stack, nil)
			wantKey = append(wantKey, false)
			continue
		case json.Delim('}'), json.Delim(']'):
			stack, wantKey = stack[:len(stack)-1], wantKey[:len(wantKey)-1]
		default:
			if n := len(stack); n > 0 && stack[n-1] != nil && wantKey[n-1] {
				k := tok.(string)
				if stack[n-1][k] {
					return true
				}
				stack[n-1][k] = true
				wantKey[n-1] = false
				continue
			}
		}
		if n := len(stack); n > 0 && stack[n-1] != nil {
			wantKey[n-1] = true // a member's value ended
		}
		if len(stack) == 0 {
			return false
		}
	}
}

// FuzzDupKey: on every JSON object encoding/json reads, dupKey does not
// panic and finds a key twice exactly when the tokens show one.
func FuzzDupKey(f *testing.F) {
	for _, s := range []string{
		`{}`, `{"a":1,"a":2}`, `{"a":{"a":1},"b":[{"a":1},{"a":2,"a":3}]}`,
		`{"a":"\"a\"","b":"\\","c":{"d":[[],{}],"d":null}}`, `{"\u0061":1,"a":2}`,
		`{"a\ud800":1,"a\udfff":2}`, "{\"a\xff\":1,\"a\xfe\":2}", ` { "k" : [ 1 , { "k" : 2 } ] , "K" : 3 } `,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		var obj map[string]any
		if json.Unmarshal(b, &obj) != nil || obj == nil {
			return
		}
		if got, want := dupKey(b) != nil, hasDupKey(b); got != want {
			t.Errorf("dupKey(%q) found one: %v, want %v", b, got, want)
		}
	})
}
