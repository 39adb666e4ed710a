package budget

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// A user's own budget wins, then the smallest of the user's groups', then
// the default.
func TestRulesOf(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "budgets.json")
	if err := os.WriteFile(path, []byte(`{"users": {"alice": 500, "free": 0},
		"groups": {"interns": {"tokens": 100, "members": ["bob", "carol"]}, "team": {"tokens": 300, "members": ["carol", "dave"]}}}`), 0o600); err != nil {
		t.Fatal(err)
	}
	r := Rules{Tokens: 1000}
	if err := ReadFile(path, &r); err != nil {
		t.Fatal(err)
	}
	for user, want := range map[string]int64{"alice": 500, "free": 0, "bob": 100, "carol": 100, "dave": 300, "erin": 1000} {
		if got := r.Of(user); got != want {
			t.Errorf("%s: budget %d, want %d", user, got, want)
		}
	}
	if !r.Any() || (&Rules{}).Any() || (*Rules)(nil).Of("x") != 0 {
		t.Error("Any or a nil Rules is wrong")
	}
	if (&Rules{}).WindowOr() != DefaultWindow {
		t.Error("no window is not the default")
	}
}

// A bad budgets file is refused with every problem named.
func TestReadFileRefuses(t *testing.T) {
	dir := t.TempDir()
	for name, c := range map[string]struct{ body, want string }{
		"unknown field": {`{"user": {}}`, `unknown field "user"`},
		"negative":      {`{"users": {"a": -1}, "groups": {"g": {"tokens": -2, "members": ["b"]}}}`, `user "a": a negative budget`},
		"no members":    {`{"groups": {"g": {"tokens": 2}}}`, `group "g": no members`},
		"trailing":      {`{} {}`, "data after the object"},
	} {
		path := filepath.Join(dir, strings.ReplaceAll(name, " ", "-")+".json")
		if err := os.WriteFile(path, []byte(c.body), 0o600); err != nil {
			t.Fatal(err)
		}
		var r Rules
		err := ReadFile(path, &r)
		if err == nil || !strings.Contains(err.Error(), c.want) || !strings.Contains(err.Error(), path) {
			t.Errorf("%s: %v, want an error naming %q and the file", name, err, c.want)
		}
	}
	if err := ReadFile(filepath.Join(dir, "missing.json"), &Rules{}); err == nil {
		t.Error("a missing file read")
	}
}
