package procs

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"strings"
	"syscall"
	"time"

	"github.com/meshweaver/supervisor/store"
)

// reapPoll is how often Reap looks at /proc while it waits.
const reapPoll = 10 * time.Millisecond

// killWait bounds how long Reap waits for a process to vanish after
// SIGKILL.
const killWait = 2 * time.Second

// StartTime returns the start time of process pid on the host. A process
// that does not exist yields an error satisfying errors.Is(err,
// fs.ErrNotExist).
func StartTime(pid int) (uint64, error) { return Host().StartTime(pid) }

// IsSame reports whether the host process id names is still running (see
// [FS.IsSame]).
func IsSame(id ID) bool { return Host().IsSame(id) }

// KillIfSame SIGKILLs each process that is still the one named.
func KillIfSame(ids []ID) {
	host := Host()
	for _, id := range ids {
		if st, err := host.Stat(id.PID); err == nil && st.Start == id.Start {
			_ = syscall.Kill(id.PID, syscall.SIGKILL)
		}
	}
}

// ReapRecord ends the process recorded at path (see store.WriteProcRecord),
// left behind by an earlier run of the daemon, and removes the record.
//
// Only a process that is provably the recorded one — same pid and start
// time — is signalled: first SIGTERM to its process group (to the process
// alone if it does not lead its group), then, if it is still running after
// grace, SIGKILL. It is not our child and cannot be waited for, so /proc is
// polled every 10ms meanwhile. reaped reports whether the recorded process
// was found running and is now gone.
//
// A missing record yields false and nil. A record that matches no running
// process is removed and yields false and nil. A damaged record is removed
// and yields an error wrapping store.ErrCorrupt. If signalling fails the
// record is kept and the error returned.
//
// A record that names another kernel (its Boot is set and is not this
// boot's id: another machine on a shared homes volume, or an earlier boot)
// is never signalled: its pid means nothing here. It is removed, as the
// caller is taking the user over.
func ReapRecord(path string, grace time.Duration) (reaped bool, err error) {
	return reapRecord(path, grace, nil)
}

// ReapMemberRecord is ReapRecord for what a daemon finds at its start: in
// a cluster (member not "") only a record that member wrote is acted on;
// any other — another member's, possibly live on this very machine, or
// one without a member — is left alone (false, nil) for the user's owner
// to reap before it starts an app-server. With member "" it is ReapRecord.
func ReapMemberRecord(path string, grace time.Duration, member string) (reaped bool, err error) {
	if member == "" {
		return ReapRecord(path, grace)
	}
	return reapRecord(path, grace, func(rec store.ProcRecord) bool { return rec.Member == member })
}

func reapRecord(path string, grace time.Duration, mine func(store.ProcRecord) bool) (reaped bool, err error) {
	rec, err := store.ReadProcRecord(path)
	if errors.Is(err, fs.ErrNotExist) {
		return false, nil
	}
	if err != nil {
		if errors.Is(err, store.ErrCorrupt) {
			if rerr := removeIfExists(path); rerr != nil {
				return false, errors.Join(err, rerr)
			}
		}
		return false, err
	}
	if mine != nil && !mine(rec) {
		return false, nil
	}
	if rec.Boot != "" {
		if boot, err := BootID(); err == nil && boot != rec.Boot {
			return false, removeIfExists(path)
		}
	}
	reaped, err = Reap(ID{PID: rec.PID, Start: rec.StartTime}, grace)
	if err != nil {
		return reaped, fmt.Errorf("reaping process %d of %s: %w", rec.PID, path, err)
	}
	return reaped, removeIfExists(path)
}

// Reap ends the host process id names, if it is still that process: SIGTERM
// to its group (or to it alone if it leads none), SIGKILL after grace, and
// waits until it is gone. It reports whether it was running and is now
// gone; it refuses to signal the daemon itself.
func Reap(id ID, grace time.Duration) (bool, error) {
	if id.PID == os.Getpid() || id.PID == syscall.Getpgrp() {
		return false, errors.New("refusing to signal the daemon itself")
	}
	host := Host()
	if err := signalIfSame(host, id, syscall.SIGTERM); err != nil {
		if errors.Is(err, errNotSame) {
			return false, nil
		}
		return false, err
	}
	if waitGone(host, id, grace) {
		return true, nil
	}
	if err := signalIfSame(host, id, syscall.SIGKILL); err != nil {
		if errors.Is(err, errNotSame) {
			return true, nil // it exited just now
		}
		return false, err
	}
	if waitGone(host, id, killWait) {
		return true, nil
	}
	return false, fmt.Errorf("still running %v after SIGKILL", killWait)
}

var errNotSame = errors.New("not the recorded process")

// signalIfSame sends sig to id's process group — or to the process alone
// if it does not lead a group — after checking it is still the recorded
// process. ESRCH means it exited in between and is reported as errNotSame.
func signalIfSame(host FS, id ID, sig syscall.Signal) error {
	st, ok := host.same(id)
	if !ok {
		return errNotSame
	}
	target := id.PID
	if st.PGRP == id.PID {
		target = -id.PID
	}
	err := syscall.Kill(target, sig)
	if errors.Is(err, syscall.ESRCH) {
		return errNotSame
	}
	if err != nil {
		return fmt.Errorf("sending %v: %w", sig, err)
	}
	return nil
}

// waitGone polls until id's process is gone or d has passed, and reports
// whether it is gone.
func waitGone(host FS, id ID, d time.Duration) bool {
	if !host.IsSame(id) {
		return true
	}
	deadline := time.NewTimer(d)
	defer deadline.Stop()
	tick := time.NewTicker(reapPoll)
	defer tick.Stop()
	for {
		select {
		case <-tick.C:
			if !host.IsSame(id) {
				return true
			}
		case <-deadline.C:
			return !host.IsSame(id)
		}
	}
}

func removeIfExists(path string) error {
	err := os.Remove(path)
	if err == nil || errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	return fmt.Errorf("removing %s: %w", path, err)
}

// bootIDPath is where the kernel gives its boot id.
const bootIDPath = "/proc/sys/kernel/random/boot_id"

// BootID is this kernel's boot id: the same for every process until the
// machine reboots, different on every other machine.
func BootID() (string, error) {
	b, err := os.ReadFile(bootIDPath)
	if err != nil {
		return "", fmt.Errorf("reading the boot id: %w", err)
	}
	id := strings.TrimSpace(string(b))
	if id == "" || len(id) > 64 {
		return "", fmt.Errorf("reading the boot id: %q is not one", id)
	}
	return id, nil
}
