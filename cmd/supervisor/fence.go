package main

import (
	"bytes"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"io/fs"
	"os"
	"strconv"
	"strings"
	"syscall"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"golang.org/x/sys/unix"

	"github.com/meshweaver/supervisor/cluster"
	"github.com/meshweaver/supervisor/procs"
)

// fenceCmd is `supervisor fence`, the out-of-process fence of a cluster
// member. serve starts it (in its own process group) and writes it, on
// stdin, each new fence time: a lease renewal moves it on. The
// app-servers run in process groups of their own, so a daemon that is
// paused (SIGSTOP) or hung does not pause them, and its in-process fence
// cannot run; this one does: when the fence time passes without a newer
// one, it SIGKILLs every app-server group the daemon started, before the
// lease can expire and another member take the users over. When its
// input ends it kills what is left of them and exits; if the daemon died
// (it did not write "stop" first), the helper leaves the cluster for it
// once nothing it ran is alive: it revokes the lease, and the others
// take its users over at once instead of a TTL later (leave).
//
// Each line is the fence time itself, an instant on the boot clock
// (cluster.BootNow, nanoseconds), not the time left, and the lease's id:
// a line read late (the helper descheduled) does not move the fence
// later, and a machine suspended past the fence time wakes past it,
// where the monotonic clock would have stood still.
func fenceCmd(ctx context.Context, args []string, stdin io.Reader, stderr io.Writer) error {
	fs := flag.NewFlagSet("fence", flag.ContinueOnError)
	fs.SetOutput(stderr)
	pid := fs.Int("daemon-pid", 0, "`PID` of the daemon whose app-servers are fenced (required)")
	member := fs.String("member", "", "the member `ID`, for the log lines")
	poll := fs.Duration("poll", 50*time.Millisecond, "how often to look for the daemon's app-servers and at the fence time")
	killStopped := fs.Bool("kill-stopped-daemon", false, "past the fence time, also SIGKILL the daemon itself when it is stopped (SIGSTOP, a tracer): its embedded etcd member must not resume as a stale leader")
	var lv fenceLeave
	fs.StringVar(&lv.endpoints, "etcd-endpoints", "", "etcd client `URLS` (comma-separated): when the daemon dies, the helper revokes its lease through them once its app-servers are dead, so the other members take its users over at once (empty: the lease expires)")
	fs.StringVar(&lv.tls.Cert, "tls-cert", "", "the member's certificate `FILE` for etcd")
	fs.StringVar(&lv.tls.Key, "tls-key", "", "its key `FILE`")
	fs.StringVar(&lv.tls.CA, "tls-ca", "", "the CA bundle `FILE` etcd's certificates are checked against")
	fs.DurationVar(&lv.ttl, "lease-ttl", 10*time.Second, "the lease's time to live: a revocation is not tried longer")
	fs.DurationVar(&lv.margin, "fence-margin", 4*time.Second, "the member's fence margin: with the TTL it bounds each revocation attempt, as it bounds the member's own etcd calls")
	if _, err := parseArgs(fs, args, noArgs); err != nil {
		return err
	}
	if *pid <= 1 || *poll <= 0 || lv.ttl <= 0 || lv.margin <= 0 || lv.margin >= lv.ttl {
		fmt.Fprintln(stderr, "supervisor fence: --daemon-pid (above 1) is required, --poll, --lease-ttl and --fence-margin must be positive, the margin below the TTL")
		return errUsage
	}
	_ = ctx // a signal does not end the fence: only the end of its input does
	f := &fence{daemon: *pid, member: *member, out: stderr, known: map[int]procs.ID{}, self: os.Getpid()}
	// The daemon's identity now, so that a pid reused later is never
	// signalled, nor taken for the daemon alive.
	st, err := procs.Host().Stat(*pid)
	if err != nil {
		return fmt.Errorf("supervisor fence: the daemon %d: %w", *pid, err)
	}
	f.daemonSelf = procs.ID{PID: *pid, Start: st.Start}
	if *killStopped {
		f.daemonID = &f.daemonSelf
	}
	pipe, err := readEnd(stdin)
	if err != nil {
		return fmt.Errorf("supervisor fence: %w", err)
	}
	defer unix.Close(pipe)
	// One goroutine reads the pipe and decides: every byte read is parsed
	// before a decision, and bytes written but not read yet hold it back
	// (inputPending). A reader of its own, handing what it read to the
	// deciding loop, left a moment between its read and its hand-over in
	// which a renewal was in neither place (issue 22's chaos run: a helper
	// descheduled on a loaded machine killed renewed daemons' app-servers,
	// "fence time passed 259ms ago" 0.1 s after a renewal, and 609ms with
	// four newer lines held by its reader). It waits in poll(2), not in a
	// read with a deadline: a read whose deadline passed before it began
	// (a slow scan, a descheduled helper) returns without reading, so a
	// loaded helper could miss the end of its input for good.
	var in fenceInput
	var deadline time.Time // zero: no lease yet, nothing to fence
	var lease clientv3.LeaseID
	buf := make([]byte, 4096)
	next := time.Now().Add(*poll)
	for {
		wait := max(time.Until(next), 0)
		fds := []unix.PollFd{{Fd: int32(pipe), Events: unix.POLLIN}}
		ready, err := unix.Poll(fds, int((wait+time.Millisecond-1)/time.Millisecond))
		if err != nil && !errors.Is(err, unix.EINTR) {
			return fmt.Errorf("supervisor fence: waiting for the daemon's pipe: %w", err)
		}
		if ready > 0 && fds[0].Revents != 0 {
			// Readable (or its writer gone): this read does not block.
			n, err := unix.Read(pipe, buf)
			switch {
			case n > 0:
				in.add(buf[:n])
			case errors.Is(err, unix.EINTR), errors.Is(err, unix.EAGAIN):
			default: // the input ended: the daemon holds the only writer
				killed, groups := f.kill()
				if len(killed) > 0 {
					f.logf("the daemon ended and left %d app-server groups: killed", len(killed))
				}
				_, lease = in.latest(deadline, lease)
				if lease != 0 && lv.endpoints != "" && !in.stopping {
					f.leave(lv, lease, groups, *poll)
				}
				return nil
			}
		}
		if time.Now().Before(next) {
			continue
		}
		f.scan()
		deadline, lease = in.latest(deadline, lease)
		if now := cluster.BootNow(); !deadline.IsZero() && !now.Before(deadline) && !inputPending(pipe) {
			if killed, _ := f.kill(); len(killed) > 0 {
				f.logf("the daemon did not renew its lease in time (fence time passed %v ago): killed %d app-server groups", now.Sub(deadline).Round(time.Millisecond), len(killed))
			}
			f.killStopped()
		}
		next = time.Now().Add(*poll)
	}
}

