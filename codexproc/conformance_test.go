package codexproc

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/meshweaver/supervisor/codexproto"
	"github.com/meshweaver/supervisor/codexrpc"
	"github.com/meshweaver/supervisor/testkit/fakeappserver"
	"github.com/meshweaver/supervisor/testkit/schema"
)

// The conformance check: every line a Conn writes in the tests of this file,
// of realcli_test.go and of fault_test.go goes through traced, and is
// validated against the schema the pinned CLI generates (`codex app-server
// generate-json-schema`) when the test ends. Requests and notifications are
// checked against the client unions; answers to server requests against the
// result schema of the request they answer. The server's requests,
// notifications and results are checked too, as a drift alarm for the pin:
// a new CLI that renames a field the client reads shows up here first.
//
// To move the pin, see docs/PROTOCOL.md, "Taking a new codex release".

// wire is the package-level collector: what every traced test wrote, by
// method, for the coverage check at the end of TestClientConformance and for
// failure reports.
var wire = &wireLog{written: map[string]int{}}

type wireLog struct {
	mu      sync.Mutex
	written map[string]int // method, "answer:<method>" or "error:<method>" → lines written
}

func (w *wireLog) count(key string) {
	w.mu.Lock()
	w.written[key]++
	w.mu.Unlock()
}

func (w *wireLog) snapshot() map[string]int {
	w.mu.Lock()
	defer w.mu.Unlock()
	out := make(map[string]int, len(w.written))
	for k, n := range w.written {
		out[k] = n
	}
	return out
}

// tracedLine is one line a traced Conn wrote or read, copied.
type tracedLine struct {
	out  bool
	line []byte
}

// traceCheck collects one connection's traffic and validates it as the test
// ends. It is safe for concurrent use: Trace runs on the writer's goroutine
// for out lines and on the read goroutine for in lines.
type traceCheck struct {
	mu     sync.Mutex
	lines  []tracedLine
	theirs map[string]string // id of a server request → method, for counting answers
	// unknownOK are server methods a test planted on purpose (fake-only
	// notifications and requests); they are not in the schema.
	unknownOK map[string]bool
}

// traced returns opts with a Trace that records the connection's traffic
// and registers a cleanup that validates it against the pinned schema.
// unknownOK names server-sent methods that are expected to be missing from
// the schema.
func traced(t testing.TB, opts codexrpc.Options, unknownOK ...string) codexrpc.Options {
	t.Helper()
	v := schema.ForTest(t) // fails, never skips, without the CLI
	tc := &traceCheck{unknownOK: map[string]bool{"fake/answer": true}, theirs: map[string]string{}}
	for _, m := range unknownOK {
		tc.unknownOK[m] = true
	}
	prev := opts.Trace
	opts.Trace = func(out bool, line []byte) {
		if prev != nil {
			prev(out, line)
		}
		tc.record(out, bytes.Clone(line))
	}
	t.Cleanup(func() {
		for _, err := range tc.validate(v) {
			t.Errorf("conformance: %v", err)
		}
	})
	return opts
}

// record keeps a line and counts what the client wrote in wire.
func (tc *traceCheck) record(out bool, line []byte) {
	tc.mu.Lock()
	defer tc.mu.Unlock()
	tc.lines = append(tc.lines, tracedLine{out: out, line: line})
	if !out {
		if len(line) > maxValidatedLine {
			return
		}
		if r, ok := decodeQuiet(line).(*codexrpc.Request); ok {
			tc.theirs[string(r.ID)] = r.Method
		}
		return
	}
	var m struct {
		ID     json.RawMessage `json:"id"`
		Method string          `json:"method"`
		Error  json.RawMessage `json:"error"`
	}
	_ = json.Unmarshal(line, &m)
	switch {
	case m.Method != "":
		wire.count(m.Method)
	case m.Error != nil:
		wire.count("error:" + tc.theirs[string(m.ID)])
	default:
		wire.count("answer:" + tc.theirs[string(m.ID)])
	}
}

func decodeQuiet(line []byte) codexrpc.Message {
	m, _ := codexrpc.DecodeMessage(line)
	return m
}

