package main

import (
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/meshweaver/supervisor/demomodel"
)

// TestBudgetEndToEnd runs the built daemon with a token budget of 60 in an
// hour, set in its --config file, on a model that reports 13 tokens a
// response: alice's rounds complete until her ledger passes 60; the next
// is refused before any model request (exit 8, naming the budget and when
// it frees up); bob, the bystander, runs on; after a restart alice is
// still refused; a SIGHUP that raises the budget lets her next round
// complete, and the daemon lives through it all.
func TestBudgetEndToEnd(t *testing.T) {
	b := newBinaryServe(t)
	b.model.SetResponder(func(*demomodel.Request) demomodel.Script {
		return demomodel.Text("ok").WithUsage(demomodel.Usage{InputTokens: 10, OutputTokens: 3})
	})
	t.Cleanup(func() { waitNoCodex(t, b.bin, b.root) })
	conf := filepath.Join(b.root, "supervisor.conf")
	writeConf := func(text string) {
		t.Helper()
		if err := os.WriteFile(conf, []byte(text), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	writeConf("user-token-budget 60\nbudget-window 1h\n")
	args := append(b.args, "--config", conf)
	start := func() (*opsServe, <-chan string) {
		sock, states := notifySocket(t)
		t.Setenv("NOTIFY_SOCKET", sock)
		srv := opsStartServe(t, b.exe, args...)
		waitState(t, srv, states, "READY=1")
		return srv, states
	}
	round := func(user, text string) (int, string) {
		t.Helper()
		code, _, stderr := cliRun(t, b.exe, nil, "round", "--addr", b.addr, "--user", user, "--thread", "t1", "--timeout", opsRoundWait.String(), text)
		return code, stderr
	}
	srv, _ := start()
	for i := 1; i <= 5; i++ { // 13 tokens each: 52 before the fifth, so it runs
		if code, stderr := round("alice", "hi"); code != 0 {
			t.Fatalf("alice's round %d: exit %d\n%s", i, code, stderr)
		}
	}
	heard := len(b.model.Requests())
	refused := func(when string) {
		t.Helper()
		code, stderr := round("alice", "one more")
		if code != exitBudget || !strings.Contains(stderr, "token budget is spent: 65 of 60") || !strings.Contains(stderr, "may run at") {
			t.Errorf("%s: exit %d, want %d naming the budget and its reset; stderr:\n%s", when, code, exitBudget, stderr)
		}
		if n := len(b.model.Requests()); n != heard {
			t.Errorf("%s: the refused round reached the model (%d requests, were %d)", when, n, heard)
		}
	}
	refused("over budget")
	if code, stderr := round("bob", "hi"); code != 0 {
		t.Fatalf("the bystander's round: exit %d\n%s", code, stderr)
	}
	heard++

	if err := srv.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if !srv.wait(opsWait) || srv.err != nil {
		t.Fatalf("the daemon's stop: %v", srv.err)
	}
	srv, states := start()
	refused("after a restart")

	writeConf("user-token-budget 100\nbudget-window 1h\n")
	if err := syscall.Kill(srv.cmd.Process.Pid, syscall.SIGHUP); err != nil {
		t.Fatal(err)
	}
	waitState(t, srv, states, "RELOADING=1")
	waitState(t, srv, states, "READY=1")
	if code, stderr := round("alice", "with more budget"); code != 0 {
		t.Fatalf("after raising the budget: exit %d\n%s", code, stderr)
	}
	if !srv.running() {
		t.Fatalf("the daemon ended: %v", srv.err)
	}
	if restart, found := srv.find(func(rec map[string]any) bool { return rec["settings"] != nil }); found {
		t.Errorf("the budget's reload was taken for a setting that needs a restart: %v", restart)
	}
}
