package codexrpc

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/cenkalti/backoff/v5"
	"golang.org/x/time/rate"
)

// RequestHandler answers a request the server sent. It runs on its own
// goroutine, which the Conn waits for on Close; ctx ends when the connection
// does. The result is written back as the answer; an error is written back as
// a JSON-RPC error (a *WireError as it is, anything else as -32603).
type RequestHandler func(ctx context.Context, req *Request) (result any, err error)

// RetryPolicy bounds the retries of a call the server refuses as overloaded
// (-32001): up to Attempts tries in all, with jittered exponential backoff
// starting at Base and capped at Max (NewBackOff).
type RetryPolicy struct {
	Attempts int
	Base     time.Duration
	Max      time.Duration
}

// NewBackOff is p's waits between tries, one per NextBackOff: the n-th is
// drawn uniformly from [d/2, d], where d is Base doubled n-1 times, at
// most Max. As cenkalti/backoff's exponential backoff, which
// randomizes an interval i to i·(1±f): i = 3d/4 and f = 1/3.
func (p RetryPolicy) NewBackOff() backoff.BackOff {
	return &backoff.ExponentialBackOff{
		InitialInterval:     p.Base * 3 / 4,
		RandomizationFactor: 1.0 / 3,
		Multiplier:          2,
		MaxInterval:         p.Max * 3 / 4,
	}
}

// DefaultRetry is the policy used when Options.Retry is zero.
var DefaultRetry = RetryPolicy{Attempts: 5, Base: 50 * time.Millisecond, Max: 2 * time.Second}

// Options configures a Conn. The zero value is usable.
type Options struct {
	// OnNotification receives every notification in arrival order, on the
	// read goroutine. It must not block; unknown methods are the handler's to
	// ignore.
	OnNotification func(*Notification)
	// OnNotifications, when set, is called instead of OnNotification with
	// notifications in arrival order, on the read goroutine: those read
	// one after another while more whole lines were already buffered go
	// together (at most MaxNotificationBatch), so a flood costs the
	// receiver one hand-off per batch instead of one per line. It never
	// waits for input to fill a batch, and a batch is handed off before an
	// answer or a server request that follows it on the wire. The callee
	// owns the slice. It must not block.
	OnNotifications func([]*Notification)
	// OnRequest answers server-initiated requests; nil answers every one with
	// -32601 (method not found).
	OnRequest RequestHandler
	// OnEOF is called on the read goroutine when the server's output ends
	// and the Conn was not closed on purpose. Its error becomes the cause of
	// every pending and later call; an *ExitError is copied per call with
	// the call's method. It must return in bounded time.
	OnEOF func() error
	// MaxLineBytes caps one incoming line (DefaultMaxLineBytes when zero):
	// a longer line is read through in pieces, never held, and skipped.
	MaxLineBytes int
	// MaxBadLines bounds the lines the Conn skips (BadLine: not JSON-RPC,
	// over MaxLineBytes, an answer to an id never sent, a server request
	// past MaxServerRequests): a burst of this many, refilled at
	// BadLineRate a second (DefaultMaxBadLines and DefaultBadLineRate when
	// zero; no bound when MaxBadLines is negative). Past it the Conn ends
	// itself: pending and later calls fail with an error wrapping
	// ErrBadLines, Err reports it, and OnAbort is called.
	MaxBadLines int
	BadLineRate float64
	// OnBadLine, when set, is called on the read goroutine for every line
	// skipped, with why (a counter's Inc). It must not block.
	OnBadLine func(BadLine)
	// OnAbort, when set, is called once on the read goroutine when the
	// Conn ended itself (ErrBadLines) while the server may still be
	// writing: the server's owner ends it. It must not block.
	OnAbort func(err error)
	// MaxServerRequests bounds the server requests whose OnRequest runs at
	// once, each on a goroutine of its own (DefaultMaxServerRequests when
	// zero); one past it is answered -32001 at once, and skipped as a bad
	// line.
	MaxServerRequests int
	// Retry bounds retries of overloaded calls (DefaultRetry when zero).
	Retry RetryPolicy
	// Trace, when set, sees every line written (out=true) and read.
	Trace func(out bool, line []byte)
	// Logger receives skipped lines (sampled: the first few a minute, then
	// a count) and handler failures (slog.Default when nil).
	Logger *slog.Logger
}

