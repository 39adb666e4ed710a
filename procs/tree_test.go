package procs

import (
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// A helper the child started in a session of its own is found among its
// descendants and ended by KillIfSame.
func TestDescendantsOutsideTheGroup(t *testing.T) {
	cmd := exec.Command("sh", "-c", "setsid sleep 60 & echo $!; wait")
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 32)
	n, err := out.Read(buf)
	if err != nil {
		t.Fatal(err)
	}
	stray, err := strconv.Atoi(strings.TrimSpace(string(buf[:n])))
	if err != nil {
		t.Fatalf("reading the stray pid: %v", err)
	}
	found := Host().Descendants(cmd.Process.Pid)
	var target []ID
	for _, p := range found {
		if p.PID == stray {
			target = append(target, p)
		}
	}
	if len(target) != 1 {
		t.Fatalf("Descendants(%d) = %v, want to include %d", cmd.Process.Pid, found, stray)
	}
	KillIfSame(target)
	if err := cmd.Wait(); err != nil {
		t.Logf("sh ended: %v", err)
	}
	deadline := time.Now().Add(5 * time.Second)
	for {
		if _, err := StartTime(stray); err != nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("stray %d still alive", stray)
		}
		time.Sleep(10 * time.Millisecond) // a process we did not start cannot be waited on
	}
	// A record whose start time does not match is left alone.
	KillIfSame([]ID{{PID: cmd.Process.Pid, Start: 1}})
}
