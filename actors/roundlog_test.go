package actors

import (
	"encoding/json"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/meshweaver/supervisor/messages"
	"github.com/meshweaver/supervisor/testkit/fakeappserver"
	"github.com/meshweaver/supervisor/third_party/hollywood/actor"
)

// collectAll gathers a round's events (any seq) until its verdict.
func (c *caller) collectAll(t testing.TB, roundID string, d time.Duration) roundResult {
	t.Helper()
	var res roundResult
	deadline := time.NewTimer(d)
	defer deadline.Stop()
	for {
		select {
		case m := <-c.ch:
			switch m := m.(type) {
			case messages.RoundEvent:
				if m.RoundID == roundID {
					res.events = append(res.events, m)
				}
			case messages.RoundFinished:
				if m.RoundID == roundID {
					res.verdict = m
					return res
				}
			}
		case <-deadline.C:
			t.Fatalf("round %s: no verdict within %v (events so far: %d)", roundID, d, len(res.events))
		}
	}
}

// nextOf waits for the next message of type T, skipping others.
func nextOf[T any](t testing.TB, c *caller, d time.Duration) T {
	t.Helper()
	deadline := time.NewTimer(d)
	defer deadline.Stop()
	for {
		select {
		case m := <-c.ch:
			if v, ok := m.(T); ok {
				return v
			}
		case <-deadline.C:
			var zero T
			t.Fatalf("no %T within %v", zero, d)
			return zero
		}
	}
}

// A caller that goes away (its actor stops) does not take its round with
// it: another caller attaches with the last seq the first one saw, and
// gets every later event exactly once, then the verdict; a third caller
// attaching after the end gets the whole log and the verdict.
func TestRoundOutlivesItsCaller(t *testing.T) {
	h := supHarness(t, heldFake(t, fakeappserver.Config{}), func(c *tree) { c.CallerGrace = time.Minute })
	events := tapEvents(t, h.engine)
	c1 := h.caller()
	h.roundAsync(c1, messages.StartRound{User: "alice", Thread: "mesh/o", Text: "hi", RoundID: "o-1"})
	first := c1.waitFirstEvent(t, "o-1", waitFor)
	from := events.mark()
	<-h.engine.Poison(c1.pid).Done()
	waitEvent(t, events, from, waitFor, "of the log noticing its caller is gone",
		func(e CallerGone) bool { return e.RoundID == "o-1" })

	c2 := h.caller()
	h.engine.SendWithSender(h.root, messages.AttachRound{User: "alice", RoundID: "o-1", AfterSeq: first.Seq}, c2.pid)
	h.engine.SendWithSender(h.root, messages.InterruptRound{User: "alice", Thread: "mesh/o", RoundID: "o-1"}, c2.pid)
	r := c2.collectAll(t, "o-1", waitFor)
	mustStatus(t, r, messages.StatusInterrupted)
	for i, ev := range r.events {
		if want := first.Seq + 1 + uint64(i); ev.Seq != want {
			t.Errorf("attached caller's event %d has seq %d, want %d", i, ev.Seq, want)
		}
	}

	c3 := h.caller()
	h.engine.SendWithSender(h.root, messages.AttachRound{User: "alice", RoundID: "o-1"}, c3.pid)
	all := c3.collectAll(t, "o-1", waitFor)
	if all.verdict != r.verdict {
		t.Errorf("verdict after the end %+v, want %+v", all.verdict, r.verdict)
	}
	if n := len(all.events); n == 0 || all.events[n-1].Seq != first.Seq+uint64(len(r.events)) || all.events[0].Seq != 1 {
		t.Errorf("replay after the end: %d events, want seqs 1..%d", n, first.Seq+uint64(len(r.events)))
	}

	c4 := h.caller()
	h.engine.SendWithSender(h.root, messages.AttachRound{User: "alice", RoundID: "nope"}, c4.pid)
	if v := nextOf[messages.RoundFinished](t, c4, waitFor); v.Status != messages.StatusNotFound {
		t.Errorf("attach to an unknown round: %+v, want not_found", v)
	}
	h.engine.SendWithSender(h.root, messages.AttachRound{User: "nobody", RoundID: "o-1"}, c4.pid)
	if v := nextOf[messages.RoundFinished](t, c4, waitFor); v.Status != messages.StatusNotFound {
		t.Errorf("attach for a user with no actor: %+v, want not_found", v)
	}
}

