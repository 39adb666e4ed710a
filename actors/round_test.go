package actors

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/meshweaver/supervisor/demomodel"
	"github.com/meshweaver/supervisor/messages"
	"github.com/meshweaver/supervisor/store"
)

func TestRoundCreatesThenResumes(t *testing.T) {
	h := newHarness(t, nil)
	c := h.caller()
	h.model.Enqueue(demomodel.Text("Hello", " there", "!"))
	r1 := h.round(c, messages.StartRound{User: "alice", Thread: "mesh/t1", Text: "first message"})
	if r1.verdict.Status != messages.StatusCompleted {
		t.Fatalf("verdict = %+v", r1.verdict)
	}
	if got := r1.text(); got != "Hello there!" {
		t.Errorf("text = %q", got)
	}
	if r1.verdict.Resumed || r1.verdict.CodexThreadID == "" {
		t.Errorf("first round verdict = %+v, want a fresh thread", r1.verdict)
	}
	home := filepath.Join(h.cfg.Homes, "alice", ".codex")
	rec := filepath.Join(filepath.Dir(home), "meshweaver", "threads", store.KeyPrefix("mesh/t1")+".txt")
	data, err := os.ReadFile(rec)
	if err != nil {
		t.Fatalf("registry file: %v", err)
	}
	if !strings.Contains(string(data), r1.verdict.CodexThreadID) {
		t.Errorf("registry file %q does not hold thread %s", data, r1.verdict.CodexThreadID)
	}

	h.model.Enqueue(demomodel.Text("Second", " answer"))
	r2 := h.round(c, messages.StartRound{User: "alice", Thread: "mesh/t1", Text: "second message"})
	if r2.verdict.Status != messages.StatusCompleted || !r2.verdict.Resumed {
		t.Fatalf("second verdict = %+v", r2.verdict)
	}
	if r2.verdict.CodexThreadID != r1.verdict.CodexThreadID {
		t.Errorf("thread changed: %s then %s", r1.verdict.CodexThreadID, r2.verdict.CodexThreadID)
	}
	reqs := h.model.Requests()
	last := reqs[len(reqs)-1]
	texts := strings.Join(last.UserTexts(), "\n")
	if n := strings.Count(texts, "first message"); n != 1 {
		t.Errorf("the model saw the earlier turn %d times, want once", n)
	}
	if len(r2.kinds(messages.KindUsage)) == 0 {
		t.Errorf("no usage event")
	}
}
