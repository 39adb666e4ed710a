package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/meshweaver/supervisor/client"
	"github.com/meshweaver/supervisor/messages"
)

// flagClusterKills is how many owners TestClusterCallersAcrossRelays
// SIGKILLs one after another (each restarted before the next), for the
// verdict latency's p50 and max.
var flagClusterKills = flag.Int("cluster.kills", 1, "owners TestClusterCallersAcrossRelays SIGKILLs in turn (more runs for the verdict latency figures)")

// callerGraceInCluster is the test cluster's --caller-grace.
const callerGraceInCluster = 2 * time.Second

// TestClusterCallersAcrossRelays: three members, the real CLI and the mock
// model. Alice's round is owned by A and runs for a `supervisor round`
// process connected to B, which is SIGKILLed mid-round: A's round log
// hears of it (through B's relay), lets the caller grace pass and
// interrupts the round, one verdict. A caller attaching through C gets
// the kept events (from the start, or after the seq it names) and that
// verdict. Then, -cluster.kills times: a round for alice runs through B,
// with callers attached through C and directly on its owner; the owner is
// SIGKILLed: the relayed callers get a failed, retryable verdict within a
// second, the direct one the client's ErrUnreachable; the next round
// through B lands on the new owner and resumes the codex thread. The
// bystander, a user a surviving member owns, keeps its app-server and
// serves its next round; no survivor fences.
func TestClusterCallersAcrossRelays(t *testing.T) {
	tc := newTestCluster(t, 3, "--caller-grace", callerGraceInCluster.String())
	clients := []*client.Client{tc.dial(0), tc.dial(1), tc.dial(2)}
	const user = "alice"
	_, first, _ := roundRetrying(t, clients[0], messages.StartRound{User: user, Thread: "t1", Text: "message 0"}, time.Minute)
	if first.Status != messages.StatusCompleted {
		t.Fatalf("alice's first round: %+v", first)
	}
	thread := first.CodexThreadID
	a := tc.ownerOf(user)
	b, c := (a+1)%3, (a+2)%3
	t.Logf("alice is owned by %s; her caller connects to %s; attaches go through %s", tc.members[a].id, tc.members[b].id, tc.members[c].id)

	// The caller through B is SIGKILLed mid-round.
	ctx, cancel := context.WithTimeout(t.Context(), 3*time.Minute)
	defer cancel()
	metricsA := fmt.Sprintf("http://%s/metrics", tc.members[a].srv.waitMsg("metrics serving")["listen"])
	seen, _ := killedCLICallerAt(t, ctx, tc.exe, tc.members[b].addr, user, "t1", "left-1", "please hang")
	killed := time.Now()
	opsWaitMetric(t, metricsA, "supervisor_rounds_total", `status="interrupted"`, "1", func(v float64) bool { return v == 1 })
	took := time.Since(killed)
	t.Logf("the owner interrupted the round %v after its relayed caller's SIGKILL (grace %v)", took.Round(time.Millisecond), callerGraceInCluster)
	if took < callerGraceInCluster {
		t.Errorf("interrupted %v after the caller died, before the %v grace", took, callerGraceInCluster)
	}

	// Attached through C: the kept events, each once, and the one verdict.
	for _, after := range []uint64{0, seen[len(seen)-1]} {
		r, err := clients[c].Attach(ctx, user, "left-1", after)
		if err != nil {
			t.Fatal(err)
		}
		var seqs []uint64
		for e := range r.Events() {
			seqs = append(seqs, e.Seq)
		}
		v, err := r.Wait()
		if err != nil || v.Status != messages.StatusInterrupted || !strings.Contains(v.Error, "caller grace") {
			t.Fatalf("attach through %s after seq %d: %+v, %v; want interrupted naming the caller grace", tc.members[c].id, after, v, err)
		}
		for i, s := range seqs {
			if s != after+uint64(i)+1 {
				t.Fatalf("attach after seq %d got seqs %v, want %d on, each once", after, seqs, after+1)
			}
		}
		if after == 0 && len(seqs) < len(seen) {
			t.Errorf("the replay has %d events, fewer than the %d the killed caller printed", len(seqs), len(seen))
		}
	}
	if n := tc.metricLabels(a, "supervisor_rounds_total", `status="interrupted"`); n != 1 {
		t.Errorf("the owner counted %v interrupted rounds, want 1 (one verdict)", n)
	}

	// The owner's death, with callers attached through relays and directly.
	var relayed, direct []time.Duration
	for run := range *flagClusterKills {
		rel, dir := killOwnerWithCallers(t, tc, clients, user, thread, run, run < *flagClusterKills-1)
		relayed, direct = append(relayed, rel...), append(direct, dir)
	}
	t.Logf("relayed callers' retryable verdicts after the owner's SIGKILL: p50 %v, max %v (%d); direct callers' ErrUnreachable: p50 %v, max %v (%d)",
		pct(relayed, 50), slices.Max(relayed), len(relayed), pct(direct, 50), slices.Max(direct), len(direct))
}

