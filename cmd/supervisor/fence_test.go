package main

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"golang.org/x/sys/unix"

	"github.com/meshweaver/supervisor/cluster"
	"github.com/meshweaver/supervisor/procs"
	"github.com/meshweaver/supervisor/testkit/etcdtest"
	"github.com/meshweaver/supervisor/testkit/proctest"
	"github.com/meshweaver/supervisor/testkit/syncbuf"
)

// fakeDaemon is a shell standing in for a daemon: its background sleep,
// under setsid, leads a process group of its own, as an app-server does
// under the real daemon. It returns the shell and the sleep's pid.
func fakeDaemon(t *testing.T) (*exec.Cmd, int) {
	t.Helper()
	return fakeDaemonScript(t, "setsid sleep 60 & echo $!; wait")
}

// fakeDaemonScript is fakeDaemon running script, which must print the
// pid of its app-server stand-in first.
func fakeDaemonScript(t *testing.T, script string) (*exec.Cmd, int) {
	t.Helper()
	sh := exec.Command("sh", "-c", script)
	out, err := sh.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := sh.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = sh.Process.Kill(); _ = sh.Wait() })
	line, err := bufio.NewReader(out).ReadString('\n')
	if err != nil {
		t.Fatal(err)
	}
	pid, err := strconv.Atoi(strings.TrimSpace(line))
	if err != nil {
		t.Fatalf("the shell said %q", line)
	}
	// A process SIGKILLed just now may not have exited yet: poll.
	t.Cleanup(func() {
		proctest.WaitGone(t, 5*time.Second, 10*time.Millisecond, func(p proctest.Proc) bool { return p.PID == pid })
	})
	return sh, pid
}

// watchFenceSaw sends each app-server group the fence learns of, until
// the test ends.
func watchFenceSaw(t *testing.T) <-chan int {
	saw := make(chan int, 8)
	fenceSaw = func(pid int) { saw <- pid }
	t.Cleanup(func() { fenceSaw = nil })
	return saw
}

// waitSaw waits until the fence has learnt of the app-server app.
func waitSaw(t *testing.T, saw <-chan int, app int) {
	t.Helper()
	deadline := time.After(10 * time.Second)
	for {
		select {
		case pid := <-saw:
			if pid == app {
				return
			}
		case <-deadline:
			t.Fatal("the fence never saw the app-server")
		}
	}
}

// TestFenceKillsPastTheDeadline: the fence leaves the daemon's app-server
// alone while each new fence time arrives before the last one passes,
// kills its process group once one passes, and exits when its input ends.
func TestFenceKillsPastTheDeadline(t *testing.T) {
	sh, app := fakeDaemon(t)
	in, feed := fencePipe(t)
	var log syncbuf.Buffer
	done := make(chan error, 1)
	go func() {
		done <- fenceCmd(context.Background(), []string{"--daemon-pid", strconv.Itoa(sh.Process.Pid), "--member", "m1", "--poll", "10ms"}, in, &log)
	}()
	// Renewals: each says 3s are left, every 100ms: far from the fence
	// time even when a loaded machine stalls this goroutine (its sleep and
	// its /proc read) for a second or more, which a 1s margin did not
	// survive for certain.
	const left = 3 * time.Second
	var wrote time.Time
	for range 10 {
		wrote = time.Now()
		if _, err := fmt.Fprintln(feed, cluster.BootNow().Add(left).UnixNano()); err != nil {
			t.Fatal(err)
		}
		time.Sleep(100 * time.Millisecond) // the daemon's renewal period, not a wait for an outcome
		if !proctest.Alive(app) {
			t.Fatalf("the fence killed a renewed daemon's app-server:\n%s", log.String())
		}
	}
	// The fence read the last renewal after it was written: its fence time
	// is at least left after the write.
	if !proctest.Poll(left+10*time.Second, 10*time.Millisecond, func() bool { return !proctest.Alive(app) }) {
		t.Fatalf("the app-server outlived the fence time:\n%s", log.String())
	}
	if took := time.Since(wrote); took < left {
		t.Fatalf("killed %v after the last renewal was written, before its %v were up", took, left)
	}
	if !strings.Contains(log.String(), "did not renew its lease in time") {
		t.Errorf("the fence's log does not say why it killed:\n%s", log.String())
	}
	feed.Close()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("fence = %v, want nil at the end of its input", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the fence did not exit at the end of its input")
	}
}