// DefaultMaxServerRequests is the default of Options.MaxServerRequests:
// the real CLI asks one approval at a time per turn.
const DefaultMaxServerRequests = 256

// Conn is one JSON-RPC connection to an app-server. It owns one read
// goroutine, started by NewConn and ended by the end of the input stream,
// and one write goroutine for the requests of Go, ended with the reading
// or by Close.
type Conn struct {
	r    io.Reader
	w    io.WriteCloser
	opts Options
	log  *slog.Logger

	wmu sync.Mutex // serializes writes of whole lines

	mu      sync.Mutex
	nextID  int64
	pending map[int64]*pendingCall
	closed  bool  // Close was called: calls end with ErrClosed
	dead    error // the read loop ended: why

	outq  [][]byte   // lines Go queued for the write goroutine
	wcond *sync.Cond // on mu: outq grew, or the Conn ended
	wdone chan struct{}

	handlerCtx    context.Context
	cancelHandler context.CancelFunc
	handlers      sync.WaitGroup
	inflight      atomic.Int64    // server requests whose handler runs
	batch         []*Notification // read goroutine only: for OnNotifications
	done          chan struct{}   // closed when the read goroutine returns

	badLines atomic.Uint64 // lines skipped, ever
	bound    *rate.Limiter // Options.MaxBadLines; nil when off
	badLog   *LogSampler   // read goroutine only: the skipped lines (at Warn)
	lateLog  *LogSampler   // read goroutine only: answers to calls given up
}

type pendingCall struct {
	method string
	ch     chan callResult // buffered 1; written once (Call)
	// done, for a call of Go, is called once instead of writing ch.
	done func(result json.RawMessage, err error)
}

// answer settles the call with r.
func (p *pendingCall) answer(r callResult) {
	if p.done == nil {
		p.ch <- r
		return
	}
	switch {
	case r.err != nil:
		p.done(nil, r.err)
	case r.resp.Error != nil:
		p.done(nil, fmt.Errorf("%s: %w", p.method, r.resp.Error))
	default:
		p.done(r.resp.Result, nil)
	}
}

type callResult struct {
	resp *Response
	err  error
}

// NewConn starts a connection reading r and writing w. Close closes w; the
// read goroutine ends when r reaches its end, so the owner of r must make
// sure it does (a Process closes it once the process is gone).
func NewConn(r io.Reader, w io.WriteCloser, opts Options) *Conn {
	if opts.Retry.Attempts <= 0 {
		opts.Retry = DefaultRetry
	}
	if opts.Logger == nil {
		opts.Logger = slog.Default()
	}
	if opts.MaxBadLines == 0 {
		opts.MaxBadLines = DefaultMaxBadLines
	}
	if opts.BadLineRate <= 0 {
		opts.BadLineRate = DefaultBadLineRate
	}
	if opts.MaxServerRequests <= 0 {
		opts.MaxServerRequests = DefaultMaxServerRequests
	}
	ctx, cancel := context.WithCancel(context.Background())
	c := &Conn{
		r: r, w: w, opts: opts, log: opts.Logger,
		pending:       make(map[int64]*pendingCall),
		handlerCtx:    ctx,
		cancelHandler: cancel,
		done:          make(chan struct{}),
		wdone:         make(chan struct{}),
		bound:         badLineBound(opts),
		badLog: NewLogSampler(opts.Logger, slog.LevelWarn, badLinesLogged, badLineWindow,
			"codex: skipped more lines that are not JSON-RPC, not logged"),
		lateLog: NewLogSampler(opts.Logger, slog.LevelDebug, badLinesLogged, badLineWindow,
			"codex: more answers to calls given up, not logged"),
	}
	c.wcond = sync.NewCond(&c.mu)
	go c.readLoop()
	go c.writeLoop()
	return c
}

