package main

import (
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"sync"
	"syscall"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/meshweaver/supervisor/cluster"
)

// fenceHelper runs the `supervisor fence` process beside a member's
// daemon: the daemon writes it each new fence time; it kills the
// daemon's app-servers when one passes (fence.go). The daemon's pause or
// hang is what it is for, so the daemon never waits on it: a write it has
// not taken within writeWait (its pipe full: it has read nothing for
// half an hour of renewals, stopped or hung) kills it. A helper that
// exits while the daemon serves (killed so, by the OOM killer, by an
// operator) is started again with the last fence time, so the member is
// never left without its fence; each restart is logged and counted.
//
// One goroutine of its own (run) waits for the process and starts the
// next; the process and its pipe are written under mu, by run and stop.
type fenceHelper struct {
	exe, daemon string // the executable, the daemon's pid
	args        []string
	stderr      io.Writer
	log         *slog.Logger
	restarts    prometheus.Counter
	writeWait   time.Duration // a write not taken in this long: the helper is hung
	restartWait time.Duration // the pause before starting the helper again
	quit        chan struct{} // closed by stop
	exited      chan struct{} // closed when run ends

	mu       sync.Mutex
	cmd      *exec.Cmd
	in       *os.File         // the daemon's end of the helper's pipe; nil between two helpers
	last     string           // the last fence line, written again to a new helper
	lease    clientv3.LeaseID // the lease of the last fence time
	stopping bool
}

func startFenceHelper(exe string, args []string, stderr io.Writer, log *slog.Logger, restarts prometheus.Counter) (*fenceHelper, error) {
	if exe == "" {
		var err error
		if exe, err = os.Executable(); err != nil {
			return nil, fmt.Errorf("finding this executable for the fence helper: %w", err)
		}
	}
	h := newFenceHelper(exe, os.Getpid(), args, stderr, log, restarts)
	if err := h.start(); err != nil {
		return nil, err
	}
	return h, nil
}

func newFenceHelper(exe string, daemon int, args []string, stderr io.Writer, log *slog.Logger, restarts prometheus.Counter) *fenceHelper {
	return &fenceHelper{exe: exe, daemon: fmt.Sprint(daemon), args: args, stderr: stderr, log: log, restarts: restarts,
		writeWait: time.Second, restartWait: time.Second, quit: make(chan struct{}), exited: make(chan struct{})}
}

// start starts the first helper and the goroutine that keeps one running.
func (h *fenceHelper) start() error {
	h.mu.Lock()
	err := h.spawnLocked()
	h.mu.Unlock()
	if err != nil {
		return err
	}
	go h.run()
	return nil
}

// spawnLocked starts a helper process on a pipe of its own and writes it
// the last fence time, if any.
func (h *fenceHelper) spawnLocked() error {
	r, w, err := os.Pipe()
	if err != nil {
		return fmt.Errorf("the fence helper's pipe: %w", err)
	}
	cmd := exec.Command(h.exe, append([]string{"fence", "--daemon-pid", h.daemon}, h.args...)...)
	// Its own group: a signal to the daemon's group (a terminal's ^Z,
	// SIGSTOP to the group) does not pause the fence.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Stdin, cmd.Stdout, cmd.Stderr = r, h.stderr, h.stderr
	err = cmd.Start()
	r.Close()
	if err != nil {
		w.Close()
		return fmt.Errorf("starting the fence helper: %w", err)
	}
	h.cmd, h.in = cmd, w
	if h.last != "" {
		h.writeLocked(h.last)
	}
	return nil
}

// run waits for the helper and, unless the daemon is stopping it, starts
// it again after restartWait (again after each failed start).
func (h *fenceHelper) run() {
	defer close(h.exited)
	for {
		h.mu.Lock()
		cmd := h.cmd
		h.mu.Unlock()
		err := cmd.Wait()
		h.mu.Lock()
		if h.stopping {
			h.mu.Unlock()
			return
		}
		h.in.Close()
		h.in = nil
		h.mu.Unlock()
		h.log.Error("the fence helper exited while the daemon serves: starting it again", "pid", cmd.Process.Pid, "err", err)
		h.restarts.Inc()
		for {
			select {
			case <-h.quit:
				return
			case <-time.After(h.restartWait):
			}
			h.mu.Lock()
			if h.stopping {
				h.mu.Unlock()
				return
			}
			err := h.spawnLocked()
			h.mu.Unlock()
			if err == nil {
				break
			}
			h.log.Error("starting the fence helper again", "err", err)
		}
	}
}

// deadline tells the helper the new fence time, an instant on the boot
// clock (the node's clock, cluster.BootNow), and the lease it belongs to.
func (h *fenceHelper) deadline(at time.Time, lease clientv3.LeaseID) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.deadlineLocked(at, lease)
}

// fenceNow tells the helper a fence time of now for the last lease it
// was told of: it kills the app-servers at its next tick.
func (h *fenceHelper) fenceNow() {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.deadlineLocked(cluster.BootNow(), h.lease)
}

func (h *fenceHelper) deadlineLocked(at time.Time, lease clientv3.LeaseID) {
	h.last, h.lease = fmt.Sprintf("%d %d\n", at.UnixNano(), int64(lease)), lease
	h.writeLocked(h.last)
}

// writeLocked writes line to the helper within writeWait. A helper that
// does not take it is killed (run starts the next); one that exited
// already fails the write, and run starts the next as well.
func (h *fenceHelper) writeLocked(line string) {
	if h.in == nil {
		return // between two helpers: the next one is written h.last
	}
	_ = h.in.SetWriteDeadline(time.Now().Add(h.writeWait))
	if _, err := io.WriteString(h.in, line); errors.Is(err, os.ErrDeadlineExceeded) {
		h.log.Error("the fence helper has not read its input (its pipe is full): killing it, to start it again", "pid", h.cmd.Process.Pid, "wait", h.writeWait)
		_ = h.cmd.Process.Kill()
	}
}

// pid is the running helper's process id (tests).
func (h *fenceHelper) pid() int {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.in == nil {
		return 0
	}
	return h.cmd.Process.Pid
}

// stop tells the helper the daemon is stopping (it leaves the cluster by
// itself), closes the helper's input (it exits, killing nothing that is
// gone already) and waits for it.
func (h *fenceHelper) stop() {
	h.mu.Lock()
	h.stopping = true
	if h.in != nil {
		h.writeLocked("stop\n")
		h.in.Close()
		h.in = nil
	}
	h.mu.Unlock()
	close(h.quit)
	select {
	case <-h.exited:
	case <-time.After(5 * time.Second):
		h.mu.Lock()
		_ = h.cmd.Process.Kill()
		h.mu.Unlock()
		<-h.exited
	}
}
