package gateway

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/vmihailenco/msgpack/v5"
)

// The gateway speaks the messages' wire names in JSON: a message's JSON
// object has the keys of its msgpack map (docs/REMOTE.md). Both ways go
// through msgpack, so the catalog's tags are the only definition of the
// names.

// decodeJSON reads one JSON object into the message v points to, with the
// wire names. Unknown keys, a key twice in one object, a second value and
// a type mismatch are errors.
func decodeJSON(body []byte, v any) error {
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.UseNumber()
	var obj map[string]any
	if err := dec.Decode(&obj); err != nil {
		return fmt.Errorf("the body is not a JSON object: %w", jsonErr(err))
	}
	if obj == nil {
		return errors.New("the body is not a JSON object")
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		return errors.New("data after the JSON object")
	}
	if err := dupKey(body); err != nil {
		return err
	}
	packed, err := msgpack.Marshal(numbers(obj))
	if err != nil {
		return fmt.Errorf("the body cannot be read: %w", err)
	}
	md := msgpack.NewDecoder(bytes.NewReader(packed))
	md.DisallowUnknownFields(true)
	if err := md.Decode(v); err != nil {
		return fmt.Errorf("the body does not fit the message: %s", cleanMsgpackErr(err))
	}
	return nil
}

// dupKey refuses a key that appears twice in one object of the JSON text
// b, at any depth (two spellings of one key, "a" and "\u0061", are one
// key): encoding/json keeps the last, other parsers the first, and a proxy
// in front that reads the other would check what the daemon does not run.
// b must be valid JSON (encoding/json has read it): the scan only follows
// the structure, one pass with no recursion.
func dupKey(b []byte) error {
	var stack []keyFrame
	for i := 0; i < len(b); i++ {
		switch b[i] {
		case '{':
			stack = append(stack, keyFrame{obj: true, wantKey: true})
		case '[':
			stack = append(stack, keyFrame{})
		case '}', ']':
			stack = stack[:len(stack)-1]
		case ',':
			if top := &stack[len(stack)-1]; top.obj {
				top.wantKey = true
			} else {
				top.idx++
			}
		case '"':
			end := i + 1
			for b[end] != '"' {
				if b[end] == '\\' {
					end++
				}
				end++
			}
			raw := b[i : end+1]
			i = end
			if len(stack) == 0 || !stack[len(stack)-1].obj || !stack[len(stack)-1].wantKey {
				continue // a value
			}
			top := &stack[len(stack)-1]
			top.wantKey = false
			var key string
			if bytes.IndexByte(raw, '\\') < 0 && utf8.Valid(raw) {
				key = string(raw[1 : len(raw)-1])
			} else if err := json.Unmarshal(raw, &key); err != nil {
				return fmt.Errorf("the body cannot be read: %w", err)
			}
			if top.has(key) {
				var path strings.Builder
				for _, f := range stack[:len(stack)-1] {
					switch {
					case !f.obj:
						path.WriteString("[" + strconv.Itoa(f.idx) + "]")
					case path.Len() > 0:
						path.WriteString("." + pathKey(f.key))
					default:
						path.WriteString(pathKey(f.key))
					}
				}
				where := "the body's object"
				if path.Len() > 0 {
					where = fmt.Sprintf("the object at %.200s", path.String())
				}
				return fmt.Errorf("the key %.100q appears twice in %s: a key may be given once", key, where)
			}
			top.add(key)
			top.key = key
		}
	}
	return nil
}

// keyFrame is an object or an array dupKey is in.
type keyFrame struct {
	obj     bool
	wantKey bool                // obj: the next string is a key
	keys    []string            // obj: its keys so far, while few
	set     map[string]struct{} // obj: its keys, once many
	key     string              // obj: the current member's key
	idx     int                 // array: the current element's index
}

// fewKeys is how many keys an object's frame keeps in a slice (a message's
// objects have a handful) before it takes a map.
const fewKeys = 16

func (f *keyFrame) has(key string) bool {
	if f.set != nil {
		_, ok := f.set[key]
		return ok
	}
	for _, k := range f.keys {
		if k == key {
			return true
		}
	}
	return false
}

func (f *keyFrame) add(key string) {
	switch {
	case f.set != nil:
		f.set[key] = struct{}{}
	case len(f.keys) < fewKeys:
		f.keys = append(f.keys, key)
	default:
		f.set = make(map[string]struct{}, 2*fewKeys)
		for _, k := range f.keys {
			f.set[k] = struct{}{}
		}
		f.set[key] = struct{}{}
		f.keys = nil
	}
}

// pathKey is a key as a step of a path: as it is when it is a plain
// name, else quoted.
func pathKey(key string) string {
	if key == "" {
		return `""`
	}
	for _, r := range key {
		if !(r == '_' || r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9') {
			return strconv.Quote(key)
		}
	}
	return key
}

// numbers turns json.Numbers into int64 (or float64 when not integral),
// so that msgpack encodes them as integers.
func numbers(v any) any {
	switch x := v.(type) {
	case map[string]any:
		for k, e := range x {
			x[k] = numbers(e)
		}
	case []any:
		for i, e := range x {
			x[i] = numbers(e)
		}
	case json.Number:
		if i, err := x.Int64(); err == nil {
			return i
		}
		if f, err := x.Float64(); err == nil && !math.IsInf(f, 0) {
			return f
		}
		return x.String()
	}
	return v
}

// encodeJSON writes a message as a JSON object with the wire names.
func encodeJSON(v any) ([]byte, error) {
	packed, err := msgpack.Marshal(v)
	if err != nil {
		return nil, err
	}
	md := msgpack.NewDecoder(bytes.NewReader(packed))
	md.SetMapDecoder(func(d *msgpack.Decoder) (any, error) { return d.DecodeUntypedMap() })
	obj, err := md.DecodeInterface()
	if err != nil {
		return nil, err
	}
	return json.Marshal(stringKeys(obj))
}

// stringKeys makes every map JSON-encodable.
func stringKeys(v any) any {
	switch x := v.(type) {
	case map[any]any:
		m := make(map[string]any, len(x))
		for k, e := range x {
			m[fmt.Sprint(k)] = stringKeys(e)
		}
		return m
	case map[string]any:
		for k, e := range x {
			x[k] = stringKeys(e)
		}
	case []any:
		for i, e := range x {
			x[i] = stringKeys(e)
		}
	}
	return v
}

func jsonErr(err error) error {
	var te *json.UnmarshalTypeError
	if errors.As(err, &te) {
		return fmt.Errorf("field %q has the wrong type", te.Field)
	}
	return err
}

// cleanMsgpackErr names the problem without msgpack's Go type names.
func cleanMsgpackErr(err error) string {
	s := strings.TrimPrefix(err.Error(), "msgpack: ")
	if len(s) > 200 {
		s = s[:200]
	}
	return s
}
