package main

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"

	"github.com/meshweaver/supervisor/actors"
	"github.com/meshweaver/supervisor/client"
	"github.com/meshweaver/supervisor/demomodel"
	"github.com/meshweaver/supervisor/isolate"
	"github.com/meshweaver/supervisor/messages"
	"github.com/meshweaver/supervisor/store"
	"github.com/meshweaver/supervisor/testkit/codexhome"
	"github.com/meshweaver/supervisor/testkit/proctest"
)

// testUIDs is the uid range of the isolation tests.
var testUIDs = isolate.Range{Lo: 210000, Hi: 210999}

// isolated returns a mutate function for newEnv that separates users the
// way mode says ("uid+bwrap", "uid", "bwrap", "shared"). The test's folders
// become passable (0711) for the users' uids and the model catalog
// readable, as an operator's would be; the workspace is shared and, with
// writable, bound read-write and writable by every user.
func isolated(t *testing.T, mode string, writable, allowShared bool) func(*daemonSetup) {
	return func(c *daemonSetup) {
		root := filepath.Dir(c.Homes)
		for _, d := range []string{filepath.Dir(root), root} {
			if err := os.Chmod(d, 0o711); err != nil {
				t.Fatal(err)
			}
		}
		wsMode := os.FileMode(0o755)
		if writable {
			wsMode = 0o777
		}
		if err := os.Chmod(c.Workspace, wsMode); err != nil {
			t.Fatal(err)
		}
		catalog := filepath.Join(root, codexhome.CatalogFile)
		if err := os.Chmod(catalog, 0o644); err != nil {
			t.Fatal(err)
		}
		opts := isolate.Options{
			Homes: c.Homes, Workspace: c.Workspace, WorkspaceWritable: writable,
			ReadOnly: []string{catalog}, AllowShared: allowShared,
			Root: os.Geteuid() == 0,
		}
		if strings.Contains(mode, "uid") {
			opts.UIDs = testUIDs
		}
		if strings.Contains(mode, "bwrap") {
			opts.Bwrap = "/usr/bin/bwrap"
		}
		n, err := isolate.New(opts)
		if err != nil {
			t.Fatal(err)
		}
		c.Isolation = n
	}
}

// TestUsersIsolated runs user A's agent (the real CLI under workspace-write,
// the mock model scripting its shell commands) against user B, whose
// app-server is alive and logged in with an API key carrying a marker:
// reading B's auth.json and B's stored key, listing the homes root, reading
// B's app-server's environment, signalling it and writing into B's home all
// fail, and the marker appears neither in A's round nor in what A's codex
// sent the model; A's own command, a read of the workspace and a patch work.
// Each layer is tried alone too: a uid per user without bubblewrap, and
// bubblewrap without a uid switch. It needs root (the uid switch); CI runs
// as root.
func TestUsersIsolated(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("the uid switch needs root; CI runs as root")
	}
	for _, mode := range []string{"uid+bwrap", "uid", "bwrap"} {
		t.Run(mode, func(t *testing.T) { testUsersIsolated(t, mode, "workspace-write") })
	}
	// Without the CLI's own sandbox (its pid namespace hides processes
	// too), each layer alone still holds.
	for _, mode := range []string{"uid", "bwrap"} {
		t.Run(mode+"/danger-full-access", func(t *testing.T) { testUsersIsolated(t, mode, "danger-full-access") })
	}
}

