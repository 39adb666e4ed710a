package main

import (
	"bufio"
	"bytes"
	"crypto/sha256"
	"debug/elf"
	"encoding/hex"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"go.etcd.io/etcd/server/v3/embed"

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

// TestSystemdUnit: the shipped unit (deploy/systemd/supervisor.service)
// notifies readiness, reloads on SIGHUP, holds no capability and only the
// native ABI, and holds no address and no node's setting: ExecStart is a
// bare `supervisor serve`, the settings come from the required environment
// file, and every SUPERVISOR_ variable it sets itself is a serve flag.
// Where systemd-analyze works offline its exposure score is checked too.
func TestSystemdUnit(t *testing.T) {
	const path = "../../deploy/systemd/supervisor.service"
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	u := parseUnit(t, path)
	for key, want := range map[string]string{
		"Type": "notify", "CapabilityBoundingSet": "", "SystemCallArchitectures": "native",
		"EnvironmentFile": "/etc/meshweaver/supervisor.env", "ExecStart": "/usr/local/bin/supervisor serve",
		"ExecReload": "/bin/kill -HUP $MAINPID", "KillMode": "mixed", "Delegate": "memory pids cpu",
	} {
		if got := u.last("Service", key); got != want {
			t.Errorf("the unit's %s=%q, want %q", key, got, want)
		}
	}
	if a := unitAddress.FindString(u.values()); a != "" {
		t.Errorf("the unit hard-codes the address %s: node settings belong in the environment file", a)
	}
	fs := flag.NewFlagSet("serve", flag.ContinueOnError)
	serveFlags(fs)
	for k := range u.env() {
		if name, ok := strings.CutPrefix(k, "SUPERVISOR_"); ok && fs.Lookup(strings.ToLower(strings.ReplaceAll(name, "_", "-"))) == nil {
			t.Errorf("the unit sets %s, which is no serve setting", k)
		}
	}
	analyze, err := exec.LookPath("systemd-analyze")
	if err != nil {
		t.Log("no systemd-analyze: exposure score not checked")
		return
	}
	tmp := filepath.Join(t.TempDir(), "supervisor.service")
	if err := os.WriteFile(tmp, b, 0o600); err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command(analyze, "security", "--offline=true", tmp).CombinedOutput()
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

// unitAddress matches an IPv4 address (with or without a port).
var unitAddress = regexp.MustCompile(`\b\d{1,3}\.\d{1,3}\.\d{1,3}\.\d{1,3}\b`)

// TestSystemdDeployments resolves the settings of each shipped systemd
// set-up exactly as serve would read them (the unit's ExecStart and
// Environment=, the environment file over them, the --config file it names
// under them) and checks what must agree across the files: every line is a
// serve setting with a valid value; the remote listens on a non-loopback
// address with mutual TLS and an authz file; the homes are writable and the
// workspace visible under ProtectSystem=strict; the metrics stay on
// loopback; --stop-timeout is below TimeoutStopSec; a --config file sets
// nothing the unit's own Environment= would silently override; and in the
// cluster, etcd's CA is not the callers'.
func TestSystemdDeployments(t *testing.T) {
	for _, d := range []struct {
		name, env, conf string
		dropIns         []string
		cluster         bool
	}{
		{name: "single", env: "supervisor.env"},
		{name: "cluster", env: "cluster/supervisor.env", conf: "cluster/supervisor.conf",
			dropIns: []string{"cluster/supervisor.service.d/cluster.conf"}, cluster: true},
	} {
		t.Run(d.name, func(t *testing.T) {
			const dir = "../../deploy/systemd/"
			u := parseUnit(t, dir+"supervisor.service")
			for _, p := range d.dropIns {
				u.merge(parseUnit(t, dir+p))
			}
			vars := u.env()
			file := readEnvFile(t, dir+d.env)
			maps.Copy(vars, file) // EnvironmentFile= wins over Environment=
			if d.conf != "" {
				if got := vars["SUPERVISOR_CONFIG"]; got != "/etc/meshweaver/supervisor.conf" {
					t.Fatalf("SUPERVISOR_CONFIG=%q, want the installed /etc/meshweaver/supervisor.conf", got)
				}
				vars["SUPERVISOR_CONFIG"] = dir + d.conf // read the shipped copy
			}
			fs := flag.NewFlagSet("serve", flag.ContinueOnError)
			fs.SetOutput(io.Discard)
			o := serveFlags(fs)
			args := strings.Fields(u.last("Service", "ExecStart"))
			if len(args) < 2 || args[1] != "serve" {
				t.Fatalf("ExecStart %v does not run serve", args)
			}
			src, errs, err := readServeSettings(fs, o, args[2:], func(k string) (string, bool) { v, ok := vars[k]; return v, ok })
			if err != nil || len(errs) > 0 {
				t.Fatalf("the settings do not read: %v %v", err, errs)
			}
			for k := range file {
				if _, ok := src[strings.ToLower(strings.ReplaceAll(strings.TrimPrefix(k, "SUPERVISOR_"), "_", "-"))]; !ok && k != "SUPERVISOR_CONFIG" {
					t.Errorf("%s sets %s, which sets no serve flag", d.env, k)
				}
			}
			get := func(name string) string { return fs.Lookup(name).Value.String() }
			if d.conf != "" {
				for name, from := range src {
					if k := envKey(name); from == k && u.env()[k] != "" && file[k] == "" {
						if b, _ := os.ReadFile(dir + d.conf); regexp.MustCompile(`(?m)^` + name + `\b`).Match(b) {
							t.Errorf("%s sets %s, which the unit's Environment=%s overrides", d.conf, name, k)
						}
					}
				}
			}
			if l := get("listen"); l == "" || isLoopback(l) {
				t.Errorf("--listen %q: a node's remote listener is the address peers dial", l)
			}
			for _, n := range []string{"tls-cert", "tls-key", "tls-ca", "authz"} {
				if get(n) == "" {
					t.Errorf("--%s is not set", n)
				}
			}
			if m := get("metrics-listen"); !isLoopback(m) {
				t.Errorf("--metrics-listen %q is off loopback (plain HTTP, no authentication)", m)
			}
			if !underAny(get("homes"), u.all("Service", "ReadWritePaths")) {
				t.Errorf("--homes %s is not under ReadWritePaths %v", get("homes"), u.all("Service", "ReadWritePaths"))
			}
			if !underAny(get("workspace"), append(u.all("Service", "ReadOnlyPaths"), u.all("Service", "ReadWritePaths")...)) {
				t.Errorf("--workspace %s is in neither ReadOnlyPaths nor ReadWritePaths", get("workspace"))
			}
			stopSec, err := strconv.Atoi(u.last("Service", "TimeoutStopSec"))
			if err != nil {
				t.Fatalf("TimeoutStopSec: %v", err)
			}
			if stop, _ := time.ParseDuration(get("stop-timeout")); stop >= time.Duration(stopSec)*time.Second {
				t.Errorf("--stop-timeout %v is not below TimeoutStopSec=%d", stop, stopSec)
			}
			if !d.cluster {
				if get("cluster") != "" {
					t.Errorf("the single node sets --cluster %s", get("cluster"))
				}
				return
			}
			if get("etcd-name") != "" {
				t.Errorf("--etcd-name %s: the cluster's etcd is external", get("etcd-name"))
			}
			if get("etcd-tls-ca") == "" || get("etcd-tls-ca") == get("tls-ca") {
				t.Errorf("--etcd-tls-ca %q: etcd needs a CA of its own, not the callers' %q", get("etcd-tls-ca"), get("tls-ca"))
			}
			for _, m := range u.all("Unit", "RequiresMountsFor") {
				if !underAny(get("homes"), []string{m}) {
					t.Errorf("RequiresMountsFor=%s does not hold --homes %s", m, get("homes"))
				}
			}
			if len(u.all("Unit", "RequiresMountsFor")) == 0 {
				t.Error("the cluster's daemon does not wait for the shared homes' mount")
			}
			checkEtcdMembers(t, dir+"cluster/", strings.Split(get("etcd-endpoints"), ","), get("etcd-election-timeout"))
		})
	}
}

// checkEtcdMembers: etcd.service runs etcd from its environment file, each
// member's file sets only etcd flags (etcd's own flag set, embed.Config)
// with values etcd accepts, the members agree on the initial cluster and
// its token, serve mutual TLS on both ports, their advertised client URLs
// are exactly the daemons' --etcd-endpoints, and their election timeout is
// the daemons' --etcd-election-timeout.
func checkEtcdMembers(t *testing.T, dir string, endpoints []string, election string) {
	t.Helper()
	u := parseUnit(t, dir+"etcd.service")
	if got := u.last("Service", "Type"); got != "notify" {
		t.Errorf("etcd.service Type=%s, want notify", got)
	}
	if got := u.last("Service", "EnvironmentFile"); got != "/etc/etcd/etcd.env" {
		t.Errorf("etcd.service EnvironmentFile=%s", got)
	}
	if f := strings.Fields(u.last("Service", "ExecStart")); len(f) != 1 || filepath.Base(f[0]) != "etcd" {
		t.Errorf("etcd.service ExecStart=%v: want etcd, its settings from the environment file", f)
	}
	files, _ := filepath.Glob(dir + "etcd/*.env")
	if len(files) != 3 {
		t.Fatalf("etcd member files %v, want 3", files)
	}
	var advertised []string
	initial := map[string]bool{}
	for _, p := range files {
		env := readEnvFile(t, p)
		cfg := embed.NewConfig()
		fs := flag.NewFlagSet("etcd", flag.ContinueOnError)
		fs.SetOutput(io.Discard)
		cfg.AddFlags(fs)
		// etcdmain's own flag, beside embed.Config's.
		fs.Func("initial-cluster-state", "", func(v string) error {
			if v != embed.ClusterStateFlagNew && v != embed.ClusterStateFlagExisting {
				return fmt.Errorf("%q is neither new nor existing", v)
			}
			return nil
		})
		for k, v := range env {
			name := strings.ToLower(strings.ReplaceAll(strings.TrimPrefix(k, "ETCD_"), "_", "-"))
			if fs.Lookup(name) == nil || !strings.HasPrefix(k, "ETCD_") {
				t.Errorf("%s: %s is no etcd flag", p, k)
			} else if err := fs.Set(name, v); err != nil {
				t.Errorf("%s: %s=%s: %v", p, k, v, err)
			}
		}
		for _, k := range []string{"ETCD_CLIENT_CERT_AUTH", "ETCD_PEER_CLIENT_CERT_AUTH"} {
			if env[k] != "true" {
				t.Errorf("%s: %s=%q, want mutual TLS", p, k, env[k])
			}
		}
		for _, k := range []string{"ETCD_LISTEN_CLIENT_URLS", "ETCD_LISTEN_PEER_URLS", "ETCD_ADVERTISE_CLIENT_URLS", "ETCD_INITIAL_ADVERTISE_PEER_URLS"} {
			if !strings.HasPrefix(env[k], "https://") {
				t.Errorf("%s: %s=%s is not https", p, k, env[k])
			}
		}
		if env["ETCD_TRUSTED_CA_FILE"] == "" || env["ETCD_PEER_TRUSTED_CA_FILE"] == "" {
			t.Errorf("%s: no trusted CA for clients or peers", p)
		}
		advertised = append(advertised, env["ETCD_ADVERTISE_CLIENT_URLS"])
		initial[env["ETCD_INITIAL_CLUSTER"]+" "+env["ETCD_INITIAL_CLUSTER_TOKEN"]] = true
		if want := env["ETCD_NAME"] + "=" + env["ETCD_INITIAL_ADVERTISE_PEER_URLS"]; !slices.Contains(strings.Split(env["ETCD_INITIAL_CLUSTER"], ","), want) {
			t.Errorf("%s: ETCD_INITIAL_CLUSTER does not name the member itself (%s)", p, want)
		}
		ms, err := strconv.Atoi(env["ETCD_ELECTION_TIMEOUT"])
		if d, _ := time.ParseDuration(election); err != nil || time.Duration(ms)*time.Millisecond != d {
			t.Errorf("%s: ETCD_ELECTION_TIMEOUT=%s, the daemons' --etcd-election-timeout %s", p, env["ETCD_ELECTION_TIMEOUT"], election)
		}
	}
	if len(initial) != 1 {
		t.Errorf("the members disagree on the initial cluster or its token: %v", initial)
	}
	slices.Sort(advertised)
	slices.Sort(endpoints)
	if !slices.Equal(advertised, endpoints) {
		t.Errorf("--etcd-endpoints %v, the members advertise %v", endpoints, advertised)
	}
}

// TestSystemdAnalyzeVerify runs `systemd-analyze verify` on every shipped
// unit (the daemon's with the cluster's drop-in, and etcd's), with the
// binaries they start replaced by a stub (verify refuses a missing
// executable), and fails on any complaint: verify exits 0 on an unknown key.
func TestSystemdAnalyzeVerify(t *testing.T) {
	analyze, err := exec.LookPath("systemd-analyze")
	if err != nil {
		t.Skip("no systemd-analyze here (apt-get install systemd)")
	}
	dir := t.TempDir()
	stub := filepath.Join(dir, "stub")
	if err := os.WriteFile(stub, []byte("#!/bin/sh\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	units := map[string]string{
		"supervisor.service":                "../../deploy/systemd/supervisor.service",
		"supervisor.service.d/cluster.conf": "../../deploy/systemd/cluster/supervisor.service.d/cluster.conf",
		"etcd.service":                      "../../deploy/systemd/cluster/etcd.service",
	}
	for name, src := range units {
		b, err := os.ReadFile(src)
		if err != nil {
			t.Fatal(err)
		}
		b = regexp.MustCompile(`/usr/local/bin/(supervisor|etcd)\b`).ReplaceAll(b, []byte(stub))
		if err := os.MkdirAll(filepath.Dir(filepath.Join(dir, name)), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, name), b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	cmd := exec.Command(analyze, "verify", filepath.Join(dir, "supervisor.service"), filepath.Join(dir, "etcd.service"))
	cmd.Env = append(os.Environ(), "SYSTEMD_UNIT_PATH="+dir+":") // the drop-in folder beside the unit; ":" keeps the defaults
	out, err := cmd.CombinedOutput()
	if err != nil || len(bytes.TrimSpace(out)) > 0 {
		t.Errorf("systemd-analyze verify: %v\n%s", err, out)
	}
}

// unitFile is a parsed systemd unit: each section's keys with their values
// in order (continuation lines joined, comments dropped).
type unitFile map[string]map[string][]string

func parseUnit(t testing.TB, path string) unitFile {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	u := unitFile{}
	section := ""
	var cont string
	for n, line := range strings.Split(string(b), "\n") {
		line = strings.TrimSpace(line)
		if cont == "" && (line == "" || line[0] == '#' || line[0] == ';') {
			continue
		}
		if strings.HasSuffix(line, "\\") {
			cont += strings.TrimSuffix(line, "\\") + " "
			continue
		}
		line, cont = cont+line, ""
		if strings.HasPrefix(line, "[") && strings.HasSuffix(line, "]") {
			section = line[1 : len(line)-1]
			if u[section] == nil {
				u[section] = map[string][]string{}
			}
			continue
		}
		k, v, ok := strings.Cut(line, "=")
		if !ok || section == "" {
			t.Fatalf("%s:%d: %q is no key=value in a section", path, n+1, line)
		}
		u[section][k] = append(u[section][k], strings.Join(strings.Fields(v), " "))
	}
	return u
}

func (u unitFile) merge(o unitFile) {
	for s, kv := range o {
		if u[s] == nil {
			u[s] = map[string][]string{}
		}
		for k, v := range kv {
			u[s][k] = append(u[s][k], v...)
		}
	}
}

func (u unitFile) last(section, key string) string {
	v := u[section][key]
	if len(v) == 0 {
		return "<unset>"
	}
	return v[len(v)-1]
}

// all is every space-separated item of key, a leading "-" (optional) dropped.
func (u unitFile) all(section, key string) []string {
	var out []string
	for _, v := range u[section][key] {
		for _, f := range strings.Fields(v) {
			out = append(out, strings.TrimPrefix(f, "-"))
		}
	}
	return out
}

// values is every value of the unit, one a line.
func (u unitFile) values() string {
	var b strings.Builder
	for _, kv := range u {
		for _, v := range kv {
			b.WriteString(strings.Join(v, "\n") + "\n")
		}
	}
	return b.String()
}

// env is the unit's Environment= assignments.
func (u unitFile) env() map[string]string {
	m := map[string]string{}
	for _, v := range u["Service"]["Environment"] {
		for _, kv := range strings.Fields(v) {
			if k, v, ok := strings.Cut(kv, "="); ok {
				m[k] = v
			}
		}
	}
	return m
}

// readEnvFile reads a systemd EnvironmentFile= of KEY=value lines.
func readEnvFile(t testing.TB, path string) map[string]string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	m := map[string]string{}
	for n, line := range strings.Split(string(b), "\n") {
		line = strings.TrimSpace(line)
		if line == "" || line[0] == '#' || line[0] == ';' {
			continue
		}
		k, v, ok := strings.Cut(line, "=")
		if !ok || !regexp.MustCompile(`^[A-Z][A-Z0-9_]*$`).MatchString(k) {
			t.Fatalf("%s:%d: %q is no KEY=value", path, n+1, line)
		}
		if _, dup := m[k]; dup {
			t.Errorf("%s:%d: %s set twice", path, n+1, k)
		}
		m[k] = v
	}
	return m
}

func underAny(path string, dirs []string) bool {
	for _, d := range dirs {
		if rel, err := filepath.Rel(d, path); err == nil && rel != ".." && !strings.HasPrefix(rel, "../") {
			return true
		}
	}
	return false
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
