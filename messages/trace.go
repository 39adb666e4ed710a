package messages

import "strings"

// A round's W3C trace context (https://www.w3.org/TR/trace-context/):
// StartRound.Traceparent and Tracestate. Their length is bounded by
// Validate (a round over the bound is refused, as for every field); their
// syntax is checked by TraceContext, and a malformed one is ignored, as
// the recommendation asks of a receiver: the daemon then starts a trace
// of its own.

// Bounds of a round's trace context, in bytes.
const (
	// MaxTraceparentLen bounds StartRound.Traceparent: version 00 is 55
	// bytes; a later version may append fields.
	MaxTraceparentLen = 256
	// MaxTracestateLen bounds StartRound.Tracestate: 32 list members of
	// at most 256-byte keys and values would be 16 KiB, but a receiver
	// need keep only 512 bytes of it.
	MaxTracestateLen = 4096
)

// traceContext bounds the trace context's fields.
func (c *checker) traceContext(traceparent, tracestate string) {
	if n := len(traceparent); n > MaxTraceparentLen {
		c.failf("traceparent is %d bytes, max %d", n, MaxTraceparentLen)
	}
	if n := len(tracestate); n > MaxTracestateLen {
		c.failf("tracestate is %d bytes, max %d", n, MaxTracestateLen)
	}
}

// TraceContext is the round's trace context as the daemon uses it:
// traceparent when it is well-formed (ok), and tracestate when that is
// well-formed too ("" otherwise: a malformed tracestate is dropped, the
// traceparent kept). A malformed traceparent gives ok false and nothing
// else.
func (m StartRound) TraceContext() (traceparent, tracestate string, ok bool) {
	if !ValidTraceparent(m.Traceparent) {
		return "", "", false
	}
	if ValidTracestate(m.Tracestate) {
		tracestate = m.Tracestate
	}
	return m.Traceparent, tracestate, true
}

// ValidTraceparent says whether s is a traceparent header a receiver may
// use: version-traceid-parentid-flags in lower-case hex, the version not
// ff, the ids not all zeros; version 00 is exactly that, a later version
// may go on after a '-'.
func ValidTraceparent(s string) bool {
	if len(s) < 55 || len(s) > MaxTraceparentLen {
		return false
	}
	if !lowerHex(s[0:2]) || s[0:2] == "ff" || s[2] != '-' ||
		!lowerHex(s[3:35]) || s[35] != '-' || !lowerHex(s[36:52]) || s[52] != '-' || !lowerHex(s[53:55]) {
		return false
	}
	if allZeros(s[3:35]) || allZeros(s[36:52]) {
		return false
	}
	if s[0:2] == "00" {
		return len(s) == 55
	}
	return len(s) == 55 || s[55] == '-'
}

// ValidTracestate says whether s is a tracestate header a receiver may
// pass on: at most 32 comma-separated key=value members (empty ones and
// spaces around them allowed), each key of lower-case letters, digits and
// _-*/ (or tenant@system), each value at most 256 printable ASCII bytes
// without ',' and '=' and not ending in a space. The empty string is valid.
func ValidTracestate(s string) bool {
	if len(s) > MaxTracestateLen {
		return false
	}
	members := 0
	for len(s) > 0 {
		var member string
		member, s, _ = strings.Cut(s, ",")
		member = strings.Trim(member, " \t")
		if member == "" {
			continue
		}
		if members++; members > 32 {
			return false
		}
		key, value, found := strings.Cut(member, "=")
		if !found || !validTracestateKey(key) || !validTracestateValue(value) {
			return false
		}
	}
	return true
}

func validTracestateKey(k string) bool {
	tenant, system, multi := strings.Cut(k, "@")
	if !multi {
		return len(k) <= 256 && keyChars(k, true)
	}
	return len(tenant) >= 1 && len(tenant) <= 241 && keyChars(tenant, false) &&
		len(system) >= 1 && len(system) <= 14 && keyChars(system, true)
}

// keyChars: lcalpha or (unless alphaFirst) a digit first, then lcalpha,
// digits and _-*/.
func keyChars(k string, alphaFirst bool) bool {
	if k == "" {
		return false
	}
	for i := 0; i < len(k); i++ {
		b := k[i]
		switch {
		case b >= 'a' && b <= 'z':
		case b >= '0' && b <= '9':
			if i == 0 && alphaFirst {
				return false
			}
		case b == '_' || b == '-' || b == '*' || b == '/':
			if i == 0 {
				return false
			}
		default:
			return false
		}
	}
	return true
}

func validTracestateValue(v string) bool {
	if v == "" || len(v) > 256 || v[len(v)-1] == ' ' {
		return false
	}
	for i := 0; i < len(v); i++ {
		if b := v[i]; b < 0x20 || b > 0x7e || b == ',' || b == '=' {
			return false
		}
	}
	return true
}

func lowerHex(s string) bool {
	for i := 0; i < len(s); i++ {
		if b := s[i]; (b < '0' || b > '9') && (b < 'a' || b > 'f') {
			return false
		}
	}
	return true
}

func allZeros(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] != '0' {
			return false
		}
	}
	return true
}
