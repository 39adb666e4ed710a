package codexrpc

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"golang.org/x/time/rate"
)

// The app-server is hostile input: an agent with full access controls its
// own app-server, and so every line it writes. A line the Conn cannot use
// costs a bounded amount (the line cap, one sampled log line at most) and
// counts against a bound past which the Conn ends.

// BadLine is why a Conn skipped a line of the server's.
type BadLine int

// The kinds of skipped lines.
const (
	BadLineNotJSONRPC    BadLine = iota // not JSON, or not a JSON-RPC message
	BadLineTooLong                      // over Options.MaxLineBytes
	BadLineStrayAnswer                  // an answer to an id this Conn never sent
	BadLineExcessRequest                // a server request past Options.MaxServerRequests in flight
)

// AllBadLines lists every BadLine, for counters preset at zero.
var AllBadLines = []BadLine{BadLineNotJSONRPC, BadLineTooLong, BadLineStrayAnswer, BadLineExcessRequest}

func (b BadLine) String() string {
	switch b {
	case BadLineNotJSONRPC:
		return "not-json-rpc"
	case BadLineTooLong:
		return "too-long"
	case BadLineStrayAnswer:
		return "stray-answer"
	case BadLineExcessRequest:
		return "excess-request"
	}
	return "unknown"
}

// ErrBadLines reports a server that sent more lines the Conn had to skip
// than Options.MaxBadLines allow: the Conn ended itself, and its owner
// should end the server (Options.OnAbort).
var ErrBadLines = errors.New("codexrpc: the app-server sent too many lines that are not JSON-RPC")

// The bound's defaults: a burst of DefaultMaxBadLines skipped lines,
// refilled at DefaultBadLineRate a second. The real CLI writes none; the
// refill keeps a long-lived server that writes a stray line now and then
// from ever meeting the bound.
const (
	DefaultMaxBadLines = 10000
	DefaultBadLineRate = 10
)

// What a Conn logs of the lines it skips: the first badLinesLogged of
// each badLineWindow, then one line with the count of those not logged,
// when the next window begins or the Conn ends.
const (
	badLinesLogged = 5
	badLineWindow  = time.Minute
)

// LogSampler lets the first n lines of each window through to a logger
// and counts the rest, for one summary line (the count, "not_logged")
// when the next window's first line comes or Flush is called: what a
// process's output costs the log is then bounded however much it writes.
// It is for one goroutine, a reader's.
type LogSampler struct {
	log     *slog.Logger
	level   slog.Level
	summary string // the summary line's message
	n       int
	window  time.Duration

	start   time.Time
	logged  int
	dropped int
}

// NewLogSampler is a sampler of n lines a window at level into log;
// summary is the message of the summary line.
func NewLogSampler(log *slog.Logger, level slog.Level, n int, window time.Duration, summary string) *LogSampler {
	return &LogSampler{log: log, level: level, n: n, window: window, summary: summary}
}

// Take reports whether a line may be logged now; one that may not is
// counted for the summary. (A caller builds the line only then: a
// redacted head costs more than the skip.)
func (s *LogSampler) Take() bool {
	now := time.Now()
	if s.start.IsZero() || now.Sub(s.start) >= s.window {
		s.Flush()
		s.start, s.logged = now, 0
	}
	if s.logged < s.n {
		s.logged++
		return true
	}
	s.dropped++
	return false
}

// Log logs msg with args, or counts it when the window's lines are used.
func (s *LogSampler) Log(msg string, args ...any) {
	if s.Take() {
		s.log.Log(context.Background(), s.level, msg, args...)
	}
}

// Flush writes the summary of the lines not logged, if any.
func (s *LogSampler) Flush() {
	if s.dropped == 0 {
		return
	}
	s.log.Log(context.Background(), s.level, s.summary, "not_logged", s.dropped, "window", s.window)
	s.dropped = 0
}

// badLineBound is the token bucket of Options.MaxBadLines; nil when off.
func badLineBound(opts Options) *rate.Limiter {
	if opts.MaxBadLines < 0 {
		return nil
	}
	return rate.NewLimiter(rate.Limit(opts.BadLineRate), opts.MaxBadLines)
}

// skipped accounts for one line the Conn could not use: it counts it,
// logs it (sampled; args are made only for a line logged), and reports
// whether the bound is now broken.
func (c *Conn) skipped(kind BadLine, msg string, args func() []any) (broken bool) {
	c.badLines.Add(1)
	if c.opts.OnBadLine != nil {
		c.opts.OnBadLine(kind)
	}
	if c.badLog.Take() {
		c.log.Warn(msg, append(args(), "kind", kind.String())...)
	}
	return c.bound != nil && !c.bound.Allow()
}

// badLinesErr is the cause a Conn ends with when its bound broke.
func (c *Conn) badLinesErr() error {
	return fmt.Errorf("%w: %d skipped (a burst of %d allowed, then %g a second); the connection was ended",
		ErrBadLines, c.badLines.Load(), c.opts.MaxBadLines, c.opts.BadLineRate)
}
