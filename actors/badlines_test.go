package actors

import (
	"encoding/json"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/meshweaver/supervisor/codexrpc"
	"github.com/meshweaver/supervisor/messages"
	"github.com/meshweaver/supervisor/testkit/fakeappserver"
	"github.com/meshweaver/supervisor/testkit/syncbuf"
)

// TestJunkFloodIsACrash: an app-server that floods its output with lines
// that are not JSON-RPC (the fake's 50,000 JunkLines after a round's
// thread/start: garbage, forged answers, notifications with bad params)
// is ended by its Conn's bound and treated as a crash: the round failed
// naming ErrBadLines, AppServerDied, a death counted, the reason in the
// actor's log, every skipped line counted by kind in
// supervisor_app_server_bad_lines_total; and of the skipped lines the
// log holds the first few and a summary.
func TestJunkFloodIsACrash(t *testing.T) {
	logs := &syncbuf.Buffer{}
	metrics := NewMetrics(nil)
	h := fakeHarness(t, fakeappserver.Config{JunkLines: 50000, JunkOnMethod: "thread/start"}, func(c *tree) {
		c.Deps.Logger = slog.New(slog.NewTextHandler(logs, nil))
		c.Deps.Metrics = metrics
	})
	events := tapEvents(t, h.engine)
	from := events.mark()
	c := h.caller()
	h.engine.SendWithSender(h.root, messages.StartRound{RoundID: "r-junk", User: "mallory", Thread: "t-junk", Text: "hi"}, c.pid)
	waitEvent(t, events, from, replyTimeout, "of mallory's flooding codex", func(e AppServerDied) bool { return e.User == "mallory" })
	if r := c.collect(t, "r-junk", replyTimeout); r.verdict.Status != messages.StatusFailed || !strings.Contains(r.verdict.Error, codexrpc.ErrBadLines.Error()) {
		t.Errorf("the round's verdict %s %q, want failed naming %q", r.verdict.Status, r.verdict.Error, codexrpc.ErrBadLines)
	}

	out := logs.String()
	var died string
	for _, l := range strings.Split(out, "\n") {
		if strings.Contains(l, "codex app-server died") {
			died = l
			break
		}
	}
	if !strings.Contains(died, codexrpc.ErrBadLines.Error()) || !strings.Contains(died, "user=") {
		t.Errorf("the death's log line %q, want it naming the user and %q", died, codexrpc.ErrBadLines)
	}
	if got := testutil.ToFloat64(metrics.Deaths); got < 1 {
		t.Errorf("deaths counted: %v, want at least 1", got)
	}
	var bad float64
	for _, k := range codexrpc.AllBadLines {
		bad += testutil.ToFloat64(metrics.BadLines.WithLabelValues(k.String()))
	}
	if bad <= codexrpc.DefaultMaxBadLines || testutil.ToFloat64(metrics.BadLines.WithLabelValues(codexrpc.BadLineStrayAnswer.String())) == 0 {
		t.Errorf("bad lines counted: %v (stray answers %v), want past the bound of %d, forged answers among them",
			bad, testutil.ToFloat64(metrics.BadLines.WithLabelValues(codexrpc.BadLineStrayAnswer.String())), codexrpc.DefaultMaxBadLines)
	}
	skipped := 0
	for _, l := range strings.Split(out, "\n") {
		if strings.Contains(l, "codex: skipp") {
			skipped++
		}
	}
	if skipped > 6 {
		t.Errorf("%d log lines about skipped lines for %v skipped, want at most 6 (5 and a summary)", skipped, bad)
	}
	t.Logf("%v lines skipped: %d log lines about them; the whole log %d bytes", bad, skipped, len(out))
}

