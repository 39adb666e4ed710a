package codexproc

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/meshweaver/supervisor/codexproto"
	"github.com/meshweaver/supervisor/codexrpc"
	"github.com/meshweaver/supervisor/testkit/fakeappserver"
	"github.com/meshweaver/supervisor/testkit/syncbuf"
)

// These tests run the scripted fake app-server as a real child process (this
// test binary, re-executed) under Start, for the faults the real CLI does not
// show on cue.

// init turns a re-executed test binary into the fake before any test or
// TestMain runs (main_test.go keeps its plain goleak.VerifyTestMain).
func init() {
	if os.Getenv(fakeappserver.EnvVar) != "" {
		fakeappserver.Main() // never returns
	}
}

// faked is the fake app-server running as a Process.
type faked struct {
	proc   *Process
	client *codexproto.Client
	notes  *notes
	// garbage counts lines read that were not JSON-RPC (skipped by the Conn).
	garbage atomic.Int64
	// writes counts the lines the client wrote, by method.
	writes map[string]*atomic.Int64
	// wrote gets the method of every request the client wrote (dropped
	// when full).
	wrote chan string
}

// waitWrite waits until the client has written a request for method.
func (fk *faked) waitWrite(t *testing.T, method string) {
	t.Helper()
	deadline := time.NewTimer(eventTimeout)
	defer deadline.Stop()
	for {
		select {
		case m := <-fk.wrote:
			if m == method {
				return
			}
		case <-deadline.C:
			t.Fatalf("the client never wrote %s", method)
		}
	}
}

type fakeOptions struct {
	conn      codexrpc.Options // OnNotification is set by startFake
	redactor  *Redactor
	stopGrace time.Duration
	unknownOK []string // server methods planted on purpose
}

func startFake(t *testing.T, f fakeappserver.Fake, o fakeOptions) *faked {
	t.Helper()
	launch, err := fakeappserver.Relaunch(f, "")
	if err != nil {
		t.Fatal(err)
	}
	fk := &faked{notes: newNotes(), writes: map[string]*atomic.Int64{}, wrote: make(chan string, 64)}
	for _, m := range []string{codexproto.MethodInitialize, codexproto.MethodThreadStart, codexproto.MethodModelList} {
		fk.writes[m] = &atomic.Int64{}
	}
	opts := o.conn
	opts.OnNotification = fk.notes.add
	opts.Trace = func(out bool, line []byte) {
		if out {
			var m struct {
				Method string `json:"method"`
			}
			if json.Unmarshal(line, &m) == nil && m.Method != "" {
				if n := fk.writes[m.Method]; n != nil {
					n.Add(1)
				}
				select {
				case fk.wrote <- m.Method:
				default:
				}
			}
			return
		}
		if len(line) < 1<<10 { // garbage is short; do not decode huge lines twice
			if _, err := codexrpc.DecodeMessage(line); err != nil {
				fk.garbage.Add(1)
			}
		}
	}
	grace := o.stopGrace
	if grace == 0 {
		grace = time.Second
	}
	// A -race child sleeps atexit_sleep_ms (1s) before it exits; that would
	// blur every exit timing measured here.
	env := append(launch.Env, "GORACE="+strings.TrimSpace(os.Getenv("GORACE")+" atexit_sleep_ms=0"))
	p, err := Start(Config{
		Binary:    launch.Path,
		Args:      launch.Args,
		Env:       AllowedEnv(os.Environ(), env),
		Home:      t.TempDir(),
		Logger:    testLogger(t),
		Redactor:  o.redactor,
		StopGrace: grace,
		Conn:      traced(t, opts, o.unknownOK...),
	})
	if err != nil {
		t.Fatal(err)
	}
	fk.proc = p
	stopOnCleanup(t, p)
	fk.client = codexproto.NewClient(p.Conn())
	if _, err := fk.client.Initialize(ctxFor(t), codexproto.ClientInfo{Name: "meshweaver-test", Version: "0.0.1"}); err != nil {
		t.Fatalf("initialize: %v", err)
	}
	return fk
}

