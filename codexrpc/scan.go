package codexrpc

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"math/bits"
	"unicode/utf8"
)

// The fast path of DecodeMessage: one pass over a line that validates it as
// encoding/json does and finds the spans of the top-level members, with no
// reflection and no copy but the one kept. It is sure of its answer only
// for the shapes the CLI writes: plain ASCII keys without escapes, each of
// the union's keys at most once and spelled exactly, a method that is a
// plain ASCII string, no "error" object. Anything else (and anything that
// is not valid JSON) it leaves to the encoding/json path, which then
// decides and words the error; so it never has to agree with encoding/json
// on a rejection, only on what it accepts. FuzzDecodeMessage checks both
// paths agree on every input.

// member names the union's keys.
type member uint8

const (
	memberOther member = iota
	memberID
	memberMethod
	memberParams
	memberResult
	memberError
)

// span is b[start:end] of a scanned line; end == 0 when absent.
type span struct{ start, end int }

// scanned is what the fast path found in a line.
type scanned struct {
	id, method, params, result span
}

// maxScanDepth bounds the nesting the fast path follows (encoding/json's
// own limit is 10000); deeper values go to encoding/json.
const maxScanDepth = 256

// scanLine scans a whole line that starts with '{' and ends with '}' (the
// caller trimmed it). ok is false when the fast path cannot be sure.
func scanLine(b []byte) (s scanned, ok bool) {
	i := skipSpace(b, 1)
	if i < len(b) && b[i] == '}' {
		return s, i+1 == len(b)
	}
	var seen uint8
	for {
		key, v, ok := memberAt(b, i)
		if !ok {
			return s, false
		}
		m, sure := memberOf(key)
		if !sure {
			return s, false
		}
		if m != memberOther {
			if seen&(1<<m) != 0 {
				return s, false // a duplicate: encoding/json merges, the last wins
			}
			seen |= 1 << m
		}
		start, end := v.start, v.end
		switch m {
		case memberID:
			s.id = v
		case memberParams:
			s.params = v
		case memberResult:
			s.result = v
		case memberMethod:
			switch {
			case b[start] == '"':
				if _, plain := stringEnd(b, start); !plain {
					return s, false // encoding/json unescapes, and replaces invalid UTF-8
				}
				s.method = span{start + 1, end - 1}
			case string(b[start:end]) != "null": // null leaves a string as it is
				return s, false // not a string: encoding/json's type error
			}
		case memberError:
			if string(b[start:end]) != "null" { // null sets the pointer to nil
				return s, false // an error object: rare, decoded by encoding/json
			}
		}
		next, last, ok := afterMember(b, end)
		if !ok || last {
			return s, ok
		}
		i = next
	}
}

// memberAt reads the member of an object at b[i]: its key, which must be
// plain (no escape, its bytes valid as they are), and the span of its
// value; ok is false for anything else.
func memberAt(b []byte, i int) (key []byte, v span, ok bool) {
	if i >= len(b) || b[i] != '"' {
		return nil, v, false
	}
	end, plain := stringEnd(b, i)
	if end < 0 || !plain {
		return nil, v, false
	}
	key = b[i+1 : end-1]
	i = skipSpace(b, end)
	if i >= len(b) || b[i] != ':' {
		return nil, v, false
	}
	start := skipSpace(b, i+1)
	if end = valueEnd(b, start); end < 0 {
		return nil, v, false
	}
	return key, span{start, end}, true
}

// afterMember reads what follows a member's value ending at b[end]: a
// comma and the index of the next member, or (last) the end of the object,
// which must also end b but for spaces; ok is false for anything else.
func afterMember(b []byte, end int) (next int, last, ok bool) {
	i := skipSpace(b, end)
	switch {
	case i < len(b) && b[i] == ',':
		return skipSpace(b, i+1), false, true
	case i < len(b) && b[i] == '}':
		return 0, true, skipSpace(b, i+1) == len(b)
	}
	return 0, false, false
}

// memberOf names a plain key; sure is false for a key encoding/json
// would match to a member in another case (it matches case-insensitively).
func memberOf(key []byte) (m member, sure bool) {
	switch string(key) {
	case "id":
		return memberID, true
	case "method":
		return memberMethod, true
	case "params":
		return memberParams, true
	case "result":
		return memberResult, true
	case "error":
		return memberError, true
	}
	for _, name := range [...]string{"id", "method", "params", "result", "error"} {
		if len(key) == len(name) && bytes.EqualFold(key, []byte(name)) {
			return memberOther, false
		}
	}
	return memberOther, true
}

func skipSpace(b []byte, i int) int {
	for i < len(b) && (b[i] == ' ' || b[i] == '\t' || b[i] == '\n' || b[i] == '\r') {
		i++
	}
	return i
}

