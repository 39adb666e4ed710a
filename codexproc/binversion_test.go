package codexproc

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/meshweaver/supervisor/codexproto"
)

func TestBinaryVersion(t *testing.T) {
	for _, tt := range []struct {
		name, out string
		want      codexproto.Version
		ok        bool
	}{
		{"release", "codex-cli 0.171.0", codexproto.Version{Minor: 171}, true},
		{"pre-release", "codex-cli 0.172.0-alpha.3", codexproto.Version{Minor: 172}, true},
		{"no version", "codex-cli", codexproto.Version{}, false},
		{"silent", "", codexproto.Version{}, false},
	} {
		t.Run(tt.name, func(t *testing.T) {
			bin := filepath.Join(t.TempDir(), "codex")
			script := "#!/bin/sh\n[ \"$1\" = --version ] || exit 9\necho '" + tt.out + "'\n"
			if err := os.WriteFile(bin, []byte(script), 0o755); err != nil {
				t.Fatal(err)
			}
			got, err := BinaryVersion(bin)
			if (err == nil) != tt.ok || got != tt.want {
				t.Errorf("BinaryVersion = %v, %v; want %v, ok %v", got, err, tt.want, tt.ok)
			}
		})
	}
	if _, err := BinaryVersion(filepath.Join(t.TempDir(), "missing")); err == nil {
		t.Error("BinaryVersion of a missing binary: no error")
	}
}
