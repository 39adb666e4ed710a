package main

import (
	"context"
	"crypto/tls"
	"errors"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/meshweaver/supervisor/actors"
	"github.com/meshweaver/supervisor/client"
	"github.com/meshweaver/supervisor/cluster"
	"github.com/meshweaver/supervisor/demomodel"
	"github.com/meshweaver/supervisor/messages"
	"github.com/meshweaver/supervisor/procs"
	"github.com/meshweaver/supervisor/store"
	"github.com/meshweaver/supervisor/testkit/codexhome"
	"github.com/meshweaver/supervisor/testkit/etcdtest"
	"github.com/meshweaver/supervisor/testkit/proctest"
)

// flagClusterLong runs the long multi-process cluster suite: SIGSTOP of a
// member, rejoin, graceful leave, 100 racing users and quorum loss. The
// default run keeps to TestClusterFailover (routing from every member and
// a SIGKILL of an owner mid-stream).
var flagClusterLong = flag.Bool("cluster.long", false, "run the long multi-process cluster suite (SIGSTOP, rejoin, leave, 100 racing users, quorum loss)")

// Lease settings of the test clusters: short, so failovers are quick.
const (
	testLeaseTTL    = 5 * time.Second
	testFenceMargin = 2 * time.Second
)

// testCluster is n `supervisor serve` processes, each with an embedded
// etcd member, on loopback, sharing one homes folder, the real codex CLI
// and one mock model; and a checker that scans /proc every 20 ms and fails
// the test if any home ever has two app-servers.
type testCluster struct {
	t                      *testing.T
	exe, bin               string
	root, homes, workspace string
	model                  *demomodel.Server
	members                []*clusterMember
	etcd                   *clientv3.Client
	stopCheck              chan struct{}
	checkDone              chan struct{}
	mu                     sync.Mutex
	violations             []string
	extra                  []string          // more serve flags
	external               *etcdtest.Cluster // nil: each member runs an embedded etcd member
	endpointsOf            map[int]string    // with external: a member's own --etcd-endpoints (proxies), else external's
	tls                    *clusterTLS       // nil: plaintext
}

// clusterTLS puts a test cluster under mutual TLS.
type clusterTLS struct {
	member func(i int) []string // member i's serve flags: its --tls-*, --etcd-tls-*, --authz
	etcd   cluster.TLSFiles     // the files of the test's own etcd clients
	caller *tls.Config          // the test's callers' (dial)
}

type clusterMember struct {
	id, addr, peer, client, dir string
	srv                         *opsServe
}

func newTestCluster(t *testing.T, n int, extra ...string) *testCluster {
	t.Helper()
	return startTestCluster(t, n, nil, extra)
}

// newTestClusterOn is n `supervisor serve` processes without etcd of
// their own, on the etcd cluster ec: production's topology.
func newTestClusterOn(t *testing.T, n int, ec *etcdtest.Cluster, extra ...string) *testCluster {
	t.Helper()
	return startTestCluster(t, n, ec, extra)
}

// newTestClusterVia is newTestClusterOn where member i reaches etcd at
// endpoints[i] (comma-separated, e.g. proxies the test can cut) when set.
func newTestClusterVia(t *testing.T, n int, ec *etcdtest.Cluster, endpoints map[int]string, extra ...string) *testCluster {
	t.Helper()
	return startTestClusterVia(t, n, ec, endpoints, extra)
}

func startTestCluster(t *testing.T, n int, ec *etcdtest.Cluster, extra []string) *testCluster {
	t.Helper()
	return startTestClusterVia(t, n, ec, nil, extra)
}

func startTestClusterVia(t *testing.T, n int, ec *etcdtest.Cluster, endpoints map[int]string, extra []string) *testCluster {
	t.Helper()
	return startTestClusterTLS(t, n, ec, endpoints, nil, extra)
}