// stringEnd validates the string starting at b[i] ('"') and returns the
// index just past it, or -1. plain reports content that is ASCII without
// escapes: its bytes are its value.
func stringEnd(b []byte, i int) (end int, plain bool) {
	plain = true
	for j := nextSpecial(b, i+1); j < len(b); j = nextSpecial(b, j+1) {
		switch c := b[j]; {
		case c == '"':
			return j + 1, plain
		case c < 0x20:
			return -1, false
		case c >= 0x80:
			plain = false
		default: // a backslash
			plain = false
			if j+1 >= len(b) {
				return -1, false
			}
			j++
			switch b[j] {
			case '"', '\\', '/', 'b', 'f', 'n', 'r', 't':
			case 'u':
				if j+4 >= len(b) || !isHex(b[j+1]) || !isHex(b[j+2]) || !isHex(b[j+3]) || !isHex(b[j+4]) {
					return -1, false
				}
				j += 4
			default:
				return -1, false
			}
		}
	}
	return -1, false
}

// nextSpecial is the index of the first byte from b[j] on that a string
// scan must look at (a quote, a backslash, a control byte or one outside
// ASCII), or len(b). It reads eight bytes at a time.
func nextSpecial(b []byte, j int) int {
	for ; j+8 <= len(b); j += 8 {
		if m := specialMask(binary.LittleEndian.Uint64(b[j:])); m != 0 {
			return j + bits.TrailingZeros64(m)/8
		}
	}
	for ; j < len(b); j++ {
		if c := b[j]; c == '"' || c == '\\' || c < 0x20 || c >= 0x80 {
			return j
		}
	}
	return j
}

// specialMask sets the high bit of the bytes of x (little-endian) that
// nextSpecial stops at. Bytes above the first one may be flagged wrongly
// (a borrow runs upwards), never the first itself nor those below it: the
// zero-byte test (v-0x01…)&^v&0x80… is exact up to its first hit.
func specialMask(x uint64) uint64 {
	const ones, highs = 0x0101010101010101, 0x8080808080808080
	quote := x ^ (ones * '"')
	backslash := x ^ (ones * '\\')
	control := (x - ones*0x20) &^ x // a byte below 0x20
	return (control | (quote-ones)&^quote | (backslash-ones)&^backslash | x) & highs
}

func isHex(c byte) bool {
	return '0' <= c && c <= '9' || 'a' <= c && c <= 'f' || 'A' <= c && c <= 'F'
}

func isDigit(c byte) bool { return '0' <= c && c <= '9' }

// numberEnd validates the number starting at b[i] and returns the index
// just past it, or -1 (JSON's grammar: no leading zeros, no "+", no "."
// without digits on both sides).
func numberEnd(b []byte, i int) int {
	if i < len(b) && b[i] == '-' {
		i++
	}
	switch {
	case i < len(b) && b[i] == '0':
		i++
	case i < len(b) && '1' <= b[i] && b[i] <= '9':
		for i++; i < len(b) && isDigit(b[i]); i++ {
		}
	default:
		return -1
	}
	if i < len(b) && b[i] == '.' {
		i++
		if i >= len(b) || !isDigit(b[i]) {
			return -1
		}
		for i++; i < len(b) && isDigit(b[i]); i++ {
		}
	}
	if i < len(b) && (b[i] == 'e' || b[i] == 'E') {
		i++
		if i < len(b) && (b[i] == '+' || b[i] == '-') {
			i++
		}
		if i >= len(b) || !isDigit(b[i]) {
			return -1
		}
		for i++; i < len(b) && isDigit(b[i]); i++ {
		}
	}
	return i
}

// valueEnd validates the JSON value starting at b[i] and returns the index
// just past it, or -1 when it is not valid or nests deeper than
// maxScanDepth. What follows the value is the caller's to check (a number
// or literal must be followed by a delimiter). It does not recurse: the
// open containers are a bit stack, 1 for an object.
func valueEnd(b []byte, i int) int {
	var stack [maxScanDepth / 64]uint64
	depth := 0
	inObject := func() bool { return stack[(depth-1)/64]&(1<<((depth-1)%64)) != 0 }
	for {
		// A value at b[i].
		if i >= len(b) {
			return -1
		}
		switch c := b[i]; c {
		case '"':
			i, _ = stringEnd(b, i)
		case '{', '[':
			i = skipSpace(b, i+1)
			closer := byte(']')
			if c == '{' {
				closer = '}'
			}
			if i < len(b) && b[i] == closer {
				i++ // empty
				break
			}
			if depth == maxScanDepth {
				return -1
			}
			word, bit := depth/64, uint64(1)<<(depth%64)
			if c == '{' {
				stack[word] |= bit
				if i = memberKey(b, i); i < 0 {
					return -1
				}
			} else {
				stack[word] &^= bit
			}
			depth++
			continue // the first element's value
		case 't':
			i = literalEnd(b, i, "true")
		case 'f':
			i = literalEnd(b, i, "false")
		case 'n':
			i = literalEnd(b, i, "null")
		default:
			i = numberEnd(b, i)
		}
		if i < 0 {
			return -1
		}
		// After a value: close containers until one goes on, or return.
		for {
			if depth == 0 {
				return i
			}
			i = skipSpace(b, i)
			if i >= len(b) {
				return -1
			}
			obj := inObject()
			switch {
			case b[i] == ',':
				i = skipSpace(b, i+1)
				if obj {
					if i = memberKey(b, i); i < 0 {
						return -1
					}
				}
			case obj && b[i] == '}', !obj && b[i] == ']':
				i++
				depth--
				continue
			default:
				return -1
			}
			break
		}
	}
}

