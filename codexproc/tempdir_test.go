package codexproc

import (
	"slices"
	"testing"
)

func TestTempDirOutside(t *testing.T) {
	for _, tt := range []struct {
		name, home string
		env        []string
		want       string // the TMPDIR the child gets; "" for none set
	}{
		{"home elsewhere, TMPDIR kept", "/srv/homes/u/.codex", []string{"TMPDIR=/var/tmp"}, "/var/tmp"},
		{"home elsewhere, no TMPDIR", "/srv/homes/u/.codex", nil, ""},
		{"home under the default /tmp", "/tmp/demo-1/homes/u/.codex", nil, "/var/tmp"},
		{"home under TMPDIR", "/var/tmp/t/homes/u/.codex", []string{"PATH=/bin", "TMPDIR=/var/tmp/t"}, "/tmp"},
		{"home under /var/tmp, TMPDIR /var/tmp", "/var/tmp/x/.codex", []string{"TMPDIR=/var/tmp"}, "/tmp"},
		{"a sibling name is not under", "/tmpfoo/u/.codex", nil, ""},
		{"home is TMPDIR itself", "/tmp", nil, "/var/tmp"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			env := TempDirOutside(slices.Clone(tt.env), tt.home)
			got := ""
			n := 0
			for _, kv := range env {
				if v, ok := cutKey(kv, "TMPDIR"); ok {
					got, n = v, n+1
				}
			}
			if got != tt.want || n > 1 {
				t.Errorf("TMPDIR = %q (%d times) in %q, want %q", got, n, env, tt.want)
			}
			if len(tt.env) > 0 && tt.env[0] == "PATH=/bin" && !slices.Contains(env, "PATH=/bin") {
				t.Errorf("env %q lost PATH", env)
			}
		})
	}
}

func cutKey(kv, key string) (string, bool) {
	if len(kv) > len(key) && kv[:len(key)+1] == key+"=" {
		return kv[len(key)+1:], true
	}
	return "", false
}
