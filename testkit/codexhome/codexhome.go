package codexhome

import (
	_ "embed"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"

	"github.com/meshweaver/supervisor/demomodel"
	"github.com/meshweaver/supervisor/isolate"
)

// Names the configuration gives the mock provider and its model: the demo
// model's (package demomodel).
const (
	// ProviderID is the model_providers key of the mock provider.
	ProviderID = demomodel.ProviderID
	// Model is the model slug codex asks the mock for.
	Model = demomodel.Model
)

// Context sizes of the catalogs WriteConfig can write.
const (
	// LargeContextWindow is the default catalog's context window: big enough
	// that no test turn triggers auto-compaction.
	LargeContextWindow = 200000
	// SmallContextWindow and SmallAutoCompactLimit are the WithSmallContext
	// catalog: a turn that reports more than 3000 tokens makes the next turn
	// compact first.
	SmallContextWindow    = 4000
	SmallAutoCompactLimit = 3000
)

// CatalogFile is the name of the model catalog WriteConfig writes into the
// home.
const CatalogFile = "mock-model-catalog.json"

//go:embed catalog.json
var catalogTemplate []byte

// Overrides returns `key=value` pairs (values in TOML syntax) that select the
// mock provider at modelBaseURL (e.g. demomodel.Server.URL(), ending in /v1):
// demomodel.Overrides. Pass each as `codex app-server -c <pair>`.
// WriteConfig writes the same pairs into config.toml.
func Overrides(modelBaseURL string) []string { return demomodel.Overrides(modelBaseURL) }

// OverrideArgs returns Overrides as command-line arguments:
// "-c", pair, "-c", pair, ...
func OverrideArgs(modelBaseURL string) []string {
	var args []string
	for _, kv := range Overrides(modelBaseURL) {
		args = append(args, "-c", kv)
	}
	return args
}

// settings collects what the Options choose.
type settings struct {
	catalog       bool
	contextWindow int
	autoCompact   int
	extra         []string
}

// Option changes what WriteConfig writes.
type Option func(*settings)

// WithoutCatalog leaves out the model catalog. Codex then warns "Model
// metadata for `mock-model` not found" on every turn, uses a 258400-token
// context window, and offers no apply_patch tool.
func WithoutCatalog() Option {
	return func(s *settings) { s.catalog = false }
}

// WithSmallContext writes a catalog with a SmallContextWindow context window
// and an auto-compaction limit of SmallAutoCompactLimit tokens.
func WithSmallContext() Option {
	return WithContextWindow(SmallContextWindow, SmallAutoCompactLimit)
}

// WithContextWindow writes a catalog with the given context window and
// auto-compaction token limit (0 means none).
func WithContextWindow(window, autoCompactLimit int) Option {
	return func(s *settings) {
		s.catalog = true
		s.contextWindow = window
		s.autoCompact = autoCompactLimit
	}
}

// WithSetting adds one `key=value` pair (TOML value, dotted key allowed),
// e.g. `shell_environment_policy.inherit="all"`. A pair whose key was set
// before (by Overrides or an earlier WithSetting) replaces it.
func WithSetting(pair string) Option {
	return func(s *settings) { s.extra = append(s.extra, pair) }
}

// CatalogJSON returns a model catalog (the model_catalog_json format) with
// one model, Model, that uses unified exec and the freeform apply_patch tool,
// with the given context window and auto-compaction limit (0 means none).
func CatalogJSON(contextWindow, autoCompactLimit int) ([]byte, error) {
	var cat struct {
		Models []map[string]any `json:"models"`
	}
	if err := json.Unmarshal(catalogTemplate, &cat); err != nil || len(cat.Models) != 1 {
		return nil, fmt.Errorf("codexhome: bad embedded catalog: %v", err)
	}
	m := cat.Models[0]
	m["context_window"] = contextWindow
	m["max_context_window"] = contextWindow
	if autoCompactLimit > 0 {
		m["auto_compact_token_limit"] = autoCompactLimit
	} else {
		m["auto_compact_token_limit"] = nil
	}
	return json.MarshalIndent(cat, "", "  ")
}

// WriteConfig writes home/config.toml selecting the mock provider at
// modelBaseURL, plus (unless WithoutCatalog) a model catalog next to it. It
// creates home with mode 0700 if needed; codex refuses a CODEX_HOME that does
// not exist.
func WriteConfig(home, modelBaseURL string, opts ...Option) error {
	s := settings{catalog: true, contextWindow: LargeContextWindow}
	for _, o := range opts {
		o(&s)
	}
	if !filepath.IsAbs(home) {
		abs, err := filepath.Abs(home)
		if err != nil {
			return fmt.Errorf("codexhome: resolving %s: %w", home, err)
		}
		home = abs
	}
	if err := os.MkdirAll(home, 0o700); err != nil {
		return fmt.Errorf("codexhome: creating %s: %w", home, err)
	}

	pairs := Overrides(modelBaseURL)
	if s.catalog {
		data, err := CatalogJSON(s.contextWindow, s.autoCompact)
		if err != nil {
			return err
		}
		path := filepath.Join(home, CatalogFile)
		if err := os.WriteFile(path, append(data, '\n'), 0o600); err != nil {
			return fmt.Errorf("codexhome: writing %s: %w", path, err)
		}
		pairs = append(pairs, "model_catalog_json="+demomodel.TOMLString(path))
	}
	pairs = append(pairs, s.extra...)

	var b strings.Builder
	b.WriteString("# Written by testkit/codexhome: codex talks to a loopback mock model.\n")
	for _, kv := range dedupe(pairs) {
		k, v, _ := strings.Cut(kv, "=")
		fmt.Fprintf(&b, "%s = %s\n", strings.TrimSpace(k), strings.TrimSpace(v))
	}
	path := filepath.Join(home, "config.toml")
	if err := os.WriteFile(path, []byte(b.String()), 0o600); err != nil {
		return fmt.Errorf("codexhome: writing %s: %w", path, err)
	}
	return nil
}

