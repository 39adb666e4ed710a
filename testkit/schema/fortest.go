package schema

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"
)

// CLIRelPath is where scripts/install-codex puts the pinned CLI, relative to
// the module root.
const CLIRelPath = ".codex-cli/node_modules/@openai/codex-linux-x64/vendor/x86_64-unknown-linux-musl/bin/codex"

// FindCLI returns the codex binary to use: $CODEX_BIN if set (it must
// exist), else CLIRelPath under the nearest directory above the working
// directory that holds a go.mod, else `codex` on PATH.
func FindCLI() (string, error) {
	if bin := os.Getenv("CODEX_BIN"); bin != "" {
		if _, err := os.Stat(bin); err != nil {
			return "", fmt.Errorf("finding codex CLI: CODEX_BIN: %w (unset it and run scripts/install-codex)", err)
		}
		return bin, nil
	}
	if dir, err := os.Getwd(); err == nil {
		for {
			if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
				bin := filepath.Join(dir, filepath.FromSlash(CLIRelPath))
				if _, err := os.Stat(bin); err == nil {
					return bin, nil
				}
				break
			}
			parent := filepath.Dir(dir)
			if parent == dir {
				break
			}
			dir = parent
		}
	}
	if bin, err := exec.LookPath("codex"); err == nil {
		return bin, nil
	}
	return "", errors.New("finding codex CLI: not in CODEX_BIN, " + CLIRelPath + " or PATH; run scripts/install-codex")
}

// CLIVersion returns the version the binary reports, e.g. "0.169.0".
func CLIVersion(bin string) (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	out, err := exec.CommandContext(ctx, bin, "--version").Output()
	if err != nil {
		return "", fmt.Errorf("asking %s for its version: %w", bin, err)
	}
	fields := strings.Fields(string(out)) // "codex-cli 0.169.0"
	if len(fields) == 0 {
		return "", fmt.Errorf("asking %s for its version: empty output", bin)
	}
	return fields[len(fields)-1], nil
}

var shared struct {
	once    sync.Once
	v       *Validator
	bin     string
	version string
	err     error
}

// ForTest returns a Validator for the pinned CLI, failing tb (never
// skipping) when the CLI is missing.
//
// Caching: the first call in a test process generates the bundle into a
// fresh os.MkdirTemp directory, compiles it, and removes the directory
// again; every later call returns the same in-memory Validator. A test
// binary therefore runs the generator once (about 150 ms) and leaves
// nothing behind, and concurrent test binaries never share a directory.
func ForTest(tb testing.TB) *Validator {
	tb.Helper()
	shared.once.Do(func() {
		shared.v, shared.bin, shared.version, shared.err = build()
	})
	if shared.err != nil {
		tb.Fatalf("schema.ForTest: %v", shared.err)
	}
	if shared.version != PinnedVersion {
		tb.Logf("schema.ForTest: %s is codex %s, but the project pins %s; run scripts/install-codex", shared.bin, shared.version, PinnedVersion)
	}
	return shared.v
}

func build() (v *Validator, bin, version string, err error) {
	bin, err = FindCLI()
	if err != nil {
		return nil, "", "", err
	}
	version, err = CLIVersion(bin)
	if err != nil {
		return nil, bin, "", err
	}
	dir, err := os.MkdirTemp("", "codex-schema-"+version+"-")
	if err != nil {
		return nil, bin, version, err
	}
	defer os.RemoveAll(dir)
	if err := Generate(bin, dir); err != nil {
		return nil, bin, version, err
	}
	v, err = Load(dir)
	return v, bin, version, err
}
