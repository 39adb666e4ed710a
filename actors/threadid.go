package actors

import (
	"bytes"
	"encoding/json"
	"unicode/utf8"
)

// threadOf is the threadId of a notification's or a request's params
// ("" when none); ok is false when params are not a JSON object.
//
// It runs for every notification in the app-server actor, serially for
// all of a user's threads, on params the Conn's reader has already
// validated. Decoding them whole (json.Unmarshal) cost as much as the
// reader's own decode; scanStrings reads the top-level keys only, up to
// "threadId" (the CLI writes it first), skipping other values without
// decoding them.
func threadOf(params json.RawMessage) (threadID string, ok bool) {
	var v [1]string
	if ok, sure := scanStrings(params, threadIDKey[:], v[:]); sure {
		return v[0], ok
	}
	var head struct {
		ThreadID string `json:"threadId"`
	}
	if json.Unmarshal(params, &head) != nil {
		return "", false
	}
	return head.ThreadID, true
}

var threadIDKey = [1]string{"threadId"}

// scanStrings reads the top-level string members named by keys of a JSON
// object into vals (same order; a key absent leaves ""), as json.Unmarshal
// into a struct of string fields with those names would, without decoding
// the other values. It stops once every key is found (the first of
// duplicate keys wins there, where json.Unmarshal takes the last: the CLI
// writes none). sure is false when it cannot tell without a full decode:
// not an object, a key with an escape or a byte outside ASCII, a key
// matching a wanted one only in another case (json.Unmarshal folds case),
// a wanted value that is not a string or null. ok is false when b is not
// a JSON object. b must be valid JSON for the results to be json.Unmarshal's.
func scanStrings(b []byte, keys []string, vals []string) (ok, sure bool) {
	i := skipSpace(b, 0)
	if i >= len(b) || b[i] != '{' {
		return false, false
	}
	i = skipSpace(b, i+1)
	if i < len(b) && b[i] == '}' {
		return true, true
	}
	left := len(keys)
	for i < len(b) {
		if b[i] != '"' {
			return false, false
		}
		end := stringEnd(b, i)
		if end < 0 {
			return false, false
		}
		key := b[i+1 : end-1]
		k, known := wantedKey(key, keys)
		if !known {
			return false, false
		}
		i = skipSpace(b, end)
		if i >= len(b) || b[i] != ':' {
			return false, false
		}
		i = skipSpace(b, i+1)
		if k >= 0 {
			switch {
			case i < len(b) && b[i] == '"':
				end := stringEnd(b, i)
				if end < 0 {
					return false, false
				}
				v, ok := stringValue(b[i:end])
				if !ok {
					return false, false
				}
				vals[k] = v
				i = end
			case bytes.HasPrefix(b[i:], []byte("null")):
				vals[k] = ""
				i += len("null")
			default:
				return false, false // a number, an object, …: as json.Unmarshal says
			}
			if left--; left == 0 {
				return true, true
			}
		} else if i = valueEnd(b, i); i < 0 {
			return false, false
		}
		i = skipSpace(b, i)
		switch {
		case i < len(b) && b[i] == ',':
			i = skipSpace(b, i+1)
		case i < len(b) && b[i] == '}':
			return true, true
		default:
			return false, false
		}
	}
	return false, false
}

// wantedKey is the index of key in keys (-1: not wanted); known is false
// when the scan cannot judge the key (see plain), or it matches a wanted
// key only in another case.
func wantedKey(key []byte, keys []string) (k int, known bool) {
	if !plain(key) {
		return -1, false
	}
	for j, w := range keys {
		if string(key) == w {
			return j, true
		}
		if bytes.EqualFold(key, []byte(w)) {
			return -1, false
		}
	}
	return -1, true
}

// stringValue is the value of the JSON string token tok (quotes
// included): its bytes when it has no escape and is valid UTF-8, else
// json.Unmarshal's reading of the token alone (which unescapes, and
// replaces invalid UTF-8).
func stringValue(tok []byte) (string, bool) {
	body := tok[1 : len(tok)-1]
	if bytes.IndexByte(body, '\\') < 0 && utf8.Valid(body) {
		return string(body), true
	}
	var s string
	if json.Unmarshal(tok, &s) != nil {
		return "", false
	}
	return s, true
}

// plain reports a string's content that is ASCII without escapes: its
// bytes are its value.
func plain(s []byte) bool {
	for _, c := range s {
		if c == '\\' || c >= 0x80 {
			return false
		}
	}
	return true
}

func skipSpace(b []byte, i int) int {
	for i < len(b) && (b[i] == ' ' || b[i] == '\t' || b[i] == '\n' || b[i] == '\r') {
		i++
	}
	return i
}

// stringEnd is the index just past the string starting at b[i] ('"'), or
// -1.
func stringEnd(b []byte, i int) int {
	for j := i + 1; j < len(b); j++ {
		switch b[j] {
		case '\\':
			j++
		case '"':
			return j + 1
		}
	}
	return -1
}

// valueEnd is the index just past the value starting at b[i], or -1.
func valueEnd(b []byte, i int) int {
	if i >= len(b) {
		return -1
	}
	switch b[i] {
	case '"':
		return stringEnd(b, i)
	case '{', '[':
		depth := 0
		for j := i; j < len(b); j++ {
			switch b[j] {
			case '"':
				end := stringEnd(b, j)
				if end < 0 {
					return -1
				}
				j = end - 1
			case '{', '[':
				depth++
			case '}', ']':
				if depth--; depth == 0 {
					return j + 1
				}
			}
		}
		return -1
	}
	j := i
	for j < len(b) && b[j] != ',' && b[j] != '}' && b[j] != ']' && b[j] != ' ' && b[j] != '\t' && b[j] != '\n' && b[j] != '\r' {
		j++
	}
	if j == i {
		return -1
	}
	return j
}