// maxValidatedLine bounds the server lines that are validated: the 3 MiB
// lines of the huge-line test would cost seconds under -race and add
// nothing (the fake pads a delta that is checked at normal size).
const maxValidatedLine = 1 << 20

// validate checks every collected line and returns one error per bad line.
func (tc *traceCheck) validate(v *schema.Validator) []error {
	tc.mu.Lock()
	lines := tc.lines
	tc.lines = nil
	tc.mu.Unlock()

	var errs []error
	bad := func(out bool, line []byte, err error) {
		dir := "server wrote"
		if out {
			dir = "client wrote"
		}
		errs = append(errs, fmt.Errorf("%s %s: %w", dir, head(line, 300), err))
	}
	ours := map[string]string{}   // id of our request → method
	theirs := map[string]string{} // id of a server request → method
	for _, l := range lines {
		if l.out {
			checkOut(v, l.line, theirs, ours, func(err error) { bad(true, l.line, err) })
			continue
		}
		if len(l.line) > maxValidatedLine {
			continue
		}
		msg, err := codexrpc.DecodeMessage(l.line)
		if err != nil {
			continue // garbage the Conn skipped, tested elsewhere
		}
		switch m := msg.(type) {
		case *codexrpc.Request:
			theirs[string(m.ID)] = m.Method
			if err := v.ValidateServerRequest(l.line); err != nil && !tc.skippable(m.Method, err) {
				bad(false, l.line, err)
			}
		case *codexrpc.Notification:
			if err := v.ValidateServerNotification(l.line); err != nil && !tc.skippable(m.Method, err) {
				bad(false, l.line, err)
			}
		case *codexrpc.Response:
			method := ours[string(m.ID)]
			if m.Error != nil || method == "" || !v.HasResultSchema(schema.ClientRequest, method) {
				continue
			}
			if err := v.ValidateResult(method, m.Result); err != nil {
				bad(false, l.line, err)
			}
		}
	}
	return errs
}

func (tc *traceCheck) skippable(method string, err error) bool {
	return tc.unknownOK[method] && errors.Is(err, schema.ErrUnknownMethod)
}

// checkOut validates one line the client wrote: a request, the initialized
// notification, or an answer to a server request.
func checkOut(v *schema.Validator, line []byte, theirs, ours map[string]string, bad func(error)) {
	var m map[string]json.RawMessage
	if err := json.Unmarshal(line, &m); err != nil {
		bad(fmt.Errorf("not a JSON object: %w", err))
		return
	}
	if _, ok := m["jsonrpc"]; ok {
		bad(errors.New(`has a "jsonrpc" field`))
	}
	var method string
	_ = json.Unmarshal(m["method"], &method)
	id, hasID := m["id"]
	switch {
	case method != "" && hasID:
		ours[string(id)] = method
		if err := v.ValidateClientRequest(line); err != nil {
			bad(err)
		}
	case method != "":
		if err := v.ValidateClientNotification(line); err != nil {
			bad(err)
		}
	case hasID:
		req := theirs[string(id)]
		if req == "" {
			bad(errors.New("answers no server request"))
			return
		}
		if e, ok := m["error"]; ok {
			var we codexrpc.WireError
			if err := json.Unmarshal(e, &we); err != nil || we.Code == 0 || we.Message == "" {
				bad(fmt.Errorf("malformed error answer to %s", req))
			}
			return
		}
		if err := v.ValidateServerRequestResponse(req, m["result"]); err != nil {
			bad(err)
		}
	default:
		bad(errors.New("neither method nor id"))
	}
}

// pipeFake runs the fake app-server in-process on io.Pipe ends and returns a
// Conn to it whose traffic is validated. Cleanup closes both and waits.
func pipeFake(t *testing.T, f fakeappserver.Fake, opts codexrpc.Options, unknownOK ...string) *codexrpc.Conn {
	t.Helper()
	cr, sw := io.Pipe() // server → client
	sr, cw := io.Pipe() // client → server
	ctx, cancel := context.WithCancel(context.Background())
	served := make(chan error, 1)
	go func() {
		err := f.Serve(ctx, sr, sw, io.Discard)
		sw.Close() // the client sees the end of output
		served <- err
	}()
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.DiscardHandler)
	}
	c := codexrpc.NewConn(cr, cw, traced(t, opts, unknownOK...))
	t.Cleanup(func() {
		c.Close() // EOF for the fake
		wctx, wcancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer wcancel()
		select {
		case <-served:
		case <-wctx.Done():
			t.Error("fake did not return after the client closed")
		}
		cancel()
		sr.Close()
		if err := c.Wait(wctx); err != nil {
			t.Errorf("conn did not finish: %v", err)
		}
	})
	return c
}