func testUsersIsolated(t *testing.T, mode, sandbox string) {
	// A secret of the daemon's own environment, which no app-server sees.
	const daemonSecret = "daemon-env-secret-4b1d"
	t.Setenv("MESHWEAVER_TEST_DAEMON_SECRET", daemonSecret)
	e := newEnv(t, func(c *daemonSetup) {
		c.Sandbox = sandbox
		isolated(t, mode, true, false)(c)
	})
	uids := strings.Contains(mode, "uid")
	const marker = "sk-bobsecret-7f3a9c1e5d"
	ws := e.workspace
	if err := os.WriteFile(filepath.Join(ws, "readme.txt"), []byte("workspace-content-ok\n"), 0o644); err != nil {
		t.Fatal(err)
	}

	// B: a stored key, a live app-server that wrote it into auth.json.
	e.send(messages.SetAPIKey{User: "bob", APIKey: marker})
	e.awaitOther("APIKeyStored", func(m any) bool { _, ok := m.(messages.APIKeyStored); return ok })
	e.model.Enqueue(demomodel.Text("hello bob"))
	e.round(messages.StartRound{User: "bob", Thread: "b/1", Text: "hi"}).mustComplete(t)
	bobHome := e.home("bob")
	bobAuth := filepath.Join(bobHome, "auth.json")
	if uids {
		checkOwned(t, bobAuth, 0o600)
		checkOwned(t, bobHome, 0o700)
	}
	if b, err := os.ReadFile(bobAuth); err != nil || !strings.Contains(string(b), marker) {
		t.Fatalf("bob's auth.json does not hold his key: %v", err)
	}
	bobKey := filepath.Join(filepath.Dir(bobHome), "meshweaver", store.APIKeyFile)
	if fi, err := os.Stat(bobKey); err != nil || fi.Sys().(*syscall.Stat_t).Uid != 0 || fi.Mode().Perm() != 0o600 {
		t.Fatalf("bob's stored key %s: %v, want root's, 0600", bobKey, err)
	}
	rec, err := store.ReadProcRecord(actors.ProcRecordPath(bobHome))
	if err != nil {
		t.Fatalf("bob's pid record: %v", err)
	}
	bobPIDs := []int{rec.PID}
	for _, p := range codexProcs(e.bin, bobHome) {
		bobPIDs = append(bobPIDs, p.PID)
	}
	if len(bobPIDs) < 2 {
		t.Fatalf("bob's codex process not found")
	}
	seen := len(e.model.Requests())

	// A's agent, hostile.
	pwned := filepath.Join(bobHome, "pwned")
	hostile := []struct{ id, cmd string }{
		{"cat-auth", "cat " + bobAuth},
		{"cat-key", "cat " + bobKey},
		{"ls-homes", "ls -a " + e.homes},
		{"ls-bob", "ls -a " + filepath.Dir(bobHome)},
		{"write-home", "echo x > " + pwned},
		{"env", "env; cat /proc/[0-9]*/environ | tr '\\0' '\\n'"},
	}
	for i, pid := range bobPIDs {
		hostile = append(hostile,
			struct{ id, cmd string }{fmt.Sprintf("environ-%d", i), fmt.Sprintf("cat /proc/%d/environ", pid)},
			struct{ id, cmd string }{fmt.Sprintf("kill-%d", i), fmt.Sprintf("kill -0 %d", pid)})
	}
	var script []demomodel.Script
	for _, h := range hostile {
		script = append(script, demomodel.Respond(demomodel.ExecCommand(h.id, h.cmd)))
	}
	patch := "*** Begin Patch\n*** Add File: from-alice.txt\n+patched by alice\n*** End Patch"
	script = append(script,
		demomodel.Respond(demomodel.ExecCommand("own", "echo own-$((6*7))")),
		demomodel.Respond(demomodel.ExecCommand("read-ws", "cat "+filepath.Join(ws, "readme.txt"))),
		demomodel.Respond(demomodel.ApplyPatch("patch", patch)),
		demomodel.Text("done"))
	e.model.Enqueue(script...)
	r := e.round(messages.StartRound{User: "alice", Thread: "a/1", Text: "look around"}).mustComplete(t)

	// What each command gave is read where it matters most: in what A's
	// codex sent the model (a denial the CLI takes for its own sandbox's is
	// not always reported to the round as an item).
	reqs := e.model.Requests()[seen:]
	outputs := toolOutputs(t, reqs)
	for _, h := range hostile {
		out, ok := outputs[h.id]
		if !ok {
			t.Errorf("%s: no output reached the model", h.id)
			continue
		}
		failed := !strings.Contains(out, "Process exited with code 0")
		switch {
		case h.id == "env":
			if strings.Contains(out, daemonSecret) {
				t.Errorf("the daemon's environment reached alice's agent: %q", out)
			}
			if !strings.Contains(out, "CODEX_HOME=") {
				t.Errorf("env printed no environment: %q", out)
			}
		case h.id == "ls-homes":
			// Under bubblewrap the listing works and shows alice alone.
			if strings.Contains(out, "bob") {
				t.Errorf("listing the homes shows bob: %q", out)
			}
		case !failed:
			t.Errorf("%s (%s) succeeded: %q", h.id, h.cmd, out)
		}
		t.Logf("%s: %.160q", h.id, out)
	}
	if _, err := os.Lstat(pwned); err == nil {
		t.Errorf("alice's agent wrote %s", pwned)
	}
	if _, res := toolPair(t, r, "own"); res != nil && !strings.Contains(res.Output, "own-42") {
		t.Errorf("alice's own command: %+v", *res)
	}
	if _, res := toolPair(t, r, "read-ws"); res != nil && !strings.Contains(res.Output, "workspace-content-ok") {
		t.Errorf("alice's read of the workspace: %+v", *res)
	}
	if !strings.Contains(outputs["own"], "own-42") || !strings.Contains(outputs["read-ws"], "workspace-content-ok") {
		t.Errorf("alice's own command and read gave the model %q and %q", outputs["own"], outputs["read-ws"])
	}
	if _, res := toolPair(t, r, "patch"); res != nil && res.Failed {
		t.Errorf("alice's patch: %+v", *res)
	}
	if b, err := os.ReadFile(filepath.Join(ws, "from-alice.txt")); err != nil || string(b) != "patched by alice\n" {
		t.Errorf("the patched file: %q, %v", b, err)
	}
	if strings.Contains(r.String(), "bobsecret") || strings.Contains(r.String(), daemonSecret) {
		t.Errorf("bob's key in alice's round: %v", r)
	}
	if len(reqs) < len(script) {
		t.Errorf("the model got %d requests from alice, want %d", len(reqs), len(script))
	}
	for _, q := range reqs {
		if strings.Contains(string(q.Body), "bobsecret") || strings.Contains(fmt.Sprint(q.Header), "bobsecret") || strings.Contains(string(q.Body), daemonSecret) {
			t.Errorf("alice's request #%d to the model carries bob's key", q.Seq)
		}
	}
	if aliceHome := e.home("alice"); uids {
		checkOwned(t, aliceHome, 0o700)
		if uidOf(t, aliceHome) == uidOf(t, bobHome) {
			t.Errorf("alice and bob share uid %d", uidOf(t, aliceHome))
		}
	}
}

