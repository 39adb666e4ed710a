package demomodel

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"slices"
	"strings"
	"sync"
	"time"
)

// ErrClosed is returned by WaitRequests once the Server is closed.
var ErrClosed = errors.New("demomodel: server closed")

// DefaultMaxBodyBytes is the request body limit when Options.MaxBodyBytes is
// 0. Larger bodies get 413.
const DefaultMaxBodyBytes = 64 << 20

// Responder decides the Script for a request when the queue is empty. It is
// called on the request's goroutine, one call per request, possibly
// concurrently; it must not keep req.
type Responder func(req *Request) Script

// Options configures a Server. The zero value is usable.
type Options struct {
	// Responder answers when the queue is empty. Nil means DemoResponder.
	Responder Responder
	// MaxBodyBytes caps request bodies. 0 means DefaultMaxBodyBytes.
	MaxBodyBytes int64
	// Logf, if set, receives one line per request and per problem.
	Logf func(format string, args ...any)
	// KeepRequests, when positive, keeps only that many of the latest
	// requests for Requests and WaitRequests (Seq and the count
	// WaitRequests waits for still number every request). 0 keeps all. A
	// long run against one Server (thousands of rounds on threads that
	// grow, each request carrying its whole history) otherwise holds
	// memory quadratic in the rounds: the cluster chaos run reached 23 GiB.
	KeepRequests int
}

// Server is a running mock model. Its methods are safe for concurrent use.
type Server struct {
	url     string
	maxBody int64
	logf    func(format string, args ...any)
	srv     *http.Server
	served  chan struct{} // closed when srv.Serve returned
	done    chan struct{} // closed by Close; ends slow and hanging streams

	keep int // Options.KeepRequests

	mu        sync.Mutex
	seen      int // requests received, retained or not
	closed    bool
	handlers  sync.WaitGroup // running handlers; Add only under mu while !closed
	conns     sync.WaitGroup // open connections (ConnState); Close waits for them
	queue     []Script
	responder Responder
	requests  []*Request
	arrived   chan struct{} // closed and replaced on each new request
}

// Start listens on 127.0.0.1 on a free port and serves until Close.
func Start(opts Options) (*Server, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, fmt.Errorf("demomodel: listening: %w", err)
	}
	s := &Server{
		url:       "http://" + ln.Addr().String() + "/v1",
		maxBody:   opts.MaxBodyBytes,
		logf:      opts.Logf,
		served:    make(chan struct{}),
		done:      make(chan struct{}),
		responder: opts.Responder,
		arrived:   make(chan struct{}),
		keep:      opts.KeepRequests,
	}
	if s.maxBody <= 0 {
		s.maxBody = DefaultMaxBodyBytes
	}
	if s.logf == nil {
		s.logf = func(string, ...any) {}
	}
	s.srv = &http.Server{
		Handler:           http.HandlerFunc(s.serveHTTP),
		ReadHeaderTimeout: 10 * time.Second,
		// Every connection is counted until its goroutine is done with
		// it: net/http's Close does not wait for them (one that closed
		// after an unread body lingers 500 ms in closeWriteAndWait).
		ConnState: func(_ net.Conn, st http.ConnState) {
			switch st {
			case http.StateNew:
				s.conns.Add(1)
			case http.StateClosed, http.StateHijacked:
				s.conns.Done()
			}
		},
	}
	go func() {
		defer close(s.served)
		_ = s.srv.Serve(ln) // returns http.ErrServerClosed after Close
	}()
	return s, nil
}

// URL is the base URL of the API, "http://127.0.0.1:<port>/v1". Codex POSTs
// to URL()+"/responses".
func (s *Server) URL() string { return s.url }

// Close stops the Server: it drops every in-flight stream (slow or hanging
// ones included, so their clients see a transport error), closes the
// connections and waits for every handler goroutine to return. Close is
// idempotent; with no error to report it fits t.Cleanup(s.Close).
func (s *Server) Close() {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		<-s.served
		return
	}
	s.closed = true
	close(s.done)
	close(s.arrived) // wake WaitRequests callers; they see closed
	s.mu.Unlock()

	_ = s.srv.Close() // only reports the listener's close error
	s.handlers.Wait()
	<-s.served
	s.conns.Wait()
}

