package gateway

import (
	"context"
	"crypto/rand"
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"path"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/meshweaver/supervisor/edge"
	"github.com/meshweaver/supervisor/messages"
	"github.com/meshweaver/supervisor/third_party/hollywood/actor"
	"github.com/meshweaver/supervisor/third_party/hollywood/remote"
)

// Config configures a Gateway. Engine, Root and Gate are required.
type Config struct {
	// Engine is the daemon's engine; the gateway's reply actors live in it.
	Engine *actor.Engine
	// Root is the daemon's root actor, where every request goes.
	Root *actor.PID
	// Gate rate-limits, validates and authorizes each request, as it does
	// the remote's messages.
	Gate *edge.Gate
	// TLS, when set, serves HTTPS; give it the remote's server config
	// (client certificates required and verified) so that the identity of
	// a caller is the same on both sides. Nil serves plaintext.
	TLS *tls.Config
	// MaxBody bounds a request body (default messages.MaxBodySize, 16
	// MiB, the remote's: every field's own bound, the images' 12 MiB
	// among them, is then reachable and named in the refusal, as on the
	// remote).
	MaxBody int64
	// MaxStreams bounds the open event streams (rounds, attaches, logins)
	// per identity (per IP in plaintext); default 16.
	MaxStreams int
	// MaxConns bounds the connections held (default a quarter of the
	// process's RLIMIT_NOFILE, 64 to 16384): past it a new connection
	// closes the oldest silent one, or is refused when every one is busy
	// (conns.go).
	MaxConns int
	// ReadHeaderTimeout bounds the request line and headers (default 5s);
	// BodyTimeout bounds reading the body (default 30s); WriteTimeout
	// bounds each write to a stream (default 30s): a client that does not
	// read is cut off, and may attach again with Last-Event-ID.
	ReadHeaderTimeout time.Duration
	BodyTimeout       time.Duration
	WriteTimeout      time.Duration
	// Keepalive is how often an idle stream gets a comment line (default
	// 15s).
	Keepalive time.Duration
	// FirstReplyWait bounds how long a stream's status waits for the
	// first reply (default 2s): a refusal the daemon sends at once (busy,
	// unknown round, draining, at its user cap, invalid) gets its own
	// status; a round with nothing to say by then opens with 200, and a
	// later refusal is its last event.
	FirstReplyWait time.Duration
	// CallTimeout bounds the wait for a single answer (default 60s).
	CallTimeout time.Duration
	// Logger receives the gateway's log lines (slog.Default when nil).
	Logger *slog.Logger
}

// Gateway serves the daemon's messages over HTTP: rounds, attaches and
// logins as Server-Sent Events, the other calls as JSON.
type Gateway struct {
	cfg Config
	log *slog.Logger
	srv *http.Server
	seq atomic.Uint64

	conns *connTable

	mu      sync.Mutex
	streams map[string]int // open streams per peer
}

