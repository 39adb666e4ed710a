package codexrpc

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"
)

// junk is what a hostile app-server writes that a Conn must skip: lines
// that are not JSON, JSON that is no message, a message cut off, and
// answers to ids the Conn never sent.
var junk = []string{
	`this is not json`,
	`[1,2,3]`,
	`{"neither":"method nor id"}`,
	`{"jsonrpc":"2.0","id":1`,
	`{"id":424242,"result":{}}`,
	`{"id":"forged","result":{"thread":{"id":"t1"}}}`,
	`{"id":-1,"error":{"code":-32600,"message":"forged"}}`,
	`{"method":42}`,
}

// forgedNotes are notifications with params no consumer can use: they
// are JSON-RPC, so the Conn hands them on (their consumer drops them) and
// neither counts nor logs them.
var forgedNotes = []string{
	`{"method":"item/agentMessage/delta","params":"not an object"}`,
	`{"method":"turn/completed","params":{"threadId":7,"turn":[]}}`,
}

// logCount is a log sink that counts what a handler writes.
type logCount struct {
	mu    sync.Mutex
	bytes int
	lines []string
}

func (l *logCount) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.bytes += len(p)
	l.lines = append(l.lines, string(p))
	return len(p), nil
}

func (l *logCount) snapshot() (int, []string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.bytes, append([]string(nil), l.lines...)
}

// matching counts the lines holding s.
func matching(lines []string, s string) int {
	n := 0
	for _, l := range lines {
		if strings.Contains(l, s) {
			n++
		}
	}
	return n
}

// TestBadLinesSampledAndBounded: a Conn skips junk and forged answers,
// logs the first few of them and counts every one (BadLines, OnBadLine by
// kind); notifications with bad params are handed on and not counted.
// One line past MaxBadLines ends the Conn: the pending call and Err carry
// ErrBadLines, OnAbort hears it once, the server's stdin is closed, and
// the log ends with one summary line naming how many were not logged.
// Without a bound each line was a WARN of its own (1,001 lines here).
func TestBadLinesSampledAndBounded(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		logs := &logCount{}
		var kinds sync.Map // BadLine → *atomic.Int64
		var notes atomic.Int64
		aborted := make(chan error, 2)
		const bound = 1000
		c, p := newPair(t, Options{
			Logger:         slog.New(slog.NewTextHandler(logs, nil)),
			MaxBadLines:    bound,
			OnNotification: func(*Notification) { notes.Add(1) },
			OnBadLine: func(k BadLine) {
				n, _ := kinds.LoadOrStore(k, new(atomic.Int64))
				n.(*atomic.Int64).Add(1)
			},
			OnAbort: func(err error) { aborted <- err },
		})
		done := goCall(c, context.Background(), "thread/start", nil)
		p.recv() // id 1: pending, never answered

		for i := range bound {
			p.send(junk[i%len(junk)])
			if i%10 == 0 {
				p.send(forgedNotes[i%len(forgedNotes)])
			}
		}
		synctest.Wait()
		if got := c.BadLines(); got != bound {
			t.Errorf("BadLines after %d junk lines = %d", bound, got)
		}
		if err := c.Err(); err != nil {
			t.Fatalf("the Conn ended at the bound, not past it: %v", err)
		}
		if got := notes.Load(); got != bound/10 {
			t.Errorf("notifications with bad params handed on: %d, want %d", got, bound/10)
		}
		_, lines := logs.snapshot()
		if len(lines) != badLinesLogged {
			t.Errorf("%d log lines for %d junk lines, want %d:\n%s", len(lines), bound, badLinesLogged, strings.Join(lines, ""))
		}

		p.send(junk[0]) // one past the bound
		<-c.Done()
		if err := c.Err(); !errors.Is(err, ErrBadLines) {
			t.Errorf("Err = %v, want ErrBadLines", err)
		}
		if out := <-done; !errors.Is(out.err, ErrBadLines) || !strings.Contains(out.err.Error(), "thread/start") {
			t.Errorf("the pending call got %v, want ErrBadLines naming thread/start", out.err)
		}
		select {
		case err := <-aborted:
			if !errors.Is(err, ErrBadLines) {
				t.Errorf("OnAbort(%v), want ErrBadLines", err)
			}
		default:
			t.Error("OnAbort was not called")
		}
		if _, err := p.in.ReadLine(); !errors.Is(err, io.EOF) {
			t.Errorf("the server's stdin after the bound: %v, want EOF (closed)", err)
		}
		if err := c.Call(context.Background(), "thread/list", nil, nil); !errors.Is(err, ErrBadLines) {
			t.Errorf("a later call: %v, want ErrBadLines", err)
		}

		bytes, lines := logs.snapshot()
		if got := matching(lines, "not_logged="+fmt.Sprint(bound+1-badLinesLogged)); got != 1 {
			t.Errorf("summary lines naming %d not logged: %d, want 1:\n%s", bound+1-badLinesLogged, got, strings.Join(lines, ""))
		}
		if len(lines) != badLinesLogged+1 || bytes > 4<<10 {
			t.Errorf("%d log lines, %d bytes for %d junk lines, want %d lines under 4 KiB", len(lines), bytes, bound+1, badLinesLogged+1)
		}
		want := map[BadLine]int64{BadLineNotJSONRPC: 626, BadLineStrayAnswer: 375}
		for _, k := range AllBadLines {
			var got int64
			if n, ok := kinds.Load(k); ok {
				got = n.(*atomic.Int64).Load()
			}
			if got != want[k] {
				t.Errorf("OnBadLine(%s) %d times, want %d", k, got, want[k])
			}
		}
		t.Logf("%d junk lines: %d log lines, %d bytes", bound+1, len(lines), bytes)
	})
}