// TestJunkFloodLeavesOthersServed: while mallory's rounds make her
// app-servers flood 300,000 junk lines each (after thread/start), into a
// log written as the daemon writes it (JSON lines to a file), bob's rounds
// keep their pace: his median within 1.5× the quiet median + 100 ms of
// noise, the project's bound for a loaded 2-core machine (the issue's
// target is 1.2×; the figures are logged). Each of mallory's processes is
// ended at 10,001 lines and logs a few lines; they restart under the
// restart policy (backoff, at most 5 deaths a minute). Before the bound
// each flood ran to its end, a WARN a line: 300,000 lines of log a process.
func TestJunkFloodLeavesOthersServed(t *testing.T) {
	logFile, err := os.Create(filepath.Join(t.TempDir(), "daemon.log"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { logFile.Close() })
	metrics := NewMetrics(nil)
	// Each of mallory's rounds opens a new thread with instructions that
	// hold "flood": each of her app-servers floods after its first
	// thread/start, bob's never.
	h := fakeHarness(t, fakeappserver.Config{JunkLines: 300000, JunkOnMethod: "thread/start", JunkOnText: "flood"}, func(c *tree) {
		c.Deps.Logger = slog.New(slog.NewJSONHandler(logFile, nil))
		c.Deps.Metrics = metrics
	})
	bob := h.caller()
	seq := 0
	bobRound := func() time.Duration {
		t.Helper()
		seq++
		start := time.Now()
		r := h.round(bob, messages.StartRound{RoundID: fmt.Sprintf("bob-%d", seq), User: "bob", Thread: "t-bob", Text: "hi"})
		if r.verdict.Status != messages.StatusCompleted {
			t.Fatalf("bob's round %d: %s %q", seq, r.verdict.Status, r.verdict.Error)
		}
		return time.Since(start)
	}
	median := func(took []time.Duration) time.Duration {
		slices.Sort(took)
		return took[len(took)/2]
	}
	bobRound() // his app-server up
	var quiet []time.Duration
	for range 15 {
		quiet = append(quiet, bobRound())
	}

	// mallory's rounds, back to back, until bob is done.
	mallory := h.caller()
	stop, done := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(done)
		for i := 0; ; i++ {
			id := fmt.Sprintf("mallory-%d", i)
			h.engine.SendWithSender(h.root, messages.StartRound{RoundID: id, User: "mallory", Thread: "t-" + id, Text: "hi", DeveloperInstructions: "flood"}, mallory.pid)
			for verdict := false; !verdict; {
				select {
				case m := <-mallory.ch:
					v, ok := m.(messages.RoundFinished)
					verdict = ok && v.RoundID == id
				case <-stop:
					return
				}
			}
		}
	}()
	// bob's rounds until 4 of her processes died of their floods (the
	// fifth would cool her down).
	deaths := func() float64 { return testutil.ToFloat64(metrics.Deaths) } // bob's never die
	var during []time.Duration
	deadline := time.Now().Add(replyTimeout)
	for deaths() < 4 || len(during) < 15 {
		if time.Now().After(deadline) {
			break
		}
		during = append(during, bobRound())
	}
	close(stop)
	<-done

	died := deaths()
	if died < 4 {
		t.Fatalf("%v of mallory's app-servers died within %v, want 4: the test flooded too little", died, replyTimeout)
	}
	q, d := median(quiet), median(during)
	if bound := q*3/2 + 100*time.Millisecond; d > bound {
		t.Errorf("bob's median round %v during mallory's floods, %v quiet: over %v", d, q, bound)
	}
	var bad float64
	for _, k := range codexrpc.AllBadLines {
		bad += testutil.ToFloat64(metrics.BadLines.WithLabelValues(k.String()))
	}
	// The flood's share of the log: the lines about lines that are not
	// JSON-RPC (the sampled ones, the summaries, the kills). The rest is
	// what any round logs (mallory's are refused at once while her
	// app-server restarts).
	b, err := os.ReadFile(logFile.Name())
	if err != nil {
		t.Fatal(err)
	}
	var floodLines, floodBytes int
	for _, l := range strings.Split(string(b), "\n") {
		var rec struct{ Msg string }
		if json.Unmarshal([]byte(l), &rec) == nil && strings.Contains(rec.Msg, "JSON-RPC") {
			floodLines++
			floodBytes += len(l) + 1
		}
	}
	if perProcess := float64(floodLines) / died; perProcess > 7 || float64(floodBytes)/died > 4<<10 {
		t.Errorf("%d log lines, %d bytes about junk for %v flooded processes, want at most 7 lines and 4 KiB a process (5, a summary, the kill)", floodLines, floodBytes, died)
	}
	t.Logf("bob's median round: quiet %v, during %v (%.2f×, %d rounds); mallory: %v app-servers killed, %.0f lines skipped, %d log lines (%d bytes) about them; the whole log %d bytes",
		q, d, float64(d)/float64(q), len(during), died, bad, floodLines, floodBytes, len(b))
}
