package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"

	"github.com/meshweaver/supervisor/demomodel"
)

// withArg is args with flag's value replaced by value (added when absent).
func withArg(args []string, flag, value string) []string {
	out := slices.Clone(args)
	if i := slices.Index(out, flag); i >= 0 && i+1 < len(out) {
		out[i+1] = value
		return out
	}
	return append(out, flag, value)
}

// readyServe starts b's daemon with args (its metrics on a free port of
// the test's) and $NOTIFY_SOCKET, waits for its READY=1 and returns it
// with its /readyz URL.
func readyServe(t *testing.T, b binaryServe, args []string) (*opsServe, string) {
	t.Helper()
	metrics, err := freeLoopbackAddr()
	if err != nil {
		t.Fatal(err)
	}
	sock, states := notifySocket(t)
	t.Setenv("NOTIFY_SOCKET", sock)
	srv := opsStartServe(t, b.exe, withArg(args, "--metrics-listen", metrics)...)
	waitState(t, srv, states, "READY=1")
	return srv, "http://" + metrics + "/readyz"
}

// stopServe ends srv with SIGTERM and checks its clean exit.
func stopServe(t *testing.T, b binaryServe, srv *opsServe) {
	t.Helper()
	if err := srv.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if !srv.wait(opsWait) {
		t.Fatalf("serve did not stop within %v of SIGTERM", opsWait)
	}
	if srv.err != nil {
		t.Errorf("serve after SIGTERM: %v, want exit 0", srv.err)
	}
	waitNoCodex(t, b.bin, b.root)
}

// roundVerdict runs `supervisor round --json` against b's daemon and
// returns its exit code and the done line.
func roundVerdict(t *testing.T, b binaryServe, thread string) (int, map[string]any) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), opsRoundWait)
	defer cancel()
	out, err := exec.CommandContext(ctx, b.exe, "round", "--addr", b.addr, "--user", "pat", "--thread", thread,
		"--json", "--timeout", "60s", "hello").Output()
	code := 0
	if err != nil {
		var ee *exec.ExitError
		if !errors.As(err, &ee) {
			t.Fatalf("round: %v", err)
		}
		code = ee.ExitCode()
	}
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		var m map[string]any
		if json.Unmarshal([]byte(line), &m) == nil && m["type"] == "done" {
			return code, m
		}
	}
	t.Fatalf("round (exit %d) printed no done line: %q", code, out)
	return 0, nil
}

// TestHomesTwoLevelsMissing: --homes two levels below a folder that
// exists, as a first start meets it on a new host. The daemon makes the
// missing folders passable for the users' uids (0711) and the homes its
// own, is ready, logs no path out of reach, and a user's round (as a uid
// of the range) completes. Before, the parents were made 0700: /readyz
// said ready while every round failed unavailable (Permission denied).
func TestHomesTwoLevelsMissing(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("the users' uids need root")
	}
	b := newBinaryServe(t)
	homes := filepath.Join(b.root, "srv", "meshweaver", "homes")
	args := withArg(b.args, "--homes", homes)

	code, stdout, stderr := cliRun(t, b.exe, nil, append(args, "--check")...)
	if code != 0 || !strings.Contains(stdout, "the settings are valid") {
		t.Fatalf("serve --check: exit %d, stdout %q, stderr %q", code, stdout, stderr)
	}
	if _, err := os.Stat(filepath.Join(b.root, "srv")); err == nil {
		t.Error("serve --check created the homes' parents")
	}

	srv, readyz := readyServe(t, b, args)
	for d, want := range map[string]os.FileMode{
		filepath.Join(b.root, "srv"):               0o711,
		filepath.Join(b.root, "srv", "meshweaver"): 0o711,
		homes: 0o711, // opened at start, as a user's first start does
	} {
		if fi, err := os.Stat(d); err != nil || fi.Mode().Perm() != want {
			t.Errorf("%s: %v, want mode %04o", d, modeOf(fi, err), want)
		}
	}
	if code, body := opsHTTP(t, readyz); code != 200 || !strings.HasPrefix(body, "ready") {
		t.Errorf("/readyz = %d %q, want 200 ready", code, body)
	}
	b.model.Enqueue(demomodel.Text("made it"))
	if code, done := roundVerdict(t, b, "homes/t1"); code != 0 || done["status"] != "completed" {
		t.Errorf("a round under the new homes: exit %d, %v, want completed", code, done)
	}
	stopServe(t, b, srv)
	// Its whole log is read once it ended.
	if rec, ok := srv.find(func(r map[string]any) bool { return r["level"] == "ERROR" }); ok {
		t.Errorf("serve logged an error: %v", rec)
	}
}

// TestReadyzWhileRoundsWouldFail: a folder above the homes that the
// users' uids cannot pass (0700, the operator's): the start logs it at
// ERROR, /readyz answers 503 naming the folder and the fix while it
// stays, a round fails unavailable and is logged at WARN with its status
// and class, and once the operator lets the uids through /readyz is 200
// without a restart. Before, /readyz said 200 ready throughout and the
// failed round was logged at INFO.
func TestReadyzWhileRoundsWouldFail(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("the users' uids need root")
	}
	b := newBinaryServe(t)
	private := filepath.Join(b.root, "private")
	if err := os.Mkdir(private, 0o700); err != nil {
		t.Fatal(err)
	}
	homes := filepath.Join(private, "homes")
	srv, readyz := readyServe(t, b, withArg(b.args, "--homes", homes))
	code, body := opsHTTP(t, readyz)
	if code != 503 || !strings.HasPrefix(body, "not ready: "+homes+" is out of the users' reach") ||
		!strings.Contains(body, private+" (mode 0700)") || !strings.Contains(body, "chmod o+x "+private) {
		t.Errorf("/readyz with the homes out of reach = %d %q, want 503 naming %s and the fix", code, body, private)
	}

	code, done := roundVerdict(t, b, "blocked/t1")
	if code != exitUnavailable || done["status"] != "unavailable" {
		t.Errorf("a round under unreachable homes: exit %d, %v, want unavailable", code, done)
	}
	failed := func(r map[string]any) bool {
		return r["msg"] == "round finished" && r["status"] == "unavailable"
	}
	srv.waitCount("the unavailable round's end", 1, failed)
	if rec, _ := srv.find(failed); rec["level"] != "WARN" || rec["class"] == nil || rec["class"] == "" || rec["err"] == nil {
		t.Errorf("the failed round was logged as %v, want level WARN with its class and error", rec)
	}
	// Logged at start, before the round's end.
	if _, ok := srv.find(func(r map[string]any) bool {
		err, _ := r["err"].(string)
		return r["level"] == "ERROR" && strings.Contains(err, private+" (mode 0700)")
	}); !ok {
		t.Errorf("serve did not log the folder out of the users' reach at ERROR")
	}

	if err := os.Chmod(private, 0o711); err != nil {
		t.Fatal(err)
	}
	if code, body := opsHTTP(t, readyz); code != 200 || !strings.HasPrefix(body, "ready") {
		t.Errorf("/readyz once the folder lets the uids through = %d %q, want 200 ready", code, body)
	}
	stopServe(t, b, srv)
}

// modeOf is a folder's mode, or the error of its stat, for a message.
func modeOf(fi os.FileInfo, err error) string {
	if err != nil {
		return err.Error()
	}
	return fmt.Sprintf("mode %04o", fi.Mode().Perm())
}
