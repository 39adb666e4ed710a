package main

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/meshweaver/supervisor/bench"
	"github.com/meshweaver/supervisor/client"
	"github.com/meshweaver/supervisor/testkit/codexhome"
	"github.com/meshweaver/supervisor/testkit/proctest"
)

// TestBenchSmall runs `supervisor bench` with tiny counts on the real CLI
// (and this test binary as the fake app-server of the events row): every
// row is there, in the table and in the JSON, with numbers. Timings are
// not asserted: they depend on the machine.
func TestBenchSmall(t *testing.T) {
	dir := t.TempDir()
	// As a deployed daemon's folders: the users' uids may pass.
	if err := os.Chmod(filepath.Dir(dir), 0o711); err != nil {
		t.Fatal(err)
	}
	out := filepath.Join(t.TempDir(), "bench.json")
	var stdout, stderr bytes.Buffer
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	code := runCLI(ctx, []string{"bench", "--quick", "--dir", dir, "--json", out,
		"--rounds", "2", "--users", "2", "--cold", "1", "--evict", "1", "--batches", "1",
		"--events", "300", "--floods", "1", "--idle-users", "50", "--registry-threads", "20",
		"--fallbacks", "1", "--mcp-calls", "5"}, nil, &stdout, &stderr)
	if code != 0 {
		t.Fatalf("exit %d\nstdout:\n%s\nstderr:\n%s", code, stdout.String(), stderr.String())
	}
	// No CLI outlives the bench: the daemon's, the direct clients'.
	if left := proctest.WaitGone(t, 10*time.Second, 20*time.Millisecond, proctest.UnderHome(dir)); len(left) > 0 {
		t.Errorf("codex processes left under %s: %v", dir, left)
	}
	b, err := os.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	var res bench.Result
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&res); err != nil {
		t.Fatalf("the JSON does not decode into bench.Result: %v\n%s", err, b)
	}
	if err := res.Complete(); err != nil {
		t.Errorf("%v\n%s", err, b)
	}
	if res.Options.Rounds != 2 || res.Options.Users != 2 || res.Options.IdleUsers != 50 {
		t.Errorf("options %+v: the flags did not apply", res.Options)
	}
	wantRows := []string{
		"warm round: send → first text", "warm round: send → verdict",
		"warm round, MCP with a new token each round: send → first text",
		"warm round, MCP with a new token each round: send → verdict",
		"direct replaying the daemon's unsubscribe+resume: send → first text",
		"direct replaying the daemon's unsubscribe+resume: send → verdict",
		"of which: thread/unsubscribe + thread/resume",
		"direct with unsubscribe+resume, no config overlay: send → first text",
		"direct with unsubscribe+resume, no config overlay: send → verdict",
		"of which: thread/unsubscribe + thread/resume", "app-server CPU per warm round", "bench process CPU per warm round",
		"cold round (new user): send → first text", "cold round (new user): send → verdict",
		"first round after a warm-up: send → first text", "first round after a warm-up: send → verdict",
		"2 users at once: send → first text", "2 users at once: send → verdict",
		"app-server RSS per live user", "daemon heap per live user",
		"warm round, 20 mesh threads: send → first text", "warm round, 20 mesh threads: send → verdict",
		"fallback round, 32 KiB transcript: send → first text", "fallback round, 32 KiB transcript: send → verdict",
		"round after idle eviction: send → first text", "round after idle eviction: send → verdict",
		"deltas end to end over the remote",
		"MCP tools/call through the front",
		"heap per idle registered user (50 users)",
	}
	if err := bench.LimitsMeasurable(); err == nil {
		wantRows = append(wantRows,
			"new user's first round, limits on: send → first text", "new user's first round, limits on: send → verdict",
			"round after an idle eviction, limits on: send → first text", "round after an idle eviction, limits on: send → verdict",
			"new user's first round, --user-cpu-max 1: send → first text", "new user's first round, --user-cpu-max 1: send → verdict",
			"round after an idle eviction, --user-cpu-max 1: send → first text", "round after an idle eviction, --user-cpu-max 1: send → verdict")
	} else {
		t.Logf("no limits rows: %v", err)
	}
	// The deployed rows: isolation off always; uid+bwrap as root with
	// bubblewrap (the run's folder is let through above), and the limits
	// too where the host enforces them.
	configs := []string{bench.ConfigIsoOff}
	if _, err := exec.LookPath("bwrap"); err == nil && os.Geteuid() == 0 {
		configs = append(configs, bench.ConfigUIDBwrap)
		if bench.LimitsMeasurable() == nil {
			configs = append(configs, bench.ConfigUIDBwrapLi)
		}
	}
	for _, c := range configs {
		for _, m := range []string{"send → first text", "send → verdict", "batch wall", "rounds a second"} {
			wantRows = append(wantRows, "2 users at once, "+c+": "+m)
		}
		wantRows = append(wantRows, "app-server CPU per round, "+c, "memory per live user, "+c)
	}
	var got []string
	seen := map[string]bool{}
	for _, r := range res.Rows {
		got = append(got, r.Name)
		seen[r.Config] = true
	}
	for _, c := range configs {
		if !seen[c] {
			t.Errorf("no row ran as %q", c)
		}
	}
	if strings.Join(got, "\n") != strings.Join(wantRows, "\n") {
		t.Errorf("rows:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(wantRows, "\n"))
	}
	table := stdout.String()
	lines := strings.Split(strings.TrimSpace(table), "\n")
	if !strings.HasPrefix(lines[0], "measurement") || !strings.Contains(lines[0], "ratio p50") {
		t.Errorf("table header %q", lines[0])
	}
	for _, name := range wantRows {
		if !strings.Contains(table, name) {
			t.Errorf("the table has no row %q:\n%s", name, table)
		}
	}
}

