package actors

import (
	"testing"

	"golang.org/x/sys/unix"

	"github.com/meshweaver/supervisor/messages"
)

// A round is refused before it runs, typed resource_limit disk, when the
// file system of the daemon's records has less free than the floor: no
// agent may fill what the journal, the thread records and the ledger need.
// Under a floor the disk meets, the same user's round runs.
func TestDiskFloorRefusesRounds(t *testing.T) {
	homes := t.TempDir()
	var st unix.Statfs_t
	if err := unix.Statfs(homes, &st); err != nil {
		t.Fatal(err)
	}
	free := int64(st.Bavail) * st.Bsize
	h := newHarness(t, func(c *tree) { c.Homes, c.MinFreeDisk = homes, free*2 })
	c := h.caller()
	res := h.round(c, messages.StartRound{User: "alice", Thread: "t1", Text: "hi", RoundID: "a1"})
	v := res.verdict
	if v.Status != messages.StatusRejected || v.ErrorInfo == nil || v.ErrorInfo.Class != messages.ErrorResourceLimit || v.ErrorInfo.Resource != "disk" {
		t.Fatalf("verdict %s %q %+v: want rejected, resource_limit disk", v.Status, v.Error, v.ErrorInfo)
	}
	if n := len(h.model.Requests()); n != 0 {
		t.Errorf("the refused round reached the model: %d requests", n)
	}
	h.stop()
	h2 := newHarness(t, func(c *tree) { c.Homes, c.MinFreeDisk = homes, 1<<20 })
	c2 := h2.caller()
	if res := h2.round(c2, messages.StartRound{User: "alice", Thread: "t1", Text: "hi", RoundID: "a2"}); res.verdict.Status != messages.StatusCompleted {
		t.Fatalf("under a floor the disk meets: %s %s", res.verdict.Status, res.verdict.Error)
	}
}
