package main

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/meshweaver/supervisor/isolate"
)

// lockName is the lock file in the homes folder: one daemon per homes.
const lockName = ".supervisor.lock"

// homesLock is the exclusive lock a daemon holds on its homes folder for
// its whole life (the kernel drops it when the process ends, however).
type homesLock struct{ f *os.File }

// lockMemberHomes takes the exclusive lock on homes (creating the folder,
// the folders above it that are missing, and the lock file if needed:
// isolate.MakeHomes) and writes this process's pid into it. A second
// daemon gets an error naming the holder's pid.
//
// In a cluster the homes are shared by every member, so the lock is the
// member's own ({homes}/.supervisor.<member>.lock): it keeps two daemons
// of one member id apart on one machine. It is not the fence between
// members — a lock on a network file system is client-local or a lease of
// its own — etcd is (package cluster).
func lockMemberHomes(homes, member string) (*homesLock, error) {
	if err := isolate.MakeHomes(homes); err != nil {
		return nil, fmt.Errorf("--homes: %w", err)
	}
	name := lockPath(homes, member)
	f, err := os.OpenFile(name, os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return nil, fmt.Errorf("opening the homes lock: %w", err)
	}
	if err := unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB); err != nil {
		b, _ := os.ReadFile(name)
		f.Close()
		if errors.Is(err, unix.EWOULDBLOCK) {
			holder := strings.TrimSpace(string(b))
			if _, perr := strconv.Atoi(holder); perr != nil || holder == "" {
				holder = "unknown"
			}
			return nil, fmt.Errorf("another supervisor (pid %s) is serving --homes %s (lock %s)", holder, homes, name)
		}
		return nil, fmt.Errorf("locking %s: %w", name, err)
	}
	err = f.Truncate(0)
	if err == nil {
		_, err = f.WriteAt([]byte(strconv.Itoa(os.Getpid())+"\n"), 0)
	}
	if err != nil {
		f.Close()
		return nil, fmt.Errorf("writing the pid into %s: %w", name, err)
	}
	return &homesLock{f: f}, nil
}

// lockPath is the homes lock of homes: the daemon's, or member's in a
// cluster.
func lockPath(homes, member string) string {
	if member != "" {
		return filepath.Join(homes, ".supervisor."+member+".lock")
	}
	return filepath.Join(homes, lockName)
}

// homesHolder is the pid of the daemon that holds the homes lock of homes
// (member's in a cluster), or "" when none does. It only reads: a lock
// file that is not there is no daemon, and none is created.
func homesHolder(homes, member string) string {
	name := lockPath(homes, member)
	f, err := os.Open(name)
	if err != nil {
		return ""
	}
	defer f.Close()
	if err := unix.Flock(int(f.Fd()), unix.LOCK_SH|unix.LOCK_NB); !errors.Is(err, unix.EWOULDBLOCK) {
		return "" // taken and let go at the close: nobody held it
	}
	b, _ := os.ReadFile(name)
	pid := strings.TrimSpace(string(b))
	if _, err := strconv.Atoi(pid); err != nil {
		return "unknown"
	}
	return pid
}

// release lets the lock go (the pid stays in the file; it is only read
// while the lock is held).
func (l *homesLock) release() { l.f.Close() }