// startTestClusterTLS is startTestClusterVia under mutual TLS when
// secured is set (with an external etcd, whose TLS it is the test's to
// start).
func startTestClusterTLS(t *testing.T, n int, ec *etcdtest.Cluster, endpoints map[int]string, secured *clusterTLS, extra []string) *testCluster {
	t.Helper()
	root := t.TempDir()
	tc := &testCluster{t: t, bin: codexBin(t), root: root, exe: opsBuild(t, root),
		homes: filepath.Join(root, "homes"), workspace: filepath.Join(root, "workspace"), extra: extra, external: ec, endpointsOf: endpoints, tls: secured}
	if err := os.MkdirAll(tc.workspace, 0o700); err != nil {
		t.Fatal(err)
	}
	// The latest requests only: a chaos run's thousands of rounds on
	// growing threads held 23 GiB of request inputs otherwise.
	model, err := demomodel.Start(demomodel.Options{KeepRequests: 1024, Responder: func(req *demomodel.Request) demomodel.Script {
		if strings.Contains(req.LastUserText(), "hang") { // a round the test kills mid-stream
			return demomodel.Text("Thinking ").Hang()
		}
		return demomodel.DemoResponder(req)
	}})
	if err != nil {
		t.Fatal(err)
	}
	tc.model = model
	t.Cleanup(model.Close)
	var initial, clients []string
	for i := range n {
		m := &clusterMember{id: fmt.Sprintf("m%d", i), dir: filepath.Join(root, fmt.Sprintf("etcd-%d", i))}
		m.addr = mustFreeAddr(t)
		m.peer = "http://" + mustFreeAddr(t)
		m.client = "http://" + mustFreeAddr(t)
		initial = append(initial, m.id+"="+m.peer)
		clients = append(clients, m.client)
		tc.members = append(tc.members, m)
	}
	// Last cleanups run first: the processes end, then no app-server may
	// be left, then the checker's verdict.
	t.Cleanup(tc.finishCheck)
	t.Cleanup(func() { waitNoCodex(t, tc.bin, root) })
	for i := range tc.members {
		tc.start(i, strings.Join(initial, ","), strings.Join(clients, ","))
	}
	for i := range tc.members {
		tc.members[i].srv.waitMsg("supervisor serving")
	}
	if ec != nil {
		clients = []string{ec.Endpoints()}
	}
	c, err := cluster.NewClient(strings.Join(clients, ","), tc.etcdFiles())
	if err != nil {
		t.Fatal(err)
	}
	tc.etcd = c
	t.Cleanup(func() { c.Close() })
	tc.startCheck()
	return tc
}

func mustFreeAddr(t *testing.T) string {
	t.Helper()
	a, err := freeLoopbackAddr()
	if err != nil {
		t.Fatal(err)
	}
	return a
}

// start runs member i's serve process.
func (tc *testCluster) start(i int, initial, clients string) {
	m := tc.members[i]
	args := []string{"serve", "--listen", m.addr, "--homes", tc.homes, "--workspace", tc.workspace, "--codex", tc.bin,
		"--log-format", "json", "--stop-timeout", "20s", "--metrics-listen", "127.0.0.1:0",
		// The members share one host and their homes sit in the test's
		// 0700 folder: no uid switching (bubblewrap still separates the
		// users), so no run depends on which test holds the uid range.
		"--uid-range", "off",
		"--cluster", "c1", "--member", m.id,
		"--lease-ttl", testLeaseTTL.String(), "--fence-margin", testFenceMargin.String()}
	if tc.external != nil {
		eps := tc.external.Endpoints()
		if own, ok := tc.endpointsOf[i]; ok {
			eps = own
		}
		args = append(args, "--etcd-endpoints", eps, "--etcd-election-timeout", etcdtest.ElectionTimeout.String())
	} else {
		args = append(args, "--allow-plaintext", "--etcd-name", m.id, "--etcd-dir", m.dir,
			"--etcd-peer-listen", m.peer, "--etcd-client-listen", m.client, "--etcd-initial-cluster", initial,
			"--etcd-endpoints", clients)
	}
	args = append(args, servable(tc.t, tc.root, tc.workspace)...)
	for _, kv := range codexhome.Overrides(tc.model.URL()) {
		args = append(args, "--codex-override", kv)
	}
	if tc.tls != nil {
		args = append(args, tc.tls.member(i)...)
	}
	args = append(args, tc.extra...)
	m.srv = opsStartServe(tc.t, tc.exe, args...)
}

// restart starts member i again on its etcd data (a rejoin).
func (tc *testCluster) restart(i int) {
	var initial, clients []string
	for _, m := range tc.members {
		initial = append(initial, m.id+"="+m.peer)
		clients = append(clients, m.client)
	}
	tc.start(i, strings.Join(initial, ","), strings.Join(clients, ","))
}

// appServerGroups maps each home to its app-servers: the live codex
// processes whose command line runs "app-server" and whose parent is not
// codex (the daemon, or under isolation the bubblewrap it started; a child
// the CLI forked and has not exec'd yet is still codex and not counted
// again). The processes around a dead one are not counted: a bubblewrap
// left a moment after its codex died, or a dying tree whose parents' command
// lines already read empty, holds no CODEX_HOME.
func (tc *testCluster) appServerGroups() map[string][]int {
	out := map[string][]int{}
	for _, p := range proctest.List(proctest.NotSelf, proctest.UnderHome(tc.homes)) {
		if p.Comm != "codex" || !p.Live() || !strings.Contains(p.Cmdline(), " app-server") {
			continue
		}
		if parent, ok := proctest.Read(p.PPID); ok && parent.Comm == "codex" {
			continue
		}
		out[p.Home()] = append(out[p.Home()], p.PID)
	}
	return out
}