// New returns a gateway; Serve starts it.
func New(cfg Config) *Gateway {
	if cfg.MaxBody <= 0 {
		cfg.MaxBody = messages.MaxBodySize
	}
	if cfg.MaxStreams <= 0 {
		cfg.MaxStreams = 16
	}
	if cfg.MaxConns <= 0 {
		cfg.MaxConns = defaultMaxConns()
	}
	if cfg.ReadHeaderTimeout <= 0 {
		cfg.ReadHeaderTimeout = 5 * time.Second
	}
	if cfg.BodyTimeout <= 0 {
		cfg.BodyTimeout = 30 * time.Second
	}
	if cfg.WriteTimeout <= 0 {
		cfg.WriteTimeout = 30 * time.Second
	}
	if cfg.Keepalive <= 0 {
		cfg.Keepalive = 15 * time.Second
	}
	if cfg.FirstReplyWait <= 0 {
		cfg.FirstReplyWait = 2 * time.Second
	}
	if cfg.CallTimeout <= 0 {
		cfg.CallTimeout = 60 * time.Second
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	g := &Gateway{cfg: cfg, log: cfg.Logger.With("component", "gateway"), streams: make(map[string]int), conns: newConnTable(cfg.MaxConns)}
	g.srv = &http.Server{
		ConnState:         g.conns.state,
		Handler:           g.Handler(),
		ReadHeaderTimeout: cfg.ReadHeaderTimeout,
		IdleTimeout:       2 * time.Minute,
		MaxHeaderBytes:    64 << 10,
		ErrorLog:          newErrorLog(g.log),
	}
	return g
}

// Serve serves on ln (TLS when Config.TLS is set) until Shutdown; it
// returns http.ErrServerClosed then.
func (g *Gateway) Serve(ln net.Listener) error {
	if g.cfg.TLS != nil {
		ln = tls.NewListener(ln, g.cfg.TLS)
	}
	return g.srv.Serve(&limitListener{Listener: ln, t: g.conns})
}

// Shutdown stops accepting, ends the open streams and waits for the
// handlers until ctx ends. A round whose stream ends goes on in the
// daemon; its caller may attach again.
func (g *Gateway) Shutdown(ctx context.Context) error {
	err := g.srv.Shutdown(ctx)
	if errors.Is(err, context.DeadlineExceeded) || errors.Is(err, context.Canceled) {
		return g.srv.Close()
	}
	return err
}

// Handler is the gateway's routes.
func (g *Gateway) Handler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("POST /v1/rounds", g.startRound)
	mux.HandleFunc("GET /v1/rounds/{round_id}/events", g.attachGet)
	mux.HandleFunc("POST /v1/attach", g.attachPost)
	mux.HandleFunc("POST /v1/login", g.login)
	mux.HandleFunc("POST /v1/interrupt", call[messages.InterruptRound](g))
	mux.HandleFunc("POST /v1/steer", call[messages.SteerRound](g))
	mux.HandleFunc("POST /v1/answer", call[messages.AnswerRequest](g))
	mux.HandleFunc("POST /v1/api_key", call[messages.SetAPIKey](g))
	mux.HandleFunc("POST /v1/logout", call[messages.Logout](g))
	mux.HandleFunc("POST /v1/account", call[messages.AccountRequest](g))
	mux.HandleFunc("POST /v1/models", call[messages.ModelsRequest](g))
	mux.HandleFunc("POST /v1/rate_limits", call[messages.RateLimitsRequest](g))
	mux.HandleFunc("POST /v1/usage", call[messages.UsageRequest](g))
	mux.HandleFunc("POST /v1/codex", call[messages.CodexRequest](g))
	mux.HandleFunc("POST /v1/warm_up", call[messages.WarmUp](g))
	mux.HandleFunc("POST /v1/login/cancel", g.cancelLogin)
	// Everything else gets a JSON error too, not the mux's text or HTML:
	// no route (or not that method) is 404; a path that is not in its
	// clean form (dot segments, doubled slashes) is 404 rather than a
	// redirect, so a client never follows a path it did not write.
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		// The daemon's TLS config refuses such a certificate at the
		// handshake already; a gateway given another config must not
		// pick one of its names either.
		if err := remote.CheckIdentity(r.TLS); err != nil {
			fail(w, http.StatusForbidden, edge.ReasonUnauthorized, err)
			return
		}
		if _, pattern := mux.Handler(r); pattern == "" || path.Clean(r.URL.Path) != r.URL.Path {
			fail(w, http.StatusNotFound, "", errors.New("no route for this method and path (docs/REMOTE.md, \"HTTP gateway\")"))
			return
		}
		mux.ServeHTTP(w, r)
	})
}

// problem is the JSON body of every error answer.
type problem struct {
	Error  string `json:"error"`
	Reason string `json:"reason,omitempty"` // the edge's refusal reason
}

func writeJSON(w http.ResponseWriter, status int, body []byte) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_, _ = w.Write(append(body, '\n'))
}

