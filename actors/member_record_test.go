package actors

import (
	"errors"
	"log/slog"
	"os"
	"testing"
	"time"

	"github.com/meshweaver/supervisor/messages"
	"github.com/meshweaver/supervisor/procs"
	"github.com/meshweaver/supervisor/store"
	"github.com/meshweaver/supervisor/testkit/fakeappserver"
	"github.com/meshweaver/supervisor/testkit/proctest"
)

// TestMemberRecordCarriesMemberAndBoot: the pid record a cluster member's
// app-server actor writes names the member and this kernel's boot; a
// second member starting on the same homes leaves that live app-server
// alone while it reaps its own leftover.
func TestMemberRecordCarriesMemberAndBoot(t *testing.T) {
	h := supHarness(t, withFake(t, fakeappserver.Config{}), func(c *tree) { c.Member = "m1" })
	c := h.caller()
	mustStatus(t, h.round(c, messages.StartRound{User: "alice", Thread: "mesh/o", Text: "hi"}), messages.StatusCompleted)
	pid := liveAppServerPID(t, h, "alice")
	home, err := store.HomeDir(h.cfg.Homes, "alice")
	if err != nil {
		t.Fatal(err)
	}
	path := ProcRecordPath(home)
	rec, err := store.ReadProcRecord(path)
	if err != nil {
		t.Fatal(err)
	}
	boot, err := procs.BootID()
	if err != nil {
		t.Fatal(err)
	}
	if rec.PID != pid || rec.Member != "m1" || rec.Boot != boot {
		t.Fatalf("record = %+v, want pid %d, member m1, boot %s", rec, pid, boot)
	}

	// Member m2 starts on the same homes: its own leftover (bob) goes,
	// m1's live app-server and its record stay.
	_, leftover, leftoverExited := sleeper(t)
	leftover.Member, leftover.Boot = "m2", boot
	bobRec := writeProcRecord(t, h.cfg.Homes, "bob", leftover)
	if n := ReapMemberOrphans(h.cfg.Homes, 500*time.Millisecond, "m2", slog.New(slog.DiscardHandler)); n != 1 {
		t.Errorf("ReapMemberOrphans(m2) ended %d, want 1 (its own leftover only)", n)
	}
	waitClosed(t, leftoverExited, waitFor, "m2's leftover ending")
	if _, err := os.Stat(bobRec); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("m2's record is still there (%v)", err)
	}
	if !proctest.Alive(pid) {
		t.Fatalf("m1's live app-server %d was ended by m2's start", pid)
	}
	if got, err := store.ReadProcRecord(path); err != nil || got != rec {
		t.Fatalf("m1's record after m2's start = %+v, %v; want %+v", got, err, rec)
	}
	// And it still serves.
	mustStatus(t, h.round(c, messages.StartRound{User: "alice", Thread: "mesh/o", Text: "again"}), messages.StatusCompleted)
	if got := appServerPID(t, h, "alice"); got != pid {
		t.Errorf("alice's app-server is %d now, want %d", got, pid)
	}
}

// TestSingleNodeRecordStaysV1: outside a cluster the record has no member
// and no boot (v1), as an older daemon reads it.
func TestSingleNodeRecordStaysV1(t *testing.T) {
	h := supHarness(t, withFake(t, fakeappserver.Config{}))
	mustStatus(t, h.round(h.caller(), messages.StartRound{User: "alice", Thread: "mesh/o", Text: "hi"}), messages.StatusCompleted)
	liveAppServerPID(t, h, "alice")
	home, err := store.HomeDir(h.cfg.Homes, "alice")
	if err != nil {
		t.Fatal(err)
	}
	data, err := os.ReadFile(ProcRecordPath(home))
	if err != nil {
		t.Fatal(err)
	}
	if want := "meshweaver-proc v1\n"; string(data[:len(want)]) != want {
		t.Errorf("record = %q, want a v1 record", data)
	}
}