// TestBadLinesSummaryPerWindow: the lines not logged are counted in one
// summary when the next window's first line comes, and that window logs
// its own first few again; with MaxBadLines negative nothing ends the
// Conn.
func TestBadLinesSummaryPerWindow(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		logs := &logCount{}
		c, p := newPair(t, Options{Logger: slog.New(slog.NewTextHandler(logs, nil)), MaxBadLines: -1})
		for i := range 20 {
			p.send(junk[i%len(junk)])
		}
		synctest.Wait()
		if _, lines := logs.snapshot(); len(lines) != badLinesLogged || matching(lines, "not_logged") != 0 {
			t.Errorf("first window: %d lines, want %d and no summary yet", len(lines), badLinesLogged)
		}
		time.Sleep(badLineWindow)
		p.send(junk[0])
		synctest.Wait()
		_, lines := logs.snapshot()
		if got := matching(lines, "not_logged=15"); got != 1 {
			t.Errorf("summary of the first window's 15 not logged: %d lines, want 1:\n%s", got, strings.Join(lines, ""))
		}
		if got := matching(lines, "kind="); got != badLinesLogged+1 {
			t.Errorf("junk lines logged: %d, want %d (the next window logs again)", got, badLinesLogged+1)
		}
		if err := c.Err(); err != nil {
			t.Errorf("no bound, yet the Conn ended: %v", err)
		}
	})
}

// floodLines is how many junk lines TestJunkFloodLog writes: the issue's
// flood was 300,000 (-flood 300000; 20 s under -race).
var floodLines = flag.Int("flood", 30000, "junk lines TestJunkFloodLog writes")

// TestJunkFloodLog: a flood of junk lines in one window with the bound
// off logs the first few and nothing more until the Conn ends, then one
// summary: about a kilobyte, where each line was a WARN of its own (the
// issue's 300,000 lines made 100 MB of log).
func TestJunkFloodLog(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		logs := &logCount{}
		flood := *floodLines
		c, p := newPair(t, Options{Logger: slog.New(slog.NewTextHandler(logs, nil)), MaxBadLines: -1})
		var b strings.Builder
		for i := range flood {
			b.WriteString(junk[i%len(junk)])
			b.WriteByte('\n')
			if b.Len() > 64<<10 {
				p.send(strings.TrimSuffix(b.String(), "\n"))
				b.Reset()
			}
		}
		if b.Len() > 0 {
			p.send(strings.TrimSuffix(b.String(), "\n"))
		}
		synctest.Wait()
		if got := c.BadLines(); got != uint64(flood) {
			t.Errorf("BadLines = %d, want %d", got, flood)
		}
		p.out.Close() // the end of the output
		<-c.Done()
		bytes, lines := logs.snapshot()
		if len(lines) != badLinesLogged+1 || bytes > 4<<10 {
			t.Errorf("%d log lines, %d bytes for %d junk lines; want %d lines under 4 KiB", len(lines), bytes, flood, badLinesLogged+1)
		}
		t.Logf("%d junk lines: %d log lines, %d bytes", flood, len(lines), bytes)
	})
}