// killOwnerWithCallers runs one round for user through a member that does
// not own it, with a caller attached through the third member and one on
// the owner, SIGKILLs the owner, checks what each caller gets and that the
// next round resumes thread on a survivor, and restarts the killed member
// when another run follows.
// It returns how long the relayed callers and the direct one waited.
func killOwnerWithCallers(t *testing.T, tc *testCluster, clients []*client.Client, user, thread string, run int, again bool) ([]time.Duration, time.Duration) {
	a := tc.ownerOf(user)
	if a < 0 {
		t.Fatalf("run %d: alice has no owner", run)
	}
	b, c := (a+1)%3, (a+2)%3
	by, byOwner := tc.userOwnedBesides(clients[b], a)
	byApp := tc.appServersOf(tc.home(by))
	if len(byApp) != 1 {
		t.Fatalf("run %d: the bystander %s has app-servers %v, want one", run, by, byApp)
	}
	t.Logf("run %d: killing %s, alice's owner; the bystander %s is on %s", run, tc.members[a].id, by, tc.members[byOwner].id)

	ctx, cancel := context.WithTimeout(t.Context(), 3*time.Minute)
	defer cancel()
	roundID := fmt.Sprintf("kill-%d", run)
	rb, err := clients[b].Round(ctx, messages.StartRound{RoundID: roundID, User: user, Thread: "t1", Text: "please hang"})
	if err != nil {
		t.Fatal(err)
	}
	// Each caller has the turn's first text: all three are attached (the
	// attaches after the round runs on the owner).
	firstText := func(r *client.Round, who string) {
		t.Helper()
		for e := range r.Events() {
			if e.Kind == messages.KindText {
				return
			}
		}
		v, err := r.Wait()
		t.Fatalf("run %d: the caller %s had no text: %+v, %v", run, who, v, err)
	}
	firstText(rb, "via "+tc.members[b].id)
	rc, err := clients[c].Attach(ctx, user, roundID, 0)
	if err != nil {
		t.Fatal(err)
	}
	firstText(rc, "via "+tc.members[c].id)
	ra, err := clients[a].Attach(ctx, user, roundID, 0)
	if err != nil {
		t.Fatal(err)
	}
	firstText(ra, "direct")
	type end struct {
		name string
		v    messages.RoundFinished
		err  error
		at   time.Time
	}
	ends := make(chan end, 3)
	for name, r := range map[string]*client.Round{"via " + tc.members[b].id: rb, "via " + tc.members[c].id: rc, "direct": ra} {
		go func() {
			v, err := r.Wait()
			ends <- end{name, v, err, time.Now()}
		}()
	}
	killed := time.Now()
	if err := tc.members[a].srv.cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	var relayed []time.Duration
	var direct time.Duration
	for range 3 {
		var e end
		select {
		case e = <-ends:
		case <-time.After(time.Minute):
			t.Fatalf("run %d: a caller had no end a minute after the owner's SIGKILL", run)
		}
		d := e.at.Sub(killed)
		t.Logf("run %d: the caller %s ended %v after the SIGKILL: %+v, %v", run, e.name, d.Round(time.Millisecond), e.v, e.err)
		if e.name == "direct" {
			if !errors.Is(e.err, client.ErrUnreachable) {
				t.Errorf("run %d: the caller on the owner got %+v, %v; want ErrUnreachable", run, e.v, e.err)
			}
			direct = d
		} else {
			if e.err != nil || e.v.Status != messages.StatusFailed || !e.v.Retryable || e.v.RoundID != roundID {
				t.Errorf("run %d: the caller %s got %+v, %v; want %s failed and retryable", run, e.name, e.v, e.err, roundID)
			}
			relayed = append(relayed, d)
		}
		if d > time.Second {
			t.Errorf("run %d: the caller %s waited %v for its end, want within a second", run, e.name, d)
		}
	}
	tc.members[a].srv.wait(opsWait)

	// The next round through B is placed again and resumes the thread.
	text, v, tries := roundRetrying(t, clients[b], messages.StartRound{User: user, Thread: "t1", Text: fmt.Sprintf("after kill %d", run)}, time.Minute)
	if v.Status != messages.StatusCompleted || !v.Resumed || v.CodexThreadID != thread || !strings.Contains(text, fmt.Sprintf("after kill %d", run)) {
		t.Fatalf("run %d: the round after the kill: %q, %+v; want completed on the resumed thread %s", run, text, v, thread)
	}
	now := tc.ownerOf(user)
	if now == a || now < 0 {
		t.Fatalf("run %d: alice is owned by %d after %d died", run, now, a)
	}
	t.Logf("run %d: alice's thread resumed on %s %v after the SIGKILL (%d tries)", run, tc.members[now].id, time.Since(killed).Round(time.Millisecond), tries)

	// The bystander and the survivors never noticed: its round runs on
	// the app-server it had, and no survivor fenced.
	if _, v, _ := roundRetrying(t, clients[byOwner], messages.StartRound{User: by, Thread: "t1", Text: "still here"}, time.Minute); v.Status != messages.StatusCompleted || !v.Resumed {
		t.Errorf("run %d: the bystander's round after the kill: %+v", run, v)
	}
	tc.bystandersUntouched(a, by, byApp)

	// The killed member comes back (as its service manager would start it).
	if !again {
		return relayed, direct
	}
	tc.restart(a)
	tc.members[a].srv.waitMsg("supervisor serving")
	clients[a] = tc.dial(a)
	return relayed, direct
}

// metricLabels reads one sample of member i's /metrics (0 when absent).
func (tc *testCluster) metricLabels(i int, name, labels string) float64 {
	tc.t.Helper()
	listen := tc.members[i].srv.waitMsg("metrics serving")["listen"]
	_, body := opsHTTP(tc.t, fmt.Sprintf("http://%s/metrics", listen))
	v, _ := opsMetric(body, name, labels)
	return v
}

// pct is the p-th percentile of ds (nearest rank).
func pct(ds []time.Duration, p int) time.Duration {
	s := slices.Clone(ds)
	slices.Sort(s)
	return s[(len(s)*p+99)/100-1]
}