// TestClientConformance drives every typed Client method, and answers every
// kind of server request the daemon handles, against the in-process fake, so
// the conformance check sees each shape the client can write at least once.
func TestClientConformance(t *testing.T) {
	home := t.TempDir()
	answered := map[string]any{
		codexproto.ReqCommandApproval:    codexproto.ApprovalAnswer{Decision: codexproto.DecisionAccept},
		codexproto.ReqFileChangeApproval: codexproto.ApprovalAnswer{Decision: codexproto.DecisionDecline},
		codexproto.ReqElicitation:        codexproto.ElicitationAnswer{Action: "decline"},
	}
	notes := newNotes()
	c := pipeFake(t, fakeappserver.Fake{
		CodexHome: home,
		HoldTurns: true,
		ServerRequests: []fakeappserver.ServerRequestSpec{
			{Method: codexproto.ReqCommandApproval, OnTurn: 1},
			{Method: codexproto.ReqFileChangeApproval, OnTurn: 1},
			{Method: codexproto.ReqElicitation, OnTurn: 1},
			{Method: codexproto.ReqUserInput, OnTurn: 1},
		},
	}, codexrpc.Options{
		OnNotification: notes.add,
		OnRequest: func(ctx context.Context, r *codexrpc.Request) (any, error) {
			if r.Method == codexproto.ReqUserInput {
				var p codexproto.UserInputParams
				if err := json.Unmarshal(r.Params, &p); err != nil || len(p.Questions) == 0 {
					return nil, fmt.Errorf("bad user input params %s: %v", r.Params, err)
				}
				return codexproto.UserInputAnswer{Answers: map[string]codexproto.UserAnswer{p.Questions[0].ID: {Answers: []string{"yes"}}}}, nil
			}
			if a, ok := answered[r.Method]; ok {
				return a, nil
			}
			return nil, &codexrpc.WireError{Code: codexrpc.CodeMethodNotFound, Message: "unexpected " + r.Method}
		},
	})
	before := wire.snapshot()
	cl := codexproto.NewClient(c)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	must := func(what string, err error) {
		t.Helper()
		if err != nil {
			t.Fatalf("%s: %v", what, err)
		}
	}

	_, err := cl.Initialize(ctx, codexproto.ClientInfo{Name: "meshweaver", Title: "Meshweaver", Version: "1.2.3"})
	must("initialize", err)
	th, err := cl.ThreadStart(ctx, codexproto.ThreadStartParams{
		Cwd: "/work/conformance", Sandbox: codexproto.SandboxWorkspaceWrite, ApprovalPolicy: codexproto.ApprovalUntrusted,
		DeveloperInstructions: "be brief", Model: "mock-model",
		Config: map[string]any{"model_reasoning_effort": "low"},
	})
	must("thread/start", err)
	must("thread/name/set", cl.ThreadNameSet(ctx, th.Thread.ID, "named"))
	_, err = cl.ThreadRead(ctx, codexproto.ThreadReadParams{ThreadID: th.Thread.ID})
	must("thread/read", err)

	// Turn 1 asks all four server requests, then holds after its first delta.
	turn, err := cl.TurnStart(ctx, codexproto.TurnStartParams{
		ThreadID: th.Thread.ID, Input: codexproto.TextInput("hi"), Summary: "auto", Effort: "low",
		ClientUserMessageID: "client-msg-1",
	})
	must("turn/start", err)
	notes.wait(t, "the held first delta", isMethod(codexproto.NoteAgentMessageDelta))
	_, err = cl.TurnSteer(ctx, codexproto.TurnSteerParams{
		ThreadID: th.Thread.ID, ExpectedTurnID: turn.ID, Input: codexproto.TextInput("more"), ClientUserMessageID: "client-msg-2",
	})
	must("turn/steer", err)
	notes.wait(t, "turn 1 completed", isMethod(codexproto.NoteTurnCompleted))

	turn2, err := cl.TurnStart(ctx, codexproto.TurnStartParams{ThreadID: th.Thread.ID, Input: codexproto.TextInput("again")})
	must("turn/start 2", err)
	notes.wait(t, "turn 2 first delta", func(n *codexrpc.Notification) bool {
		return n.Method == codexproto.NoteAgentMessageDelta && strings.Contains(string(n.Params), turn2.ID)
	})
	must("turn/interrupt", cl.TurnInterrupt(ctx, th.Thread.ID, turn2.ID))

	_, err = cl.ThreadResume(ctx, codexproto.ThreadResumeParams{
		ThreadID: th.Thread.ID, Cwd: "/work/conformance", Sandbox: codexproto.SandboxReadOnly,
		ApprovalPolicy: codexproto.ApprovalNever, ExcludeTurns: true,
	})
	must("thread/resume", err)
	_, err = cl.ModelList(ctx, codexproto.ModelListParams{})
	must("model/list", err)
	_, err = cl.AccountRead(ctx)
	must("account/read", err)
	_, err = cl.LoginStart(ctx, codexproto.LoginStartParams{Type: codexproto.LoginAPIKey, APIKey: "sk-test-FAKE0000"})
	must("login apiKey", err)
	dev, err := cl.LoginStart(ctx, codexproto.LoginStartParams{Type: codexproto.LoginDeviceCode})
	must("login device code", err)
	_, err = cl.LoginCancel(ctx, dev.LoginID)
	must("login cancel", err)
	must("logout", cl.Logout(ctx))

	// Every typed call and every answer above reached the collector (the
	// cleanup of traced validates them).
	after := wire.snapshot()
	var missing []string
	for _, key := range []string{
		codexproto.MethodInitialize, codexproto.MethodInitialized, codexproto.MethodThreadStart, codexproto.MethodThreadResume, codexproto.MethodThreadNameSet,
		codexproto.MethodThreadRead, codexproto.MethodTurnStart, codexproto.MethodTurnInterrupt, codexproto.MethodTurnSteer, codexproto.MethodModelList,
		codexproto.MethodAccountRead, codexproto.MethodLoginStart, codexproto.MethodLoginCancel, codexproto.MethodLogout,
		"answer:" + codexproto.ReqCommandApproval, "answer:" + codexproto.ReqFileChangeApproval,
		"answer:" + codexproto.ReqElicitation, "answer:" + codexproto.ReqUserInput,
	} {
		if after[key] == before[key] {
			missing = append(missing, key)
		}
	}
	sort.Strings(missing)
	if len(missing) > 0 {
		t.Errorf("not written by the client: %v", missing)
	}
}