// ctxFor is a context that ends after eventTimeout or with the test.
func ctxFor(t testing.TB) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), eventTimeout)
	t.Cleanup(cancel)
	return ctx
}

func (fk *faked) thread(t *testing.T) string {
	t.Helper()
	res, err := fk.client.ThreadStart(ctxFor(t), codexproto.ThreadStartParams{Cwd: "/work/fake", ApprovalPolicy: codexproto.ApprovalNever, Sandbox: codexproto.SandboxReadOnly})
	if err != nil {
		t.Fatalf("thread/start: %v", err)
	}
	return res.Thread.ID
}

// turn starts a turn and waits for its turn/completed.
func (fk *faked) turn(t *testing.T, threadID string) codexproto.TurnNotification {
	t.Helper()
	turn, err := fk.client.TurnStart(ctxFor(t), codexproto.TurnStartParams{ThreadID: threadID, Input: codexproto.TextInput("hi")})
	if err != nil {
		t.Fatalf("turn/start: %v", err)
	}
	done := fk.notes.wait(t, "turn/completed", func(n *codexrpc.Notification) bool {
		return n.Method == codexproto.NoteTurnCompleted && decode[codexproto.TurnNotification](t, n.Params).Turn.ID == turn.ID
	})
	return decode[codexproto.TurnNotification](t, done.Params)
}

// healthy checks that the connection still answers calls.
func (fk *faked) healthy(t *testing.T) {
	t.Helper()
	res, err := fk.client.ModelList(ctxFor(t), codexproto.ModelListParams{})
	if err != nil || len(res.Data) == 0 {
		t.Fatalf("model/list after the fault: %d models, %v", len(res.Data), err)
	}
}

func TestFakeGarbageAndHugeLines(t *testing.T) {
	const huge = 3 << 20
	f := fakeappserver.Fake{GarbageLines: true, HugeLineBytes: huge, ReplyText: "big reply here"}

	t.Run("delivered", func(t *testing.T) {
		fk := startFake(t, f, fakeOptions{})
		th := fk.thread(t)
		done := fk.turn(t, th)
		if done.Turn.Status != codexproto.TurnCompleted {
			t.Fatalf("turn = %+v", done.Turn)
		}
		deltas := fk.notes.filter(forThread(codexproto.NoteAgentMessageDelta, th))
		if len(deltas) != 3 {
			t.Fatalf("got %d deltas, want 3", len(deltas))
		}
		first := decode[codexproto.Delta](t, deltas[0].Params).Delta
		if len(first) < huge-300 || !strings.HasPrefix(first, "big ") {
			t.Errorf("first delta: %d bytes starting %.10q, want the padded ~3 MiB one", len(first), first)
		}
		if got := decode[codexproto.Delta](t, deltas[2].Params).Delta; got != "here" {
			t.Errorf("last delta = %q", got)
		}
		fk.healthy(t)
		if fk.garbage.Load() < 10 {
			t.Errorf("only %d garbage lines seen; the fake should put one before every message", fk.garbage.Load())
		}
	})

	t.Run("over the cap skipped", func(t *testing.T) {
		// The same shape at a smaller scale: a 300 KiB line over a 64 KiB cap.
		f := f
		f.HugeLineBytes = 300 << 10
		fk := startFake(t, f, fakeOptions{conn: codexrpc.Options{MaxLineBytes: 64 << 10}})
		th := fk.thread(t)
		if _, err := fk.client.TurnStart(ctxFor(t), codexproto.TurnStartParams{ThreadID: th, Input: codexproto.TextInput("hi")}); err != nil {
			t.Fatal(err)
		}
		// The huge delta, the completed item and turn/completed all carry
		// the padded text, so all three are over the cap; idle is not.
		fk.notes.wait(t, "idle", func(n *codexrpc.Notification) bool {
			return forThread("thread/status/changed", th)(n) && strings.Contains(string(n.Params), `"idle"`)
		})
		// Answers come in order, so once this call returns every line
		// before it has been read.
		fk.healthy(t)
		var got []string
		for _, n := range fk.notes.filter(forThread(codexproto.NoteAgentMessageDelta, th)) {
			got = append(got, decode[codexproto.Delta](t, n.Params).Delta)
		}
		if strings.Join(got, "|") != "reply |here" {
			t.Errorf("deltas = %q, want the two small ones", got)
		}
		if n := len(fk.notes.filter(isMethod(codexproto.NoteTurnCompleted))); n != 0 {
			t.Errorf("got %d turn/completed, want the over-long one skipped", n)
		}
	})
}

