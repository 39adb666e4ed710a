package codexhome_test

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"go.uber.org/goleak"

	"github.com/meshweaver/supervisor/isolate"
	"github.com/meshweaver/supervisor/testkit/codexhome"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

const testURL = "http://127.0.0.1:9/v1"

func TestOverrides(t *testing.T) {
	t.Parallel()
	got := codexhome.Overrides(testURL)
	for _, want := range []string{
		`model_provider="mock"`,
		`model="mock-model"`,
		`model_providers.mock.name="Mock model"`,
		`model_providers.mock.base_url="http://127.0.0.1:9/v1"`,
		`model_providers.mock.wire_api="responses"`,
		`model_providers.mock.requires_openai_auth=false`,
		`model_providers.mock.request_max_retries=0`,
		`model_providers.mock.stream_max_retries=0`,
	} {
		if !contains(got, want) {
			t.Errorf("Overrides lacks %s: %q", want, got)
		}
	}
	args := codexhome.OverrideArgs(testURL)
	if len(args) != 2*len(got) || args[0] != "-c" || args[1] != got[0] {
		t.Errorf("OverrideArgs = %q", args)
	}
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

// catalogModel reads the single model of the catalog WriteConfig wrote.
func catalogModel(t *testing.T, home string) map[string]any {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(home, codexhome.CatalogFile))
	if err != nil {
		t.Fatal(err)
	}
	var cat struct {
		Models []map[string]any `json:"models"`
	}
	if err := json.Unmarshal(b, &cat); err != nil || len(cat.Models) != 1 {
		t.Fatalf("catalog %s: %v", b, err)
	}
	return cat.Models[0]
}

func TestWriteConfig(t *testing.T) {
	t.Parallel()
	home := filepath.Join(t.TempDir(), "a", "home")
	if err := codexhome.WriteConfig(home, testURL); err != nil {
		t.Fatal(err)
	}
	fi, err := os.Stat(home)
	if err != nil || fi.Mode().Perm() != 0o700 {
		t.Errorf("home mode = %v, %v; want 0700", fi.Mode(), err)
	}
	b, err := os.ReadFile(filepath.Join(home, "config.toml"))
	if err != nil {
		t.Fatal(err)
	}
	cfg := string(b)
	for _, want := range []string{
		`model_provider = "mock"`,
		`model_providers.mock.base_url = "http://127.0.0.1:9/v1"`,
		`model_catalog_json = "` + filepath.Join(home, codexhome.CatalogFile) + `"`,
	} {
		if !strings.Contains(cfg, want+"\n") {
			t.Errorf("config.toml lacks %s:\n%s", want, cfg)
		}
	}
	m := catalogModel(t, home)
	if m["slug"] != codexhome.Model || m["apply_patch_tool_type"] != "freeform" ||
		m["context_window"] != float64(codexhome.LargeContextWindow) || m["auto_compact_token_limit"] != nil {
		t.Errorf("catalog model = %v", m)
	}
}

func TestWriteConfigOptions(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()

	small, err := codexhome.MkHome(filepath.Join(dir), testURL, codexhome.WithSmallContext())
	if err != nil {
		t.Fatal(err)
	}
	if small != filepath.Join(dir, "codex-home") {
		t.Errorf("MkHome = %s", small)
	}
	m := catalogModel(t, small)
	if m["context_window"] != float64(codexhome.SmallContextWindow) || m["auto_compact_token_limit"] != float64(codexhome.SmallAutoCompactLimit) {
		t.Errorf("small catalog model = %v", m)
	}

	bare := filepath.Join(dir, "bare")
	err = codexhome.WriteConfig(bare, testURL, codexhome.WithoutCatalog(),
		codexhome.WithSetting(`model_providers.mock.stream_max_retries=2`),
		codexhome.WithSetting(`shell_environment_policy.inherit="all"`))
	if err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(filepath.Join(bare, "config.toml"))
	if err != nil {
		t.Fatal(err)
	}
	cfg := string(b)
	if strings.Contains(cfg, "model_catalog_json") {
		t.Errorf("WithoutCatalog wrote a catalog:\n%s", cfg)
	}
	if _, err := os.Stat(filepath.Join(bare, codexhome.CatalogFile)); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("catalog file exists: %v", err)
	}
	if strings.Count(cfg, "stream_max_retries") != 1 || !strings.Contains(cfg, "model_providers.mock.stream_max_retries = 2\n") {
		t.Errorf("WithSetting did not replace the key:\n%s", cfg)
	}
	if !strings.Contains(cfg, `shell_environment_policy.inherit = "all"`) {
		t.Errorf("WithSetting did not add the key:\n%s", cfg)
	}
}

func TestEnv(t *testing.T) {
	t.Parallel()
	got := codexhome.Env([]string{"A=1", "CODEX_HOME=/old", "B=2"}, "/new")
	if strings.Join(got, " ") != "A=1 B=2 CODEX_HOME=/new" {
		t.Errorf("Env = %q", got)
	}
}

