package main

import (
	"bufio"
	"context"
	"encoding/json"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/meshweaver/supervisor/client"
	"github.com/meshweaver/supervisor/demomodel"
	"github.com/meshweaver/supervisor/messages"
)

// cliLine is one line of `supervisor round --json`.
type cliLine struct {
	Type    string `json:"type"`
	Seq     uint64 `json:"seq"`
	Text    string `json:"text"`
	RoundID string `json:"round_id"`
}

// killedCLICaller runs `supervisor round --json` as its own process,
// reads its events until the first text delta, and SIGKILLs it. It
// returns the events it printed (seqs) and the text so far.
func killedCLICaller(t *testing.T, ctx context.Context, rig *callerRig, user, thread, roundID string) (seqs []uint64, text string) {
	t.Helper()
	return killedCLICallerAt(t, ctx, rig.exe, rig.addr, user, thread, roundID, "count")
}

// killedCLICallerAt is killedCLICaller with the daemon at addr and the
// round's text.
func killedCLICallerAt(t *testing.T, ctx context.Context, exe, addr, user, thread, roundID, prompt string) (seqs []uint64, text string) {
	t.Helper()
	cmd := exec.CommandContext(ctx, exe, "round", "--addr", addr, "--user", user, "--thread", thread,
		"--round-id", roundID, "--json", prompt)
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	var stderr strings.Builder
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	killed := false
	defer func() {
		if !killed {
			_ = cmd.Process.Kill()
		}
		_ = cmd.Wait()
	}()
	sc := bufio.NewScanner(out)
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		var l cliLine
		if err := json.Unmarshal(sc.Bytes(), &l); err != nil {
			t.Fatalf("CLI line %q: %v", sc.Text(), err)
		}
		if l.Type == "done" {
			t.Fatalf("the round ended before the caller was killed: %s", sc.Text())
		}
		if l.RoundID != roundID {
			t.Fatalf("CLI line for round %q, want %q", l.RoundID, roundID)
		}
		seqs = append(seqs, l.Seq)
		if l.Type == string(messages.KindText) {
			text += l.Text
			if err := cmd.Process.Signal(syscall.SIGKILL); err != nil {
				t.Fatal(err)
			}
			killed = true
			return seqs, text
		}
	}
	t.Fatalf("the CLI ended without a text event (%v); stderr: %s", sc.Err(), stderr.String())
	return nil, ""
}

// TestCallerProcessKilledGraceExpires: the caller is a separate OS process
// (the `supervisor round` CLI) SIGKILLed mid-round, with the real daemon
// binary and the real codex CLI. Nobody attaches within --caller-grace:
// the turn is interrupted (supervisor_rounds_total{status="interrupted"}),
// a caller attaching afterwards gets every event once and the verdict
// interrupted naming the grace, and the thread serves the next round.
func TestCallerProcessKilledGraceExpires(t *testing.T) {
	rig := startCallerRig(t, "--caller-grace", "2s")
	ctx, cancel := context.WithTimeout(t.Context(), opsRoundWait)
	defer cancel()
	// The turn would run until its client goes away.
	rig.model.Enqueue(demomodel.Text("alpha ", "beta ", "gamma ").WithDelay(100 * time.Millisecond).Hang())

	seen, _ := killedCLICaller(t, ctx, rig, "killed", "kill/1", "kill-grace")
	killedAt := time.Now()
	metricsURL := "http://" + rig.metrics + "/metrics"
	opsWaitMetric(t, metricsURL, "supervisor_rounds_total", `status="interrupted"`, "1", func(v float64) bool { return v == 1 })
	t.Logf("interrupted %v after the caller's SIGKILL (grace 2s)", time.Since(killedAt).Round(time.Millisecond))
	if d := time.Since(killedAt); d < 2*time.Second {
		t.Errorf("interrupted %v after the caller died, before the 2s grace", d)
	}

	c, err := client.Dial(ctx, rig.addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	a, err := c.Attach(ctx, "killed", "kill-grace", 0)
	if err != nil {
		t.Fatal(err)
	}
	var all []uint64
	for e := range a.Events() {
		all = append(all, e.Seq)
	}
	v, err := a.Wait()
	if err != nil || v.Status != messages.StatusInterrupted || !strings.Contains(v.Error, "caller grace") {
		t.Fatalf("attach after the grace: %+v, %v; want interrupted naming the caller grace", v, err)
	}
	for i, s := range all {
		if s != uint64(i+1) {
			t.Fatalf("seqs %v: want 1..%d, each once", all, len(all))
		}
	}
	if len(all) < len(seen) {
		t.Errorf("the log has %d events, fewer than the %d the killed caller printed", len(all), len(seen))
	}

	// The turn is over in codex: the thread serves the next round.
	rig.model.Enqueue(demomodel.Text("next"))
	r, err := c.Round(ctx, messages.StartRound{User: "killed", Thread: "kill/1", Text: "again"})
	if err != nil {
		t.Fatal(err)
	}
	for range r.Events() {
	}
	if v, err := r.Wait(); err != nil || v.Status != messages.StatusCompleted {
		t.Fatalf("the next round on the thread: %+v, %v; want completed", v, err)
	}
}

// TestCallerProcessKilledReattaches: the same SIGKILLed CLI caller, and a
// new caller (another process's connection) attaching within the grace
// after the last event the killed one printed: it gets every later event
// exactly once and the completed verdict.
func TestCallerProcessKilledReattaches(t *testing.T) {
	rig := startCallerRig(t, "--caller-grace", "60s")
	ctx, cancel := context.WithTimeout(t.Context(), opsRoundWait)
	defer cancel()
	words := []string{"alpha ", "beta ", "gamma ", "delta ", "epsilon"}
	rig.model.Enqueue(demomodel.Text(words...).WithDelay(300 * time.Millisecond))

	seen, text := killedCLICaller(t, ctx, rig, "killed", "kill/2", "kill-attach")
	c, err := client.Dial(ctx, rig.addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	a, err := c.Attach(ctx, "killed", "kill-attach", seen[len(seen)-1])
	if err != nil {
		t.Fatal(err)
	}
	finishAttached(t, a, seen, text, words, "the kill")
}