func TestFakeExitMidCallRedactsStderr(t *testing.T) {
	red := &Redactor{}
	red.Add("hunter2-registered-value")
	f := fakeappserver.Fake{
		// initialize, initialized, then thread/start is the 3rd line: the
		// fake exits on it without answering.
		ExitAfterMessages: 3,
		ExitCode:          3,
		StderrLines: []string{
			"proxy said Authorization: Bearer abc.def",
			"loaded key sk-live1234567890 from env",
			"db password hunter2-registered-value in use",
			"plain diagnostic line stays",
		},
	}
	fk := startFake(t, f, fakeOptions{redactor: red})
	_, err := fk.client.ThreadStart(ctxFor(t), codexproto.ThreadStartParams{Cwd: "/w"})
	var ee *codexrpc.ExitError
	if !errors.As(err, &ee) {
		t.Fatalf("err = %v (%T), want *ExitError", err, err)
	}
	if ee.Method != codexproto.MethodThreadStart || ee.Exit.Code != 3 || ee.Exit.Signal != "" || !ee.Exit.Known {
		t.Errorf("ExitError = %+v, want thread/start, code 3", ee)
	}
	for _, secret := range []string{"abc.def", "sk-live1234567890", "hunter2-registered-value"} {
		if strings.Contains(err.Error(), secret) || strings.Contains(fk.proc.StderrTail(), secret) {
			t.Errorf("secret %q leaked: %q", secret, err)
		}
	}
	for _, kept := range []string{"plain diagnostic line stays", "proxy said", "loaded key sk-" + codexrpc.Redacted, "db password " + codexrpc.Redacted, codexrpc.Redacted} {
		if !strings.Contains(ee.Stderr, kept) {
			t.Errorf("stderr tail lacks %q: %q", kept, ee.Stderr)
		}
	}
	if fk.proc.Conn().Pending() != 0 {
		t.Errorf("pending = %d", fk.proc.Conn().Pending())
	}

	// A call after the death fails at once, with the same exit and tail.
	start := time.Now()
	err = fk.client.Conn.Call(context.Background(), codexproto.MethodModelList, nil, nil)
	if d := time.Since(start); d > 500*time.Millisecond {
		t.Errorf("call after death took %v", d)
	}
	var again *codexrpc.ExitError
	if !errors.As(err, &again) || again.Method != codexproto.MethodModelList || again.Exit != ee.Exit || again.Stderr != ee.Stderr {
		t.Errorf("call after death: %v, want the same ExitError for %s", err, codexproto.MethodModelList)
	}
	if err := fk.client.Conn.Notify("initialized", nil); !errors.As(err, &again) {
		t.Errorf("notify after death: %v, want an ExitError", err)
	}
	if got := fk.proc.ExitStatus(); got != ee.Exit {
		t.Errorf("ExitStatus = %+v, want %+v", got, ee.Exit)
	}
}

func TestFakeHangDeadline(t *testing.T) {
	fk := startFake(t, fakeappserver.Fake{HangOnMethod: codexproto.MethodThreadStart}, fakeOptions{})
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	_, err := fk.client.ThreadStart(ctx, codexproto.ThreadStartParams{Cwd: "/w"})
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("err = %v, want deadline exceeded", err)
	}
	if n := fk.proc.Conn().Pending(); n != 0 {
		t.Errorf("pending = %d after the deadline, want 0", n)
	}
	fk.healthy(t)
}