// TestFenceKillsWhatADeadDaemonLeft: when the daemon's pipe closes (it
// died), the fence kills the app-server groups it had seen, even though
// they were re-parented. Its etcd is unreachable (the network cut,
// quorum lost): the helper tries to revoke the lease for at most the
// TTL, says it expires instead, and exits.
func TestFenceKillsWhatADeadDaemonLeft(t *testing.T) {
	sh, app := fakeDaemon(t)
	in, feed := fencePipe(t)
	var log syncbuf.Buffer
	saw := watchFenceSaw(t)
	done := make(chan error, 1)
	go func() {
		done <- fenceCmd(context.Background(), []string{"--daemon-pid", strconv.Itoa(sh.Process.Pid), "--poll", "10ms",
			"--etcd-endpoints", "http://" + mustFreeAddr(t), "--lease-ttl", "2s", "--fence-margin", "1s"}, in, &log)
	}()
	if _, err := fmt.Fprintln(feed, cluster.BootNow().Add(time.Minute).UnixNano(), 42); err != nil { // a lease renewed: far from the fence time
		t.Fatal(err)
	}
	// Once the fence knows the app-server, the daemon dies; an unrenewed
	// minute is far away, so only the end of the input can kill it.
	waitSaw(t, saw, app)
	_ = sh.Process.Kill()
	_ = sh.Wait()
	feed.Close()
	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(30 * time.Second):
		t.Fatalf("the fence did not exit at the end of its input:\n%s", log.String())
	}
	if !proctest.Poll(5*time.Second, 10*time.Millisecond, func() bool { return !proctest.Alive(app) }) {
		t.Fatalf("the dead daemon's app-server was left running:\n%s", log.String())
	}
	if !strings.Contains(log.String(), "expires instead") {
		t.Errorf("the fence's log does not say the lease expires instead:\n%s", log.String())
	}
}

// TestFenceTimeIsAnInstant: a fence time the helper reads after it has
// passed (the helper descheduled, or the machine suspended, while the
// line waited in the pipe) kills at once: the line names the instant, so
// a late read does not move the fence later.
func TestFenceTimeIsAnInstant(t *testing.T) {
	sh, app := fakeDaemon(t)
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	at := cluster.BootNow().Add(300 * time.Millisecond)
	if _, err := fmt.Fprintln(w, at.UnixNano()); err != nil {
		t.Fatal(err)
	}
	for cluster.BootNow().Before(at.Add(700 * time.Millisecond)) { // the line waits, unread, past its instant
		time.Sleep(50 * time.Millisecond)
	}
	var log syncbuf.Buffer
	done := make(chan error, 1)
	go func() {
		done <- fenceCmd(context.Background(), []string{"--daemon-pid", strconv.Itoa(sh.Process.Pid), "--poll", "10ms"}, r, &log)
	}()
	read := time.Now()
	if !proctest.Poll(10*time.Second, 10*time.Millisecond, func() bool { return !proctest.Alive(app) }) {
		t.Fatalf("the app-server outlived a fence time read after it passed:\n%s", log.String())
	}
	// A relative reading would have waited 300ms from the read.
	if took := time.Since(read); took >= 300*time.Millisecond {
		t.Errorf("killed %v after the late read: the late read moved the fence", took)
	}
	w.Close()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("the fence did not exit at the end of its input")
	}
}

// TestFenceKillsAStoppedDaemon: with --kill-stopped-daemon (a member with
// an embedded etcd), past the fence time the helper kills the app-servers
// and leaves a running daemon alone; a daemon stopped (SIGSTOP) past it is
// killed too, so its etcd member cannot resume as a stale leader.
func TestFenceKillsAStoppedDaemon(t *testing.T) {
	sh, app := fakeDaemonScript(t, "setsid sleep 60 & echo $!; wait; exec sleep 60") // lives on after its app-server
	in, feed := fencePipe(t)
	var log syncbuf.Buffer
	done := make(chan error, 1)
	go func() {
		done <- fenceCmd(context.Background(), []string{"--daemon-pid", strconv.Itoa(sh.Process.Pid), "--poll", "10ms", "--kill-stopped-daemon"}, in, &log)
	}()
	if _, err := fmt.Fprintln(feed, cluster.BootNow().Add(-time.Second).UnixNano()); err != nil { // past already
		t.Fatal(err)
	}
	if !proctest.Poll(10*time.Second, 10*time.Millisecond, func() bool { return !proctest.Alive(app) }) {
		t.Fatalf("the app-server outlived the fence time:\n%s", log.String())
	}
	// Some polls past the fence time with the daemon running: it lives.
	for range 20 {
		time.Sleep(10 * time.Millisecond) // the helper's poll period, a window that must stay quiet
		if p, ok := proctest.Read(sh.Process.Pid); !ok || !p.Live() {
			t.Fatalf("the fence killed a running daemon:\n%s", log.String())
		}
	}
	if err := sh.Process.Signal(syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	if !proctest.Poll(10*time.Second, 10*time.Millisecond, func() bool {
		p, ok := proctest.Read(sh.Process.Pid)
		return !ok || !p.Live()
	}) {
		t.Fatalf("the stopped daemon outlived its fence time:\n%s", log.String())
	}
	if !strings.Contains(log.String(), "stopped past its fence time") {
		t.Errorf("the fence's log does not say why it killed the daemon:\n%s", log.String())
	}
	feed.Close()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("the fence did not exit at the end of its input")
	}
}