func fail(w http.ResponseWriter, status int, reason string, err error) {
	b, _ := json.Marshal(problem{Error: err.Error(), Reason: reason})
	writeJSON(w, status, b)
}

// peer is who sent r: its certificate identity under TLS, and the peer
// key streams are counted by.
func peer(r *http.Request) (identity string, addr net.Addr) {
	identity = remote.DefaultIdentify(r.TLS)
	if tcp, err := net.ResolveTCPAddr("tcp", r.RemoteAddr); err == nil {
		addr = tcp
	}
	return identity, addr
}

// read decodes the body into a message of type T and admits it through
// the gate; on failure it has answered.
func read[T any](g *Gateway, w http.ResponseWriter, r *http.Request, edit func(*T)) (T, bool) {
	var m T
	rc := http.NewResponseController(w)
	if r.ContentLength > g.cfg.MaxBody {
		// Refused before a byte of it is read: no wait for a body that
		// may never come. The connection closes after the answer, and a
		// read deadline already past keeps the server from draining
		// what does come.
		_ = rc.SetReadDeadline(time.Now())
		w.Header().Set("Connection", "close")
		fail(w, http.StatusRequestEntityTooLarge, "", fmt.Errorf("the body is over %d bytes (Content-Length %d)", g.cfg.MaxBody, r.ContentLength))
		return m, false
	}
	_ = rc.SetReadDeadline(time.Now().Add(g.cfg.BodyTimeout))
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, g.cfg.MaxBody))
	if err != nil {
		// Nothing more of this body is wanted: the read deadline moves to
		// now, else net/http's drain of what is left (up to 256 KiB)
		// would wait for a trickled or withheld rest until the deadline.
		// The connection closes after the answer.
		_ = rc.SetReadDeadline(time.Now())
		w.Header().Set("Connection", "close")
	} else {
		_ = rc.SetReadDeadline(time.Time{})
	}
	if err != nil {
		var tooBig *http.MaxBytesError
		if errors.As(err, &tooBig) {
			fail(w, http.StatusRequestEntityTooLarge, "", fmt.Errorf("the body is over %d bytes", g.cfg.MaxBody))
			return m, false
		}
		fail(w, http.StatusBadRequest, "", fmt.Errorf("reading the body: %w", err))
		return m, false
	}
	if err := decodeJSON(body, &m); err != nil {
		fail(w, http.StatusBadRequest, edge.ReasonMalformed, err)
		return m, false
	}
	if edit != nil {
		edit(&m)
	}
	return m, g.admit(w, r, m)
}

// admit runs the gate's checks on a decoded message.
func (g *Gateway) admit(w http.ResponseWriter, r *http.Request, m any) bool {
	identity, addr := peer(r)
	reason, err := g.cfg.Gate.Admit(identity, addr, m)
	if err == nil {
		return true
	}
	status := http.StatusBadRequest
	switch reason {
	case edge.ReasonRate:
		status = http.StatusTooManyRequests
	case edge.ReasonUnauthorized:
		status = http.StatusForbidden
	}
	fail(w, status, reason, err)
	return false
}

// inbox is a reply actor: what the daemon sends it lands in ch. A reader
// that falls more than cap(ch) behind is cut off (over is closed).
type inbox struct {
	pid  *actor.PID
	ch   chan any
	over chan struct{}
}

func (g *Gateway) spawn() *inbox {
	in := &inbox{ch: make(chan any, 1024), over: make(chan struct{})}
	var once sync.Once
	in.pid = g.cfg.Engine.SpawnFunc(func(c *actor.Context) {
		switch m := c.Message().(type) {
		case actor.Initialized, actor.Started, actor.Stopped:
		default:
			if u, err := messages.Unwrap(m); err == nil {
				m = u
			}
			select {
			case in.ch <- m:
			default:
				once.Do(func() { close(in.over) })
			}
		}
	}, "gateway", actor.WithID(strconv.FormatUint(g.seq.Add(1), 10)), actor.WithInboxSize(64))
	return in
}