// readEnd is a descriptor of the helper's own for its input, the read
// end of the daemon's pipe (close-on-exec, left blocking: the helper
// waits in poll(2)). Anything else is refused: fence times come only
// from the daemon.
func readEnd(in io.Reader) (int, error) {
	f, ok := in.(*os.File)
	if !ok {
		return -1, errors.New("its input must be the read end of the daemon's pipe")
	}
	rc, err := f.SyscallConn()
	if err != nil {
		return -1, fmt.Errorf("its input: %w", err)
	}
	dup, derr := -1, error(nil)
	if cerr := rc.Control(func(fd uintptr) {
		var st unix.Stat_t
		if derr = unix.Fstat(int(fd), &st); derr != nil {
			return
		}
		fl, err := unix.FcntlInt(fd, unix.F_GETFL, 0)
		if st.Mode&unix.S_IFMT != unix.S_IFIFO || err != nil || fl&unix.O_ACCMODE == unix.O_WRONLY {
			derr = errors.New("its input must be the read end of the daemon's pipe")
			return
		}
		dup, derr = unix.FcntlInt(fd, unix.F_DUPFD_CLOEXEC, 0)
	}); cerr != nil {
		return -1, fmt.Errorf("its input: %w", cerr)
	}
	if derr != nil {
		return -1, fmt.Errorf("its input: %w", derr)
	}
	return dup, nil
}

// fenceInput is what the helper read from the daemon's pipe and has
// not parsed yet (a partial line waits for its end).
type fenceInput struct {
	buf      []byte
	stopping bool // the daemon wrote "stop": it ends on purpose, and leaves by itself
}

func (in *fenceInput) add(b []byte) { in.buf = append(in.buf, b...) }

