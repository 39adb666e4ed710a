package codexproc

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"time"

	"github.com/meshweaver/supervisor/codexproto"
)

// LocalInstallDir is the project-local, git-ignored folder that
// scripts/install-codex installs the pinned CLI into.
const LocalInstallDir = ".codex-cli"

// ResolveInstalled finds the codex executable the way a daemon in
// production does, explicitly: explicit when given (serve's --codex), else
// the CODEX_BIN environment variable, else "codex" on PATH. Unlike
// ResolveBinary it never searches the working directory's parents for a
// developer tree's install. A Node shim is mapped to its native binary.
func ResolveInstalled(explicit string) (string, error) {
	candidate := explicit
	if candidate == "" {
		candidate = os.Getenv("CODEX_BIN")
	}
	if candidate == "" {
		p, err := exec.LookPath("codex")
		if err != nil {
			return "", errors.New("codex CLI not found: give --codex, set CODEX_BIN, or put codex on PATH")
		}
		candidate = p
	}
	return checkBinary(candidate)
}

// ResolveBinary finds the codex executable for the demo and the tests:
// explicit when given, else the CODEX_BIN environment variable, else the
// project-local install (searched from the working directory upwards),
// else "codex" on PATH. When the path is
// the npm Node shim, the native binary it wraps is returned instead: killing
// a shim can leave the native process running, and it costs a Node start.
func ResolveBinary(explicit string) (string, error) {
	candidate := explicit
	if candidate == "" {
		candidate = os.Getenv("CODEX_BIN")
	}
	if candidate == "" {
		candidate = findLocalInstall()
	}
	if candidate == "" {
		p, err := exec.LookPath("codex")
		if err != nil {
			return "", errors.New("codex CLI not found: set CODEX_BIN, run scripts/install-codex, or put codex on PATH")
		}
		candidate = p
	}
	return checkBinary(candidate)
}

// checkBinary makes candidate absolute, maps a Node shim to its native
// binary and checks that the result is an executable file.
func checkBinary(candidate string) (string, error) {
	abs, err := filepath.Abs(candidate)
	if err != nil {
		return "", fmt.Errorf("resolving codex binary: %w", err)
	}
	if isNodeShim(abs) {
		native, err := nativeFromShim(abs)
		if err != nil {
			return "", err
		}
		return native, nil
	}
	fi, err := os.Stat(abs)
	if err != nil {
		return "", fmt.Errorf("codex binary: %w", err)
	}
	if fi.IsDir() || fi.Mode()&0o111 == 0 {
		return "", fmt.Errorf("codex binary %s is not an executable file", abs)
	}
	return abs, nil
}

// nativeTriple is the npm vendor folder and platform package for this machine.
func nativeTriple() (triple, pkg string) {
	switch runtime.GOOS + "/" + runtime.GOARCH {
	case "linux/amd64":
		return "x86_64-unknown-linux-musl", "codex-linux-x64"
	case "linux/arm64":
		return "aarch64-unknown-linux-musl", "codex-linux-arm64"
	case "darwin/amd64":
		return "x86_64-apple-darwin", "codex-darwin-x64"
	case "darwin/arm64":
		return "aarch64-apple-darwin", "codex-darwin-arm64"
	}
	return "", ""
}

// NativeInInstall is where an npm install rooted at dir (the folder holding
// node_modules) keeps the native binary.
func NativeInInstall(dir string) string {
	triple, pkg := nativeTriple()
	return filepath.Join(dir, "node_modules", "@openai", pkg, "vendor", triple, "bin", "codex")
}

func findLocalInstall() string {
	dir, err := os.Getwd()
	if err != nil {
		return ""
	}
	for {
		p := NativeInInstall(filepath.Join(dir, LocalInstallDir))
		if fi, err := os.Stat(p); err == nil && !fi.IsDir() {
			return p
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return ""
		}
		dir = parent
	}
}

func isNodeShim(path string) bool {
	real, err := filepath.EvalSymlinks(path)
	if err != nil {
		return false
	}
	if filepath.Ext(real) == ".js" {
		return true
	}
	f, err := os.Open(real)
	if err != nil {
		return false
	}
	defer f.Close()
	head := make([]byte, 64)
	n, _ := f.Read(head)
	return bytes.HasPrefix(head[:n], []byte("#!")) && bytes.Contains(head[:n], []byte("node"))
}

// nativeFromShim maps the npm shim (…/@openai/codex/bin/codex.js, perhaps
// through a node_modules/.bin symlink) to the platform binary beside it.
func nativeFromShim(shim string) (string, error) {
	real, err := filepath.EvalSymlinks(shim)
	if err != nil {
		return "", fmt.Errorf("resolving codex shim: %w", err)
	}
	triple, pkg := nativeTriple()
	if triple == "" {
		return "", fmt.Errorf("codex shim %s: no native binary known for %s/%s", shim, runtime.GOOS, runtime.GOARCH)
	}
	pkgRoot := filepath.Dir(filepath.Dir(real)) // …/@openai/codex
	candidates := []string{
		filepath.Join(pkgRoot, "node_modules", "@openai", pkg, "vendor", triple, "bin", "codex"),
		filepath.Join(filepath.Dir(pkgRoot), pkg, "vendor", triple, "bin", "codex"), // hoisted
		filepath.Join(pkgRoot, "vendor", triple, "bin", "codex"),
	}
	for _, c := range candidates {
		if fi, err := os.Stat(c); err == nil && !fi.IsDir() && fi.Mode()&0o111 != 0 {
			return c, nil
		}
	}
	return "", fmt.Errorf("codex shim %s: native binary for %s not found beside it", shim, triple)
}

// VersionTimeout bounds `codex --version`; it answers in milliseconds.
const VersionTimeout = 30 * time.Second

// BinaryVersion asks the codex binary bin for its version (`codex
// --version`, "codex-cli 0.169.0"). The daemon's start logs it; each
// app-server's own version comes from its initialize (codexproto.Client).
func BinaryVersion(bin string) (codexproto.Version, error) {
	ctx, cancel := context.WithTimeout(context.Background(), VersionTimeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin, "--version")
	cmd.Env = AllowedEnv(os.Environ(), nil)
	cmd.WaitDelay = time.Second
	out, err := cmd.Output()
	if err != nil {
		return codexproto.Version{}, fmt.Errorf("asking %s for its version: %w", bin, err)
	}
	fields := strings.Fields(string(out))
	if len(fields) == 0 {
		return codexproto.Version{}, fmt.Errorf("asking %s for its version: no answer", bin)
	}
	v, err := codexproto.ParseVersion(fields[len(fields)-1])
	if err != nil {
		return codexproto.Version{}, fmt.Errorf("asking %s for its version: %w", bin, err)
	}
	return v, nil
}