// startCheck scans /proc every 20 ms for a home with two app-servers.
func (tc *testCluster) startCheck() {
	tc.stopCheck, tc.checkDone = make(chan struct{}), make(chan struct{})
	go func() {
		defer close(tc.checkDone)
		tick := time.NewTicker(20 * time.Millisecond)
		defer tick.Stop()
		for {
			select {
			case <-tc.stopCheck:
				return
			case <-tick.C:
			}
			for home, groups := range tc.appServerGroups() {
				if len(groups) > 1 {
					var desc []string
					for _, g := range groups {
						desc = append(desc, proctest.Describe(g))
					}
					tc.mu.Lock()
					tc.violations = append(tc.violations, fmt.Sprintf("%s: %d app-servers at %s: %s",
						home, len(groups), time.Now().Format("15:04:05.000"), strings.Join(desc, "; ")))
					tc.mu.Unlock()
				}
			}
		}
	}()
}

func (tc *testCluster) finishCheck() {
	if tc.stopCheck == nil {
		return
	}
	close(tc.stopCheck)
	<-tc.checkDone
	tc.mu.Lock()
	defer tc.mu.Unlock()
	if len(tc.violations) > 0 {
		tc.t.Errorf("a home had two app-servers at once (%d scans):\n%s", len(tc.violations), strings.Join(tc.violations[:min(10, len(tc.violations))], "\n"))
	}
}

// dial connects a Go client to member i.
func (tc *testCluster) dial(i int, opts ...client.Option) *client.Client {
	tc.t.Helper()
	ctx, cancel := context.WithTimeout(tc.t.Context(), 30*time.Second)
	defer cancel()
	if tc.tls != nil {
		opts = append(opts, client.WithTLS(tc.tls.caller))
	}
	c, err := client.Dial(ctx, tc.members[i].addr, opts...)
	if err != nil {
		tc.t.Fatal(err)
	}
	tc.t.Cleanup(func() { c.Close() })
	return c
}

// etcdFiles are the test's etcd clients' TLS files (none in plaintext).
func (tc *testCluster) etcdFiles() cluster.TLSFiles {
	if tc.tls == nil {
		return cluster.TLSFiles{}
	}
	return tc.tls.etcd
}

// ownerOf is the member index that owns user in etcd, -1 for none.
func (tc *testCluster) ownerOf(user string) int {
	tc.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	resp, err := tc.etcd.Get(ctx, "/meshweaver/c1/owners/"+user)
	if err != nil {
		tc.t.Fatalf("reading the owner of %s: %v", user, err)
	}
	if len(resp.Kvs) == 0 {
		return -1
	}
	for i, m := range tc.members {
		if m.id == string(resp.Kvs[0].Value) {
			return i
		}
	}
	tc.t.Fatalf("owner %q is not a member", resp.Kvs[0].Value)
	return -1
}

// roundOnce sends one round through c and returns its text and verdict.
func roundOnce(ctx context.Context, c *client.Client, req messages.StartRound) (string, messages.RoundFinished, error) {
	r, err := c.Round(ctx, req)
	if err != nil {
		return "", messages.RoundFinished{}, err
	}
	var text strings.Builder
	for e := range r.Events() {
		if e.Kind == messages.KindText {
			text.WriteString(e.Text)
		}
	}
	v, err := r.Wait()
	return text.String(), v, err
}

// roundRetrying sends the round until its verdict is not retryable, for at
// most within, as a caller following the Retryable contract does.
func roundRetrying(t *testing.T, c *client.Client, req messages.StartRound, within time.Duration) (string, messages.RoundFinished, int) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), within)
	defer cancel()
	tries := 0
	for {
		tries++
		text, v, err := roundOnce(ctx, c, req)
		if err != nil {
			t.Fatalf("round %s for %s: %v (try %d)", req.Thread, req.User, err, tries)
		}
		if !v.Retryable {
			return text, v, tries
		}
		select {
		case <-ctx.Done():
			t.Fatalf("round for %s still retryable after %v (%d tries): %+v", req.User, within, tries, v)
		case <-time.After(200 * time.Millisecond): // a caller's retry pause
		}
	}
}

