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

// NewestRelPath is where `scripts/install-codex --newest` puts the newest
// CLI npm serves, relative to the module root.
const NewestRelPath = ".codex-cli-newest/node_modules/@openai/codex-linux-x64/vendor/x86_64-unknown-linux-musl/bin/codex"

// FindNewestCLI returns the newest CLI to check the pin against:
// $CODEX_BIN_NEWEST if set (it must exist), else NewestRelPath under the
// module root if it is there, else "" (none was installed: npm was out of
// reach, or nobody asked).
func FindNewestCLI() (string, error) {
	if bin := os.Getenv("CODEX_BIN_NEWEST"); bin != "" {
		if _, err := os.Stat(bin); err != nil {
			return "", fmt.Errorf("finding the newest codex CLI: CODEX_BIN_NEWEST: %w", err)
		}
		return bin, nil
	}
	if root := moduleRoot(); root != "" {
		bin := filepath.Join(root, filepath.FromSlash(NewestRelPath))
		if _, err := os.Stat(bin); err == nil {
			return bin, nil
		}
	}
	return "", nil
}

// moduleRoot is the nearest directory above the working directory that
// holds a go.mod, or "".
func moduleRoot() string {
	dir, err := os.Getwd()
	if err != nil {
		return ""
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			return dir
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return ""
		}
		dir = parent
	}
}

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
	if root := moduleRoot(); root != "" {
		bin := filepath.Join(root, filepath.FromSlash(CLIRelPath))
		if _, err := os.Stat(bin); err == nil {
			return bin, nil
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

// Built is a bundle generated from one CLI: its Validator and its Bundle.
type Built struct {
	Bin, Version string
	Validator    *Validator
	Bundle       *Bundle
}

// Build runs bin's generator into a temporary directory, loads the
// bundle both ways (to validate lines, to compare) and removes the
// directory.
func Build(bin string) (*Built, error) {
	version, err := CLIVersion(bin)
	if err != nil {
		return nil, err
	}
	dir, err := os.MkdirTemp("", "codex-schema-"+version+"-")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(dir)
	if err := Generate(bin, dir); err != nil {
		return nil, err
	}
	v, err := Load(dir)
	if err != nil {
		return nil, err
	}
	b, err := LoadBundle(dir)
	if err != nil {
		return nil, err
	}
	return &Built{Bin: bin, Version: version, Validator: v, Bundle: b}, nil
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

// ForTestVersion is the version of the CLI whose bundle ForTest returns.
func ForTestVersion(tb testing.TB) string {
	tb.Helper()
	ForTest(tb)
	return shared.version
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
