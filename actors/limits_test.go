package actors

import (
	"context"
	"fmt"
	"os"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/meshweaver/supervisor/contain"
	"github.com/meshweaver/supervisor/messages"
	"github.com/meshweaver/supervisor/testkit/fakeappserver"
)

// TestAppServerKilledForMemory: alice's app-server itself takes more than
// her memory limit (a fake that holds 512 MiB under a 256 MiB limit at her
// turn/start) and the kernel kills it. Her round gets one verdict, failed,
// with resource_limit naming memory, counted once; the restart policy
// starts a fresh process, and her next round completes on it. Bob, on the
// same daemon and limits, is the bystander: his rounds before and after
// complete.
func TestAppServerKilledForMemory(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("cgroups need root; CI runs as root")
	}
	node, err := contain.Open(contain.Options{Name: fmt.Sprintf("meshweaver-test-%d-oom", os.Getpid()),
		Limits: contain.Limits{Memory: 256 << 20}})
	if err != nil {
		t.Fatal(err)
	}
	if rep := node.Report(); len(rep.Missing) > 0 || !node.Active() {
		t.Skipf("no memory cgroup here: %v", rep.Missing)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := node.Close(ctx); err != nil {
			t.Error(err)
		}
	})
	metrics := NewMetrics(nil)
	h := fakeHarness(t, fakeappserver.Config{HogOnMethod: "turn/start", HogOnText: "HOG", HogBytes: 512 << 20}, func(c *tree) {
		c.Contain, c.Metrics = node, metrics
	})
	c := h.caller()
	if r := h.round(c, messages.StartRound{User: "bob", Thread: "b", Text: "hi"}); r.verdict.Status != messages.StatusCompleted {
		t.Fatalf("bob's first round: %+v", r.verdict)
	}
	r := h.round(c, messages.StartRound{User: "alice", Thread: "a", Text: "HOG"})
	info := r.verdict.ErrorInfo
	if r.verdict.Status != messages.StatusFailed || info == nil || info.Class != messages.ErrorResourceLimit || info.Resource != "memory" {
		t.Fatalf("alice's round: %+v, want failed with resource_limit naming memory", r.verdict)
	}
	if got := testutil.ToFloat64(metrics.LimitHits.WithLabelValues("memory")); got != 1 {
		t.Errorf("supervisor_user_limit_hits_total{resource=memory} = %v, want 1", got)
	}
	// Her next round runs on a fresh process. It was sent, now and then,
	// to the killed one while its exit report waited for its cgroup to be
	// emptied, and failed with that process's SIGKILL (no second kill:
	// scripts/sigtrace saw the OOM killer's one SIGKILL per run).
	if r := h.round(c, messages.StartRound{User: "alice", Thread: "a", Text: "hi again"}); r.verdict.Status != messages.StatusCompleted {
		t.Errorf("alice's round after her kill: %+v", r.verdict)
	}
	if r := h.round(c, messages.StartRound{User: "bob", Thread: "b", Text: "hi"}); r.verdict.Status != messages.StatusCompleted {
		t.Errorf("bob's round after alice's kill: %+v", r.verdict)
	}
}