// TestHugeLinesBounded: a line over MaxLineBytes is read through and
// skipped without being held (what it allocates is a few times the cap,
// for the part read before it was too long, not the line), counted as too
// long, and the next message is delivered; a line of junk just under the
// cap costs a few times the cap. (The LineReader bounded this before the
// bad-line bound; the test keeps it so.)
func TestHugeLinesBounded(t *testing.T) {
	const max = 1 << 20
	got := make(chan string, 1)
	c, p := newPair(t, Options{MaxLineBytes: max, OnNotification: func(n *Notification) { got <- n.Method }})
	// What the test writes is made before the measures: they count what
	// the Conn allocates (and the little the pipe does).
	chunk := []byte(strings.Repeat("x", 64<<10))
	after1 := []byte("\n" + `{"method":"after/huge"}` + "\n")
	junkLine := []byte("{" + strings.Repeat("y", max-2) + "\n" + `{"method":"after/junk"}` + "\n")
	write := func(b []byte) {
		t.Helper()
		if _, err := p.out.Write(b); err != nil {
			t.Fatal(err)
		}
	}
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	for range 1024 { // 64 MiB without a newline
		write(chunk)
	}
	write(after1)
	if m := await(t, got); m != "after/huge" {
		t.Errorf("after the huge line: %q", m)
	}
	runtime.ReadMemStats(&after)
	if alloc := after.TotalAlloc - before.TotalAlloc; alloc > 8<<20 {
		t.Errorf("a 64 MiB line over a 1 MiB cap allocated %d bytes, want under 8 MiB", alloc)
	} else {
		t.Logf("a 64 MiB line over a 1 MiB cap: %d bytes allocated", alloc)
	}
	runtime.ReadMemStats(&before)
	write(junkLine) // junk of the cap's size, then a message
	if m := await(t, got); m != "after/junk" {
		t.Errorf("after the junk line: %q", m)
	}
	runtime.ReadMemStats(&after)
	if alloc := after.TotalAlloc - before.TotalAlloc; alloc > 8*max {
		t.Errorf("a junk line of 1 MiB allocated %d bytes, want under 8 MiB", alloc)
	} else {
		t.Logf("a junk line of 1 MiB: %d bytes allocated", alloc)
	}
	if got := c.BadLines(); got != 2 {
		t.Errorf("BadLines = %d, want 2 (one too long, one not JSON-RPC)", got)
	}
}

// TestServerRequestsCapped: server requests past MaxServerRequests in
// flight are answered -32001 at once, without a goroutine, and counted;
// those in flight are answered when their handler returns.
func TestServerRequestsCapped(t *testing.T) {
	release := make(chan struct{})
	var kinds sync.Map
	c, p := newPair(t, Options{
		MaxServerRequests: 2,
		OnBadLine:         func(k BadLine) { kinds.Store(k, true) },
		OnRequest: func(ctx context.Context, r *Request) (any, error) {
			select {
			case <-release:
			case <-ctx.Done():
			}
			return map[string]string{"decision": "decline"}, nil
		},
	})
	for i := range 3 {
		p.send(fmt.Sprintf(`{"method":"item/commandExecution/requestApproval","id":%d,"params":{}}`, i))
	}
	m := p.recv()
	if m["id"] != 2.0 || m["error"].(map[string]any)["code"] != float64(CodeOverloaded) {
		t.Fatalf("the third request's answer = %v, want -32001 at once", m)
	}
	if _, ok := kinds.Load(BadLineExcessRequest); !ok || c.BadLines() != 1 {
		t.Errorf("the refused request was not counted as %s (BadLines %d)", BadLineExcessRequest, c.BadLines())
	}
	close(release)
	for range 2 {
		if m := p.recv(); m["result"] == nil {
			t.Errorf("a request in flight got %v, want its result", m)
		}
	}
}