func TestFakeOverloadedRetried(t *testing.T) {
	retry := codexrpc.RetryPolicy{Attempts: 5, Base: 5 * time.Millisecond, Max: 20 * time.Millisecond}
	t.Run("then success", func(t *testing.T) {
		fk := startFake(t, fakeappserver.Fake{OverloadedTimes: 3, OverloadedMethod: codexproto.MethodThreadStart}, fakeOptions{conn: codexrpc.Options{Retry: retry}})
		if id := fk.thread(t); id == "" {
			t.Fatal("no thread id")
		}
		if n := fk.writes[codexproto.MethodThreadStart].Load(); n != 4 {
			t.Errorf("thread/start written %d times, want 4 (3 refused, 1 served)", n)
		}
	})
	t.Run("bounded", func(t *testing.T) {
		fk := startFake(t, fakeappserver.Fake{OverloadedTimes: 100, OverloadedMethod: codexproto.MethodThreadStart}, fakeOptions{conn: codexrpc.Options{Retry: retry}})
		_, err := fk.client.ThreadStart(ctxFor(t), codexproto.ThreadStartParams{Cwd: "/w"})
		if codexrpc.Classify(err) != codexrpc.ClassOverloaded {
			t.Fatalf("err = %v, want overloaded", err)
		}
		if n := fk.writes[codexproto.MethodThreadStart].Load(); n != int64(retry.Attempts) {
			t.Errorf("thread/start written %d times, want %d", n, retry.Attempts)
		}
		fk.healthy(t)
	})
}

func TestFakeUnknownNotificationsIgnored(t *testing.T) {
	unknown := []string{"fake/brandNewThing", "thread/futureFeature/updated"}
	fk := startFake(t, fakeappserver.Fake{UnknownNotifications: unknown}, fakeOptions{unknownOK: unknown})
	th := fk.thread(t)
	if done := fk.turn(t, th); done.Turn.Status != codexproto.TurnCompleted {
		t.Fatalf("turn = %+v", done.Turn)
	}
	for _, m := range unknown {
		if n := len(fk.notes.filter(forThread(m, th))); n != 1 {
			t.Errorf("%s delivered %d times, want once (to be ignored by the handler)", m, n)
		}
	}
	fk.healthy(t)
}

func TestFakeUnknownServerRequest(t *testing.T) {
	const method = "fake/askSomethingNew"
	fk := startFake(t, fakeappserver.Fake{
		ServerRequests: []fakeappserver.ServerRequestSpec{{Method: method}},
	}, fakeOptions{unknownOK: []string{method}}) // no OnRequest
	th := fk.thread(t)
	if done := fk.turn(t, th); done.Turn.Status != codexproto.TurnCompleted {
		t.Fatalf("turn = %+v", done.Turn)
	}
	type fakeAnswer struct {
		Method string              `json:"method"`
		Error  *codexrpc.WireError `json:"error"`
		Result any                 `json:"result"`
	}
	ans := decode[fakeAnswer](t, fk.notes.wait(t, "fake/answer", isMethod("fake/answer")).Params)
	if ans.Method != method || ans.Error == nil || ans.Error.Code != codexrpc.CodeMethodNotFound {
		t.Errorf("the client answered %+v, want a -32601 error", ans)
	}
}

