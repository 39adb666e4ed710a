package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/meshweaver/supervisor/contain"
)

// configLines runs `supervisor config args` with env as the environment
// and returns its settings: name → "value source" lines (a repeatable
// setting's lines joined by "|").
func configLines(t *testing.T, env map[string]string, args ...string) map[string]string {
	t.Helper()
	var out, errOut bytes.Buffer
	lookup := func(k string) (string, bool) { v, ok := env[k]; return v, ok }
	if err := configCmd(args, lookup, &out, &errOut); err != nil {
		t.Fatalf("config %q: %v\n%s", args, err, errOut.String())
	}
	got := map[string]string{}
	space := regexp.MustCompile(`\s{2,}`)
	for _, line := range strings.Split(strings.TrimSpace(out.String()), "\n")[1:] {
		name, rest, _ := strings.Cut(space.ReplaceAllString(line, "\t"), "\t")
		rest = strings.ReplaceAll(rest, "\t", " ")
		if got[name] != "" {
			rest = got[name] + "|" + rest
		}
		got[name] = rest
	}
	return got
}

// A flag beats its variable, the variable beats the file, the file beats
// the default; each setting says which one it came from.
func TestConfigSources(t *testing.T) {
	file := filepath.Join(t.TempDir(), "supervisor.conf")
	conf := "queue-limit 5\nlog-level warn\nmax-live = 7\n# a comment\nidle-timeout 90s\ncodex-env FROM_FILE=1\n"
	if err := os.WriteFile(file, []byte(conf), 0o600); err != nil {
		t.Fatal(err)
	}
	env := map[string]string{
		"SUPERVISOR_QUEUE_LIMIT": "6", "SUPERVISOR_LOG_LEVEL": "error", "SUPERVISOR_CONFIG": file,
		"SUPERVISOR_CODEX_ENV": "A=1,B=2",
	}
	got := configLines(t, env, "--queue-limit", "8", "--homes=/srv/homes")
	for name, want := range map[string]string{
		"queue-limit":   "8 flag",                     // flag over variable over file
		"homes":         "/srv/homes flag",            // flag only
		"log-level":     "error SUPERVISOR_LOG_LEVEL", // variable over file
		"config":        file + " SUPERVISOR_CONFIG",
		"codex-env":     "A=1 SUPERVISOR_CODEX_ENV|B=2 SUPERVISOR_CODEX_ENV", // the variable's list, not the file's
		"max-live":      "7 file " + file,
		"idle-timeout":  "1m30s file " + file,
		"stall-timeout": "10m0s default",
		"workspace":     `"" default`,
		"stop-timeout":  "30s default",
	} {
		if got[name] != want {
			t.Errorf("%s: %q, want %q", name, got[name], want)
		}
	}
	// Without the flag and the variable, the file's value shows.
	if got := configLines(t, map[string]string{}, "--config", file); got["queue-limit"] != "5 file "+file || got["log-level"] != "warn file "+file {
		t.Errorf("from the file alone: queue-limit %q, log-level %q", got["queue-limit"], got["log-level"])
	}
}

// A secret is never printed, whatever its source; a path to a secret file
// is.
func TestConfigRedactsSecrets(t *testing.T) {
	const key, token, pw = "sk-test-config-0123456789", "tok-0123456789abcdef", "etcd-pw-42"
	file := filepath.Join(t.TempDir(), "supervisor.conf")
	conf := "codex-override model_providers.p.http_headers={Authorization=\"Bearer " + token + "\"}\n" +
		"codex-override model=o4\n" + "codex-env MESH_TOKEN=" + token + "\n"
	if err := os.WriteFile(file, []byte(conf), 0o600); err != nil {
		t.Fatal(err)
	}
	var out, errOut bytes.Buffer
	env := map[string]string{"SUPERVISOR_CODEX_ENV": "OPENAI_API_KEY=" + key,
		"SUPERVISOR_ETCD_ENDPOINTS": "https://root:" + pw + "@10.0.0.1:2379"}
	lookup := func(k string) (string, bool) { v, ok := env[k]; return v, ok }
	args := []string{"--config", file, "--codex-env", "OTHER=" + key, "--codex-env", "PLAIN=visible",
		"--tls-key", "/etc/meshweaver/tls/node.key"}
	if err := configCmd(args, lookup, &out, &errOut); err != nil {
		t.Fatalf("config: %v\n%s", err, errOut.String())
	}
	for _, secret := range []string{key, token, pw} {
		if strings.Contains(out.String()+errOut.String(), secret) {
			t.Errorf("config printed the secret %q:\n%s", secret, out.String())
		}
	}
	for _, want := range []string{"OTHER=<redacted>", "PLAIN=visible", "model=o4", "https://root:<redacted>@10.0.0.1:2379",
		"/etc/meshweaver/tls/node.key", "model_providers.p.http_headers=<redacted>"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("config lacks %q:\n%s", want, out.String())
		}
	}
	// codex-env from the flags: the variable's and the file's are not used.
	if strings.Contains(out.String(), "OPENAI_API_KEY") || strings.Contains(out.String(), "MESH_TOKEN") {
		t.Errorf("config shows the variable's codex-env though the flag set it:\n%s", out.String())
	}
}

