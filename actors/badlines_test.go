package actors

import (
	"log/slog"
	"strings"
	"testing"

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
