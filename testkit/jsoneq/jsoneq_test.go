package jsoneq

import "testing"

func TestEqual(t *testing.T) {
	for _, c := range []struct {
		a, b any
		want bool
	}{
		{[]int{}, nil, true},
		{[]int(nil), []int{}, true},
		{map[string]int{"a": 1}, map[string]int{"a": 1}, true},
		{[]int{1}, []int{2}, false},
		{"x", "y", false},
	} {
		if got := Equal(c.a, c.b); got != c.want {
			t.Errorf("Equal(%#v, %#v) = %v, want %v", c.a, c.b, got, c.want)
		}
	}
	if s := String(func() {}); s == "" || s[0] != '!' {
		t.Errorf("String of a func = %q, want the error", s)
	}
}