// latest parses every complete line taken so far and returns the last
// fence time among them and its lease, or deadline and lease when there
// is none; a partial line waits for its end. A line is the fence time
// (boot clock nanoseconds) and, after a space, the lease's id.
func (in *fenceInput) latest(deadline time.Time, lease clientv3.LeaseID) (time.Time, clientv3.LeaseID) {
	for {
		i := bytes.IndexByte(in.buf, '\n')
		if i < 0 {
			return deadline, lease
		}
		line := strings.TrimSpace(string(in.buf[:i]))
		if line == "stop" {
			in.stopping = true
		}
		at, id, _ := strings.Cut(line, " ")
		if ns, err := strconv.ParseInt(at, 10, 64); err == nil {
			deadline = time.Unix(0, ns)
			if l, err := strconv.ParseInt(id, 10, 64); err == nil {
				lease = clientv3.LeaseID(l)
			}
		}
		in.buf = in.buf[i+1:]
	}
}

// inputPending reports whether the pipe holds bytes written and not
// read yet (FIONREAD, which is TIOCINQ): a renewal the helper has yet to
// read.
func inputPending(pipe int) bool {
	n, err := unix.IoctlGetInt(pipe, unix.TIOCINQ)
	return err == nil && n > 0
}

// fence is what the helper knows of the daemon's app-servers.
type fence struct {
	daemon     int
	daemonSelf procs.ID  // the daemon's pid and start time
	daemonID   *procs.ID // set: kill the daemon itself when it is stopped past the fence time
	self       int
	member     string
	out        io.Writer
	known      map[int]procs.ID // app-server group leaders, by pid
}

// scan remembers the daemon's children that lead a process group of
// their own (the app-servers; under isolation, their bubblewrap), so that
// they can be found after the daemon died and they were re-parented. A
// group is forgotten once nothing of it lives (see groupLives). Children
// are found by the daemon's pid, so they are trusted only when the daemon
// is the same process before and after the look: a pid reused after the
// daemon died (the helper stopped or starved meanwhile) names a
// stranger, whose children are not the daemon's.
func (f *fence) scan() {
	host := procs.Host()
	var dead []int
	for pid, id := range f.known {
		if !host.IsSame(id) {
			dead = append(dead, pid)
		}
	}
	if len(dead) > 0 {
		members := host.Groups(dead...)
		for _, pid := range dead {
			if !groupLives(host, f.known[pid], members) {
				delete(f.known, pid)
			}
		}
	}
	if !host.IsSame(f.daemonSelf) {
		return // exited (a zombie has no children left) or a reused pid
	}
	found := host.Scan(func(p procs.Proc) bool {
		return p.PPID == f.daemon && p.PGRP == p.PID && p.PID != f.self && p.Alive()
	})
	if !host.IsSame(f.daemonSelf) {
		return // it was alive when the look began, maybe not throughout
	}
	for _, id := range found {
		if _, ok := f.known[id.PID]; !ok && fenceSaw != nil {
			fenceSaw(id.PID)
		}
		f.known[id.PID] = id
	}
}

// groupLives reports whether the app-server group led by id is still
// there to kill: its leader runs, or the leader is dead (a zombie with
// its start time, or gone) and live members remain, which members lists
// (see procs.FS.Groups). The kernel does not reuse a process group's id
// while the group has a member, so while one lives the group is the
// app-server's; a leader's pid held by another process means the group
// emptied and the pid was reused: a stranger's.
func groupLives(host procs.FS, id procs.ID, members map[int][]procs.ID) bool {
	if host.IsSame(id) {
		return true
	}
	st, err := host.Stat(id.PID)
	switch {
	case err == nil && st.Start != id.Start:
		return false // the pid reused: its group emptied first
	case err != nil && !errors.Is(err, fs.ErrNotExist):
		return false // unreadable: left alone (leave still waits for its members)
	}
	for _, m := range members[id.PID] {
		if m.Start >= id.Start { // started after the leader, as its group's members did
			return true
		}
	}
	return false
}

// fenceSaw, when set (by a test, before the fence starts), hears each
// app-server group the fence learns of.
var fenceSaw func(pid int)