// fencePipe is the daemon's pipe to a helper under test: the helper
// reads in, the test writes feed.
func fencePipe(t *testing.T) (in, feed *os.File) {
	t.Helper()
	in, feed, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { in.Close(); feed.Close() })
	return in, feed
}

// TestFenceInputPending: a renewal written to the helper's pipe and not
// read yet is seen, so the helper does not fence on an older one.
func TestFenceInputPending(t *testing.T) {
	r, w := fencePipe(t)
	fd, err := readEnd(r)
	if err != nil {
		t.Fatalf("readEnd of a pipe: %v", err)
	}
	defer unix.Close(fd)
	if inputPending(fd) {
		t.Fatal("an empty pipe has input pending")
	}
	if _, err := fmt.Fprintln(w, cluster.BootNow().UnixNano()); err != nil {
		t.Fatal(err)
	}
	if !inputPending(fd) {
		t.Fatal("a written line is not pending")
	}
	if _, err := bufio.NewReader(r).ReadString('\n'); err != nil {
		t.Fatal(err)
	}
	if inputPending(fd) {
		t.Fatal("a read line is still pending")
	}
	// The helper reads only the read end of a pipe: fence times come
	// from the daemon.
	pr, pw := io.Pipe()
	defer pr.Close()
	defer pw.Close()
	null, err := os.Open(os.DevNull)
	if err != nil {
		t.Fatal(err)
	}
	defer null.Close()
	for name, in := range map[string]io.Reader{"an io.Pipe": pr, "the pipe's write end": w, os.DevNull: null} {
		if fd, err := readEnd(in); err == nil {
			unix.Close(fd)
			t.Errorf("%s taken for the daemon's pipe", name)
		} else if !strings.Contains(err.Error(), "the read end of the daemon's pipe") {
			t.Errorf("%s refused with %v", name, err)
		}
	}
	// Every complete line taken counts, the last one wins, a partial
	// line waits for its end; a line's lease comes with its fence time.
	var in fenceInput
	in.add([]byte("1000 7\n2000 8\n30"))
	if got, lease := in.latest(time.Time{}, 0); !got.Equal(time.Unix(0, 2000)) || lease != 8 {
		t.Fatalf("latest = %v, lease %d; want the second line's", got, lease)
	}
	in.add([]byte("00 9\n"))
	if got, lease := in.latest(time.Unix(0, 2000), 8); !got.Equal(time.Unix(0, 3000)) || lease != 9 {
		t.Fatalf("latest = %v, lease %d; want the completed third line's", got, lease)
	}
	if got, lease := in.latest(time.Unix(0, 3000), 9); !got.Equal(time.Unix(0, 3000)) || lease != 9 {
		t.Fatalf("latest with nothing new = %v, lease %d", got, lease)
	}
	// A line without a lease (or a garbled one) keeps the lease known.
	in.add([]byte("4000\n5000 x\n"))
	if got, lease := in.latest(time.Unix(0, 3000), 9); !got.Equal(time.Unix(0, 5000)) || lease != 9 {
		t.Fatalf("latest = %v, lease %d; want the last fence time and lease 9", got, lease)
	}
}

