package procs

import (
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// A helper the child started in a session of its own is found among its
// descendants and ended by KillIfSame.
func TestDescendantsOutsideTheGroup(t *testing.T) {
	cmd, stray := startGroupLeader(t, "setsid sleep 60 & echo $!; wait")
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

// A process group outlives its leader while a member lives: Groups finds
// the member, and a group signal still reaches it.
func TestGroupsAfterTheLeader(t *testing.T) {
	cmd, member := startGroupLeader(t, "sleep 60 & echo $!; wait")
	leader := cmd.Process.Pid
	st, err := Host().Stat(member)
	if err != nil {
		t.Fatal(err)
	}
	mid := ID{PID: member, Start: st.Start}
	t.Cleanup(func() { KillIfSame([]ID{mid}) })
	if got := Host().Groups(leader)[leader]; len(got) != 2 {
		t.Fatalf("Groups(%d) = %v, want the leader and its member", leader, got)
	}
	_ = cmd.Process.Kill()
	_ = cmd.Wait() // the leader reaped: gone, its group lives on
	if got := Host().Groups(leader)[leader]; !slices.Equal(got, []ID{mid}) {
		t.Fatalf("Groups(%d) with its leader gone = %v, want [%v]", leader, got, mid)
	}
	if err := syscall.Kill(-leader, syscall.SIGKILL); err != nil {
		t.Fatalf("signalling the leaderless group: %v", err)
	}
	if !Poll(5*time.Second, 10*time.Millisecond, func() bool { return len(Host().Groups(leader)) == 0 }) {
		t.Fatalf("the group's member outlived its SIGKILL: %v", Host().Groups(leader))
	}
}

// startGroupLeader runs script in a shell leading a process group of its
// own; script starts a process and prints its pid first, which this
// returns.
func startGroupLeader(t *testing.T, script string) (*exec.Cmd, int) {
	t.Helper()
	cmd := exec.Command("sh", "-c", script)
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
	pid, err := strconv.Atoi(strings.TrimSpace(string(buf[:n])))
	if err != nil {
		t.Fatalf("reading the started process's pid: %v", err)
	}
	return cmd, pid
}