// A StartRound repeated with the same client message id runs once: the
// repeat, under its own round id, gets the first round's events and
// verdict; the app-server saw one turn.
func TestRepeatedStartRoundRunsOnce(t *testing.T) {
	record := filepath.Join(t.TempDir(), "received.jsonl")
	h := fakeHarness(t, fakeappserver.Config{ReplyText: "once", RecordPath: record}, nil)
	c := h.caller()
	m := messages.StartRound{User: "bob", Thread: "mesh/d", Text: "hi", RoundID: "d-1", ClientMessageID: "m-1"}
	r1 := h.round(c, m)
	mustStatus(t, r1, messages.StatusCompleted)
	m.RoundID = "d-2"
	r2 := h.round(c, m)
	if r2.verdict.Status != messages.StatusCompleted || r2.text() != "once" || r2.verdict.CodexThreadID != r1.verdict.CodexThreadID {
		t.Errorf("repeat: verdict %+v text %q, want the first round's", r2.verdict, r2.text())
	}
	if n := countMethod(recordedRequests(t, record), "turn/start"); n != 1 {
		t.Errorf("turn/start sent %d times, want 1", n)
	}
	// The same round id on another thread is refused, not attached.
	m.Thread, m.ClientMessageID, m.RoundID = "mesh/other", "", "d-1"
	h.engine.SendWithSender(h.root, m, c.pid)
	if v := nextOf[messages.RoundFinished](t, c, waitFor); v.Status != messages.StatusRejected {
		t.Errorf("round id reused on another thread: %+v, want rejected", v)
	}
}

