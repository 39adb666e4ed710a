package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/meshweaver/supervisor/actors"
	"github.com/meshweaver/supervisor/contain"
	"github.com/meshweaver/supervisor/demomodel"
	"github.com/meshweaver/supervisor/messages"
	"github.com/meshweaver/supervisor/testkit/codexhome"
)

// attack is one hostile command of alice's agent: the round whose text
// holds "ATTACK-<id>" has the model run cmd once, then answer "done".
type attack struct{ id, cmd string }

// attackResponder answers each request by the attack its round names, so
// that alice's and bob's concurrent rounds each get their own script.
func attackResponder(attacks []attack) demomodel.Responder {
	return func(req *demomodel.Request) demomodel.Script {
		body := string(req.Body)
		for _, a := range attacks {
			if !strings.Contains(body, "ATTACK-"+a.id+" ") {
				continue
			}
			if strings.Contains(body, `"function_call_output"`) {
				return demomodel.Text("done with " + a.id)
			}
			return demomodel.Respond(demomodel.ExecCommand(a.id, a.cmd))
		}
		return demomodel.Text("hello")
	}
}

// limitsNode is a contain.Node of the test's own (its cgroup folder named
// for the test), removed with everything in it at the end.
func limitsNode(t *testing.T, l contain.Limits) *contain.Node {
	t.Helper()
	n, err := contain.Open(contain.Options{Name: fmt.Sprintf("meshweaver-test-%d-%s", os.Getpid(), t.Name()), Limits: l})
	if err != nil {
		t.Fatal(err)
	}
	if rep := n.Report(); len(rep.Missing) > 0 {
		t.Skipf("this host cannot enforce %v", rep.Missing)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := n.Close(ctx); err != nil {
			t.Error(err)
		}
	})
	return n
}

// p50 is the median of ds.
func p50(ds []time.Duration) time.Duration {
	s := slices.Clone(ds)
	slices.Sort(s)
	return s[len(s)/2]
}

