package messages

import (
	"encoding/binary"
	"errors"
	"fmt"
)

// Limits on the structure of a body, checked before msgpack sees it.
// msgpack skips unknown fields recursively, so deep nesting would overflow
// the stack (a fatal error, not a panic); and it preallocates slices from
// declared lengths, so the element count bounds the memory a small body can
// make the decoder allocate.
const (
	// maxDepth is the deepest nesting of arrays and maps in a body. The
	// deepest registered message (RoundEvent → ToolCall → Paths → FileChange)
	// needs 4.
	maxDepth = 32
	// maxElements is the total number of array elements plus map entries
	// (key-value pairs) in a body.
	maxElements = 1 << 18
)

// checkBody reports whether b is exactly one well-formed msgpack value whose
// top level is a map, within maxDepth and maxElements, and in which every
// declared length fits in the bytes that remain. It walks b iteratively and
// allocates nothing.
func checkBody(b []byte) error {
	if len(b) == 0 {
		return errors.New("empty body")
	}
	if c := b[0]; !(c >= 0x80 && c <= 0x8f || c == 0xde || c == 0xdf) {
		return fmt.Errorf("body starts with code 0x%02x, want a map", c)
	}
	// pending[d] is the number of values still to read at depth d; depth 0
	// holds the single top-level value.
	var pending [maxDepth + 1]uint64
	depth := 0
	pending[0] = 1
	elements := uint64(0)
	pos := 0
	for {
		for depth > 0 && pending[depth] == 0 {
			depth--
		}
		if pending[depth] == 0 { // depth 0: the top-level value is complete
			break
		}
		pending[depth]--

		if pos >= len(b) {
			return errors.New("unexpected end of body")
		}
		c := b[pos]
		pos++
		rest := uint64(len(b) - pos)

		var skip uint64     // payload bytes after the header
		var children uint64 // nested values for an array or map
		var entries uint64  // elements counted against maxElements
		container := false
		switch {
		case c <= 0x7f || c >= 0xe0: // positive and negative fixint
		case c <= 0x8f: // fixmap
			entries, children, container = uint64(c&0x0f), 2*uint64(c&0x0f), true
		case c <= 0x9f: // fixarray
			entries, children, container = uint64(c&0x0f), uint64(c&0x0f), true
		case c <= 0xbf: // fixstr
			skip = uint64(c & 0x1f)
		default:
			var hdr int // length field size in bytes
			switch c {
			case 0xc0, 0xc2, 0xc3: // nil, false, true
			case 0xc1:
				return fmt.Errorf("reserved code 0xc1 at offset %d", pos-1)
			case 0xcc, 0xd0: // uint8, int8
				skip = 1
			case 0xcd, 0xd1: // uint16, int16
				skip = 2
			case 0xca, 0xce, 0xd2: // float32, uint32, int32
				skip = 4
			case 0xcb, 0xcf, 0xd3: // float64, uint64, int64
				skip = 8
			case 0xd4, 0xd5, 0xd6, 0xd7, 0xd8: // fixext 1, 2, 4, 8, 16: type byte + data
				skip = 1 + 1<<(c-0xd4)
			case 0xc4, 0xd9: // bin8, str8
				hdr = 1
			case 0xc5, 0xda: // bin16, str16
				hdr = 2
			case 0xc6, 0xdb: // bin32, str32
				hdr = 4
			case 0xc7: // ext8
				hdr = 1
				skip = 1 // type byte
			case 0xc8: // ext16
				hdr = 2
				skip = 1
			case 0xc9: // ext32
				hdr = 4
				skip = 1
			case 0xdc: // array16
				hdr, container = 2, true
			case 0xdd: // array32
				hdr, container = 4, true
			case 0xde: // map16
				hdr, container = 2, true
			case 0xdf: // map32
				hdr, container = 4, true
			}
			if hdr > 0 {
				if rest < uint64(hdr) {
					return errors.New("unexpected end of body")
				}
				var n uint64
				switch hdr {
				case 1:
					n = uint64(b[pos])
				case 2:
					n = uint64(binary.BigEndian.Uint16(b[pos:]))
				case 4:
					n = uint64(binary.BigEndian.Uint32(b[pos:]))
				}
				pos += hdr
				rest -= uint64(hdr)
				switch {
				case !container:
					skip += n
				case c == 0xde || c == 0xdf:
					entries, children = n, 2*n
				default:
					entries, children = n, n
				}
			}
		}

		if skip > rest {
			return errors.New("unexpected end of body")
		}
		pos += int(skip)
		if !container || children == 0 {
			continue
		}
		// Every nested value takes at least one byte.
		if children > rest {
			return errors.New("unexpected end of body")
		}
		if elements += entries; elements > maxElements {
			return fmt.Errorf("more than %d elements", maxElements)
		}
		if depth == maxDepth {
			return fmt.Errorf("nested deeper than %d", maxDepth)
		}
		depth++
		pending[depth] = children
	}
	if pos != len(b) {
		return fmt.Errorf("%d trailing bytes", len(b)-pos)
	}
	return nil
}