// Under on_request ask, approvals go to the caller as request events with
// a deadline: one answered (accept reaches codex), one left to expire
// (declined, and an event says so).
func TestAskApprovalAnsweredAndExpired(t *testing.T) {
	record := filepath.Join(t.TempDir(), "received.jsonl")
	approval := func(item string) fakeappserver.ServerRequestSpec {
		return fakeappserver.ServerRequestSpec{Method: "item/commandExecution/requestApproval",
			Params: json.RawMessage(`{"threadId":"${threadId}","turnId":"${turnId}","itemId":"` + item + `","command":"touch x","cwd":"/w"}`)}
	}
	h := fakeHarness(t, fakeappserver.Config{ReplyText: "done", RecordPath: record,
		ServerRequests: []fakeappserver.ServerRequestSpec{approval("call-a"), approval("call-b")}}, nil)
	c := h.caller()
	h.roundAsync(c, messages.StartRound{User: "carol", Thread: "mesh/ask", Text: "go", RoundID: "a-1",
		OnRequest: messages.PolicyAsk, AskTimeoutMS: 1500})
	var asked []messages.RoundEvent
	var closed []messages.RoundEvent
	var verdict messages.RoundFinished
	deadline := time.After(waitFor)
	for verdict.Status == "" {
		select {
		case m := <-c.ch:
			switch m := m.(type) {
			case messages.RoundEvent:
				switch m.Kind {
				case messages.KindRequest:
					asked = append(asked, m)
					if len(asked) == 1 {
						if m.Request.Command != "touch x" || m.Request.Type != messages.RequestCommandApproval ||
							m.Request.DeadlineUnixMilli < time.Now().UnixMilli() {
							t.Errorf("request event %+v", m.Request)
						}
						h.engine.SendWithSender(h.root, messages.AnswerRequest{User: "carol", RoundID: "a-1",
							RequestID: m.Request.RequestID, Decision: messages.DecisionAccept}, c.pid)
					}
				case messages.KindRequestClosed:
					closed = append(closed, m)
				}
			case messages.RoundControlled:
				if !m.OK {
					t.Errorf("answer refused: %+v", m)
				}
			case messages.RoundFinished:
				verdict = m
			}
		case <-deadline:
			t.Fatalf("no verdict within %v (asked %d, closed %d)", waitFor, len(asked), len(closed))
		}
	}
	if verdict.Status != messages.StatusCompleted || len(asked) != 2 || len(closed) != 2 {
		t.Fatalf("verdict %+v, %d asked, %d closed; want completed, 2, 2", verdict, len(asked), len(closed))
	}
	if closed[0].Request.Outcome != "answered: accept" || closed[1].Request.Outcome != "expired: declined" {
		t.Errorf("outcomes %q, %q", closed[0].Request.Outcome, closed[1].Request.Outcome)
	}
	data, err := os.ReadFile(record)
	if err != nil {
		t.Fatal(err)
	}
	var decisions []string
	for _, line := range strings.Split(string(data), "\n") {
		var m struct {
			Result struct {
				Decision string `json:"decision"`
			} `json:"result"`
		}
		if json.Unmarshal([]byte(line), &m) == nil && m.Result.Decision != "" {
			decisions = append(decisions, m.Result.Decision)
		}
	}
	if strings.Join(decisions, ",") != "accept,decline" {
		t.Errorf("codex got decisions %v, want accept, decline", decisions)
	}
	// A late answer finds the request closed.
	h.engine.SendWithSender(h.root, messages.AnswerRequest{User: "carol", RoundID: "a-1",
		RequestID: asked[1].Request.RequestID, Decision: messages.DecisionAccept}, c.pid)
	if rc := nextOf[messages.RoundControlled](t, c, waitFor); rc.OK || rc.NotFound {
		t.Errorf("a late answer was taken, or its round not found: %+v", rc)
	}
	// An answer for a round the user does not have: NotFound (the
	// gateway's 404).
	h.engine.SendWithSender(h.root, messages.AnswerRequest{User: "carol", RoundID: "no-such-round",
		RequestID: "q", Decision: messages.DecisionAccept}, c.pid)
	if rc := nextOf[messages.RoundControlled](t, c, waitFor); rc.OK || !rc.NotFound {
		t.Errorf("an answer for an unknown round: %+v, want NotFound", rc)
	}
}

