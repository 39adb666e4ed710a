package actors

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/meshweaver/supervisor/messages"
	"github.com/meshweaver/supervisor/testkit/fakeappserver"
)

// fakeHarness runs the tree against the fake app-server configured by fc.
func fakeHarness(t *testing.T, fc fakeappserver.Config, mutate func(*tree)) *harness {
	t.Helper()
	l, err := fakeappserver.Relaunch(fc, "")
	if err != nil {
		t.Fatal(err)
	}
	return newHarness(t, func(c *tree) {
		c.CodexBin, c.CodexArgs = l.Path, l.Args
		c.CodexEnv = append(c.CodexEnv, l.Env...)
		c.Overrides = nil
		if mutate != nil {
			mutate(c)
		}
	})
}

// A question from the CLI is answered in-line with blank answers and
// surfaced to the user as an event; garbage lines, unknown notifications
// and unknown server requests never fault the round.
func TestQuestionSurfacedAndNoiseIgnored(t *testing.T) {
	record := filepath.Join(t.TempDir(), "received.jsonl")
	h := fakeHarness(t, fakeappserver.Config{
		ReplyText:            "Noted.",
		GarbageLines:         true,
		UnknownNotifications: []string{"brand/new/notification", "thread/goal/cleared"},
		ServerRequests: []fakeappserver.ServerRequestSpec{
			{Method: "item/tool/requestUserInput"},
			{Method: "item/some/futureRequest", Params: json.RawMessage(`{"threadId":"${threadId}"}`)},
		},
		RecordPath: record,
	}, nil)
	c := h.caller()
	r := h.round(c, messages.StartRound{User: "carol", Thread: "t-q", Text: "pick a database"})
	if r.verdict.Status != messages.StatusCompleted {
		t.Fatalf("verdict = %+v", r.verdict)
	}
	qs := r.kinds(messages.KindQuestion)
	if len(qs) != 1 || !strings.HasPrefix(qs[0].Text, "Codex asks: ") {
		t.Fatalf("question events = %+v", qs)
	}
	if got := r.text(); got != "Noted." {
		t.Errorf("text = %q", got)
	}
	data, err := os.ReadFile(record)
	if err != nil {
		t.Fatal(err)
	}
	var sawBlank, sawNotFound bool
	for _, line := range strings.Split(string(data), "\n") {
		var m struct {
			Result struct {
				Answers map[string]struct {
					Answers []string `json:"answers"`
				} `json:"answers"`
			} `json:"result"`
			Error *struct {
				Code int `json:"code"`
			} `json:"error"`
		}
		if json.Unmarshal([]byte(line), &m) != nil {
			continue
		}
		if len(m.Result.Answers) > 0 {
			sawBlank = true
			for id, a := range m.Result.Answers {
				if len(a.Answers) != 0 {
					t.Errorf("answer to %s = %v, want blank", id, a.Answers)
				}
			}
		}
		if m.Error != nil && m.Error.Code == -32601 {
			sawNotFound = true
		}
	}
	if !sawBlank {
		t.Error("the fake received no answers to its question")
	}
	if !sawNotFound {
		t.Error("the unknown server request was not answered method-not-found")
	}
}

// Overloaded answers are retried inside the client: the round never sees them.
func TestOverloadedStartRetried(t *testing.T) {
	h := fakeHarness(t, fakeappserver.Config{OverloadedTimes: 2, OverloadedMethod: "thread/start"}, nil)
	c := h.caller()
	r := h.round(c, messages.StartRound{User: "dave", Thread: "t-o", Text: "hi"})
	if r.verdict.Status != messages.StatusCompleted {
		t.Fatalf("verdict = %+v", r.verdict)
	}
}

// The CLI dying at thread/start fails the round with the method and the
// exit, and the next round starts a fresh process and completes.
func TestDeathAtThreadStart(t *testing.T) {
	h := fakeHarness(t, fakeappserver.Config{ExitOnMethod: "turn/start", ExitCode: 3,
		StderrLines: []string{"Error: something broke"}}, nil)
	c := h.caller()
	r := h.round(c, messages.StartRound{User: "erin", Thread: "t-d", Text: "hi"})
	if r.verdict.Status != messages.StatusFailed {
		t.Fatalf("verdict = %+v", r.verdict)
	}
	for _, want := range []string{"turn/start", "exited with code 3", "something broke"} {
		if !strings.Contains(r.verdict.Error, want) {
			t.Errorf("verdict error %q does not name %q", r.verdict.Error, want)
		}
	}
}
