package main

import (
	"syscall"
	"testing"
	"time"

	"github.com/meshweaver/supervisor/messages"
	"github.com/meshweaver/supervisor/testkit/etcdtest"
	"github.com/meshweaver/supervisor/testkit/proctest"
)

// TestClusterPausedMemberResumes: production's topology, three daemons on
// three etcd processes. A member's daemon is paused (SIGSTOP) past its
// lease's TTL: its fence helper kills its app-server at the fence time
// (the daemon itself is left stopped: it has no etcd member of its own to
// come back as a stale leader), and a survivor takes its user over only
// after the lease expired. The bystander, a user another member owns,
// keeps its app-server, and no survivor fences. Resumed (SIGCONT), the
// member finds its renewals too late, fences, registers again with a
// fresh lease and is back serving within 2 s (issue 22).
func TestClusterPausedMemberResumes(t *testing.T) {
	longCluster(t)
	ec := etcdtest.Start(t, 3)
	tc := newTestClusterOn(t, 3, ec)
	const user = "pat"
	if _, v, _ := roundRetrying(t, tc.dial(0), messages.StartRound{User: user, Thread: "t1", Text: "first"}, time.Minute); v.Status != messages.StatusCompleted {
		t.Fatalf("first round: %+v", v)
	}
	owner := tc.ownerOf(user)
	if owner < 0 {
		t.Fatal("pat has no owner")
	}
	survivor := (owner + 1) % 3
	by, byOwner := tc.userOwnedBesides(tc.dial(survivor), owner)
	byApp := tc.appServersOf(tc.home(by))
	home := tc.home(user)
	gone := tc.keyGone(survivor, "/meshweaver/c1/owners/"+user)
	m := tc.members[owner]

	stopped := time.Now()
	if err := m.srv.cmd.Process.Signal(syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	if !proctest.Poll(2*testLeaseTTL, 20*time.Millisecond, func() bool { return len(tc.appServersOf(home)) == 0 }) {
		t.Fatal("the paused member's app-server outlived its fence time")
	}
	fenced := time.Since(stopped)
	var expired time.Duration
	select {
	case at := <-gone:
		expired = at.Sub(stopped)
	case <-time.After(3 * testLeaseTTL):
		t.Fatal("the paused member's lease did not expire")
	}
	if expired < fenced {
		t.Fatalf("pat's key went %v after the pause, before the app-server was fenced (%v)", expired, fenced)
	}
	t.Logf("paused %s: app-server fenced %v after the SIGSTOP, its lease expired %v after", m.id, fenced.Round(time.Millisecond), expired.Round(time.Millisecond))
	if _, v, _ := roundRetrying(t, tc.dial(survivor), messages.StartRound{User: user, Thread: "t1", Text: "on a survivor"}, time.Minute); v.Status != messages.StatusCompleted || !v.Resumed {
		t.Fatalf("pat's round on a survivor: %+v", v)
	}
	t.Logf("pat resumed on a survivor %v after the SIGSTOP", time.Since(stopped).Round(time.Millisecond))

	if err := m.srv.cmd.Process.Signal(syscall.SIGCONT); err != nil {
		t.Fatal(err)
	}
	resumed := time.Now()
	back := tc.dial(owner)
	if _, v, tries := roundRetrying(t, back, messages.StartRound{User: user, Thread: "t1", Text: "through the resumed member"}, time.Minute); v.Status != messages.StatusCompleted || !v.Resumed {
		t.Fatalf("pat's round through the resumed member: %+v (%d tries)", v, tries)
	}
	took := time.Since(resumed)
	t.Logf("the resumed member served a round %v after the SIGCONT", took.Round(time.Millisecond))
	if took > 2*time.Second {
		t.Errorf("the resumed member served again %v after the SIGCONT, want within 2s", took)
	}
	if v := tc.metric(owner, "supervisor_cluster_fences_total"); v < 1 {
		t.Errorf("the resumed member counted %v fences, want its own", v)
	}
	tc.bystandersUntouched(owner, by, byApp)
	t.Logf("the bystander %s is owned by %s", by, tc.members[byOwner].id)
}