// Enqueue appends scripts to the FIFO queue. Each request takes the first
// queued Script; the Responder answers only when the queue is empty.
func (s *Server) Enqueue(scripts ...Script) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.queue = append(s.queue, scripts...)
}

// Pending is the number of queued Scripts not served yet.
func (s *Server) Pending() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.queue)
}

// SetResponder replaces the Responder used when the queue is empty. Nil
// restores DemoResponder. Requests already being answered are not affected.
func (s *Server) SetResponder(r Responder) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.responder = r
}

// Requests returns a copy of every request received so far, in order,
// including ones answered with 404 or 413.
func (s *Server) Requests() []Request {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.snapshotLocked()
}

func (s *Server) snapshotLocked() []Request {
	rs := s.requests
	if s.keep > 0 && len(rs) > s.keep {
		rs = rs[len(rs)-s.keep:]
	}
	out := make([]Request, len(rs))
	for i, r := range rs {
		out[i] = r.clone()
	}
	return out
}

// WaitRequests waits until at least n requests have been received and
// returns them all. It fails with ctx's error when ctx ends first, and with
// ErrClosed when the Server closes first.
func (s *Server) WaitRequests(ctx context.Context, n int) ([]Request, error) {
	for {
		s.mu.Lock()
		if s.seen >= n {
			out := s.snapshotLocked()
			s.mu.Unlock()
			return out, nil
		}
		if s.closed {
			got := s.seen
			s.mu.Unlock()
			return nil, fmt.Errorf("waiting for %d requests, got %d: %w", n, got, ErrClosed)
		}
		ch := s.arrived
		s.mu.Unlock()
		select {
		case <-ch:
		case <-ctx.Done():
			s.mu.Lock()
			got := s.seen
			s.mu.Unlock()
			return nil, fmt.Errorf("waiting for %d requests, got %d: %w", n, got, ctx.Err())
		}
	}
}

// enter registers a running handler, or reports that the Server is closed.
func (s *Server) enter() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return false
	}
	s.handlers.Add(1)
	return true
}

// record stores req, numbers it and wakes WaitRequests.
func (s *Server) record(req *Request) {
	s.mu.Lock()
	defer s.mu.Unlock()
	req.Seq = s.seen
	s.seen++
	s.requests = append(s.requests, req)
	if s.keep > 0 && len(s.requests) >= 2*s.keep {
		// A copy, so that the dropped requests' memory goes.
		s.requests = slices.Clone(s.requests[len(s.requests)-s.keep:])
	}
	if !s.closed {
		close(s.arrived)
		s.arrived = make(chan struct{})
	}
}

// next pops the next queued Script, or returns the Responder to ask.
func (s *Server) next() (Script, Responder, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.queue) > 0 {
		sc := s.queue[0]
		s.queue[0] = Script{}
		s.queue = s.queue[1:]
		return sc, nil, true
	}
	r := s.responder
	if r == nil {
		r = DemoResponder
	}
	return Script{}, r, false
}

func (s *Server) serveHTTP(w http.ResponseWriter, r *http.Request) {
	if !s.enter() {
		http.Error(w, "demomodel: server closed", http.StatusServiceUnavailable)
		return
	}
	defer s.handlers.Done()

	req := &Request{
		Received: time.Now(),
		Method:   r.Method,
		Path:     r.URL.Path,
		Header:   r.Header.Clone(),
	}
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, s.maxBody))
	var tooLarge *http.MaxBytesError
	switch {
	case errors.As(err, &tooLarge):
		req.Status = http.StatusRequestEntityTooLarge
	case err != nil:
		req.Status = http.StatusBadRequest
	default:
		req.Body = body
		req.parseBody()
	}

	responses := strings.TrimSuffix(pathOf(s.url), "/") + "/responses"
	switch {
	case req.Status != 0:
		// Body problem, decided above.
	case req.Path != responses:
		req.Status = http.StatusNotFound
	case r.Method != http.MethodPost:
		req.Status = http.StatusMethodNotAllowed
	case req.ParseError != nil:
		req.Status = http.StatusBadRequest
	}
	// Record before asking the Responder, so WaitRequests sees the request
	// at once and the Responder sees its Seq.
	s.record(req)
	if req.Status != 0 {
		s.logf("demomodel: #%d %s %s -> %d", req.Seq, req.Method, req.Path, req.Status)
		s.writeError(w, req, Script{})
		return
	}
	sc := s.choose(req)
	status := sc.Status
	if status == 0 {
		status = http.StatusOK
	}
	s.mu.Lock()
	req.Status = status
	s.mu.Unlock()
	s.logf("demomodel: #%d %s %s -> %d", req.Seq, req.Method, req.Path, status)
	if status != http.StatusOK {
		s.writeError(w, req, sc)
		return
	}
	s.stream(w, r, sc)
}