// Go sends a request without waiting: the line is written by the Conn's
// write goroutine (a peer that stops reading never blocks the caller), and
// done is called exactly once with the answer's result or its error. For
// an answer, done runs on the read goroutine, in wire order with
// OnNotification: a sink that both feed sees a call's answer exactly where
// the server put it among its notifications. When the connection ends
// first, done gets its cause (an *ExitError, ErrClosed), on the goroutine
// that ended it. Go returns the call's id, for Forget; no retries and no
// deadline: those are the caller's. Done must not block.
func (c *Conn) Go(method string, params any, done func(result json.RawMessage, err error)) (int64, error) {
	params, trace := unwrapTrace(params)
	if params == nil {
		params = struct{}{}
	}
	body, err := json.Marshal(params)
	if err != nil {
		return 0, fmt.Errorf("encoding %s params: %w", method, err)
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if err := c.unusableLocked(method); err != nil {
		return 0, err
	}
	line, err := json.Marshal(outRequest{ID: c.nextID + 1, Method: method, Params: json.RawMessage(body), Trace: trace})
	if err != nil {
		return 0, err
	}
	c.nextID++
	c.pending[c.nextID] = &pendingCall{method: method, done: done}
	c.outq = append(c.outq, line)
	c.wcond.Signal()
	return c.nextID, nil
}

// Forget drops a call of Go that its caller gave up on (its deadline
// passed): its done is not called, and an answer that still comes is
// ignored. It reports whether the call was still pending.
func (c *Conn) Forget(id int64) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	_, ok := c.pending[id]
	delete(c.pending, id)
	return ok
}

// writeLoop writes what Go queued, in order, until the Conn ends.
func (c *Conn) writeLoop() {
	defer close(c.wdone)
	for {
		c.mu.Lock()
		for len(c.outq) == 0 && !c.closed && c.dead == nil {
			c.wcond.Wait()
		}
		if c.closed || c.dead != nil {
			c.outq = nil
			c.mu.Unlock()
			return
		}
		line := c.outq[0]
		c.outq = c.outq[1:]
		c.mu.Unlock()
		if err := c.writeLine(line); err != nil {
			// The process is gone or stopped reading: the reader reports
			// why to every pending call, or the caller's deadline does.
			c.log.Debug("codex: could not send a request", "err", err)
		}
	}
}

// Call sends a request and waits for its answer, decoding the result into
// result when it is not nil. It returns ctx's error when ctx ends first,
// leaving no pending entry behind; a *WireError when the server refused; an
// *ExitError when the process died; ErrClosed after Close. Overloaded
// refusals are retried under the Conn's RetryPolicy.
func (c *Conn) Call(ctx context.Context, method string, params, result any) error {
	params, trace := unwrapTrace(params)
	if params == nil {
		params = struct{}{}
	}
	body, err := json.Marshal(params)
	if err != nil {
		return fmt.Errorf("encoding %s params: %w", method, err)
	}
	waits := c.opts.Retry.NewBackOff()
	for attempt := 1; ; attempt++ {
		resp, err := c.callOnce(ctx, method, body, trace)
		if err != nil {
			return err
		}
		if resp.Error != nil {
			if resp.Error.Code == CodeOverloaded && attempt < c.opts.Retry.Attempts {
				t := time.NewTimer(waits.NextBackOff())
				select {
				case <-t.C:
					continue
				case <-ctx.Done():
					t.Stop()
					return fmt.Errorf("%s: %w (after overloaded answers)", method, ctx.Err())
				}
			}
			return fmt.Errorf("%s: %w", method, resp.Error)
		}
		if result == nil {
			return nil
		}
		if err := json.Unmarshal(resp.Result, result); err != nil {
			return fmt.Errorf("decoding %s result: %w", method, err)
		}
		return nil
	}
}