func TestFakeStopEscalates(t *testing.T) {
	const grace = 250 * time.Millisecond
	for _, tc := range []struct {
		name       string
		f          fakeappserver.Fake
		min, max   time.Duration
		wantSignal string
	}{
		// stdin EOF ignored: the SIGTERM after one grace period ends it.
		{"eof ignored", fakeappserver.Fake{IgnoreStdinEOF: true}, grace, 10 * time.Second, ""},
		// stdin EOF and SIGTERM ignored: only the SIGKILL after the second
		// grace period ends it.
		{"eof and sigterm ignored", fakeappserver.Fake{IgnoreStdinEOF: true, TermIgnored: true}, 2 * grace, 10 * time.Second, "SIGKILL"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			fk := startFake(t, tc.f, fakeOptions{stopGrace: grace})
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			start := time.Now()
			if err := fk.proc.Stop(ctx); err != nil {
				t.Fatalf("stop: %v", err)
			}
			took := time.Since(start)
			t.Logf("stop took %v (grace %v)", took, grace)
			if took < tc.min || took > tc.max {
				t.Errorf("stop took %v, want between %v and %v", took, tc.min, tc.max)
			}
			st := fk.proc.ExitStatus()
			if st.Signal != tc.wantSignal {
				t.Errorf("exit = %+v, want signal %q", st, tc.wantSignal)
			}
			if !strings.Contains(fk.proc.StderrTail(), "stdin closed; ignoring EOF") {
				t.Errorf("stderr tail %q: the fake never saw stdin close", fk.proc.StderrTail())
			}
			requireGroupGone(t, fk.proc.PID())
			if err := fk.proc.Conn().Err(); !errors.Is(err, codexrpc.ErrClosed) {
				t.Errorf("Conn.Err() = %v, want ErrClosed after a stop", err)
			}
		})
	}
}

func TestFakeKillMidCall(t *testing.T) {
	fk := startFake(t, fakeappserver.Fake{HangOnMethod: codexproto.MethodThreadStart}, fakeOptions{})
	errc := make(chan error, 1)
	go func() {
		_, err := fk.client.ThreadStart(context.Background(), codexproto.ThreadStartParams{Cwd: "/w"})
		errc <- err
	}()
	fk.waitWrite(t, codexproto.MethodThreadStart) // now it is pending, and never answered
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	start := time.Now()
	if err := fk.proc.Kill(ctx); err != nil {
		t.Fatalf("kill: %v", err)
	}
	var err error
	select {
	case err = <-errc:
	case <-time.After(eventTimeout):
		t.Fatal("the pending call never returned")
	}
	if d := time.Since(start); d > time.Second {
		t.Errorf("kill and failing the call took %v, want under 1s", d)
	}
	var ee *codexrpc.ExitError
	if !errors.As(err, &ee) || ee.Method != codexproto.MethodThreadStart || ee.Exit.Signal != "SIGKILL" {
		t.Fatalf("err = %v, want an ExitError for thread/start killed by SIGKILL", err)
	}
	requireGroupGone(t, fk.proc.PID())
}

// shProcess starts /bin/sh -c script as the "app-server", for process faults
// no app-server shows on cue.
func shProcess(t *testing.T, script string, grace time.Duration) (*Process, *notes) {
	t.Helper()
	n := newNotes()
	p, err := Start(Config{
		Binary:    "/bin/sh",
		Args:      []string{"-c", script},
		Home:      t.TempDir(),
		Logger:    testLogger(t),
		StopGrace: grace,
		ExitDrain: 200 * time.Millisecond,
		Conn:      codexrpc.Options{OnNotification: n.add},
	})
	if err != nil {
		t.Fatal(err)
	}
	stopOnCleanup(t, p)
	return p, n
}

// A process that closes its stdout but lives on, holding stderr: pending
// calls must still fail in bounded time (OnEOF's contract), not hang until
// the process is stopped.
func TestProcessClosesOutputButLives(t *testing.T) {
	p, _ := shProcess(t, `exec 1>&-; echo "closed stdout" >&2; exec sleep 300`, 200*time.Millisecond)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	start := time.Now()
	err := p.Conn().Call(ctx, codexproto.MethodModelList, nil, nil)
	var ee *codexrpc.ExitError
	if !errors.As(err, &ee) || ee.Method != codexproto.MethodModelList {
		t.Fatalf("err = %v after %v, want an ExitError for %s", err, time.Since(start), codexproto.MethodModelList)
	}
	if ee.Exit.Known {
		t.Errorf("exit = %+v, want unknown: the process is still running", ee.Exit)
	}
	if !strings.Contains(err.Error(), "closed its output") {
		t.Errorf("error text = %q", err)
	}
	if d := time.Since(start); d > 5*time.Second {
		t.Errorf("the call failed after %v, want about ExitDrain", d)
	}
}

