package main

import (
	"bufio"
	"crypto/sha256"
	"debug/elf"
	"encoding/hex"
	"encoding/json"
	"flag"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/meshweaver/supervisor/codexproto"
)

// TestReleaseScript runs scripts/release for one architecture: a static
// binary named by the version, which reports that version, a commit and
// the pinned CLI, and its SHA-256 in the sums file.
func TestReleaseScript(t *testing.T) {
	if testing.Short() {
		t.Skip("builds a release binary (a minute on a cold cache)")
	}
	out := t.TempDir()
	cmd := exec.Command("../../scripts/release", "v0.0.0-test")
	cmd.Env = append(os.Environ(), "OUT="+out, "ARCHES=amd64")
	if b, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("scripts/release: %v\n%s", err, b)
	}
	exe := filepath.Join(out, "supervisor-v0.0.0-test-linux-amd64")
	f, err := elf.Open(exe)
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range f.Progs {
		if p.Type == elf.PT_INTERP {
			t.Errorf("%s is dynamically linked (it has an interpreter)", exe)
		}
	}
	f.Close()
	b, err := exec.Command(exe, "version", "--json").Output()
	if err != nil {
		t.Fatal(err)
	}
	var bi buildInfo
	if err := json.Unmarshal(b, &bi); err != nil || bi.Version != "v0.0.0-test" || bi.Commit == "unknown" || bi.Commit == "" || bi.Codex != codexproto.PinnedCLIVersion {
		t.Errorf("the release binary says %s (%v)", b, err)
	}
	sums, err := os.ReadFile(filepath.Join(out, "SHA256SUMS-v0.0.0-test"))
	if err != nil {
		t.Fatal(err)
	}
	data, err := os.ReadFile(exe)
	if err != nil {
		t.Fatal(err)
	}
	sum := sha256.Sum256(data)
	if want := hex.EncodeToString(sum[:]) + "  supervisor-v0.0.0-test-linux-amd64\n"; string(sums) != want {
		t.Errorf("sums file %q, want %q", sums, want)
	}
}

// TestDockerfile checks what can be checked without a docker engine (this
// machine has none, so the image is not built here): every stage a COPY
// takes from exists, every file copied from the context exists, the codex
// version is the pinned one, the runtime has bash and bubblewrap, runs as
// a non-root user, keeps the homes on a volume, and starts the binary it
// copied. hadolint runs too when it is installed.
func TestDockerfile(t *testing.T) {
	b, err := os.ReadFile("../../Dockerfile")
	if err != nil {
		t.Fatal(err)
	}
	// Join continued lines; drop comments.
	var lines []string
	var cur strings.Builder
	sc := bufio.NewScanner(strings.NewReader(string(b)))
	for sc.Scan() {
		l := strings.TrimSpace(sc.Text())
		if strings.HasPrefix(l, "#") || l == "" {
			continue
		}
		if strings.HasSuffix(l, "\\") {
			cur.WriteString(strings.TrimSuffix(l, "\\") + " ")
			continue
		}
		cur.WriteString(l)
		lines = append(lines, cur.String())
		cur.Reset()
	}
	stages := map[string]bool{}
	copied := map[string]bool{}
	env := map[string]string{}
	var user, entry, volume, runtimeRuns string
	last := ""
	for _, l := range lines {
		instr, rest, _ := strings.Cut(l, " ")
		f := strings.Fields(rest)
		switch strings.ToUpper(instr) {
		case "FROM":
			if len(f) == 3 && strings.EqualFold(f[1], "AS") {
				stages[f[2]] = true
			}
			last, runtimeRuns = f[0], ""
		case "ARG":
			if k, v, ok := strings.Cut(f[0], "="); ok && k == "CODEX_VERSION" && v != codexproto.PinnedCLIVersion {
				t.Errorf("the Dockerfile installs codex %s, the project pins %s", v, codexproto.PinnedCLIVersion)
			}
		case "COPY":
			if from, ok := strings.CutPrefix(f[0], "--from="); ok {
				if !stages[from] {
					t.Errorf("COPY --from=%s: no such stage", from)
				}
				copied[f[len(f)-1]] = true
				continue
			}
			for _, src := range f[:len(f)-1] {
				if _, err := os.Stat(filepath.Join("../..", src)); err != nil {
					t.Errorf("COPY %s: %v", src, err)
				}
			}
		case "RUN":
			runtimeRuns += rest + "\n"
			for _, m := range regexp.MustCompile(`\./cmd/\w+`).FindAllString(rest, -1) {
				if _, err := os.Stat(filepath.Join("../..", m)); err != nil {
					t.Errorf("RUN builds %s: %v", m, err)
				}
			}
		case "ENV":
			for _, kv := range f {
				if k, v, ok := strings.Cut(kv, "="); ok {
					env[k] = v
				}
			}
		case "USER":
			user = rest
		case "ENTRYPOINT":
			entry = rest
		case "VOLUME":
			volume = rest
		}
	}
	if last != "debian:bookworm-slim" {
		t.Errorf("the runtime stage is %s", last)
	}
	for _, pkg := range []string{"bash", "bubblewrap"} {
		if !strings.Contains(runtimeRuns, " "+pkg+" ") {
			t.Errorf("the runtime image does not install %s", pkg)
		}
	}
	if user == "" || user == "root" || user == "0" {
		t.Errorf("the image runs as %q, want a service user", user)
	}
	if !strings.Contains(volume, env["SUPERVISOR_HOMES"]) || env["SUPERVISOR_HOMES"] == "" {
		t.Errorf("VOLUME %s does not hold SUPERVISOR_HOMES %q", volume, env["SUPERVISOR_HOMES"])
	}
	var argv []string
	if err := json.Unmarshal([]byte(entry), &argv); err != nil {
		t.Fatalf("ENTRYPOINT %s is not the exec form: %v", entry, err)
	}
	if !slicesContain(argv, "/usr/local/bin/supervisor") || !copied["/usr/local/bin/supervisor"] || !copied[env["CODEX_BIN"]] {
		t.Errorf("ENTRYPOINT %v, CODEX_BIN %s: not the copied binaries %v", argv, env["CODEX_BIN"], copied)
	}
	// Every SUPERVISOR_ variable names a serve flag.
	fs := flag.NewFlagSet("serve", flag.ContinueOnError)
	serveFlags(fs)
	for k := range env {
		if name, ok := strings.CutPrefix(k, "SUPERVISOR_"); ok && fs.Lookup(strings.ToLower(strings.ReplaceAll(name, "_", "-"))) == nil {
			t.Errorf("ENV %s is no serve setting", k)
		}
	}
	if hadolint, err := exec.LookPath("hadolint"); err == nil {
		if out, err := exec.Command(hadolint, "../../Dockerfile").CombinedOutput(); err != nil {
			t.Errorf("hadolint: %v\n%s", err, out)
		}
	}
}