func (c *Conn) callOnce(ctx context.Context, method string, params json.RawMessage, trace *Trace) (*Response, error) {
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("%s: %w", method, err)
	}
	c.mu.Lock()
	if err := c.unusableLocked(method); err != nil {
		c.mu.Unlock()
		return nil, err
	}
	c.nextID++
	id := c.nextID
	p := &pendingCall{method: method, ch: make(chan callResult, 1)}
	c.pending[id] = p
	c.mu.Unlock()

	if err := c.write(outRequest{ID: id, Method: method, Params: params, Trace: trace}); err != nil {
		c.forget(id)
		// A write fails when the process is gone; the reader is then about
		// to report why (bounded by OnEOF), and that report is the answer.
		t := time.NewTimer(5 * time.Second)
		select {
		case <-c.done:
		case <-ctx.Done():
		case <-t.C:
		}
		t.Stop()
		c.mu.Lock()
		uerr := c.unusableLocked(method)
		c.mu.Unlock()
		if uerr != nil {
			return nil, uerr
		}
		return nil, fmt.Errorf("sending %s: %w", method, err)
	}
	select {
	case r := <-p.ch:
		return r.resp, r.err
	case <-ctx.Done():
		c.forget(id)
		return nil, fmt.Errorf("%s: %w", method, ctx.Err())
	}
}

// unusableLocked reports why no new call can be made, or nil.
func (c *Conn) unusableLocked(method string) error {
	switch {
	case c.closed:
		return ErrClosed
	case c.dead != nil:
		return causeFor(method, c.dead)
	}
	return nil
}

func (c *Conn) forget(id int64) {
	c.mu.Lock()
	delete(c.pending, id)
	c.mu.Unlock()
}

// BadLines reports how many lines of the server's the Conn has skipped
// (every BadLine), for a counter or a test.
func (c *Conn) BadLines() uint64 { return c.badLines.Load() }

// Pending reports how many calls await an answer.
func (c *Conn) Pending() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.pending)
}

// Notify sends a notification.
func (c *Conn) Notify(method string, params any) error {
	c.mu.Lock()
	err := c.unusableLocked(method)
	c.mu.Unlock()
	if err != nil {
		return err
	}
	if err := c.write(outNotification{Method: method, Params: params}); err != nil {
		return fmt.Errorf("sending %s: %w", method, err)
	}
	return nil
}

// writeTimeout bounds a write to a peer that stopped reading, when the
// writer supports deadlines (a pipe to a process does).
const writeTimeout = 30 * time.Second

func (c *Conn) write(v any) error {
	line, err := json.Marshal(v)
	if err != nil {
		return err
	}
	return c.writeLine(line)
}

// writeLine writes one line (without its newline), whole.
func (c *Conn) writeLine(line []byte) error {
	line = append(line, '\n')
	c.wmu.Lock()
	defer c.wmu.Unlock()
	if d, ok := c.w.(interface{ SetWriteDeadline(time.Time) error }); ok {
		_ = d.SetWriteDeadline(time.Now().Add(writeTimeout))
	}
	if c.opts.Trace != nil {
		c.opts.Trace(true, line[:len(line)-1])
	}
	_, err := c.w.Write(line)
	return err
}

// Close ends the connection on purpose: pending and later calls fail with
// ErrClosed, the writer is closed (for a process, its stdin: the polite way
// to ask it to exit), and server-request handlers are cancelled. It does not
// wait; Wait does.
func (c *Conn) Close() error {
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		return nil
	}
	c.closed = true
	pending := c.pending
	c.pending = make(map[int64]*pendingCall)
	c.wcond.Broadcast()
	c.mu.Unlock()
	for _, p := range pending {
		p.answer(callResult{err: ErrClosed})
	}
	c.cancelHandler()
	// Not under wmu: a write blocked on a peer that stopped reading holds
	// it, and closing the pipe is what wakes that write up.
	return c.w.Close()
}