// A descendant that left the process group (setsid) and holds stdout and
// stderr must not keep Stop waiting beyond ExitDrain: Stop closes its ends
// of the pipes instead.
func TestStopWithStrayHoldingPipes(t *testing.T) {
	if _, err := exec.LookPath("setsid"); err != nil {
		t.Fatalf("this test needs setsid (util-linux): %v", err)
	}
	// The stray inherits stdout and stderr; the script then reports its pid
	// as a notification on stdout.
	p, n := shProcess(t, `setsid sleep 300 </dev/null & echo '{"method":"stray","params":{"pid":'$!'}}'; exec sleep 300`, 100*time.Millisecond)
	stray := decode[struct {
		PID int `json:"pid"`
	}](t, n.wait(t, "the stray's pid", isMethod("stray")).Params).PID
	t.Cleanup(func() { _ = syscall.Kill(stray, syscall.SIGKILL) }) // ours to end
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	start := time.Now()
	if err := p.Stop(ctx); err != nil {
		t.Fatalf("stop: %v after %v", err, time.Since(start))
	}
	if d := time.Since(start); d > 5*time.Second {
		t.Errorf("stop took %v with grace 100ms and drain 200ms", d)
	}
	if err := syscall.Kill(stray, 0); err != nil {
		t.Errorf("the stray should still be alive (it left the group): %v", err)
	}
}

// ModelListAll follows nextCursor through every page, with the hidden
// models only when asked.
func TestFakeModelListAllPages(t *testing.T) {
	fk := startFake(t, fakeappserver.Fake{ModelPageSize: 2}, fakeOptions{})
	page, err := fk.client.ModelList(ctxFor(t), codexproto.ModelListParams{})
	if err != nil || len(page.Data) != 2 || page.NextCursor == nil {
		t.Fatalf("first page: %d models, next %v, %v; want 2 and a cursor", len(page.Data), page.NextCursor, err)
	}
	for _, tt := range []struct {
		hidden bool
		want   int
	}{{false, 9}, {true, 12}} {
		all, err := fk.client.ModelListAll(ctxFor(t), tt.hidden)
		if err != nil {
			t.Fatal(err)
		}
		ids := map[string]bool{}
		hidden := 0
		for _, m := range all {
			ids[m.ID] = true
			if m.Hidden {
				hidden++
			}
			if len(m.InputModalities) == 0 {
				t.Errorf("%s: no input modalities", m.ID)
			}
		}
		if len(all) != tt.want || len(ids) != tt.want || (hidden > 0) != tt.hidden {
			t.Errorf("includeHidden %v: %d models (%d distinct, %d hidden), want %d", tt.hidden, len(all), len(ids), hidden, tt.want)
		}
	}
}