func TestBenchRefusesBadCounts(t *testing.T) {
	var stdout, stderr bytes.Buffer
	if code := runCLI(context.Background(), []string{"bench", "--rounds", "-1"}, nil, &stdout, &stderr); code != 2 {
		t.Errorf("exit %d, want 2 (usage); stderr %s", code, stderr.String())
	}
	if !strings.Contains(stderr.String(), "--rounds must not be negative") {
		t.Errorf("stderr %q", stderr.String())
	}
}

// TestBenchWarmUpRow: with the WarmUp hook (client.WarmUp) the rounds
// phase adds the row of the first round after a warm-up, and the hook ran,
// and was answered without an error, before each of those rounds.
func TestBenchWarmUpRow(t *testing.T) {
	bin, err := codexhome.CodexBin()
	if err != nil {
		t.Fatalf("the real codex CLI is required (run scripts/install-codex): %v", err)
	}
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	opts := benchOptions(exe)
	opts.Codex, opts.Dir, opts.Only = bin, dir, []string{"rounds"}
	opts.Counts = bench.Counts{Rounds: 1, Cold: 2, Evict: 1, Users: 1, Batches: 1, Events: 1, Floods: 1,
		IdleUsers: 1, RegistryThreads: 2, Fallbacks: 1, MCPCalls: 1}
	var warmed []string
	warmUp := opts.WarmUp
	opts.WarmUp = func(ctx context.Context, c *client.Client, user, thread string) error {
		warmed = append(warmed, user+"/"+thread)
		return warmUp(ctx, c, user, thread)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	res, err := bench.Run(ctx, opts)
	if err != nil {
		t.Fatal(err)
	}
	if left := proctest.WaitGone(t, 10*time.Second, 20*time.Millisecond, proctest.UnderHome(dir)); len(left) > 0 {
		t.Errorf("codex processes left under %s: %v", dir, left)
	}
	if err := res.Complete(); err != nil {
		t.Error(err)
	}
	if want := []string{"warmup-0/c", "warmup-1/c"}; strings.Join(warmed, " ") != strings.Join(want, " ") {
		t.Errorf("warmed %v, want %v", warmed, want)
	}
	found := 0
	for _, r := range res.Rows {
		if strings.HasPrefix(r.Name, "first round after a warm-up: ") {
			found++
			if r.Daemon.N != 2 || r.Base.N != 2 {
				t.Errorf("row %+v: want 2 samples a side", r)
			}
		}
		if strings.HasPrefix(r.Name, "deltas") || strings.HasPrefix(r.Name, "heap") {
			t.Errorf("row %q of a phase left out by Only", r.Name)
		}
	}
	if found != 2 {
		t.Errorf("%d warm-up rows, want 2 (first text, verdict)", found)
	}
}