// Done is closed when the read goroutine has returned.
func (c *Conn) Done() <-chan struct{} { return c.done }

// Err reports why reading ended: nil while it goes on, ErrClosed after Close,
// else the cause (for a process, an *ExitError).
func (c *Conn) Err() error {
	select {
	case <-c.done:
	default:
		return nil
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		return ErrClosed
	}
	return c.dead
}

// Wait blocks until the read and write goroutines and every server-request
// handler have returned, or ctx ends.
func (c *Conn) Wait(ctx context.Context) error {
	for _, ch := range []chan struct{}{c.done, c.wdone} {
		select {
		case <-ch:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	ch := make(chan struct{})
	go func() { c.handlers.Wait(); close(ch) }()
	select {
	case <-ch:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// MaxNotificationBatch caps one call of Options.OnNotifications.
const MaxNotificationBatch = 64

func (c *Conn) readLoop() {
	defer close(c.done)
	lr := NewLineReader(c.r, c.opts.MaxLineBytes)
	var dec decoder
	var readErr error
	for {
		if len(c.batch) > 0 && !lr.Ready() {
			c.handOff() // nothing more to read without waiting
		}
		line, err := lr.ReadLine()
		if err != nil {
			if errors.Is(err, ErrLineTooLong) {
				lr.shrink()
				if c.skipped(BadLineTooLong, "codex: skipping an over-long line", func() []any { return []any{"err", err} }) {
					readErr = c.badLinesErr()
					break
				}
				continue
			}
			readErr = err
			break
		}
		if c.opts.Trace != nil {
			c.opts.Trace(false, line)
		}
		msg, err := dec.decode(line)
		if err != nil {
			broken := c.skipped(BadLineNotJSONRPC, "codex: skipping a line that is not JSON-RPC", func() []any {
				return []any{"err", clip(err.Error(), 200), "bytes", len(line), "head", logHead(line)}
			})
			lr.shrink()
			if broken {
				readErr = c.badLinesErr()
				break
			}
			continue
		}
		broken := c.dispatch(msg)
		lr.shrink()
		if broken {
			readErr = c.badLinesErr()
			break
		}
	}
	c.handOff()
	c.badLog.Flush()
	c.lateLog.Flush()
	c.finish(readErr)
}

// handOff gives the batched notifications to OnNotifications.
func (c *Conn) handOff() {
	if len(c.batch) == 0 {
		return
	}
	b := c.batch
	c.batch = nil
	c.opts.OnNotifications(b)
}

// dispatch hands msg on; broken reports a skipped line that broke the
// bound of bad lines.
func (c *Conn) dispatch(msg Message) (broken bool) {
	if n, ok := msg.(*Notification); ok {
		switch {
		case c.opts.OnNotifications != nil:
			c.batch = append(c.batch, n)
			if len(c.batch) == MaxNotificationBatch {
				c.handOff()
			}
		case c.opts.OnNotification != nil:
			c.opts.OnNotification(n)
		}
		return false
	}
	c.handOff() // what came before an answer or a request is delivered first
	switch m := msg.(type) {
	case *Response:
		id, err := strconv.ParseInt(string(m.ID), 10, 64)
		c.mu.Lock()
		p, ok := c.pending[id]
		if ok {
			delete(c.pending, id)
		}
		sent := err == nil && id > 0 && id <= c.nextID
		c.mu.Unlock()
		switch {
		case !sent: // forged: no call of this Conn's had that id
			return c.skipped(BadLineStrayAnswer, "codex: skipping an answer to an id never sent", func() []any { return []any{"id", logHead(m.ID)} })
		case !ok: // a call given up (Forget, a deadline) or answered twice
			c.lateLog.Log("codex: answer to no pending call", "id", head(m.ID, 40))
			return false
		}
		p.answer(callResult{resp: m})
	case *Request:
		if c.opts.OnRequest == nil {
			c.answerError(m, &WireError{Code: CodeMethodNotFound, Message: "method not found: " + m.Method})
			return false
		}
		if c.inflight.Load() >= int64(c.opts.MaxServerRequests) {
			broken := c.skipped(BadLineExcessRequest, "codex: refusing a server request past the cap", func() []any {
				return []any{"method", clip(m.Method, 100), "cap", c.opts.MaxServerRequests}
			})
			c.answerError(m, &WireError{Code: CodeOverloaded, Message: fmt.Sprintf("%d server requests are in flight; retry later", c.opts.MaxServerRequests)})
			return broken
		}
		c.inflight.Add(1)
		c.handlers.Add(1)
		go func() {
			defer c.handlers.Done()
			defer c.inflight.Add(-1)
			res, err := c.opts.OnRequest(c.handlerCtx, m)
			if err != nil {
				var we *WireError
				if !errors.As(err, &we) {
					we = &WireError{Code: CodeInternalError, Message: err.Error()}
				}
				c.answerError(m, we)
				return
			}
			if werr := c.write(outResult{ID: m.ID, Result: res}); werr != nil {
				c.log.Debug("codex: could not answer a server request", "method", clip(m.Method, 100), "err", werr)
			}
		}()
	}
	return false
}

func (c *Conn) answerError(m *Request, we *WireError) {
	if err := c.write(outError{ID: m.ID, Error: we}); err != nil {
		c.log.Debug("codex: could not answer a server request", "method", clip(m.Method, 100), "err", err)
	}
}

// finish runs once reading has ended: it settles why, and fails every call
// still waiting with that cause.
func (c *Conn) finish(readErr error) {
	c.mu.Lock()
	closed := c.closed
	c.mu.Unlock()
	aborted := errors.Is(readErr, ErrBadLines)
	var cause error
	switch {
	case closed:
		cause = ErrClosed
	case aborted:
		// The output has not ended: the server is still there, and is
		// told to go (its stdin closed) and, by OnAbort, made to.
		cause = readErr
		_ = c.w.Close()
	case c.opts.OnEOF != nil:
		// Bounded by the OnEOF contract; it may wait for the process exit and
		// its stderr, so it runs before pending calls are failed.
		cause = c.opts.OnEOF()
	case readErr == io.EOF:
		cause = io.ErrUnexpectedEOF
	default:
		cause = readErr
	}
	if cause == nil {
		cause = io.ErrUnexpectedEOF
	}
	c.mu.Lock()
	if c.closed {
		cause = ErrClosed
	}
	c.dead = cause
	pending := c.pending
	c.pending = make(map[int64]*pendingCall)
	c.wcond.Broadcast()
	c.mu.Unlock()
	c.cancelHandler()
	for _, p := range pending {
		p.answer(callResult{err: causeFor(p.method, cause)})
	}
	if aborted && c.opts.OnAbort != nil && !errors.Is(cause, ErrClosed) {
		c.opts.OnAbort(cause)
	}
}

// causeFor makes the error a call to method sees when the connection died.
func causeFor(method string, cause error) error {
	if errors.Is(cause, ErrClosed) {
		return ErrClosed
	}
	var ee *ExitError
	if errors.As(cause, &ee) {
		cp := *ee
		cp.Method = method
		return &cp
	}
	return fmt.Errorf("%s: connection lost: %w", method, cause)
}

// clip is s cut to n bytes, for a log line.
func clip(s string, n int) string {
	if len(s) > n {
		return s[:n] + "…"
	}
	return s
}

func head(b []byte, n int) string {
	if len(b) > n {
		return string(b[:n]) + "…"
	}
	return string(b)
}

// logHead is a redacted, short prefix of a line for logs: redaction runs
// before truncation so no secret is cut into a shape it no longer matches.
func logHead(line []byte) string {
	if len(line) > 4096 {
		line = line[:4096]
	}
	return head([]byte(RedactCommon(string(line))), 120)
}
