package messages

import (
	"bytes"
	"errors"
	"fmt"
	"log/slog"
	"reflect"
	"testing"

	"google.golang.org/protobuf/types/known/anypb"
)

// FuzzDecode checks that Decode never panics, fails only with its
// sentinels, and that whatever it accepts encodes again, within the limits,
// to a body that decodes to the same value and encodes to the same bytes.
func FuzzDecode(f *testing.F) {
	for _, v := range append(samples(), zeroValues()...) {
		a, err := Encode(v)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(a.TypeUrl, a.Value)
	}
	f.Add("meshweaver/start_round.v1", []byte{0x81, 0xa7, 'h', 'i', 's', 't', 'o', 'r', 'y', 0x91, 0x92, 0xa4, 'u', 's', 'e', 'r', 0xa0})
	f.Add("meshweaver/round_event.v1", []byte{0x81, 0xa1, 'x', 0xc7, 0x02, 0x05, 0x00, 0x00})
	f.Add("meshweaver/nope.v1", []byte{0x80})

	f.Fuzz(func(t *testing.T, typeURL string, body []byte) {
		v, err := Decode(&anypb.Any{TypeUrl: typeURL, Value: body})
		if err != nil {
			if !errors.Is(err, ErrUnknownType) && !errors.Is(err, ErrMalformed) {
				t.Fatalf("Decode error %v wraps no sentinel", err)
			}
			if v != nil {
				t.Fatalf("Decode returned %v with error %v", v, err)
			}
			return
		}
		if reflect.TypeOf(v).Kind() != reflect.Struct {
			t.Fatalf("Decode returned a %T, want a struct value", v)
		}
		// Accepted values must be safe to validate and log.
		if m, ok := v.(interface{ Validate() error }); ok {
			if err := m.Validate(); err != nil && !errors.Is(err, ErrInvalid) {
				t.Fatalf("Validate error %v does not wrap ErrInvalid", err)
			}
		}
		_ = fmt.Sprintf("%v %+v %#v", v, v, v)
		slog.New(slog.DiscardHandler).Info("m", "v", v)

		a1, err := Encode(v)
		if err != nil {
			t.Fatalf("Encode(Decode(…)) = %v", err)
		}
		if a1.TypeUrl != typeURL {
			t.Fatalf("re-encoded TypeUrl %q, want %q", a1.TypeUrl, typeURL)
		}
		v2, err := Decode(a1)
		if err != nil {
			t.Fatalf("Decode(Encode(v)) = %v", err)
		}
		a2, err := Encode(v2)
		if err != nil {
			t.Fatalf("Encode(v2) = %v", err)
		}
		if !bytes.Equal(a1.Value, a2.Value) {
			t.Fatalf("encoding is not stable:\n%x\n%x", a1.Value, a2.Value)
		}
		v3, err := Decode(a2)
		if err != nil || !reflect.DeepEqual(v2, v3) {
			t.Fatalf("round trip: %#v, %v; want %#v", v3, err, v2)
		}
	})
}