func slicesContain(s []string, x string) bool {
	for _, v := range s {
		if v == x {
			return true
		}
	}
	return false
}

// TestSystemdUnit: the unit notifies readiness, reloads on SIGHUP, reads
// an environment file, holds no capability and only the native ABI, and
// passes only flags serve has. Where systemd-analyze works offline its
// exposure score is checked too.
func TestSystemdUnit(t *testing.T) {
	b, err := os.ReadFile("../../docs/supervisor.service")
	if err != nil {
		t.Fatal(err)
	}
	unit := string(b)
	for _, want := range []string{"\nType=notify\n", "\nCapabilityBoundingSet=\n", "\nSystemCallArchitectures=native\n",
		"\nEnvironmentFile=-/etc/meshweaver/supervisor.env\n", "\nExecReload=/bin/kill -HUP $MAINPID\n", "\nKillMode=mixed\n"} {
		if !strings.Contains(unit, want) {
			t.Errorf("the unit lacks %q", strings.TrimSpace(want))
		}
	}
	fs := flag.NewFlagSet("serve", flag.ContinueOnError)
	serveFlags(fs)
	for _, m := range regexp.MustCompile(`(?m)^\s+--([a-z-]+)`).FindAllStringSubmatch(unit, -1) {
		if fs.Lookup(m[1]) == nil {
			t.Errorf("the unit passes --%s, which serve does not have", m[1])
		}
	}
	analyze, err := exec.LookPath("systemd-analyze")
	if err != nil {
		t.Log("no systemd-analyze: exposure score not checked")
		return
	}
	path := filepath.Join(t.TempDir(), "supervisor.service")
	if err := os.WriteFile(path, b, 0o600); err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command(analyze, "security", "--offline=true", path).CombinedOutput()
	m := regexp.MustCompile(`Overall exposure level for supervisor\.service: ([0-9.]+)`).FindSubmatch(out)
	if err != nil || m == nil {
		t.Logf("systemd-analyze security --offline does not work here (%v): score not checked", err)
		return
	}
	score, _ := strconv.ParseFloat(string(m[1]), 64)
	t.Logf("systemd-analyze security: %.1f", score)
	if score > 4 {
		t.Errorf("the unit's exposure is %.1f, want at most 4 (it was 3.3)", score)
	}
}

// TestGoModHasNoReplace: `go install …/cmd/supervisor@latest` refuses a
// module whose go.mod has replace directives.
func TestGoModHasNoReplace(t *testing.T) {
	b, err := os.ReadFile("../../go.mod")
	if err != nil {
		t.Fatal(err)
	}
	if regexp.MustCompile(`(?m)^\s*replace\b`).Match(b) {
		t.Error("go.mod has a replace directive: go install …@latest would refuse the module")
	}
}

// TestDaemonLinksNoTestCode: the shipped binary carries no test code: no
// package of testkit/ (the fakes run from test binaries, which TestMain
// dispatches) and not the standard library's testing.
func TestDaemonLinksNoTestCode(t *testing.T) {
	out, err := exec.Command("go", "list", "-deps", "-f", "{{.ImportPath}}", ".").Output()
	if err != nil {
		var stderr []byte
		if ee, ok := err.(*exec.ExitError); ok {
			stderr = ee.Stderr
		}
		t.Fatalf("go list -deps: %v\n%s", err, stderr)
	}
	deps := strings.Fields(string(out))
	if !slices.Contains(deps, "github.com/meshweaver/supervisor/bench") {
		t.Fatalf("go list -deps lists no bench among %d packages: not the daemon's deps", len(deps))
	}
	for _, p := range deps {
		if strings.HasPrefix(p, "github.com/meshweaver/supervisor/testkit/") || p == "testing" || strings.HasPrefix(p, "testing/") {
			t.Errorf("the daemon links %s", p)
		}
	}
}