// A mistake in any source is a usage error naming it; help lists config.
func TestConfigCommandLine(t *testing.T) {
	var out, errOut bytes.Buffer
	env := map[string]string{"SUPERVISOR_MAX_LIVE": "lots"}
	lookup := func(k string) (string, bool) { v, ok := env[k]; return v, ok }
	if err := configCmd([]string{"--nope"}, lookup, &out, &errOut); err != errUsage {
		t.Errorf("config --nope: %v, want errUsage", err)
	}
	for _, want := range []string{"unknown flag --nope", "SUPERVISOR_MAX_LIVE"} {
		if !strings.Contains(errOut.String(), want) {
			t.Errorf("config's errors lack %q: %s", want, errOut.String())
		}
	}
	out.Reset()
	if code := runCLI(context.Background(), []string{"help"}, nil, &out, &errOut); code != 0 || !strings.Contains(out.String(), "\n  config ") {
		t.Errorf("supervisor help: exit %d, lists no config command:\n%s", code, out.String())
	}
	out.Reset()
	errOut.Reset()
	if code := runCLI(context.Background(), []string{"help", "config"}, nil, &out, &errOut); code != 0 || !strings.HasPrefix(out.String(), "usage: supervisor config") {
		t.Errorf("supervisor help config: exit %d, stdout %q, stderr %q; want the help on stdout", code, out.String(), errOut.String())
	}
}

// TestConfigJSONResolves: config --json prints one object a setting, as
// the table does, with what serve makes of the settings it decides at
// start: the auto limits as this node's numbers, the CLI's path, the
// defaults taken from other settings, bubblewrap and the uid range as
// this host allows them; secrets stay redacted. Before, --json was an
// unknown flag and "auto" was all config said.
func TestConfigJSONResolves(t *testing.T) {
	bin := opsCodexBin(t)
	var out, errOut bytes.Buffer
	lookup := func(string) (string, bool) { return "", false }
	err := configCmd([]string{"--json", "--homes", "/srv/homes", "--codex", bin, "--sandbox", "workspace-write",
		"--codex-env", "OPENAI_API_KEY=sk-secret-0123", "--user-pids-max", "300"}, lookup, &out, &errOut)
	if err != nil {
		t.Fatalf("config --json: %v\n%s", err, errOut.String())
	}
	got := map[string]map[string]any{}
	for _, line := range strings.Split(strings.TrimSpace(out.String()), "\n") {
		var m map[string]any
		if err := json.Unmarshal([]byte(line), &m); err != nil {
			t.Fatalf("config --json printed %q: %v", line, err)
		}
		got[m["name"].(string)] = m
	}
	if table := configLines(t, nil); len(got) != len(table) {
		t.Errorf("config --json: %d settings, the table %d", len(got), len(table))
	}
	def := contain.Defaults()
	for name, want := range map[string]string{
		"user-memory-max":         contain.FormatSize(def.Memory),
		"user-cpu-max":            contain.FormatCPU(def.CPU),
		"codex":                   bin,
		"max-sandbox":             "workspace-write",
		"allow-approval-policies": "never",
	} {
		if r, _ := got[name]["resolved"].(string); r != want || got[name]["why"] == "" {
			t.Errorf("%s: %v, want resolved %q with why", name, got[name], want)
		}
	}
	if _, ok := got["user-pids-max"]["resolved"]; ok || got["user-pids-max"]["value"] != "300" {
		t.Errorf("user-pids-max set to 300: %v, want the value and nothing resolved", got["user-pids-max"])
	}
	if f := got["log-format"]["resolved"]; f != "json" && f != "text" {
		t.Errorf("log-format auto resolved to %v", got["log-format"])
	}
	for _, name := range []string{"bwrap", "uid-range", "cgroup-version"} {
		if r, ok := got[name]["resolved"].(string); !ok || r == "" || r == "auto" {
			t.Errorf("%s: %v, want what this host makes of it", name, got[name])
		}
	}
	if vals := fmt.Sprint(got["codex-env"]["values"]); vals != "[OPENAI_API_KEY=<redacted>]" || strings.Contains(out.String(), "sk-secret") {
		t.Errorf("codex-env: %s, want the key redacted", vals)
	}
	if got["homes"]["value"] != "/srv/homes" || got["homes"]["source"] != "flag" {
		t.Errorf("homes: %v", got["homes"])
	}
}