// dedupe keeps the last pair of each key, at the place of the first one.
// Root-level dotted keys are valid TOML, but a key may appear only once.
func dedupe(pairs []string) []string {
	index := map[string]int{}
	var out []string
	for _, kv := range pairs {
		k, _, _ := strings.Cut(kv, "=")
		k = strings.TrimSpace(k)
		if i, ok := index[k]; ok {
			out[i] = kv
			continue
		}
		index[k] = len(out)
		out = append(out, kv)
	}
	return out
}

// MkHome creates dir/codex-home (mode 0700) with WriteConfig and returns its
// absolute path, to be used as CODEX_HOME. dir must exist; a test passes
// t.TempDir().
func MkHome(dir, modelBaseURL string, opts ...Option) (string, error) {
	abs, err := filepath.Abs(dir)
	if err != nil {
		return "", fmt.Errorf("codexhome: resolving %s: %w", dir, err)
	}
	home := filepath.Join(abs, "codex-home")
	if err := WriteConfig(home, modelBaseURL, opts...); err != nil {
		return "", err
	}
	return home, nil
}

// Env returns base (e.g. os.Environ()) with CODEX_HOME set to home and any
// earlier CODEX_HOME removed.
func Env(base []string, home string) []string {
	out := make([]string, 0, len(base)+1)
	for _, kv := range base {
		if !strings.HasPrefix(kv, "CODEX_HOME=") {
			out = append(out, kv)
		}
	}
	return append(out, "CODEX_HOME="+home)
}

// BinEnv is the environment variable that names the codex binary to use.
const BinEnv = "CODEX_BIN"

// LocalBin is where scripts/install-codex puts the native binary, relative to
// the repository root.
const LocalBin = ".codex-cli/node_modules/@openai/codex-linux-x64/vendor/x86_64-unknown-linux-musl/bin/codex"

// ErrNoCodex is wrapped by CodexBin when no binary is found.
var ErrNoCodex = errors.New("codex binary not found; run scripts/install-codex (or set CODEX_BIN)")

// CodexBin finds the codex binary: $CODEX_BIN if set, else the project-local
// install under the repository root (the nearest directory above the working
// directory holding go.mod), else `codex` on PATH.
func CodexBin() (string, error) {
	if p := os.Getenv(BinEnv); p != "" {
		if err := checkExec(p); err != nil {
			return "", fmt.Errorf("codexhome: %s=%s: %w", BinEnv, p, err)
		}
		return p, nil
	}
	var tried []string
	if wd, err := os.Getwd(); err == nil {
		if root, ok := repoRoot(wd); ok {
			p := filepath.Join(root, filepath.FromSlash(LocalBin))
			if checkExec(p) == nil {
				return reachable(p)
			}
			tried = append(tried, p)
		}
	}
	if p, err := exec.LookPath("codex"); err == nil {
		return p, nil
	}
	tried = append(tried, "codex on PATH")
	return "", fmt.Errorf("codexhome: %w (tried %s)", ErrNoCodex, strings.Join(tried, ", "))
}

// reachable is the project-local CLI where the users' uids of the
// isolation tests can run it: as the daemon does (isolate.LinkCLI), a
// clone under a 0700 folder has its native binary linked into the
// daemon's CLI folder, so that the tests find the app-servers by the
// path they run. Without root no uid is switched: the install as it is.
func reachable(native string) (string, error) {
	if os.Geteuid() != 0 {
		return native, nil
	}
	if blocked, err := isolate.Unreachable(native); err != nil || blocked == "" {
		return native, nil
	}
	return isolate.LinkCLI(native, isolate.DefaultCLILinks)
}

// repoRoot walks up from dir to the nearest directory holding go.mod.
func repoRoot(dir string) (string, bool) {
	for {
		if fi, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil && !fi.IsDir() {
			return dir, true
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", false
		}
		dir = parent
	}
}

// checkExec reports whether p is an executable regular file.
func checkExec(p string) error {
	fi, err := os.Stat(p)
	if err != nil {
		return err
	}
	if !fi.Mode().IsRegular() || fi.Mode().Perm()&0o111 == 0 {
		return fmt.Errorf("not an executable file")
	}
	return nil
}