// The round log keeps at most RoundLogEvents events: a caller attaching
// from the start is told which events are gone, under the last dropped
// seq, and gets the rest; the log's retention ends with its user actor
// asked to forget it.
func TestRoundLogBounds(t *testing.T) {
	e, err := actor.NewEngine(actor.NewEngineConfig())
	if err != nil {
		t.Fatal(err)
	}
	cfg := *mustTree(t, Config{Homes: t.TempDir(), Workspace: t.TempDir(), RoundLogEvents: 3, RoundRetention: 50 * time.Millisecond}, Deps{})
	cfg.rounds.enter()
	parentGot := make(chan any, 16)
	c1 := &caller{ch: make(chan any, 64)}
	c1.pid = e.SpawnFunc(func(ctx *actor.Context) { c1.ch <- ctx.Message() }, "c1")
	var log *actor.PID
	parent := e.SpawnFunc(func(ctx *actor.Context) {
		switch m := ctx.Message().(type) {
		case actor.Started:
			log = ctx.SpawnChild(newRoundLog(&cfg, roundRequest{StartRound: messages.StartRound{User: "u", Thread: "t", RoundID: "b-1"},
				replyTo: c1.pid}, "r1", nil, nil), "log", spawnOpts("r1", cfg.Logger, nil)...)
		case logFinished, logExpired:
			parentGot <- m
		}
	}, "user")
	defer func() { <-e.Poison(parent).Done(); <-e.Poison(c1.pid).Done() }()
	for i := range 5 {
		e.Send(log, messages.RoundEvent{Kind: messages.KindNotice, Text: strings.Repeat("x", i)})
	}
	e.Send(log, messages.RoundFinished{Status: messages.StatusCompleted})
	if r := c1.collectAll(t, "b-1", waitFor); len(r.events) != 5 || r.events[4].Seq != 5 {
		t.Fatalf("first caller got %d events, want 5 (seq 1..5)", len(r.events))
	}
	c2 := &caller{ch: make(chan any, 64)}
	c2.pid = e.SpawnFunc(func(ctx *actor.Context) { c2.ch <- ctx.Message() }, "c2")
	defer func() { <-e.Poison(c2.pid).Done() }()
	e.Send(log, attachLog{to: c2.pid, alias: "b-2"})
	r := c2.collectAll(t, "b-2", waitFor)
	var seqs []uint64
	for _, ev := range r.events {
		seqs = append(seqs, ev.Seq)
	}
	if len(seqs) != 4 || seqs[0] != 2 || r.events[0].Kind != messages.KindError || seqs[3] != 5 ||
		!strings.Contains(r.events[0].Text, "events 1 to 2") {
		t.Errorf("replay from the start: seqs %v, first %+v; want a gap notice at 2, then 3..5", seqs, r.events[0])
	}
	// A caller that says it saw the largest seq there is (a Last-Event-ID
	// of 18446744073709551615) gets no gap notice: after+1 wrapped to 0
	// and told it "events 0 to 0" were gone. The verdict still comes.
	c3 := &caller{ch: make(chan any, 64)}
	c3.pid = e.SpawnFunc(func(ctx *actor.Context) { c3.ch <- ctx.Message() }, "c3")
	defer func() { <-e.Poison(c3.pid).Done() }()
	e.Send(log, attachLog{to: c3.pid, alias: "b-3", after: math.MaxUint64})
	if r := c3.collectAll(t, "b-3", waitFor); len(r.events) != 0 {
		t.Errorf("a caller past the last seq got %+v, want no events, only the verdict", r.events)
	}
	if got := (<-parentGot).(logFinished); got.roundID != "b-1" || got.bytes <= 0 {
		t.Errorf("logFinished %+v", got)
	}
	select {
	case m := <-parentGot:
		if got, ok := m.(logExpired); !ok || got.roundID != "b-1" {
			t.Errorf("after retention: %#v, want logExpired b-1", m)
		}
	case <-time.After(waitFor):
		t.Fatal("no logExpired after the retention")
	}
}

// BenchmarkRoundLog measures an event's way through a round log to one
// attached local caller: numbered, kept (bounded), forwarded.
func BenchmarkRoundLog(b *testing.B) {
	e, err := actor.NewEngine(actor.NewEngineConfig())
	if err != nil {
		b.Fatal(err)
	}
	cfg := *mustTree(b, Config{Homes: b.TempDir(), Workspace: b.TempDir()}, Deps{})
	got := make(chan uint64, 1)
	n := uint64(b.N)
	c := e.SpawnFunc(func(ctx *actor.Context) {
		if ev, ok := ctx.Message().(messages.RoundEvent); ok && ev.Seq == n {
			got <- ev.Seq
		}
	}, "c")
	var log *actor.PID
	parent := e.SpawnFunc(func(ctx *actor.Context) {
		if _, ok := ctx.Message().(actor.Started); ok {
			log = ctx.SpawnChild(newRoundLog(&cfg, roundRequest{StartRound: messages.StartRound{User: "u", Thread: "t", RoundID: "b"},
				replyTo: c}, "r1", nil, nil), "log", spawnOpts("r1", cfg.Logger, nil)...)
		}
	}, "user")
	defer func() { <-e.Poison(parent).Done(); <-e.Poison(c).Done() }()
	ev := messages.RoundEvent{Kind: messages.KindText, Text: strings.Repeat("x", 40), ItemID: "item-1"}
	b.ResetTimer()
	for range b.N {
		e.Send(log, ev)
	}
	<-got
}