// TestSharedUIDRefused: where neither a uid switch nor bubblewrap separates
// users (simulated by the configuration), the first user is served and the
// second refused, naming the flag that accepts it; with that flag, both are
// served.
func TestSharedUIDRefused(t *testing.T) {
	for _, allow := range []bool{false, true} {
		t.Run(fmt.Sprintf("allow=%v", allow), func(t *testing.T) {
			e := newEnv(t, isolated(t, "shared", false, allow))
			if w := e.cfg.Isolation.Warning(); w == "" {
				t.Errorf("no warning in shared mode")
			}
			e.model.Enqueue(demomodel.Text("one"))
			e.round(messages.StartRound{User: "alice", Thread: "t", Text: "hi"}).mustComplete(t)
			if allow {
				e.model.Enqueue(demomodel.Text("two"))
				e.round(messages.StartRound{User: "bob", Thread: "t", Text: "hi"}).mustComplete(t)
				return
			}
			r := e.round(messages.StartRound{User: "bob", Thread: "t", Text: "hi"})
			if r.verdict.Status == messages.StatusCompleted || !strings.Contains(r.verdict.Error, "--allow-shared-uid") {
				t.Errorf("second user's verdict %+v, want a refusal naming --allow-shared-uid", r.verdict)
			}
		})
	}
}

// toolOutputs collects, by call id, the tool outputs the requests carry.
func toolOutputs(t *testing.T, reqs []demomodel.Request) map[string]string {
	t.Helper()
	out := map[string]string{}
	for _, q := range reqs {
		var body struct {
			Input []struct {
				Type   string          `json:"type"`
				CallID string          `json:"call_id"`
				Output json.RawMessage `json:"output"`
			} `json:"input"`
		}
		if err := json.Unmarshal(q.Body, &body); err != nil {
			t.Errorf("request #%d: %v", q.Seq, err)
			continue
		}
		for _, in := range body.Input {
			if in.Type != "function_call_output" && in.Type != "custom_tool_call_output" {
				continue
			}
			var s string
			if json.Unmarshal(in.Output, &s) != nil {
				s = string(in.Output)
			}
			out[in.CallID] = s
		}
	}
	return out
}

func uidOf(t *testing.T, path string) uint32 {
	t.Helper()
	fi, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	return fi.Sys().(*syscall.Stat_t).Uid
}

// checkOwned checks that path belongs to a uid of the test range, with mode.
func checkOwned(t *testing.T, path string, mode os.FileMode) {
	t.Helper()
	fi, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	if uid := fi.Sys().(*syscall.Stat_t).Uid; uid < testUIDs.Lo || uid > testUIDs.Hi || fi.Mode().Perm() != mode {
		t.Errorf("%s: uid %d mode %v, want a uid in %s and %v", path, uid, fi.Mode().Perm(), testUIDs, mode)
	}
}

