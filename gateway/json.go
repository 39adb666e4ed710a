package gateway

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"strings"

	"github.com/vmihailenco/msgpack/v5"
)

// The gateway speaks the messages' wire names in JSON: a message's JSON
// object has the keys of its msgpack map (docs/REMOTE.md). Both ways go
// through msgpack, so the catalog's tags are the only definition of the
// names.

// decodeJSON reads one JSON object into the message v points to, with the
// wire names. Unknown keys, a second value and a type mismatch are errors.
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
