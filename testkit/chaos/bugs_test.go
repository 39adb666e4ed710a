package chaos

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/meshweaver/supervisor/messages"
	"github.com/meshweaver/supervisor/store"
)

// TestTurnStartFailureReleasesTheAppServer: a round that ends without a
// running turn must not keep its user's app-server busy, and a valid
// StartRound on a fresh thread must fit the CLI's input limit. Both were
// bugs: the round subscribed before turn/start and never unsubscribed when
// it failed (so the app-server was never idle-evicted), and the seeded
// transcript was not bounded by what the text leaves of the CLI's
// 1,048,576-character limit, so a 1 MiB text with a history failed.
func TestTurnStartFailureReleasesTheAppServer(t *testing.T) {
	h := newHarness(t, config{users: 1, threads: 2, delay: time.Millisecond, userBudget: 3, seed: 1},
		"--idle-timeout", "1s")
	const user = "user1"
	ths := h.threads(user)

	// A normal round: once it is done the app-server is idle and goes
	// after the idle timeout.
	r := h.startRound(user, ths[0], kindText, "idle.ok", true)
	h.await(r)
	if len(r.verdicts) == 0 || r.verdicts[0].Status != messages.StatusCompleted {
		t.Fatalf("first round: %+v", r.verdicts)
	}
	if !poll(nil, 15*time.Second, func() bool { _, ok := h.serverOfLocked(user); return !ok }) {
		t.Fatal("the app-server was not stopped after 1s idle, even after a clean round")
	}

	// A round on a fresh mesh thread with the longest text and a history:
	// the transcript gets what the text leaves of the CLI's limit.
	r = h.startRoundWith(messages.StartRound{
		RoundID: "idle.toolong", User: user, Thread: ths[1], Text: strings.Repeat("x", messages.MaxTextLen),
		History: []messages.Turn{{Role: messages.RoleUser, Text: "earlier"}, {Role: messages.RoleAssistant, Text: "answer"}},
	})
	h.await(r)
	t.Logf("verdict: %+v", r.verdicts)
	if len(r.verdicts) == 0 || r.verdicts[0].Status != messages.StatusCompleted {
		t.Fatalf("want the 1 MiB round with a history to complete, got %+v", r.verdicts)
	}
	if !poll(nil, 15*time.Second, func() bool { _, ok := h.serverOfLocked(user); return !ok }) {
		t.Errorf("the app-server is still running 15s after the round with a 1s idle timeout")
	}
	h.gate.Lock()
	code, _, err := h.d.terminate(45 * time.Second)
	h.gate.Unlock()
	if err != nil || code != 0 {
		t.Errorf("SIGTERM: exit %d, %v", code, err)
	}
	h.closeCaller()
}

// TestDaemonKillLeavesNoCommandRunning: after the daemon is SIGKILLed and
// started again on the same homes, nothing the old app-servers started may
// still run. The app-servers themselves die at once (Pdeathsig), but a
// command codex runs without the bubblewrap sandbox (danger-full-access;
// also any sandbox mode where codex runs commands unsandboxed) lives in a
// process group of its own, outside the app-server's group, and has no
// parent-death signal: it is orphaned and keeps running. The next daemon's
// ReapOrphans (actors/reap.go → procs.ReapRecord) only signals the
// recorded app-server PID, which is already gone, and removes the record:
// the command is never ended. (In the workspace-write chaos run the
// sandbox's bwrap --die-with-parent ends such commands, so TestChaos does
// not see this.)
func TestDaemonKillLeavesNoCommandRunning(t *testing.T) {
	h := newHarness(t, config{users: 1, threads: 1, delay: time.Millisecond, userBudget: 3, seed: 1},
		"--sandbox", "danger-full-access", "--approval-policy", "never")
	h.commandFor = func(id string) string { return "sleep 120; echo " + h.marker + "-" + id }
	const user = "user1"
	r := h.startRound(user, h.threads(user)[0], kindApprove, "orphan.1", true)
	if !poll(nil, 60*time.Second, func() bool {
		for _, p := range runProcs(h.root, h.codex, h.marker) {
			if strings.HasPrefix(p.cmd, "sleep 120") {
				return true
			}
		}
		return false
	}) {
		t.Fatal("the command did not start")
	}
	if err := h.killDaemon(); err != nil {
		t.Fatal(err)
	}
	h.await(r) // lost with the daemon
	k := h.daemonKills[0]
	t.Logf("daemon kill: %d app-servers, %d ended by Pdeathsig; %d other processes; next daemon reaped %d; %d survivors",
		k.appServers, k.pdeathsig, k.others, k.reapedLog, len(k.survivors))
	for _, p := range k.survivors {
		t.Errorf("still running 10s after the next daemon started: pid %d ppid %d, process group %d (not the app-server's), cmd %.80q",
			p.pid, p.ppid, p.pgid, p.cmd)
	}
	h.gate.Lock()
	code, _, err := h.d.terminate(45 * time.Second)
	h.gate.Unlock()
	if err != nil || code != 0 {
		t.Errorf("SIGTERM: exit %d, %v", code, err)
	}
	h.closeCaller()
}

// TestStaleTempFilesAreRemoved: a daemon SIGKILLed inside
// store.WriteFileAtomic (between CreateTemp and the rename; the two fsyncs
// make the window tens of milliseconds on a busy disk) leaves
// ".<name>.tmp<digits>" beside the journal or thread record: the chaos
// run met one (journal/.<prefix>.jsonl.tmp…). The real file stays
// intact, but nothing ever removes the half-written temporary: one more
// per crash, up to the journal's 256 KiB each. Here such leftovers are
// planted, as a killed daemon leaves them, before the user's first round;
// after a completed round and a clean stop they should be gone (a sweep
// when the registry actor starts would do: it is the homes' one writer).
func TestStaleTempFilesAreRemoved(t *testing.T) {
	h := newHarness(t, config{users: 1, threads: 1, delay: time.Millisecond, userBudget: 3, seed: 1})
	const user = "user1"
	th := h.threads(user)[0]
	home := h.home(user)
	planted := []string{
		filepath.Join(filepath.Dir(home), "meshweaver", "journal", "."+store.KeyPrefix(th)+".jsonl.tmp1234567"),
		filepath.Join(filepath.Dir(home), "meshweaver", "threads", "."+store.KeyPrefix(th)+".txt.tmp7654321"),
	}
	for _, p := range planted {
		if err := os.MkdirAll(filepath.Dir(p), 0o700); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(`{"format":"meshweaver-jour`), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	r := h.startRound(user, th, kindText, "tmp.1", true)
	h.await(r)
	if len(r.verdicts) == 0 || r.verdicts[0].Status != messages.StatusCompleted {
		t.Fatalf("round: %+v", r.verdicts)
	}
	h.gate.Lock()
	code, _, err := h.d.terminate(45 * time.Second)
	h.gate.Unlock()
	if err != nil || code != 0 {
		t.Errorf("SIGTERM: exit %d, %v", code, err)
	}
	h.closeCaller()
	for _, p := range planted {
		if fileExists(p) {
			t.Errorf("a half-written temporary file is still there after a round and a clean stop: %s", p)
		}
	}
	if left := h.tempFiles(); len(left) > 0 {
		t.Logf("temporary files under meshweaver/: %v", left)
	}
}