// TestClusterFailover: three members with embedded etcd share one homes
// folder. A round for a user is answered through every member (two of
// them relay to the owner). The owner is SIGKILLed while a relayed round
// streams: the caller gets a failed verdict marked retryable within about
// the lease TTL, and the retried round resumes the same codex thread on a
// survivor, with the history the model sees. No home ever has two
// app-servers.
func TestClusterFailover(t *testing.T) {
	tc := newTestCluster(t, 3)
	clients := []*client.Client{tc.dial(0), tc.dial(1), tc.dial(2)}
	const user = "alice"

	// Routing from every member: the same user, the same codex thread.
	var thread string
	for i, c := range clients {
		text, v, _ := roundRetrying(t, c, messages.StartRound{User: user, Thread: "t1", Text: fmt.Sprintf("message %d", i)}, time.Minute)
		if v.Status != messages.StatusCompleted || !strings.Contains(text, fmt.Sprintf("message %d", i)) {
			t.Fatalf("round via member %d: %q, %+v", i, text, v)
		}
		if thread == "" {
			thread = v.CodexThreadID
		} else if v.CodexThreadID != thread || !v.Resumed {
			t.Fatalf("round via member %d ran on codex thread %s (resumed %v), want %s resumed", i, v.CodexThreadID, v.Resumed, thread)
		}
	}
	owner := tc.ownerOf(user)
	if owner < 0 {
		t.Fatal("alice has no owner in etcd")
	}
	// Its app-server's pid record names the owner and this kernel's boot.
	home, err := store.HomeDir(tc.homes, user)
	if err != nil {
		t.Fatal(err)
	}
	rec, err := store.ReadProcRecord(actors.ProcRecordPath(home))
	if err != nil {
		t.Fatal(err)
	}
	if boot, err := procs.BootID(); err != nil || rec.Member != tc.members[owner].id || rec.Boot != boot {
		t.Fatalf("alice's pid record %+v, want member %s and boot %s (%v)", rec, tc.members[owner].id, boot, err)
	}
	via := (owner + 1) % 3
	t.Logf("alice is owned by %s; the mid-stream round goes through %s", tc.members[owner].id, tc.members[via].id)

	// The bystander: a user a survivor owns, whose app-server must not
	// notice the owner's death (no survivor fences).
	by, byOwner := tc.userOwnedBesides(clients[0], owner)
	byApp := tc.appServersOf(tc.home(by))
	if len(byApp) != 1 {
		t.Fatalf("the bystander %s has app-servers %v, want one", by, byApp)
	}
	t.Logf("the bystander %s is owned by %s", by, tc.members[byOwner].id)

	// A relayed round streams; its owner is SIGKILLed.
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	r, err := clients[via].Round(ctx, messages.StartRound{User: user, Thread: "t1", Text: "please hang"})
	if err != nil {
		t.Fatal(err)
	}
	for e := range r.Events() {
		if e.Kind == messages.KindText {
			break // the turn runs on the owner
		}
	}
	gone := tc.keyGone(via, "/meshweaver/c1/owners/"+user)
	killed := time.Now()
	if err := tc.members[owner].srv.cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	tc.members[owner].srv.wait(opsWait)
	// The dead member's fence helper left the cluster for it: alice's key
	// went before the lease could have expired (a TTL after the last
	// renewal, which came at most a renewal period before the SIGKILL).
	select {
	case at := <-gone:
		every := cluster.NewDeadline(testLeaseTTL, testFenceMargin, time.Time{}).RenewEvery()
		if took := at.Sub(killed); took >= testLeaseTTL-every {
			t.Errorf("alice's owner key went %v after the SIGKILL, as the lease expired: the fence helper did not revoke it", took)
		} else {
			t.Logf("alice's owner key went %v after the SIGKILL (the helper revoked the lease)", took.Round(time.Millisecond))
		}
	case <-time.After(2 * testLeaseTTL):
		t.Fatal("alice's owner key outlived its lease")
	}
	v, err := r.Wait()
	took := time.Since(killed)
	if err != nil || v.Status != messages.StatusFailed || !v.Retryable {
		t.Fatalf("the relayed round after its owner's death: %+v, %v; want failed and retryable", v, err)
	}
	t.Logf("verdict %v after the SIGKILL: %s", took.Round(time.Millisecond), v.Error)
	if took > testLeaseTTL+2*time.Second {
		t.Fatalf("the verdict took %v, want about the lease TTL %v", took, testLeaseTTL)
	}

	// The retried round resumes the thread on a survivor, with its history.
	text, v, tries := roundRetrying(t, clients[via], messages.StartRound{User: user, Thread: "t1", Text: "after failover"}, time.Minute)
	took = time.Since(killed)
	if v.Status != messages.StatusCompleted || !v.Resumed || v.CodexThreadID != thread || !strings.Contains(text, "after failover") {
		t.Fatalf("the round after the failover: %q, %+v; want completed on the resumed thread %s", text, v, thread)
	}
	newOwner := tc.ownerOf(user)
	if newOwner == owner || newOwner < 0 {
		t.Fatalf("alice is owned by %d after %d died", newOwner, owner)
	}
	t.Logf("thread resumed on %s %v after the SIGKILL (%d tries)", tc.members[newOwner].id, took.Round(time.Millisecond), tries)
	var seen []string
	for _, req := range tc.model.Requests() {
		if req.LastUserText() == "after failover" {
			seen = req.UserTexts()
		}
	}
	if !slices.Contains(seen, "message 0") || !slices.Contains(seen, "message 2") {
		t.Fatalf("the model saw %q in the resumed thread, want the earlier messages", seen)
	}

	// The survivors never fenced; the bystander's app-server is the one it
	// had, and its next round runs on it.
	tc.bystandersUntouched(owner, by, byApp)
	if _, v, _ := roundRetrying(t, clients[byOwner], messages.StartRound{User: by, Thread: "t1", Text: "still here"}, time.Minute); v.Status != messages.StatusCompleted || !v.Resumed {
		t.Errorf("the bystander's round after the death: %+v", v)
	}
}

