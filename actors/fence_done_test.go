package actors

import (
	"testing"
	"time"

	"github.com/meshweaver/supervisor/messages"
	"github.com/meshweaver/supervisor/testkit/fakeappserver"
	"github.com/meshweaver/supervisor/testkit/proctest"
)

// TestFenceDoneWaitsForUsers: a fence's Done closes only once every user
// actor live at the fence has stopped, its app-server with it. The
// app-servers here ignore the end of their input and SIGTERM, so each
// stop takes its StopGrace twice, to the SIGKILL: none may be alive when
// Done closes. A second fence sent while the first waits (its users
// stopping already) closes too; a fence with no user closes at once.
func TestFenceDoneWaitsForUsers(t *testing.T) {
	p := &fakePlacement{owner: func(string, int) (bool, string, error) { return true, "", nil }}
	h := supHarness(t, withFake(t, fakeappserver.Config{ReplyText: "ok", IgnoreStdinEOF: true, TermIgnored: true}),
		func(c *tree) {
			c.Placement = p
			c.StopGrace = 300 * time.Millisecond
		})
	c := h.caller()
	for _, u := range []string{"alice", "bob"} {
		if r := h.round(c, messages.StartRound{User: u, Thread: "t1", Text: "hi"}); r.verdict.Status != messages.StatusCompleted {
			t.Fatalf("%s: verdict %+v", u, r.verdict)
		}
	}
	pids := appServersUnder(h.cfg.Homes)
	if len(pids) < 2 {
		t.Fatalf("app-servers %v, want one per user", pids)
	}
	first, second := make(chan struct{}), make(chan struct{})
	h.engine.Send(h.root, Fence{Done: first})
	h.engine.Send(h.root, Fence{Done: second})
	for i, done := range []chan struct{}{first, second} {
		select {
		case <-done:
		case <-time.After(waitFor):
			t.Fatalf("fence %d: Done not closed within %v", i+1, waitFor)
		}
		for _, pid := range pids {
			if proctest.Alive(pid) {
				t.Fatalf("fence %d: Done closed while app-server %d still runs", i+1, pid)
			}
		}
	}

	none := make(chan struct{})
	h.engine.Send(h.root, Fence{Done: none})
	select {
	case <-none:
	case <-time.After(waitFor):
		t.Fatalf("a fence with no user: Done not closed within %v", waitFor)
	}
}