func TestCodexBin(t *testing.T) {
	fake := filepath.Join(t.TempDir(), "codex")
	if err := os.WriteFile(fake, []byte("#!/bin/sh\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	t.Run("CODEX_BIN", func(t *testing.T) {
		t.Setenv(codexhome.BinEnv, fake)
		if got, err := codexhome.CodexBin(); err != nil || got != fake {
			t.Errorf("CodexBin = %q, %v; want %q", got, err, fake)
		}
	})
	t.Run("CODEX_BIN missing file", func(t *testing.T) {
		t.Setenv(codexhome.BinEnv, fake+".nope")
		if _, err := codexhome.CodexBin(); err == nil {
			t.Error("CodexBin accepted a missing CODEX_BIN")
		}
	})
	t.Run("project-local install", func(t *testing.T) {
		t.Setenv(codexhome.BinEnv, "")
		got, err := codexhome.CodexBin()
		if err != nil {
			t.Fatalf("CodexBin: %v (run scripts/install-codex)", err)
		}
		if !strings.HasSuffix(got, filepath.FromSlash(codexhome.LocalBin)) {
			// From a clone the users' uids cannot enter (a 0700 folder), as
			// root: the same file, linked where they can.
			wd, _ := os.Getwd()
			local := filepath.Join(filepath.Dir(filepath.Dir(wd)), filepath.FromSlash(codexhome.LocalBin))
			a, errA := os.Stat(local)
			b, errB := os.Stat(got)
			if errA != nil || errB != nil || !os.SameFile(a, b) || !strings.HasPrefix(got, isolate.DefaultCLILinks+"/") {
				t.Errorf("CodexBin = %q, want the project-local install %s or its link under %s", got, local, isolate.DefaultCLILinks)
			}
		}
	})
	t.Run("PATH", func(t *testing.T) {
		t.Setenv(codexhome.BinEnv, "")
		t.Setenv("PATH", filepath.Dir(fake))
		t.Chdir(t.TempDir()) // no go.mod above
		if got, err := codexhome.CodexBin(); err != nil || got != fake {
			t.Errorf("CodexBin = %q, %v; want %q from PATH", got, err, fake)
		}
	})
	t.Run("nothing found", func(t *testing.T) {
		t.Setenv(codexhome.BinEnv, "")
		t.Setenv("PATH", t.TempDir())
		t.Chdir(t.TempDir())
		_, err := codexhome.CodexBin()
		if !errors.Is(err, codexhome.ErrNoCodex) || !strings.Contains(err.Error(), "scripts/install-codex") {
			t.Errorf("CodexBin error = %v", err)
		}
	})
}

// TestStrictConfig has the real CLI validate what this package writes:
// --strict-config rejects unknown keys, and the catalog is parsed.
func TestStrictConfig(t *testing.T) {
	bin, err := codexhome.CodexBin()
	if err != nil {
		t.Fatalf("the real codex CLI is required: %v", err)
	}
	check := func(t *testing.T, home string, args ...string) {
		t.Helper()
		ctx, cancel := context.WithTimeout(context.Background(), waitTimeout)
		defer cancel()
		cmd := exec.CommandContext(ctx, bin, append([]string{"app-server", "--strict-config", "--print-startup-config"}, args...)...)
		cmd.Env = codexhome.Env(os.Environ(), home)
		out, err := cmd.Output()
		if err != nil {
			t.Fatalf("codex rejected the config: %v\n%s", err, out)
		}
		if !strings.Contains(string(out), `"appServerVersion"`) {
			t.Errorf("output = %s", out)
		}
	}
	for name, opts := range map[string][]codexhome.Option{
		"default":       nil,
		"small context": {codexhome.WithSmallContext()},
		"no catalog":    {codexhome.WithoutCatalog()},
	} {
		t.Run(name, func(t *testing.T) {
			home, err := codexhome.MkHome(t.TempDir(), testURL, opts...)
			if err != nil {
				t.Fatal(err)
			}
			check(t, home)
		})
	}
	t.Run("overrides", func(t *testing.T) {
		check(t, t.TempDir(), codexhome.OverrideArgs(testURL)...)
	})
	t.Run("a bad key is caught", func(t *testing.T) {
		home, err := codexhome.MkHome(t.TempDir(), testURL, codexhome.WithSetting("no_such_key=1"))
		if err != nil {
			t.Fatal(err)
		}
		cmd := exec.Command(bin, "app-server", "--strict-config", "--print-startup-config")
		cmd.Env = codexhome.Env(os.Environ(), home)
		if out, err := cmd.Output(); err == nil {
			t.Errorf("codex accepted an unknown key: %s", out)
		}
	})
}

func TestOverridesQuoteTOML(t *testing.T) {
	t.Parallel()
	got := codexhome.Overrides(`http://h/"x"\y` + "\n")
	if !contains(got, `model_providers.mock.base_url="http://h/\"x\"\\y\u000a"`) {
		t.Errorf("Overrides = %q", got)
	}
}