// keyGone watches key through member i's etcd (the etcd cluster's
// endpoints when external) and sends the time its deletion is seen.
func (tc *testCluster) keyGone(i int, key string) <-chan time.Time {
	tc.t.Helper()
	ep := tc.members[i].client
	if tc.external != nil {
		ep = tc.external.Endpoints()
	}
	c, err := cluster.NewClient(ep, tc.etcdFiles())
	if err != nil {
		tc.t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	tc.t.Cleanup(func() { cancel(); c.Close() })
	get, err := c.Get(ctx, key)
	if err != nil || len(get.Kvs) == 0 {
		tc.t.Fatalf("%s: %v, %v", key, get, err)
	}
	w := c.Watch(ctx, key, clientv3.WithRev(get.Header.Revision+1))
	out := make(chan time.Time, 1)
	go func() {
		for resp := range w {
			for _, ev := range resp.Events {
				if ev.Type == clientv3.EventTypeDelete {
					out <- time.Now()
					return
				}
			}
		}
	}()
	return out
}

// bystandersUntouched fails the test when a member other than victim
// fenced, or the bystander user by lost the app-servers byApp it had.
func (tc *testCluster) bystandersUntouched(victim int, by string, byApp []int) {
	tc.t.Helper()
	for i, m := range tc.members {
		if i == victim {
			continue
		}
		if v := tc.metric(i, "supervisor_cluster_fences_total"); v != 0 {
			tc.t.Errorf("survivor %s fenced %v times after the fault on %s", m.id, v, tc.members[victim].id)
		}
	}
	if now := tc.appServersOf(tc.home(by)); !slices.Equal(now, byApp) {
		tc.t.Errorf("the bystander %s's app-servers went from %v to %v across the fault on %s", by, byApp, now, tc.members[victim].id)
	}
}

// userOwnedBesides runs a first round for users until one lands on a
// member other than not, and returns the user and its owner.
func (tc *testCluster) userOwnedBesides(c *client.Client, not int) (string, int) {
	tc.t.Helper()
	for i := range 20 {
		user := fmt.Sprintf("bystander%d", i)
		if _, v, _ := roundRetrying(tc.t, c, messages.StartRound{User: user, Thread: "t1", Text: "hello"}, time.Minute); v.Status != messages.StatusCompleted {
			tc.t.Fatalf("%s's first round: %+v", user, v)
		}
		if o := tc.ownerOf(user); o != not && o >= 0 {
			return user, o
		}
	}
	tc.t.Fatal("20 users all landed on one member")
	return "", -1
}

// metric reads a counter or gauge of member i's /metrics.
func (tc *testCluster) metric(i int, name string) float64 {
	tc.t.Helper()
	listen := tc.members[i].srv.waitMsg("metrics serving")["listen"]
	_, body := opsHTTP(tc.t, fmt.Sprintf("http://%s/metrics", listen))
	v, ok := opsMetric(body, name, "")
	if !ok {
		tc.t.Fatalf("member %s's /metrics lacks %s", tc.members[i].id, name)
	}
	return v
}

// --- the long suite (-cluster.long) ---

func longCluster(t *testing.T) {
	if !*flagClusterLong {
		t.Skip("the long cluster suite runs with -cluster.long")
	}
}

// appServersOf is home's live app-servers (see appServerGroups).
func (tc *testCluster) appServersOf(home string) []int {
	return tc.appServerGroups()[home]
}

func (tc *testCluster) home(user string) string {
	return filepath.Join(tc.homes, user, ".codex")
}

// TestClusterSIGSTOPFenced: a paused member's app-servers are killed by
// its fence before its lease can expire, so the user's next owner never
// runs beside them; past its fence time the helper kills the paused
// daemon too, so its etcd member cannot come back as a stale leader. The
// other two members are the bystanders: neither fences, and a user one of
// them owns keeps its app-server. The killed member, restarted as its
// service manager would, rejoins and serves.
func TestClusterSIGSTOPFenced(t *testing.T) {
	longCluster(t)
	tc := newTestCluster(t, 3)
	c := tc.dial(0)
	const user = "bob"
	if _, v, _ := roundRetrying(t, c, messages.StartRound{User: user, Thread: "t1", Text: "first"}, time.Minute); v.Status != messages.StatusCompleted {
		t.Fatalf("first round: %+v", v)
	}
	owner := tc.ownerOf(user)
	home := tc.home(user)
	if n := len(tc.appServersOf(home)); n != 1 {
		t.Fatalf("bob has %d app-servers, want 1", n)
	}
	by, byOwner := tc.userOwnedBesides(tc.dial((owner+1)%3), owner)
	byApp := tc.appServersOf(tc.home(by))
	m := tc.members[owner]
	stopped := time.Now()
	if err := m.srv.cmd.Process.Signal(syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	var gone time.Time
	if !proctest.Poll(2*testLeaseTTL, 20*time.Millisecond, func() bool {
		if len(tc.appServersOf(home)) == 0 {
			gone = time.Now()
			return true
		}
		return false
	}) {
		t.Fatal("the paused member's app-server was not fenced")
	}
	t.Logf("fenced %v after SIGSTOP (TTL %v, margin %v)", gone.Sub(stopped).Round(time.Millisecond), testLeaseTTL, testFenceMargin)
	if gone.Sub(stopped) >= testLeaseTTL {
		t.Fatalf("fenced %v after the pause: the lease (TTL %v) could have expired first", gone.Sub(stopped), testLeaseTTL)
	}
	if !m.srv.wait(opsWait) {
		t.Fatal("the paused daemon was not killed by its fence helper")
	}
	other := tc.dial((owner + 1) % 3)
	if _, v, _ := roundRetrying(t, other, messages.StartRound{User: user, Thread: "t1", Text: "second"}, time.Minute); v.Status != messages.StatusCompleted || !v.Resumed {
		t.Fatalf("round on the survivor: %+v", v)
	}
	took := time.Since(stopped)
	t.Logf("bob resumed on a survivor %v after the SIGSTOP", took.Round(time.Millisecond))
	tc.bystandersUntouched(owner, by, byApp)
	t.Logf("the bystander %s is owned by %s", by, tc.members[byOwner].id)
	// Restarted on its etcd data, the member rejoins and serves rounds
	// again (relaying bob's to the new owner).
	restarted := time.Now()
	tc.restart(owner)
	m.srv.waitMsg("supervisor serving")
	back := tc.dial(owner)
	if _, v, _ := roundRetrying(t, back, messages.StartRound{User: user, Thread: "t1", Text: "third"}, time.Minute); v.Status != messages.StatusCompleted || !v.Resumed {
		t.Fatalf("round through the restarted member: %+v", v)
	}
	t.Logf("the restarted member served bob's round %v after its start", time.Since(restarted).Round(time.Millisecond))
}

// TestClusterRejoinAndLeave: a member SIGKILLed and restarted on its etcd
// data rejoins; a member stopped with SIGTERM leaves at once (its lease
// revoked) and its users are taken over without waiting for a TTL.
func TestClusterRejoinAndLeave(t *testing.T) {
	longCluster(t)
	tc := newTestCluster(t, 3)
	c := tc.dial(0)
	if _, v, _ := roundRetrying(t, c, messages.StartRound{User: "carol", Thread: "t1", Text: "first"}, time.Minute); v.Status != messages.StatusCompleted {
		t.Fatalf("first round: %+v", v)
	}
	// Rejoin after a SIGKILL (member 2 owns nothing that matters here).
	if err := tc.members[2].srv.cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	tc.members[2].srv.wait(opsWait)
	start := time.Now()
	tc.restart(2)
	tc.members[2].srv.waitMsg("supervisor serving")
	t.Logf("rejoined %v after the restart (the old life's helper revoked its lease; else it expires first)", time.Since(start).Round(time.Millisecond))
	c2 := tc.dial(2)
	if _, v, _ := roundRetrying(t, c2, messages.StartRound{User: "carol", Thread: "t1", Text: "via the rejoined member"}, time.Minute); v.Status != messages.StatusCompleted || !v.Resumed {
		t.Fatalf("round via the rejoined member: %+v", v)
	}
	// Graceful leave of carol's owner: immediate takeover.
	owner := tc.ownerOf("carol")
	if err := tc.members[owner].srv.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if !tc.members[owner].srv.wait(30 * time.Second) {
		t.Fatal("the member did not stop on SIGTERM")
	}
	left := time.Now()
	if o := tc.ownerOf("carol"); o >= 0 {
		t.Fatalf("carol still owned by %d after its owner left", o)
	}
	survivor := tc.dial((owner + 1) % 3)
	_, v, tries := roundRetrying(t, survivor, messages.StartRound{User: "carol", Thread: "t1", Text: "after the leave"}, time.Minute)
	if v.Status != messages.StatusCompleted || !v.Resumed || tries != 1 {
		t.Fatalf("round after the leave: %+v after %d tries; want completed at once", v, tries)
	}
	t.Logf("takeover round done %v after the leaver exited", time.Since(left).Round(time.Millisecond))
}

// TestClusterRacingUsers: 100 users, each sent its first round from every
// member at once: every round completes, every user ends with one owner,
// and no home ever has two app-servers.
func TestClusterRacingUsers(t *testing.T) {
	longCluster(t)
	// At most 12 app-servers a member (idle ones are stopped for new
	// ones), 10 users racing at a time: the machine has 2 cores, and a
	// longer lease, as etcd's keepalives wait behind the app-servers.
	tc := newTestCluster(t, 3, "--max-live", "12", "--peer-rate", "1000", "--peer-burst", "1000",
		"--lease-ttl", "15s", "--fence-margin", "5s")
	clients := []*client.Client{tc.dial(0), tc.dial(1), tc.dial(2)}
	const users = 100
	var wg sync.WaitGroup
	errs := make(chan error, users*3)
	slots := make(chan struct{}, 10)
	start := time.Now()
	for u := range users {
		slots <- struct{}{}
		var race sync.WaitGroup
		for i, c := range clients {
			race.Add(1)
			wg.Go(func() {
				defer race.Done()
				user := fmt.Sprintf("racer-%03d", u)
				text, v, _ := roundRetrying(t, c, messages.StartRound{User: user, Thread: fmt.Sprintf("t%d", i), Text: "race " + user}, 5*time.Minute)
				if v.Status != messages.StatusCompleted || !strings.Contains(text, "race "+user) {
					errs <- fmt.Errorf("%s via member %d: %q, %+v", user, i, text, v)
				}
			})
		}
		go func() { race.Wait(); <-slots }()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	t.Logf("%d rounds for %d users in %v", users*3, users, time.Since(start).Round(time.Millisecond))
	owned := 0
	for u := range users {
		if tc.ownerOf(fmt.Sprintf("racer-%03d", u)) >= 0 {
			owned++
		}
	}
	if owned != users {
		t.Errorf("%d of %d users have an owner after their rounds, want all (no member was fenced)", owned, users)
	}
}

// TestClusterQuorumLoss: with two of three members gone, the last one
// cannot renew its lease and stops its app-servers within one TTL
// (consistency over availability), and refuses rounds as retryable.
func TestClusterQuorumLoss(t *testing.T) {
	longCluster(t)
	tc := newTestCluster(t, 3)
	c := tc.dial(0)
	// Find a user member 0 owns.
	var user string
	for i := 0; user == ""; i++ {
		u := fmt.Sprintf("dave-%d", i)
		if _, v, _ := roundRetrying(t, c, messages.StartRound{User: u, Thread: "t1", Text: "hi"}, time.Minute); v.Status != messages.StatusCompleted {
			t.Fatalf("round: %+v", v)
		}
		if tc.ownerOf(u) == 0 {
			user = u
		}
		if i > 30 {
			t.Fatal("member 0 owns none of 30 users")
		}
	}
	home := tc.home(user)
	lost := time.Now()
	for _, i := range []int{1, 2} {
		if err := tc.members[i].srv.cmd.Process.Signal(syscall.SIGKILL); err != nil {
			t.Fatal(err)
		}
	}
	// Timed from the kills, not from the dead daemons' ends: their fence
	// helpers keep the daemons' log pipes open while they try to revoke
	// the leases, which without quorum they cannot (a TTL at most).
	if !proctest.Poll(testLeaseTTL+time.Second, 20*time.Millisecond, func() bool { return len(tc.appServersOf(home)) == 0 }) {
		t.Fatalf("member 0 kept %s's app-server %v after losing quorum", user, time.Since(lost))
	}
	t.Logf("app-servers stopped %v after quorum loss (TTL %v)", time.Since(lost).Round(time.Millisecond), testLeaseTTL)
	for _, i := range []int{1, 2} {
		tc.members[i].srv.wait(opsWait)
	}
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	_, v, err := roundOnce(ctx, c, messages.StartRound{User: user, Thread: "t1", Text: "no quorum"})
	if err != nil || !v.Retryable || v.Status == messages.StatusCompleted {
		t.Fatalf("round without quorum: %+v, %v; want a retryable refusal", v, err)
	}
	if errors.Is(ctx.Err(), context.DeadlineExceeded) {
		t.Fatal("the refusal took the whole deadline")
	}
}

// TestClusterExternalEtcd: production's topology, three daemons on an etcd
// cluster of three processes of its own. etcd's leader is SIGKILLed, then
// a follower is frozen (SIGSTOP) for longer than the lease TTL and
// resumed, then the leader: each is an election, or nothing, to wait out.
// Every daemon is a bystander: none fences, every user's app-server is the
// one it had, and every user's next round completes on it (after the
// leader's resume, see below).
func TestClusterExternalEtcd(t *testing.T) {
	ec := etcdtest.Start(t, 3)
	tc := newTestClusterOn(t, 3, ec)
	c := tc.dial(0)
	users := []string{"ada", "bea", "cy", "dot", "eve", "fay"}
	apps := map[string][]int{}
	for _, u := range users {
		if _, v, _ := roundRetrying(t, c, messages.StartRound{User: u, Thread: "t1", Text: "first"}, time.Minute); v.Status != messages.StatusCompleted {
			t.Fatalf("%s's first round: %+v", u, v)
		}
		apps[u] = tc.appServersOf(tc.home(u))
		if len(apps[u]) != 1 {
			t.Fatalf("%s has app-servers %v, want one", u, apps[u])
		}
	}
	untouched := func(when string) {
		t.Helper()
		for i, m := range tc.members {
			if v := tc.metric(i, "supervisor_cluster_fences_total"); v != 0 {
				t.Errorf("%s: member %s fenced %v times", when, m.id, v)
			}
		}
		for _, u := range users {
			if now := tc.appServersOf(tc.home(u)); !slices.Equal(now, apps[u]) {
				t.Errorf("%s: %s's app-servers went from %v to %v", when, u, apps[u], now)
			}
		}
	}
	// watch holds the quiet: two fence windows, checking all the while
	// that every app-server lives (a fence would kill some at once).
	watch := func(when string) {
		t.Helper()
		end := time.Now().Add(2 * (testLeaseTTL - testFenceMargin))
		for time.Now().Before(end) {
			for _, u := range users {
				for _, pid := range apps[u] {
					if !proctest.Alive(pid) {
						t.Fatalf("%s: %s's app-server %d died", when, u, pid)
					}
				}
			}
			time.Sleep(100 * time.Millisecond) // a scan period across a window that must stay quiet
		}
		untouched(when)
	}

	leader := ec.Leader()
	t.Logf("SIGKILL of etcd's leader e%d", leader)
	ec.Members[leader].Kill()
	watch("after the etcd leader's SIGKILL")
	for i, u := range users {
		if _, v, _ := roundRetrying(t, tc.dial(i%3), messages.StartRound{User: u, Thread: "t1", Text: "after the kill"}, time.Minute); v.Status != messages.StatusCompleted || !v.Resumed {
			t.Errorf("%s's round after the etcd leader's death: %+v", u, v)
		}
	}
	ec.Members[leader].Restart()

	leader = ec.Leader()
	follower := (leader + 1) % 3
	t.Logf("SIGSTOP of etcd's follower e%d past the TTL", follower)
	ec.Members[follower].Stop()
	watch("while an etcd follower is frozen")
	ec.Members[follower].Cont()
	for i, u := range users {
		if _, v, _ := roundRetrying(t, tc.dial((i+1)%3), messages.StartRound{User: u, Thread: "t1", Text: "after the freeze"}, time.Minute); v.Status != messages.StatusCompleted || !v.Resumed {
			t.Errorf("%s's round after the etcd follower's freeze: %+v", u, v)
		}
	}
	untouched("after the follower's freeze")

	// The leader frozen past the TTL is an election to wait out too. When
	// it resumes, etcd itself may revoke every lease: the old leader's
	// lessor finds them all expired and its revocation is forwarded to the
	// new leader (etcd-io/etcd#15247; its guard skips the check when the
	// member ticked a moment ago, which a resumed process always has).
	// Then every member fences (its lease is gone: consistency first) and
	// must be back serving at once.
	leader = ec.Leader()
	t.Logf("SIGSTOP of etcd's leader e%d past the TTL", leader)
	ec.Members[leader].Stop()
	watch("while the etcd leader is frozen")
	ec.Members[leader].Cont()
	resumed := time.Now()
	for i, u := range users {
		if _, v, _ := roundRetrying(t, tc.dial(i%3), messages.StartRound{User: u, Thread: "t1", Text: "after the leader's freeze"}, time.Minute); v.Status != messages.StatusCompleted || !v.Resumed {
			t.Errorf("%s's round after the etcd leader's freeze: %+v", u, v)
		}
	}
	fences := 0.0
	for i := range tc.members {
		fences += tc.metric(i, "supervisor_cluster_fences_total")
	}
	t.Logf("after the leader resumed: %v fences, every user served again %v after the SIGCONT", fences, time.Since(resumed).Round(time.Millisecond))
}