func (g *Gateway) stop(in *inbox) { <-g.cfg.Engine.Poison(in.pid).Done() }

// call is a JSON request answered by one message.
func call[T any](g *Gateway) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		m, ok := read[T](g, w, r, nil)
		if !ok {
			return
		}
		in := g.spawn()
		defer g.stop(in)
		g.cfg.Engine.SendWithSender(g.cfg.Root, m, in.pid)
		t := time.NewTimer(g.cfg.CallTimeout)
		defer t.Stop()
		select {
		case reply := <-in.ch:
			g.answer(w, reply)
		case <-t.C:
			fail(w, http.StatusGatewayTimeout, "", fmt.Errorf("no answer within %v", g.cfg.CallTimeout))
		case <-r.Context().Done():
		}
	}
}

// answer writes one reply as JSON with its status (refusalStatus): a
// Rejected as an error; any other reply with the same body it has on the
// wire, so that a client reading only the status does not take a refusal
// for done.
func (g *Gateway) answer(w http.ResponseWriter, reply any) {
	status := refusalStatus(reply)
	if rej, ok := reply.(messages.Rejected); ok {
		fail(w, status, "", errors.New(rej.Reason))
		return
	}
	b, err := encodeJSON(reply)
	if err != nil {
		fail(w, http.StatusInternalServerError, "", fmt.Errorf("encoding the answer: %w", err))
		return
	}
	if status == 0 {
		status = http.StatusOK
	}
	if v, ok := reply.(messages.RoundFinished); ok && status == http.StatusTooManyRequests && v.ErrorInfo.ResetsAtUnix > 0 {
		w.Header().Set("Retry-After", strconv.FormatInt(max(1, v.ErrorInfo.ResetsAtUnix-time.Now().Unix()), 10))
	}
	writeJSON(w, status, b)
}

// refusalStatus is the HTTP status of a reply that refuses its request,
// 0 for any other (docs/REMOTE.md, "HTTP gateway"):
//
//   - 400: the message is at fault (a Rejected of no class, a StartRound
//     that fails validation);
//   - 404: an unknown round (an attach's not_found verdict, an answer to
//     a round the user's actor does not know);
//   - 409: busy (a thread with its queue full) or no running round (an
//     interrupt, steer or answer the round refused);
//   - 429: a round refused because its user's token budget is spent, with
//     Retry-After (seconds until the budget frees up);
//   - 500: the daemon could not carry it out (a Rejected of class failed:
//     a write that failed, codex said no);
//   - 503: the node cannot take it now (at its user cap, draining, the
//     user's ownership moved, the user's codex cannot run or answer).
func refusalStatus(reply any) int {
	switch m := reply.(type) {
	case messages.Rejected:
		switch m.Class {
		case messages.RefusalUnavailable:
			return http.StatusServiceUnavailable
		case messages.RefusalFailed:
			return http.StatusInternalServerError
		}
		return http.StatusBadRequest
	case messages.RoundControlled:
		switch {
		case m.OK:
			return 0
		case m.NotFound:
			return http.StatusNotFound
		}
		return http.StatusConflict
	case messages.RoundFinished:
		switch m.Status {
		case messages.StatusRejected:
			if m.ErrorInfo != nil && m.ErrorInfo.Class == messages.ErrorBudget {
				return http.StatusTooManyRequests
			}
			return http.StatusBadRequest
		case messages.StatusNotFound:
			return http.StatusNotFound
		case messages.StatusBusy:
			return http.StatusConflict
		case messages.StatusUnavailable:
			return http.StatusServiceUnavailable
		}
	case messages.AccountResponse:
		return unavailableIf(m.Error)
	case messages.ModelsResponse:
		return unavailableIf(m.Error)
	case messages.RateLimitsResponse:
		return unavailableIf(m.Error)
	case messages.UsageResponse:
		return unavailableIf(m.Error)
	case messages.CodexResponse:
		return unavailableIf(m.Error)
	case messages.WarmedUp:
		return unavailableIf(m.Error)
	}
	return 0
}

