package turninput

import "encoding/json"

func mustJSON(v any) string {
	b, err := json.Marshal(v)
	if err != nil {
		return "!" + err.Error()
	}
	return string(b)
}

// jsonEqual compares by JSON encoding, so nil and empty slices are equal.
func jsonEqual(a, b any) bool {
	norm := func(v any) string {
		s := mustJSON(v)
		if s == "[]" {
			return "null"
		}
		return s
	}
	return norm(a) == norm(b)
}
