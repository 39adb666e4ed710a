package actors

import (
	"encoding/json"
	"testing"

	"github.com/meshweaver/supervisor/messages"
)

// A round that asks for raw events gets every notification of its thread
// that no other event carries (the thread's status and read state, the
// account's rate limits…) as it came: its method and its params, valid
// JSON naming the thread. Without asking, none; the other events are the
// same either way.
func TestRawEventsPassed(t *testing.T) {
	h := newHarness(t, nil)
	c := h.caller()
	plain := h.round(c, messages.StartRound{User: "alice", Thread: "t1", Text: "hi", RoundID: "a1"})
	raw := h.round(c, messages.StartRound{User: "alice", Thread: "t2", Text: "hi", RoundID: "a2", RawEvents: true})
	if n := len(plain.kinds(messages.KindRaw)); n != 0 {
		t.Errorf("%d raw events without asking", n)
	}
	if plain.verdict.Status != messages.StatusCompleted || raw.verdict.Status != messages.StatusCompleted || plain.text() != raw.text() {
		t.Fatalf("verdicts %s, %s; texts %q, %q", plain.verdict.Status, raw.verdict.Status, plain.text(), raw.text())
	}
	methods := map[string]bool{}
	for _, ev := range raw.kinds(messages.KindRaw) {
		if ev.Raw == nil || ev.Raw.Method == "" || ev.Raw.Cut {
			t.Fatalf("raw event %+v", ev)
		}
		var p map[string]any
		if err := json.Unmarshal([]byte(ev.Raw.Params), &p); err != nil {
			t.Errorf("%s: params %q are not JSON: %v", ev.Raw.Method, ev.Raw.Params, err)
		}
		methods[ev.Raw.Method] = true
		if ev.Raw.Method == "thread/status/changed" && p["threadId"] != raw.verdict.CodexThreadID {
			t.Errorf("thread/status/changed names thread %v, want the round's %s", p["threadId"], raw.verdict.CodexThreadID)
		}
	}
	for _, m := range []string{"thread/status/changed", "account/rateLimits/updated"} {
		if !methods[m] {
			t.Errorf("no raw %s among %v", m, methods)
		}
	}
	// The first round also said "starting codex" (a status event).
	if got, want := len(raw.events)-len(raw.kinds(messages.KindRaw))-len(raw.kinds(messages.KindStatus)),
		len(plain.events)-len(plain.kinds(messages.KindStatus)); got != want {
		t.Errorf("%d other events with raw events on, %d without", got, want)
	}
}