// TestFakeJunkFloodEndsTheProcess: an app-server that floods its stdout
// with lines that are not JSON-RPC (the fake's JunkLines: garbage, forged
// answers, notifications with bad params) past the Conn's bound is
// killed: its Conn ends with ErrBadLines, the process exits by SIGKILL
// though it never stopped writing, and the log holds a few lines, not
// one per junk line. Without the bound the process lived on, its 50,000
// lines each a WARN.
func TestFakeJunkFloodEndsTheProcess(t *testing.T) {
	launch, err := fakeappserver.Relaunch(fakeappserver.Fake{JunkLines: 50000}, "")
	if err != nil {
		t.Fatal(err)
	}
	logs := &syncbuf.Buffer{}
	var bad atomic.Int64
	env := append(launch.Env, "GORACE="+strings.TrimSpace(os.Getenv("GORACE")+" atexit_sleep_ms=0"))
	p, err := Start(Config{
		Binary:    launch.Path,
		Args:      launch.Args,
		Env:       AllowedEnv(os.Environ(), env),
		Home:      t.TempDir(),
		Logger:    slog.New(slog.NewTextHandler(logs, nil)),
		StopGrace: time.Second,
		Conn:      codexrpc.Options{OnBadLine: func(codexrpc.BadLine) { bad.Add(1) }},
	})
	if err != nil {
		t.Fatal(err)
	}
	stopOnCleanup(t, p)
	if _, err := codexproto.NewClient(p.Conn()).Initialize(ctxFor(t), codexproto.ClientInfo{Name: "meshweaver-test", Version: "0.0.1"}); err != nil {
		t.Fatalf("initialize (answered before the flood): %v", err)
	}
	select {
	case <-p.Exited():
	case <-time.After(eventTimeout):
		t.Fatalf("the flooding app-server still runs after %v (%d bad lines read)", eventTimeout, bad.Load())
	}
	if st := p.ExitStatus(); st.Signal != "SIGKILL" {
		t.Errorf("exit %v, want killed by SIGKILL", st)
	}
	<-p.Conn().Done()
	if err := p.Conn().Err(); !errors.Is(err, codexrpc.ErrBadLines) {
		t.Errorf("Conn.Err = %v, want ErrBadLines", err)
	}
	if n := bad.Load(); n <= codexrpc.DefaultMaxBadLines || n >= 50000*8/9 {
		t.Errorf("%d bad lines counted, want just past the bound of %d", n, codexrpc.DefaultMaxBadLines)
	}
	out := logs.String()
	if lines := strings.Count(out, "\n"); lines > 10 || len(out) > 8<<10 || !strings.Contains(out, "killing the codex app-server") {
		t.Errorf("%d log lines, %d bytes for the flood, want at most 10 under 8 KiB naming the kill:\n%s", lines, len(out), out)
	} else {
		t.Logf("%d bad lines read: %d log lines, %d bytes", bad.Load(), lines, len(out))
	}
}

// TestFakeStderrFloodSampled: an app-server that writes 1,000 ERROR lines
// to stderr (the fake's 500 StderrLines, at its start and at its end)
// reaches the log with the first 20 and one line counting the rest, where
// each was a WARN of its own; the stderr tail still ends with the last.
func TestFakeStderrFloodSampled(t *testing.T) {
	var lines []string
	for i := range 500 {
		lines = append(lines, fmt.Sprintf("2026-12-07T00:00:00.000000Z ERROR codex_core::flood: line %d", i))
	}
	launch, err := fakeappserver.Relaunch(fakeappserver.Fake{StderrLines: lines}, "")
	if err != nil {
		t.Fatal(err)
	}
	logs := &syncbuf.Buffer{}
	env := append(launch.Env, "GORACE="+strings.TrimSpace(os.Getenv("GORACE")+" atexit_sleep_ms=0"))
	p, err := Start(Config{
		Binary:    launch.Path,
		Args:      launch.Args,
		Env:       AllowedEnv(os.Environ(), env),
		Home:      t.TempDir(),
		Logger:    slog.New(slog.NewTextHandler(logs, nil)),
		StopGrace: time.Second,
	})
	if err != nil {
		t.Fatal(err)
	}
	stopOnCleanup(t, p)
	if _, err := codexproto.NewClient(p.Conn()).Initialize(ctxFor(t), codexproto.ClientInfo{Name: "meshweaver-test", Version: "0.0.1"}); err != nil {
		t.Fatalf("initialize: %v", err)
	}
	if err := p.Stop(ctxFor(t)); err != nil { // stdin closed: the fake writes its lines again and exits
		t.Fatal(err)
	}
	out := logs.String()
	relayed, summary := strings.Count(out, `msg="codex stderr"`), strings.Count(out, "not_logged=980")
	if relayed != stderrLogged || summary != 1 || len(out) > 8<<10 {
		t.Errorf("%d stderr lines relayed, %d summaries of 980, %d bytes; want %d, 1, under 8 KiB:\n%s", relayed, summary, len(out), stderrLogged, out)
	} else {
		t.Logf("1,000 ERROR lines on stderr: %d log lines, %d bytes", strings.Count(out, "\n"), len(out))
	}
	if tail := p.StderrTail(); !strings.HasSuffix(tail, "line 499") {
		t.Errorf("the stderr tail ends %q, want the last line", tail[max(0, len(tail)-80):])
	}
}