// kill SIGKILLs every known app-server group that still has a live
// process, its leader dead or not: a leader killed by its Pdeathsig as
// the daemon died leaves the rest of its group (a tool command) running.
// It returns the groups it signalled and every group it knew, which
// leave waits on.
func (f *fence) kill() (killed, known []int) {
	f.scan()
	host := procs.Host()
	for pid := range f.known {
		known = append(known, pid)
	}
	members := host.Groups(known...)
	for pid, id := range f.known {
		delete(f.known, pid)
		if !groupLives(host, id, members) {
			continue
		}
		if err := syscall.Kill(-pid, syscall.SIGKILL); err == nil || !errors.Is(err, syscall.ESRCH) {
			killed = append(killed, pid)
		}
	}
	return killed, known
}

// fenceLeave is how the helper reaches etcd to leave for a dead daemon.
type fenceLeave struct {
	endpoints string
	tls       cluster.TLSFiles
	ttl       time.Duration
	margin    time.Duration
}

// leaveWait bounds each wait of leave: for the daemon's exit to complete,
// for its app-server groups to die. Past it the helper does not revoke, and
// the lease expires as it would have.
const leaveWait = 2 * time.Second

// leave revokes the lease of a daemon that died, once nothing it ran can
// act as the owner of a user any more, so the other members take its
// users over now rather than when the lease expires (a TTL after its
// last renewal). Nothing can act when the daemon has exited (a zombie or
// gone: its exit has sent each app-server its Pdeathsig, SIGKILL) and no
// process of an app-server group the helper knew is alive, signalled or
// not (a group whose leader its Pdeathsig killed first, and another
// process of which kill found and signalled). A daemon that closed
// the input and lives on is stopping: it leaves by itself (its own
// revocation, or its lease's expiry), and the helper does nothing.
func (f *fence) leave(lv fenceLeave, lease clientv3.LeaseID, groups []int, poll time.Duration) {
	host := procs.Host()
	if !procs.Poll(leaveWait, poll, func() bool { return !host.IsSame(f.daemonSelf) }) {
		return // stopping on its own
	}
	if !procs.Poll(leaveWait, poll, func() bool { return liveInGroups(groups) == 0 }) {
		f.logf("the daemon died and %d processes of its app-server groups are alive %v after its exit: its lease is left to expire", liveInGroups(groups), leaveWait)
		return
	}
	clients, err := cluster.EndpointClients(lv.endpoints, "", lv.tls)
	if err == nil {
		defer func() {
			for _, c := range clients {
				c.Close()
			}
		}()
		d := cluster.NewDeadline(lv.ttl, lv.margin, time.Time{})
		err = cluster.Revoke(context.Background(), clients, lease, lv.ttl, d.Attempt())
	}
	if err != nil {
		f.logf("the daemon died; revoking its lease failed, so it expires instead: %v", err)
		return
	}
	f.logf("the daemon died and its app-servers are dead: revoked its lease %x, so its users move at once", int64(lease))
}

// liveInGroups counts the live processes of the process groups groups.
func liveInGroups(groups []int) int {
	n := 0
	for _, ids := range procs.Host().Groups(groups...) {
		n += len(ids)
	}
	return n
}

// killStopped SIGKILLs the daemon when it is stopped (state T, or t
// under a tracer) past its fence time. Its lease is lost or about to be;
// what must not happen is its embedded etcd member resuming: if that
// member led etcd when it stopped, its lessor wakes to every lease
// expired and revokes them all, the survivors' too, through the new
// leader (etcd-io/etcd#15247), and every member of the cluster fences. A
// killed daemon is restarted by its service manager and rejoins.
func (f *fence) killStopped() {
	if f.daemonID == nil {
		return
	}
	host := procs.Host()
	st, err := host.Stat(f.daemonID.PID)
	if err != nil || st.Start != f.daemonID.Start || (st.State != 'T' && st.State != 't') {
		return
	}
	if err := syscall.Kill(f.daemonID.PID, syscall.SIGKILL); err == nil {
		f.logf("the daemon is stopped past its fence time: killed it (its etcd member must not come back as a stale leader)")
		f.daemonID = nil
	}
}

func (f *fence) logf(format string, args ...any) {
	fmt.Fprintf(f.out, "%s supervisor fence (member %s, daemon %d): %s\n", time.Now().UTC().Format(time.RFC3339Nano), f.member, f.daemon, fmt.Sprintf(format, args...))
}