// unavailableIf is 503 when a reply carries an error: the user's codex
// could not answer.
func unavailableIf(errText string) int {
	if errText != "" {
		return http.StatusServiceUnavailable
	}
	return 0
}

// cancelLogin has no answer of its own.
func (g *Gateway) cancelLogin(w http.ResponseWriter, r *http.Request) {
	m, ok := read[messages.CancelLogin](g, w, r, nil)
	if !ok {
		return
	}
	g.cfg.Engine.Send(g.cfg.Root, m)
	writeJSON(w, http.StatusAccepted, []byte(`{}`))
}

// startRound runs a round and streams it. The request's traceparent and
// tracestate headers (W3C trace context) become the round's, unless its
// body sets traceparent.
func (g *Gateway) startRound(w http.ResponseWriter, r *http.Request) {
	m, ok := read(g, w, r, func(m *messages.StartRound) {
		if m.RoundID == "" {
			m.RoundID = "gw-" + rand.Text()
		}
		if m.Traceparent == "" {
			m.Traceparent = r.Header.Get("traceparent")
			m.Tracestate = strings.Join(r.Header.Values("tracestate"), ",")
		}
	})
	if !ok {
		return
	}
	w.Header().Set("X-Round-Id", m.RoundID)
	g.stream(w, r, m)
}

// attachGet is AttachRound for EventSource clients: the user in the query,
// the last seq in Last-Event-ID (or after_seq).
func (g *Gateway) attachGet(w http.ResponseWriter, r *http.Request) {
	m := messages.AttachRound{User: r.URL.Query().Get("user"), RoundID: r.PathValue("round_id")}
	after := r.URL.Query().Get("after_seq")
	if id := r.Header.Get("Last-Event-ID"); id != "" {
		after = id
	}
	if after != "" {
		n, err := strconv.ParseUint(after, 10, 64)
		if err != nil {
			fail(w, http.StatusBadRequest, edge.ReasonMalformed, errors.New("Last-Event-ID (or after_seq) is not a seq"))
			return
		}
		m.AfterSeq = n
	}
	if !g.admit(w, r, m) {
		return
	}
	g.stream(w, r, m)
}

// attachPost is AttachRound as JSON; a Last-Event-ID header wins over
// after_seq when it is larger.
func (g *Gateway) attachPost(w http.ResponseWriter, r *http.Request) {
	m, ok := read(g, w, r, func(m *messages.AttachRound) {
		if n, err := strconv.ParseUint(r.Header.Get("Last-Event-ID"), 10, 64); err == nil && n > m.AfterSeq {
			m.AfterSeq = n
		}
	})
	if ok {
		g.stream(w, r, m)
	}
}

func (g *Gateway) login(w http.ResponseWriter, r *http.Request) {
	if m, ok := read[messages.StartLogin](g, w, r, nil); ok {
		g.stream(w, r, m)
	}
}