// choose picks the Script for a valid model request. A panicking Responder
// gets a 500, so a bad test script cannot take the Server down.
func (s *Server) choose(req *Request) (sc Script) {
	sc, responder, ok := s.next()
	if ok {
		return sc
	}
	s.mu.Lock()
	view := req.clone()
	s.mu.Unlock()
	defer func() {
		if p := recover(); p != nil {
			s.logf("demomodel: responder panicked: %v", p)
			sc = HTTPError(http.StatusInternalServerError, APIError{
				Message: fmt.Sprintf("demomodel: responder panicked: %v", p), Type: "server_error",
			})
		}
	}()
	return responder(&view)
}

// writeError answers with sc, a non-200 Script, or with the Server's own
// error for req.Status when sc is the zero Script.
func (s *Server) writeError(w http.ResponseWriter, req *Request, sc Script) {
	status := sc.Status
	if status == 0 {
		status = req.Status
		// The Server's own errors.
		msg := map[int]string{
			http.StatusNotFound:              "demomodel: no such path " + req.Path,
			http.StatusMethodNotAllowed:      "demomodel: method not allowed",
			http.StatusRequestEntityTooLarge: "demomodel: request body too large",
			http.StatusBadRequest:            "demomodel: bad request body",
		}[status]
		if req.ParseError != nil {
			msg += ": " + req.ParseError.Error()
		}
		sc = HTTPError(status, APIError{Message: msg, Type: "invalid_request_error"})
	}
	for k, vs := range sc.Header {
		for _, v := range vs {
			w.Header().Add(k, v)
		}
	}
	w.WriteHeader(status)
	_, _ = w.Write(sc.Body)
}

// stream writes sc as an SSE stream.
func (s *Server) stream(w http.ResponseWriter, r *http.Request, sc Script) {
	rc := http.NewResponseController(w)
	h := w.Header()
	for k, vs := range sc.Header {
		for _, v := range vs {
			h.Add(k, v)
		}
	}
	h.Set("Content-Type", "text/event-stream")
	h.Set("Cache-Control", "no-cache")
	w.WriteHeader(http.StatusOK)
	if rc.Flush() != nil {
		return
	}

	var timer *time.Timer
	defer func() {
		if timer != nil {
			timer.Stop()
		}
	}()
	var buf bytes.Buffer
	for _, ev := range sc.Events {
		if sc.Delay > 0 {
			if timer == nil {
				timer = time.NewTimer(sc.Delay)
			} else {
				timer.Reset(sc.Delay)
			}
			select {
			case <-timer.C:
			case <-r.Context().Done():
				return
			case <-s.done:
				s.cut(rc) // a closing server drops the connection
				return
			}
		}
		buf.Reset()
		fmt.Fprintf(&buf, "event: %s\ndata: %s\n\n", ev.Type, ev.Data)
		if _, err := w.Write(buf.Bytes()); err != nil {
			return
		}
		if rc.Flush() != nil {
			return
		}
	}
	switch {
	case sc.CutStream:
		s.cut(rc)
	case sc.HangStream:
		select {
		case <-r.Context().Done():
		case <-s.done:
			s.cut(rc)
		}
	}
}

// cut closes the connection without the final chunk.
func (s *Server) cut(rc *http.ResponseController) {
	conn, _, err := rc.Hijack()
	if err != nil {
		// Without a Hijacker, make net/http drop the connection.
		panic(http.ErrAbortHandler)
	}
	_ = conn.Close()
}

// pathOf is the path part of a URL made by Start.
func pathOf(url string) string {
	rest := strings.TrimPrefix(url, "http://")
	if i := strings.IndexByte(rest, '/'); i >= 0 {
		return rest[i:]
	}
	return "/"
}