// fenceOnEtcd starts the fence for a fake daemon (running script, see
// fakeDaemonScript) whose lease (a minute
// long, far from expiring while the test runs) holds one key on a real
// etcd; it returns the daemon, its app-server's pid, the input, the
// fence's log and result, and the key's watch.
func fenceOnEtcd(t *testing.T, script string) (*exec.Cmd, int, io.WriteCloser, *syncbuf.Buffer, chan error, clientv3.WatchChan, *clientv3.Client) {
	t.Helper()
	ec := etcdtest.Start(t, 1)
	c, err := cluster.NewClient(ec.Endpoints(), cluster.TLSFiles{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	g, err := c.Grant(t.Context(), 60)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.Put(t.Context(), "owner", "m1", clientv3.WithLease(g.ID)); err != nil {
		t.Fatal(err)
	}
	wctx, cancel := context.WithCancel(t.Context())
	t.Cleanup(cancel)
	watch := c.Watch(wctx, "owner")
	sh, app := fakeDaemonScript(t, script)
	in, feed := fencePipe(t)
	log := &syncbuf.Buffer{}
	saw := watchFenceSaw(t)
	done := make(chan error, 1)
	go func() {
		done <- fenceCmd(context.Background(), []string{"--daemon-pid", strconv.Itoa(sh.Process.Pid), "--member", "m1", "--poll", "10ms",
			"--etcd-endpoints", ec.Endpoints(), "--lease-ttl", "60s"}, in, log)
	}()
	if _, err := fmt.Fprintln(feed, cluster.BootNow().Add(time.Minute).UnixNano(), int64(g.ID)); err != nil {
		t.Fatal(err)
	}
	waitSaw(t, saw, app)
	return sh, app, feed, log, done, watch, c
}

// TestFenceLeavesForADeadDaemon: when the daemon dies, the helper kills
// what it left and then revokes its lease, so the other members take its
// users over at once, not a TTL (here a minute) later; the key goes only
// after the app-server is dead.
func TestFenceLeavesForADeadDaemon(t *testing.T) {
	sh, app, feed, log, done, watch, _ := fenceOnEtcd(t, "setsid sleep 60 & echo $!; wait")
	_ = sh.Process.Kill()
	_ = sh.Wait()
	feed.Close()
	awaitRevoked(t, watch, done, log, "the dead daemon's app-server", func() bool { return proctest.Alive(app) }, "revoked its lease")
}

// awaitRevoked waits for the helper to revoke the dead daemon's lease
// (the owner key's delete on watch) and to exit; what (alive) must be
// dead by the revocation, and the helper's log must say said.
func awaitRevoked(t *testing.T, watch clientv3.WatchChan, done chan error, log *syncbuf.Buffer, what string, alive func() bool, said string) {
	t.Helper()
	select {
	case resp := <-watch:
		if len(resp.Events) == 0 || resp.Events[0].Type != clientv3.EventTypeDelete {
			t.Fatalf("the owner key's watch: %+v", resp)
		}
		if alive() {
			t.Fatalf("the lease was revoked while %s was alive:\n%s", what, log.String())
		}
	case <-time.After(10 * time.Second):
		t.Fatalf("the dead daemon's lease was not revoked:\n%s", log.String())
	}
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(log.String(), said) {
		t.Errorf("the fence's log does not say %q:\n%s", said, log.String())
	}
}

// TestFenceKillsALeaderlessGroup: as the daemon dies, its exit sends each
// app-server its Pdeathsig, which may kill it just before the helper
// sees the end of its input, while a process it started (a tool
// command) lives on in its group. The helper kills that group all the
// same, and revokes the lease only once that process is dead.
func TestFenceKillsALeaderlessGroup(t *testing.T) {
	sh, app, feed, log, done, watch, _ := fenceOnEtcd(t, "setsid sh -c 'sleep 60 & wait' & echo $!; wait")
	var tool proctest.Proc
	if !proctest.Poll(10*time.Second, 10*time.Millisecond, func() bool {
		m := proctest.List(func(p proctest.Proc) bool { return p.PGID == app && p.PID != app && p.Comm == "sleep" })
		if len(m) == 1 {
			tool = m[0]
		}
		return len(m) == 1
	}) {
		t.Fatalf("the app-server's tool command never started: %s", proctest.Describe(app))
	}
	t.Cleanup(func() {
		if tool.Running() {
			_ = syscall.Kill(tool.PID, syscall.SIGKILL)
		}
		proctest.WaitGone(t, 5*time.Second, 10*time.Millisecond, func(p proctest.Proc) bool { return p.PID == tool.PID && p.Start == tool.Start })
	})
	// The app-server's Pdeathsig first, then the daemon's death.
	if err := syscall.Kill(app, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	_ = sh.Process.Kill()
	_ = sh.Wait()
	feed.Close()
	awaitRevoked(t, watch, done, log, "a process of a dead app-server's group", tool.Running, "left 1 app-server groups: killed")
}

// TestFenceScanTrustsOnlyTheDaemon: the helper finds the app-servers as
// children of the daemon's pid, which names the daemon only while it has
// the daemon's start time: a pid reused (the daemon died while the helper
// was stopped) teaches the scan nothing. And a group is killed without
// its leader only while the leader's pid is not another process's.
func TestFenceScanTrustsOnlyTheDaemon(t *testing.T) {
	sh, app := fakeDaemon(t)
	host := procs.Host()
	st, err := host.Stat(sh.Process.Pid)
	if err != nil {
		t.Fatal(err)
	}
	var log syncbuf.Buffer
	f := &fence{daemon: sh.Process.Pid, daemonSelf: procs.ID{PID: sh.Process.Pid, Start: st.Start + 1}, self: os.Getpid(), out: &log, known: map[int]procs.ID{}}
	// The app-server leads its group once setsid ran: poll with the true
	// daemon first, then look with the false one.
	same := f.daemonSelf
	same.Start = st.Start
	other := f.daemonSelf
	f.daemonSelf = same
	if !proctest.Poll(10*time.Second, 10*time.Millisecond, func() bool { f.scan(); return len(f.known) == 1 }) {
		t.Fatalf("the daemon's app-server %d was not found: %v", app, f.known)
	}
	appID := f.known[app]
	clear(f.known)
	f.daemonSelf = other
	f.scan()
	if len(f.known) != 0 {
		t.Fatalf("a scan under a reused daemon pid learnt %v", f.known)
	}
	if killed, known := f.kill(); len(killed)+len(known) != 0 || !proctest.Alive(app) {
		t.Fatalf("kill under a reused daemon pid: killed %v of %v", killed, known)
	}
	// The app-server's pid with another start time is a stranger's, even
	// with live processes in its group.
	members := host.Groups(app)
	if len(members[app]) == 0 || !groupLives(host, appID, members) {
		t.Fatalf("the live app-server's group: %v", members)
	}
	if groupLives(host, procs.ID{PID: app, Start: appID.Start - 1}, members) {
		t.Fatal("a group whose leader's pid is another process's taken for the app-server's")
	}
	f.daemonSelf = same
	f.scan()
	if killed, _ := f.kill(); len(killed) != 1 || killed[0] != app {
		t.Fatalf("kill = %v, want the app-server %d", killed, app)
	}
	if !proctest.Poll(10*time.Second, 10*time.Millisecond, func() bool { return !proctest.Alive(app) }) {
		t.Fatal("the app-server outlived its kill")
	}
}

// TestFenceLeavesALiveDaemonsLeaseAlone: a daemon that closes the input
// and lives on is stopping; it leaves by itself (or its lease expires):
// the helper revokes nothing.
func TestFenceLeavesALiveDaemonsLeaseAlone(t *testing.T) {
	// This daemon outlives its app-server (the helper kills it when the
	// input ends).
	sh, _, feed, log, done, _, c := fenceOnEtcd(t, "setsid sleep 60 & echo $!; exec sleep 60")
	feed.Close()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if !proctest.Alive(sh.Process.Pid) {
		t.Fatal("the daemon died during the test")
	}
	get, err := c.Get(t.Context(), "owner")
	if err != nil || len(get.Kvs) != 1 {
		t.Fatalf("the live daemon's key: %v, %v; want it kept\n%s", get, err, log.String())
	}
}

// TestFenceLeavesAStoppingDaemonsLeaseAlone: a daemon that wrote "stop"
// (it revoked its lease itself, or means it to expire) and then exited
// is not left for: the helper does not wait for it nor revoke.
func TestFenceLeavesAStoppingDaemonsLeaseAlone(t *testing.T) {
	sh, _, feed, log, done, _, c := fenceOnEtcd(t, "setsid sleep 60 & echo $!; wait")
	if _, err := io.WriteString(feed, "stop\n"); err != nil {
		t.Fatal(err)
	}
	_ = sh.Process.Kill()
	_ = sh.Wait()
	feed.Close()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	get, err := c.Get(t.Context(), "owner")
	if err != nil || len(get.Kvs) != 1 {
		t.Fatalf("the stopping daemon's key: %v, %v; want it kept\n%s", get, err, log.String())
	}
}
