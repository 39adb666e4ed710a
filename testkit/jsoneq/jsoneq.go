// Package jsoneq compares values by their JSON encoding, for tests whose
// wants are written as literals: nil and empty slices compare equal.
package jsoneq

import "encoding/json"

// String is v's JSON encoding, or "!" and the error when v has none.
func String(v any) string {
	b, err := json.Marshal(v)
	if err != nil {
		return "!" + err.Error()
	}
	return string(b)
}

// Equal says whether a and b encode alike, an empty list as null.
func Equal(a, b any) bool {
	norm := func(v any) string {
		s := String(v)
		if s == "[]" {
			return "null"
		}
		return s
	}
	return norm(a) == norm(b)
}
