package main

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/meshweaver/supervisor/client"
	"github.com/meshweaver/supervisor/demomodel"
	"github.com/meshweaver/supervisor/messages"
)

// TestGoClientEndToEnd: package client against the real daemon binary run
// as root (users separated by uid, the default), the real codex CLI and
// the mock model: rounds with their text and verdicts, a resumed thread,
// an interrupt of a running round, the account and models queries, and a
// refusal as a *client.RejectedError.
func TestGoClientEndToEnd(t *testing.T) {
	b := newBinaryServe(t)
	bin, root, exe, model, addr := b.bin, b.root, b.exe, b.model, b.addr
	args := b.args
	t.Cleanup(func() { waitNoCodex(t, bin, root) })
	srv := opsStartServe(t, exe, args...)
	srv.waitMsg("supervisor serving")

	ctx, cancel := context.WithTimeout(t.Context(), opsRoundWait)
	defer cancel()
	c, err := client.Dial(ctx, addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()

	round := func(req messages.StartRound) (string, messages.RoundFinished) {
		t.Helper()
		r, err := c.Round(ctx, req)
		if err != nil {
			t.Fatalf("Round: %v", err)
		}
		var text strings.Builder
		for e := range r.Events() {
			if e.Kind == messages.KindText {
				text.WriteString(e.Text)
			}
		}
		v, err := r.Wait()
		if err != nil {
			t.Fatalf("Wait: %v", err)
		}
		return text.String(), v
	}

	model.Enqueue(demomodel.Text("Hello ", "from ", "Go"))
	text, v := round(messages.StartRound{User: "gopher", Thread: "go/t1", Text: "hello"})
	if text != "Hello from Go" || v.Status != messages.StatusCompleted || v.Resumed {
		t.Errorf("first round: %q, %+v; want the text, completed on a new thread", text, v)
	}
	model.Enqueue(demomodel.Text("Again"))
	text, v2 := round(messages.StartRound{User: "gopher", Thread: "go/t1", Text: "again"})
	if text != "Again" || v2.Status != messages.StatusCompleted || !v2.Resumed || v2.CodexThreadID != v.CodexThreadID {
		t.Errorf("second round: %q, %+v; want the text, completed on the resumed thread %s", text, v2, v.CodexThreadID)
	}

	// A round whose model stream hangs: interrupted, it still gets its
	// verdict.
	model.Enqueue(demomodel.Text("Thinking ").Hang())
	r, err := c.Round(ctx, messages.StartRound{User: "gopher", Thread: "go/t2", Text: "take your time"})
	if err != nil {
		t.Fatal(err)
	}
	for e := range r.Events() {
		if e.Kind == messages.KindText {
			break // it runs
		}
	}
	if a, err := c.Interrupt(ctx, messages.InterruptRound{User: "gopher", Thread: "go/t2", RoundID: r.ID()}); err != nil || !a.OK {
		t.Errorf("Interrupt = %+v, %v; want OK", a, err)
	}
	if v, err := r.Wait(); err != nil || v.Status != messages.StatusInterrupted {
		t.Errorf("the interrupted round: %+v, %v; want interrupted", v, err)
	}

	if m, err := c.Models(ctx, "gopher"); err != nil || m.Error != "" || len(m.Models) == 0 {
		t.Errorf("Models = %+v, %v; want a list", m, err)
	}
	if m, err := c.RateLimits(ctx, "gopher"); err != nil || !strings.Contains(m.Error, "authentication required") || m.User != "gopher" {
		t.Errorf("RateLimits = %+v, %v; want the CLI's answer without a ChatGPT login", m, err)
	}
	if a, err := c.Account(ctx, "gopher"); err != nil || a.Error != "" || a.User != "gopher" {
		t.Errorf("Account = %+v, %v", a, err)
	}
	if _, err := c.Account(ctx, "not a user"); !errors.As(err, new(*client.RejectedError)) {
		t.Errorf("Account of an invalid user = %v, want a *client.RejectedError", err)
	}
	// A refused round still has its verdict.
	if _, v := round(messages.StartRound{User: "../x", Thread: "t", Text: "hi"}); v.Status != messages.StatusRejected {
		t.Errorf("a round for an invalid user: %+v, want rejected", v)
	}
}
