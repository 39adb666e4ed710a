package actors

import (
	"strings"
	"testing"
	"time"

	"github.com/meshweaver/supervisor/messages"
	"github.com/meshweaver/supervisor/testkit/fakeappserver"
	"github.com/meshweaver/supervisor/third_party/hollywood/actor"
)

// mcpEvents collects the MCP startup statuses the codex actors broadcast.
func (h *harness) mcpEvents() <-chan MCPStartupReported {
	h.t.Helper()
	ch := make(chan MCPStartupReported, 64)
	pid := h.engine.SpawnFunc(func(c *actor.Context) {
		if ev, ok := c.Message().(MCPStartupReported); ok {
			ch <- ev
		}
	}, "mcp-events")
	h.engine.Subscribe(pid)
	h.t.Cleanup(func() {
		h.engine.Unsubscribe(pid)
		<-h.engine.Poison(pid).Done()
	})
	return ch
}

// nextFailed is the next failed MCP startup broadcast.
func nextFailed(t *testing.T, ch <-chan MCPStartupReported) MCPStartupReported {
	t.Helper()
	deadline := time.NewTimer(30 * time.Second)
	defer deadline.Stop()
	for {
		select {
		case ev := <-ch:
			if ev.Status == "failed" {
				return ev
			}
		case <-deadline.C:
			t.Fatal("no failed MCP startup was reported")
		}
	}
}

func mcpNotices(r roundResult) (out []string) {
	for _, e := range r.kinds(messages.KindNotice) {
		if strings.Contains(e.Text, "MCP server") {
			out = append(out, e.Text)
		}
	}
	return out
}

// A failed MCP start reported while the round runs (before its subscribe,
// or during its turn) reaches that round as a notice and is reported.
func TestMCPStartupFailureDelivered(t *testing.T) {
	for _, on := range []string{"", "turn/start"} {
		t.Run("on="+on, func(t *testing.T) {
			h := fakeHarness(t, fakeappserver.Config{MCPStartup: "failed", MCPStartupOn: on}, nil)
			events := h.mcpEvents()
			c := h.caller()
			r := h.round(c, messages.StartRound{User: "mia", Thread: "t-mcp", Text: "hi",
				MCPURL: "http://127.0.0.1:1/mcp?key=sekrit", MCPToken: "tok-secret"})
			if r.verdict.Status != messages.StatusCompleted {
				t.Fatalf("verdict = %+v", r.verdict)
			}
			if got := mcpNotices(r); len(got) != 1 || !strings.Contains(got[0], "meshweaver failed to start") {
				t.Errorf("MCP notices = %q, want the one failure", got)
			}
			ev := nextFailed(t, events)
			// Right after thread/start it races the subscribe: kept for
			// the round or delivered to it; during the turn it goes to
			// the round.
			if (ev.Round != nil) == ev.Kept || (on != "" && ev.Round == nil) {
				t.Errorf("reported with round %v, kept %v; want one of them (the round, with on=%q)", ev.Round, ev.Kept, on)
			}
			if ev.Server != "meshweaver" || ev.ThreadID != r.verdict.CodexThreadID || ev.User != "mia" {
				t.Errorf("reported %+v, want meshweaver on %s for mia", ev, r.verdict.CodexThreadID)
			}
			if !strings.Contains(ev.Error, "http://127.0.0.1:1/mcp") || strings.Contains(ev.Error, "sekrit") {
				t.Errorf("reported error %q, want the URL without its query", ev.Error)
			}
		})
	}
}

// A failed MCP start reported after its round ended (the real CLI takes
// ~1.3 s to give up on a dead server) is reported, delivered to no round,
// and not replayed to the next round on the thread, which has no MCP URL.
func TestMCPStartupLateNotReplayed(t *testing.T) {
	h := fakeHarness(t, fakeappserver.Config{MCPStartup: "failed", MCPStartupOn: "thread/unsubscribe"}, nil)
	events := h.mcpEvents()
	c := h.caller()
	r1 := h.round(c, messages.StartRound{User: "ned", Thread: "t-late", Text: "hi", MCPURL: "http://127.0.0.1:1/mcp"})
	if r1.verdict.Status != messages.StatusCompleted {
		t.Fatalf("round 1 verdict = %+v", r1.verdict)
	}
	if got := mcpNotices(r1); len(got) != 0 {
		t.Fatalf("round 1 got %q before the failure was reported", got)
	}
	// Round 2 unsubscribes the thread before resuming it: the fake reports
	// round 1's failure then, after round 1 ended.
	r2 := h.round(c, messages.StartRound{User: "ned", Thread: "t-late", Text: "again"})
	if r2.verdict.Status != messages.StatusCompleted || !r2.verdict.Resumed {
		t.Fatalf("round 2 verdict = %+v, want completed and resumed", r2.verdict)
	}
	if got := mcpNotices(r2); len(got) != 0 {
		t.Errorf("round 2 (no MCP URL) got round 1's MCP failure: %q", got)
	}
	ev := nextFailed(t, events)
	if ev.Round != nil || ev.Kept || ev.ThreadID != r1.verdict.CodexThreadID || ev.Server != "meshweaver" {
		t.Errorf("reported %+v, want round 1's thread, delivered to no round", ev)
	}
}

// With the real CLI, a dead MCP server's failure (~1.3 s after the thread
// starts, often after the round ended) is reported with the server and its
// error, and never reaches the thread's next round, which has no MCP URL.
func TestMCPStartupFailureRealCLI(t *testing.T) {
	h := newHarness(t, nil)
	events := h.mcpEvents()
	c := h.caller()
	r1 := h.round(c, messages.StartRound{User: "olga", Thread: "t-dead", Text: "hi", MCPURL: "http://127.0.0.1:1/mcp"})
	if r1.verdict.Status != messages.StatusCompleted {
		t.Fatalf("round 1 verdict = %+v", r1.verdict)
	}
	ev := nextFailed(t, events)
	if ev.Server != "meshweaver" || ev.ThreadID != r1.verdict.CodexThreadID || !strings.Contains(ev.Error, "127.0.0.1:1/mcp") {
		t.Errorf("reported %+v, want meshweaver's failure on %s naming its URL", ev, r1.verdict.CodexThreadID)
	}
	// Whether round 1 still ran is a race; a notice it got was reported
	// as its own.
	if len(mcpNotices(r1)) > 0 && ev.Round == nil && !ev.Kept {
		t.Errorf("round 1 got the notice, reported as delivered to no round")
	}
	r2 := h.round(c, messages.StartRound{User: "olga", Thread: "t-dead", Text: "again"})
	if r2.verdict.Status != messages.StatusCompleted || !r2.verdict.Resumed {
		t.Fatalf("round 2 verdict = %+v", r2.verdict)
	}
	if got := mcpNotices(r2); len(got) != 0 {
		t.Errorf("round 2 (no MCP URL) got %q", got)
	}
}