// servable readies a test's folders for `supervisor serve` run as root,
// which separates users by default: root and its parent passable by the
// users' uids, the workspace readable, the readOnly files readable and
// bound into the sandboxes (the returned --sandbox-ro flags).
func servable(t *testing.T, root, workspace string, readOnly ...string) []string {
	t.Helper()
	for _, d := range []string{filepath.Dir(root), root} {
		if err := os.Chmod(d, 0o711); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Chmod(workspace, 0o755); err != nil {
		t.Fatal(err)
	}
	var args []string
	for _, p := range readOnly {
		if err := os.Chmod(p, 0o644); err != nil {
			t.Fatal(err)
		}
		args = append(args, "--sandbox-ro", p)
	}
	return args
}

// TestReadyzWarnsSharedUID: a warning of the isolation (the shared-uid
// mode) follows "ready" in /readyz.
func TestReadyzWarnsSharedUID(t *testing.T) {
	n, err := isolate.New(isolate.Options{Homes: t.TempDir(), AllowShared: true})
	if err != nil {
		t.Fatal(err)
	}
	ops, err := startOps("127.0.0.1:0", newRegistry(), slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	defer ops.stop()
	ops.warning = n.Warning()
	ops.ready.Store(true)
	code, body := opsHTTP(t, "http://"+ops.Addr()+"/readyz")
	if code != http.StatusOK || !strings.HasPrefix(body, "ready\nwarning: users are not separated") {
		t.Errorf("/readyz = %d %q, want 200, ready and the warning", code, body)
	}
}

// TestCLIInAPrivateClone: the project cloned where people clone things
// (root's home, a mktemp -d folder: 0700), its CLI installed inside the
// clone. The users' uids cannot follow that path, so the daemon links the
// CLI into its own folder (isolate.DefaultCLILinks) and runs it from
// there: a round completes under uid+bwrap with the real CLI, and no
// app-server outlives the daemon.
func TestCLIInAPrivateClone(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("the uid switch needs root; CI runs as root")
	}
	b := newBinaryServe(t)
	clone := filepath.Join(b.root, "clone")
	if err := os.Mkdir(clone, 0o700); err != nil {
		t.Fatal(err)
	}
	// The CLI's folder (bin/ and its helpers), as an install in the clone
	// holds it: hard links where the file systems allow, else a copy.
	vendor := filepath.Dir(filepath.Dir(b.bin))
	private := filepath.Join(clone, "vendor")
	if out, err := exec.Command("cp", "-al", vendor, private).CombinedOutput(); err != nil {
		if out, err := exec.Command("cp", "-a", vendor, private).CombinedOutput(); err != nil {
			t.Fatalf("copying the CLI into the clone: %v: %s", err, out)
		}
		t.Logf("hard links failed (%s); copied", out)
	}
	bin := filepath.Join(private, "bin", filepath.Base(b.bin))
	if blocked, err := isolate.Unreachable(bin); err != nil || blocked != clone {
		t.Fatalf("the CLI in the clone: blocked at %q (%v), want %s", blocked, err, clone)
	}
	args := slices.Clone(b.args)
	args[slices.Index(args, "--codex")+1] = bin
	var linked string
	t.Cleanup(func() { // after the daemon stopped: cleanups run last first
		if linked != "" {
			waitNoCodex(t, linked, b.root)
		}
	})
	srv := opsStartServe(t, b.exe, args...)
	srv.waitMsg("supervisor serving")

	ctx, cancel := context.WithTimeout(t.Context(), opsRoundWait)
	defer cancel()
	c, err := client.Dial(ctx, b.addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	text, v, err := roundOnce(ctx, c, messages.StartRound{User: "pat", Thread: "t1", Text: "hello from a private clone"})
	if err != nil || v.Status != messages.StatusCompleted || !strings.Contains(text, "hello from a private clone") {
		t.Fatalf("the round: %q, %+v, %v", text, v, err)
	}
	var apps []proctest.Proc
	for _, p := range proctest.List(proctest.NotSelf, proctest.UnderHome(b.homes)) {
		if p.Comm == "codex" && strings.Contains(p.Cmdline(), " app-server") {
			apps = append(apps, p)
		}
	}
	if len(apps) == 0 {
		t.Fatal("no app-server runs for pat")
	}
	linked = apps[0].Exe()
	if !strings.HasPrefix(linked, isolate.DefaultCLILinks+"/") {
		t.Errorf("pat's app-server runs %s, want the CLI linked under %s", linked, isolate.DefaultCLILinks)
	}
}
