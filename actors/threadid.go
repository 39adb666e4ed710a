package actors

import (
	"bytes"
	"encoding/json"
)

// threadOf is the threadId of a notification's or a request's params
// ("" when none); ok is false when params are not a JSON object.
//
// It runs for every notification in the app-server actor, serially for
// all of a user's threads, on params the Conn's reader has already
// validated. Decoding them whole (json.Unmarshal) cost as much as the
// reader's own decode; scanThreadID reads the top-level keys only, up to
// "threadId" (the CLI writes it first), skipping other values without
// decoding them, and leaves anything unusual (an escaped or non-ASCII key,
// "threadId" in another case, an id not plain ASCII, a non-string id) to
// json.Unmarshal.
func threadOf(params json.RawMessage) (threadID string, ok bool) {
	if id, ok, sure := scanThreadID(params); sure {
		return id, ok
	}
	var head struct {
		ThreadID string `json:"threadId"`
	}
	if json.Unmarshal(params, &head) != nil {
		return "", false
	}
	return head.ThreadID, true
}

// scanThreadID finds the top-level "threadId" string of a JSON object;
// sure is false when it cannot tell without a full decode.
func scanThreadID(b []byte) (id string, ok, sure bool) {
	i := skipSpace(b, 0)
	if i >= len(b) || b[i] != '{' {
		return "", false, false
	}
	i = skipSpace(b, i+1)
	if i < len(b) && b[i] == '}' {
		return "", true, true
	}
	for i < len(b) {
		if b[i] != '"' {
			return "", false, false
		}
		end := stringEnd(b, i)
		if end < 0 {
			return "", false, false
		}
		key := b[i+1 : end-1]
		if !plainKey(key) {
			return "", false, false
		}
		i = skipSpace(b, end)
		if i >= len(b) || b[i] != ':' {
			return "", false, false
		}
		i = skipSpace(b, i+1)
		if string(key) == "threadId" {
			if i >= len(b) || b[i] != '"' {
				return "", false, false // null, a number, …: as json.Unmarshal says
			}
			end := stringEnd(b, i)
			if end < 0 || !plain(b[i+1:end-1]) {
				return "", false, false // json.Unmarshal unescapes, and replaces invalid UTF-8
			}
			return string(b[i+1 : end-1]), true, true
		}
		if i = valueEnd(b, i); i < 0 {
			return "", false, false
		}
		i = skipSpace(b, i)
		switch {
		case i < len(b) && b[i] == ',':
			i = skipSpace(b, i+1)
		case i < len(b) && b[i] == '}':
			return "", true, true
		default:
			return "", false, false
		}
	}
	return "", false, false
}

// plainKey reports a key the scan can judge: no escape and no byte
// outside ASCII, and not "threadId" in another case (json.Unmarshal
// matches field names case-insensitively, Unicode folding included).
func plainKey(key []byte) bool {
	return plain(key) && (string(key) == "threadId" || !bytes.EqualFold(key, []byte("threadId")))
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