// stream sends m and writes what comes back as Server-Sent Events until
// the last reply (a verdict, a login's end, a refusal), the client's
// departure, or a write that does not go through.
func (g *Gateway) stream(w http.ResponseWriter, r *http.Request, m any) {
	identity, addr := peer(r)
	key := edge.PeerKey(identity, addr, nil)
	if !g.takeStream(key) {
		fail(w, http.StatusTooManyRequests, edge.ReasonRate, fmt.Errorf("%d event streams are open for this peer", g.cfg.MaxStreams))
		return
	}
	defer g.dropStream(key)
	in := g.spawn()
	defer g.stop(in)

	g.cfg.Engine.SendWithSender(g.cfg.Root, m, in.pid)
	tick := time.NewTicker(g.cfg.Keepalive)
	defer tick.Stop()
	// The status waits for the first reply: a stream refused at once (a
	// verdict of busy, not_found, unavailable, rejected; a Rejected) is
	// answered with its status and its body as JSON, like a call. A reply
	// that is not a refusal, or FirstReplyWait first, opens the stream
	// with 200; a refusal after that is the stream's last event.
	wait := time.NewTimer(g.cfg.FirstReplyWait)
	defer wait.Stop()
	var first any
	select {
	case first = <-in.ch:
		if status := refusalStatus(first); status != 0 {
			if _, terminal := sseFrame(first); terminal {
				g.answer(w, first)
				return
			}
		}
	case <-in.over:
		fail(w, http.StatusServiceUnavailable, "", errors.New("the client did not keep up; attach again with Last-Event-ID"))
		return
	case <-wait.C:
	case <-r.Context().Done():
		return
	}
	h := w.Header()
	h.Set("Content-Type", "text/event-stream")
	h.Set("Cache-Control", "no-cache")
	h.Set("X-Accel-Buffering", "no")
	w.WriteHeader(http.StatusOK)
	rc := http.NewResponseController(w)
	write := func(b []byte) bool {
		_ = rc.SetWriteDeadline(time.Now().Add(g.cfg.WriteTimeout))
		if _, err := w.Write(b); err != nil {
			return false
		}
		return rc.Flush() == nil
	}
	if !write([]byte(": stream open\n\n")) {
		return
	}
	if first != nil {
		frame, last := sseFrame(first)
		if frame != nil && !write(frame) || last {
			return
		}
	}
	for {
		select {
		case reply := <-in.ch:
			frame, last := sseFrame(reply)
			if frame != nil && !write(frame) {
				return
			}
			if last {
				return
			}
		case <-in.over:
			write([]byte("event: error\ndata: {\"error\":\"the client did not keep up; attach again with Last-Event-ID\"}\n\n"))
			return
		case <-tick.C:
			if !write([]byte(": keepalive\n\n")) {
				return
			}
		case <-r.Context().Done():
			return
		}
	}
}

// sseFrame is one reply as an SSE event; last is true for the stream's
// last reply.
func sseFrame(reply any) (frame []byte, last bool) {
	var event, id string
	switch m := reply.(type) {
	case messages.RoundEvent:
		event, id = "round_event", strconv.FormatUint(m.Seq, 10)
	case messages.RoundFinished:
		event, last = "round_finished", true
	case messages.LoginChallenge:
		event = "login_challenge"
	case messages.LoginFinished:
		event, last = "login_finished", true
	case messages.Rejected:
		event, last = "rejected", true
	default:
		return nil, false
	}
	b, err := encodeJSON(reply)
	if err != nil {
		return nil, false
	}
	if id != "" {
		frame = append(frame, "id: "+id+"\n"...)
	}
	frame = append(frame, "event: "+event+"\ndata: "...)
	frame = append(frame, b...)
	return append(frame, "\n\n"...), last
}

// Conns is the number of connections held now; Shed counts those closed
// to make room for new ones (evicted: the oldest silent one) and those
// refused because every held one was busy.
func (g *Gateway) Conns() int { return g.conns.held() }

// Shed is the connections evicted and refused so far (see Conns).
func (g *Gateway) Shed() (evicted, refused uint64) {
	return g.conns.evicted.Load(), g.conns.refused.Load()
}

// Streams is the number of event streams open now.
func (g *Gateway) Streams() int {
	g.mu.Lock()
	defer g.mu.Unlock()
	n := 0
	for _, c := range g.streams {
		n += c
	}
	return n
}

func (g *Gateway) takeStream(key string) bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.streams[key] >= g.cfg.MaxStreams {
		return false
	}
	g.streams[key]++
	return true
}

func (g *Gateway) dropStream(key string) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.streams[key]--; g.streams[key] <= 0 {
		delete(g.streams, key)
	}
}