// TestConformanceCatchesDrift makes sure the check is not vacuous: lines the
// pinned schema refuses are reported.
func TestConformanceCatchesDrift(t *testing.T) {
	v := schema.ForTest(t)
	tc := &traceCheck{unknownOK: map[string]bool{}}
	for _, l := range []string{
		`{"id":1,"method":"turn/start","params":{"threadId":"t","input":"not a list"}}`,
		`{"id":2,"method":"thread/bogus","params":{}}`,
		`{"jsonrpc":"2.0","method":"initialized"}`,
		`{"id":99,"result":{}}`,
	} {
		tc.lines = append(tc.lines, tracedLine{out: true, line: []byte(l)})
	}
	tc.lines = append(tc.lines,
		tracedLine{line: []byte(`{"method":"item/commandExecution/requestApproval","id":0,"params":{"threadId":"t","turnId":"u","itemId":"i","startedAtMs":1}}`)},
		tracedLine{out: true, line: []byte(`{"id":0,"result":{"decision":"maybe"}}`)},
		tracedLine{line: []byte(`{"method":"turn/completed","params":{"threadId":"t"},"emittedAtMs":1}`)},
	)
	errs := tc.validate(v)
	if got, want := len(errs), 6; got != want {
		t.Errorf("got %d errors, want %d:", got, want)
		for _, err := range errs {
			t.Log(err)
		}
	}
}
