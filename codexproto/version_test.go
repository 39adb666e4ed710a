package codexproto_test

import (
	"testing"

	"github.com/meshweaver/supervisor/codexproto"
)

func TestTestedRange(t *testing.T) {
	pin := codexproto.PinnedCLI()
	if got, want := pin.String(), codexproto.PinnedCLIVersion; got != want {
		t.Fatalf("PinnedCLI() = %s, want %s", got, want)
	}
	if !pin.AtLeast(codexproto.OldestTestedCLI) {
		t.Fatalf("the pin %v is older than OldestTestedCLI %v", pin, codexproto.OldestTestedCLI)
	}
	for _, tt := range []struct {
		v    codexproto.Version
		want bool
	}{
		{pin, true},
		{codexproto.OldestTestedCLI, true},
		{codexproto.Version{Major: pin.Major, Minor: pin.Minor, Patch: pin.Patch + 1}, false},
		{codexproto.Version{Major: pin.Major, Minor: pin.Minor + 1}, false},
		{codexproto.Version{Major: pin.Major + 1}, false},
		{codexproto.Version{Major: 0, Minor: codexproto.OldestTestedCLI.Minor - 1, Patch: 99}, false},
		{codexproto.Version{}, false},
	} {
		if got := tt.v.Tested(); got != tt.want {
			t.Errorf("%v.Tested() = %v, want %v (range %s)", tt.v, got, tt.want, codexproto.TestedRange())
		}
	}
}

func TestParseVersion(t *testing.T) {
	for _, tt := range []struct {
		in   string
		want codexproto.Version
		ok   bool
	}{
		{"0.171.0", codexproto.Version{Minor: 171}, true},
		{"0.171.0-alpha.2", codexproto.Version{Minor: 171}, true},
		{"1.2.3+build", codexproto.Version{Major: 1, Minor: 2, Patch: 3}, true},
		{"0.171", codexproto.Version{}, false},
		{"0.x.1", codexproto.Version{}, false},
		{"", codexproto.Version{}, false},
	} {
		got, err := codexproto.ParseVersion(tt.in)
		if (err == nil) != tt.ok || got != tt.want {
			t.Errorf("ParseVersion(%q) = %v, %v; want %v, ok %v", tt.in, got, err, tt.want, tt.ok)
		}
	}
}