// TestUserLimitsContainAHostileAgent is the containment issue's "done
// when", against the real CLI under uid+bwrap with danger-full-access and
// the limits 512 MiB, 256 processes, 1 core, 256 MiB of disk: alice's
// agent spins two CPUs, asks for 3 GiB, forks 1,500 processes and writes
// 1 GiB into her home, one round each. Bob is the bystander: his p50
// verdict while alice spins stays within 1.5x + 50 ms of his quiet one.
// Alice never holds more than the limits + 25% (+16 processes), every
// attacked round gets one verdict naming the limit, and both users' next
// rounds complete.
func TestUserLimitsContainAHostileAgent(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("cgroups, the uid switch and the home image need root; CI runs as root")
	}
	const (
		memLimit  = 512 << 20
		pidsLimit = 256
		diskLimit = 256 << 20
	)
	attacks := []attack{
		{"cpu", "timeout 8 sh -c 'while :; do :; done' & timeout 8 sh -c 'while :; do :; done' & wait"},
		// 3 GiB in 1 GiB blocks: met at once. A pipe's hog (head -c 3G
		// /dev/zero | tail) grows at the pipe's pace, and at the limit
		// the cgroup's file pages are reclaimed and fault back in turn:
		// 8 s to its OOM kill at 256 MiB on a busy 2-core machine, past
		// the CLI's 10 s command timeout at 512 MiB under CI's load,
		// which then ended it with no kill (memory stayed bounded).
		{"mem", "dd if=/dev/zero of=/dev/null bs=1G count=3"},
		// dash, which ends at the first refused fork (bash retries for
		// half a minute each); the sleeps keep their pids a few seconds.
		{"pids", "dash -c 'for i in $(seq 1500); do sleep 4 & done; wait'"},
		{"disk", "dd if=/dev/zero of=$HOME/fill bs=1M count=1024; sync"},
		{"clean", "truncate -s 0 $HOME/fill"}, // the CLI refuses rm -f
	}
	model, err := demomodel.Start(demomodel.Options{Responder: attackResponder(attacks)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(model.Close)
	limits := limitsNode(t, contain.Limits{Memory: memLimit, Pids: pidsLimit, CPU: 1})
	disk, err := contain.OpenDisk(diskLimit)
	if err != nil {
		t.Skip(err)
	}
	metrics := actors.NewMetrics(nil)
	e := newEnv(t, func(c *daemonSetup) {
		catalog := c.Overrides[len(c.Overrides)-1] // model_catalog_json
		c.Overrides = append(codexhome.Overrides(model.URL()), catalog)
		c.Sandbox = "danger-full-access"
		c.Contain, c.Disk, c.Metrics = limits, disk, metrics
		isolated(t, "uid+bwrap", false, false)(c)
	})
	t.Cleanup(func() { _ = disk.Close() }) // after the daemon stopped (cleanups run last first)

	bob := func(n int) []time.Duration {
		var took []time.Duration
		for range n {
			start := time.Now()
			e.round(messages.StartRound{User: "bob", Thread: "b/1", Text: "hi"}).mustComplete(t)
			took = append(took, time.Since(start))
		}
		return took
	}
	alice := func(thread, text string) roundResult {
		return e.round(messages.StartRound{User: "alice", Thread: thread, Text: text})
	}
	alice("a/0", "hi").mustComplete(t)
	bob(2) // warm
	quiet := p50(bob(7))

	group, err := limits.Group(filepath.Dir(e.home("alice")))
	if err != nil {
		t.Fatal(err)
	}
	// CPU: two spinners; bob's rounds beside them.
	cpuID := e.startRound(messages.StartRound{User: "alice", Thread: "a/cpu", Text: "ATTACK-cpu now"})
	e.waitEvent(cpuID, "the spinners' command", func(ev messages.RoundEvent) bool {
		return ev.Kind == messages.KindToolCall && ev.Tool != nil && ev.Tool.CallID == "cpu"
	})
	busy := p50(bob(7))
	if r := e.await(cpuID); r.verdict.Status != messages.StatusCompleted {
		t.Errorf("alice's spinning round: %v", r)
	}
	// Quiet again once the spinners are gone: the machine's other load
	// (CI runs other test binaries beside this one) moves while the test
	// runs, and the busy window lies between the two quiet ones.
	after := p50(bob(7))
	t.Logf("bob's p50 verdict: quiet %v before and %v after, beside alice's spinners %v", quiet, after, busy)
	quiet = max(quiet, after)
	if limit := quiet*3/2 + 50*time.Millisecond; busy > limit {
		t.Errorf("bob's p50 verdict beside alice's spinners is %v, over 1.5x + 50ms of quiet (%v)", busy, limit)
	}

	// Memory, processes, disk: each round ends once, naming the limit.
	for _, c := range []struct{ id, resource string }{{"mem", "memory"}, {"pids", "pids"}, {"disk", "disk"}} {
		r := alice("a/"+c.id, "ATTACK-"+c.id+" now")
		info := r.verdict.ErrorInfo
		if info == nil || info.Class != messages.ErrorResourceLimit || info.Resource != c.resource {
			t.Errorf("alice's %s round: verdict %+v, want class resource_limit naming %s", c.id, r.verdict, c.resource)
		}
		if got := testutil.ToFloat64(metrics.LimitHits.WithLabelValues(c.resource)); got < 1 {
			t.Errorf("supervisor_user_limit_hits_total{resource=%q} = %v", c.resource, got)
		}
		t.Logf("%s: %s: %s", c.id, r.verdict.Status, r.verdict.Error)
		// The fork loop's sleeps hold their pids a few seconds: the next
		// round starts once they are gone, or it meets the same limit.
		deadline := time.Now().Add(waitTimeout)
		for group.Usage().Pids > pidsLimit/2 && time.Now().Before(deadline) {
			time.Sleep(50 * time.Millisecond)
		}
	}
	u := group.Usage()
	if u.MemoryPeak > memLimit*5/4 {
		t.Errorf("alice's cgroup held %d MiB at most, over 512 MiB + 25%%", u.MemoryPeak>>20)
	}
	if u.PidsPeak > pidsLimit+16 {
		t.Errorf("alice's cgroup ran %d processes at most, over 256 + 16", u.PidsPeak)
	}
	img := filepath.Join(filepath.Dir(e.home("alice")), "meshweaver", contain.ImageName)
	fi, err := os.Stat(img)
	if err != nil {
		t.Fatal(err)
	}
	if used := fi.Sys().(*syscall.Stat_t).Blocks * 512; used > diskLimit*5/4 {
		t.Errorf("alice's home image takes %d MiB of the host, over 256 MiB + 25%%", used>>20)
	}
	t.Logf("alice's peaks: memory %d MiB, processes %d; her image takes %d MiB of the host",
		u.MemoryPeak>>20, u.PidsPeak, fi.Sys().(*syscall.Stat_t).Blocks*512>>20)

	// What an operator sees of alice, against her limits.
	e.send(messages.UsageRequest{User: "alice"})
	got := e.awaitOther("alice's usage", func(m any) bool { _, ok := m.(messages.UsageResponse); return ok }).(messages.UsageResponse)
	if !got.Live || got.MemoryMaxBytes != memLimit || got.PidsMax != pidsLimit || got.CPUMax != 1 || got.DiskMaxBytes < diskLimit*4/5 ||
		got.OOMKills < 1 || got.PidsRefusals < 1 || got.MemoryPeak < memLimit/2 || got.CPUSeconds < 1 {
		t.Errorf("alice's usage: %+v", got)
	}

	// The next rounds: alice cleans her home and chats; bob is served.
	if r := alice("a/clean", "ATTACK-clean now"); r.verdict.Status != messages.StatusCompleted {
		t.Errorf("alice's round after the attacks: %v", r)
	}
	if disk.Full(e.home("alice")) {
		t.Error("alice's home is still full after her cleaning round")
	}
	if r := alice("a/next", "hi").mustComplete(t); r.verdict.ErrorInfo != nil {
		t.Errorf("alice's next round still names a limit: %+v", r.verdict.ErrorInfo)
	}
	bob(1)
	if daemonRSS := readRSS(t); daemonRSS > 1<<30 {
		t.Errorf("the daemon holds %d MiB", daemonRSS>>20)
	}
}

// readRSS is this process's resident memory (the in-process daemon's).
func readRSS(t *testing.T) int64 {
	t.Helper()
	data, err := os.ReadFile("/proc/self/statm")
	if err != nil {
		t.Fatal(err)
	}
	f := strings.Fields(string(data))
	pages, _ := strconv.ParseInt(f[1], 10, 64)
	return pages * int64(os.Getpagesize())
}

// TestUserDiskQuotaContainsAFill: with the homes on a filesystem that
// enforces project quotas (an ext4 image the test makes and mounts on the
// homes) and the sandboxes in user namespaces (uid+bwrap), each home is
// bounded by a project quota of 64 MiB: alice's agent writes 256 MiB into
// her home in one round, which gets the disk verdict and is counted;
// her home's project and the whole filesystem hold no more than 64 MiB +
// 25%; her thread records, beside the home and outside her project, are
// all kept; bob, the bystander, completes his rounds during and after;
// alice's next rounds work once she empties her file.
func TestUserDiskQuotaContainsAFill(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("project quotas, the uid switch and bubblewrap need root")
	}
	const diskLimit = 64 << 20
	attacks := []attack{
		{"fill", "dd if=/dev/zero of=$HOME/fill bs=1M count=256; sync"},
		{"clean", "truncate -s 0 $HOME/fill"},
	}
	model, err := demomodel.Start(demomodel.Options{Responder: attackResponder(attacks)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(model.Close)
	var disk *contain.Disk
	var fsDir string
	metrics := actors.NewMetrics(nil)
	e := newEnv(t, func(c *daemonSetup) {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		qfs, err := contain.MakeQuotaFS(ctx, filepath.Join(filepath.Dir(c.Homes), "homes.img"), c.Homes, 512<<20)
		if err != nil {
			t.Skipf("no project quotas on this host (scripts/quota-uml runs this test in a kernel with them): %v", err)
		}
		// After the daemon stopped: cleanups run last first.
		t.Cleanup(func() {
			if err := qfs.Close(); err != nil {
				t.Error(err)
			}
		})
		fsDir = qfs.Dir
		catalog := c.Overrides[len(c.Overrides)-1] // model_catalog_json
		c.Overrides = append(codexhome.Overrides(model.URL()), catalog)
		c.Sandbox = "danger-full-access"
		isolated(t, "uid+bwrap", false, false)(c)
		if !c.Isolation.UserNamespaces() {
			t.Fatal("uid+bwrap sandboxes are not in user namespaces")
		}
		if disk, err = contain.OpenDiskOn(c.Homes, diskLimit, true); err != nil {
			t.Fatal(err)
		}
		if disk.Kind() != "project quota" {
			t.Fatalf("the disk bound is %q (%v), want project quotas", disk.Kind(), disk.NoQuota())
		}
		c.Disk, c.Metrics = disk, metrics
	})
	alice := func(thread, text string) roundResult {
		return e.round(messages.StartRound{User: "alice", Thread: thread, Text: text})
	}
	alice("a/0", "hi").mustComplete(t)
	e.round(messages.StartRound{User: "bob", Thread: "b/1", Text: "hi"}).mustComplete(t)

	fillID := e.startRound(messages.StartRound{User: "alice", Thread: "a/fill", Text: "ATTACK-fill now"})
	e.waitEvent(fillID, "the fill's command", func(ev messages.RoundEvent) bool {
		return ev.Kind == messages.KindToolCall && ev.Tool != nil && ev.Tool.CallID == "fill"
	})
	// Bob, the bystander, while alice fills her home.
	if r := e.round(messages.StartRound{User: "bob", Thread: "b/1", Text: "hi"}).mustComplete(t); r.verdict.ErrorInfo != nil {
		t.Errorf("bob's round beside the fill: %+v", r.verdict.ErrorInfo)
	}
	r := e.await(fillID)
	if info := r.verdict.ErrorInfo; info == nil || info.Class != messages.ErrorResourceLimit || info.Resource != "disk" {
		t.Errorf("alice's fill round: verdict %+v, want class resource_limit naming disk", r.verdict)
	}
	if got := testutil.ToFloat64(metrics.LimitHits.WithLabelValues("disk")); got != 1 {
		t.Errorf("supervisor_user_limit_hits_total{resource=\"disk\"} = %v, want 1", got)
	}
	u, ok := disk.Usage(e.home("alice"))
	if !ok || u.Size != diskLimit || u.Used > diskLimit*5/4 || u.Used < diskLimit/2 {
		t.Errorf("alice's project: %+v, %v; want about %d MiB of %d", u, ok, diskLimit>>20, diskLimit>>20)
	}
	var st syscall.Statfs_t
	if err := syscall.Statfs(fsDir, &st); err != nil {
		t.Fatal(err)
	}
	t.Logf("alice's project holds %d KiB of %d; the filesystem %d KiB", u.Used>>10, u.Size>>10, int64(st.Blocks-st.Bfree)*st.Bsize>>10)
	if used := int64(st.Blocks-st.Bfree) * st.Bsize; used > diskLimit*5/4+32<<20 { // + the filesystem's own (journal, quota files)
		t.Errorf("the homes' filesystem holds %d MiB after alice's fill", used>>20)
	}
	threads, err := os.ReadDir(filepath.Join(filepath.Dir(e.home("alice")), "meshweaver", "threads"))
	if err != nil || len(threads) < 2 {
		t.Errorf("alice's thread records after the fill: %d, %v; want both threads'", len(threads), err)
	}
	// What an operator sees of alice's disk.
	e.send(messages.UsageRequest{User: "alice"})
	got := e.awaitOther("alice's usage", func(m any) bool { _, ok := m.(messages.UsageResponse); return ok }).(messages.UsageResponse)
	if got.DiskMaxBytes != diskLimit || got.DiskBytes < diskLimit/2 {
		t.Errorf("alice's usage: disk %d of %d", got.DiskBytes, got.DiskMaxBytes)
	}
	// The next rounds: alice empties her file and chats; bob is served.
	if r := alice("a/clean", "ATTACK-clean now"); r.verdict.Status != messages.StatusCompleted {
		t.Errorf("alice's round after the fill: %v", r)
	}
	if disk.Full(e.home("alice")) {
		t.Error("alice's home is still full after her cleaning round")
	}
	if r := alice("a/next", "hi").mustComplete(t); r.verdict.ErrorInfo != nil {
		t.Errorf("alice's next round still names a limit: %+v", r.verdict.ErrorInfo)
	}
	e.round(messages.StartRound{User: "bob", Thread: "b/1", Text: "hi"}).mustComplete(t)
}

// TestCheckNamesTheDiskBound: serve --check says how homes would be
// bounded: by project quota, or by image with why not project quotas.
func TestCheckNamesTheDiskBound(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("images need root")
	}
	if _, err := contain.OpenDisk(64 << 20); err != nil {
		t.Skip(err)
	}
	o := limitOptions{memory: "auto", pids: "auto", cpu: "auto", disk: "64MiB", cgroupVersion: "auto"}
	homes := t.TempDir()
	for _, userns := range []bool{false, true} {
		rep, disk, err := o.check(homes, "", userns)
		if err != nil {
			t.Fatal(err)
		}
		quotas := contain.ProjectQuotas(homes) == nil && userns
		if quotas && disk != "project quota" || !quotas && !strings.HasPrefix(disk, "image (no project quotas: ") {
			t.Errorf("userns %v: disk bound %q", userns, disk)
		}
		if line := describeEnforced(rep, disk); !strings.Contains(line, "disk by "+disk) {
			t.Errorf("the --check line %q does not name the disk bound", line)
		}
		t.Logf("userns %v: %s", userns, describeEnforced(rep, disk))
	}
}