// memberKey validates `"key" :` at b[i] and returns the index of the
// member's value, or -1.
func memberKey(b []byte, i int) int {
	if i >= len(b) || b[i] != '"' {
		return -1
	}
	end, _ := stringEnd(b, i)
	if end < 0 {
		return -1
	}
	i = skipSpace(b, end)
	if i >= len(b) || b[i] != ':' {
		return -1
	}
	return skipSpace(b, i+1)
}

func literalEnd(b []byte, i int, lit string) int {
	if len(b)-i < len(lit) || string(b[i:i+len(lit)]) != lit {
		return -1
	}
	return i + len(lit)
}

// ScanStrings reads string members of the JSON object obj as json.Unmarshal
// into a struct whose fields are strings named names (their json tags)
// would: out[i] is the value of the member names[i], "" when it is absent
// or null. It validates obj in one pass and decodes nothing else, so it
// costs a fraction of json.Unmarshal on the notifications the CLI writes.
// sure is false when it cannot answer as json.Unmarshal would (obj is not
// one valid object, a key is escaped or not ASCII or one of names in
// another case, a name comes twice, its value is neither a string nor
// null, or there are over 64 names): decode obj with encoding/json then.
// The strings do not alias obj. out must be at least as long as names.
func ScanStrings(obj []byte, names []string, out []string) (sure bool) {
	return ScanStringsReusing(obj, names, out, nil)
}

// ScanStringsReusing is ScanStrings that puts prev[i] in out[i] when the
// member's value is the same string, without a new one: the ids a turn's
// notifications repeat (thread, turn, item) cost no allocation. prev may
// be shorter than names, or nil.
func ScanStringsReusing(obj []byte, names []string, out, prev []string) (sure bool) {
	if len(names) > 64 || len(out) < len(names) {
		return false
	}
	clear(out[:len(names)])
	b := obj
	i := skipSpace(b, 0)
	if i >= len(b) || b[i] != '{' {
		return false
	}
	i = skipSpace(b, i+1)
	if i < len(b) && b[i] == '}' {
		return skipSpace(b, i+1) == len(b)
	}
	var seen uint64
	for {
		key, v, ok := memberAt(b, i)
		if !ok {
			return false
		}
		field := -1
		for k, name := range names {
			if string(key) == name {
				field = k
				break
			}
			if len(key) == len(name) && bytes.EqualFold(key, []byte(name)) {
				return false // encoding/json would match it if no exact match came first
			}
		}
		if field >= 0 {
			if seen&(1<<field) != 0 {
				return false
			}
			seen |= 1 << field
			var was string
			if field < len(prev) {
				was = prev[field]
			}
			s, ok := stringValue(b[v.start:v.end], was)
			if !ok {
				return false
			}
			out[field] = s
		}
		next, last, ok := afterMember(b, v.end)
		if !ok || last {
			return ok
		}
		i = next
	}
}

// stringValue decodes a valid JSON value into a string as encoding/json
// does: null is "", a string without escapes whose bytes are valid UTF-8
// is its bytes (was itself when it has those bytes: no new string), any
// other string goes through encoding/json (which unescapes and replaces
// invalid UTF-8); ok is false for other values.
func stringValue(v []byte, was string) (string, bool) {
	switch {
	case string(v) == "null":
		return "", true
	case v[0] != '"':
		return "", false
	}
	body := v[1 : len(v)-1]
	if bytes.IndexByte(body, '\\') < 0 && utf8.Valid(body) {
		if string(body) == was {
			return was, true
		}
		return string(body), true
	}
	return unquoteJSON(v)
}

// unquoteJSON decodes a JSON string with encoding/json (apart, so that
// stringValue's result does not escape to the heap).
func unquoteJSON(v []byte) (s string, ok bool) {
	return s, json.Unmarshal(v, &s) == nil
}
