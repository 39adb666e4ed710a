package mcpecho

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/subtle"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"slices"
	"sync"
	"time"
)

// ErrClosed is returned by the Wait methods once the Server is closed.
var ErrClosed = errors.New("mcpecho: server closed")

// ProtocolVersion is the MCP protocol version the server answers with when
// the client asks for one it does not know.
const ProtocolVersion = "2025-06-18"

// knownVersions are the protocol versions the server accepts as asked.
var knownVersions = []string{"2024-11-05", "2025-03-26", "2025-06-18"}

// ServerName is serverInfo.name in the initialize result.
const ServerName = "meshweaver-mcpecho"

// Instructions is the initialize result's instructions text.
const Instructions = "Echo tools of the meshweaver mesh."

// maxBody bounds a request body.
const maxBody = 4 << 20

// JSON-RPC error codes the server uses.
const (
	codeParseError     = -32700
	codeInvalidRequest = -32600
	codeMethodNotFound = -32601
	codeInvalidParams  = -32602
)

// Options configures a Server. The zero value is usable.
type Options struct {
	// Token, if set, is the bearer token every request must carry
	// ("Authorization: Bearer <Token>"); others get 401.
	Token string
	// Annotations adds MCP tool annotations (e.g. {"readOnlyHint": true})
	// to the tools named by the keys.
	Annotations map[string]map[string]any
	// Logf, if set, receives one line per request.
	Logf func(format string, args ...any)
}

// Request is one HTTP request the Server received. Requests are snapshots:
// nothing changes them later.
type Request struct {
	// Seq numbers the requests of a Server from 0 in arrival order.
	Seq      int
	Received time.Time
	// Method is the HTTP method.
	Method string
	Path   string
	Header http.Header
	Body   []byte
	// RPCMethods are the JSON-RPC methods of the body, in order ("" for a
	// response the client sent).
	RPCMethods []string
	// Status is the HTTP status the Server answered with.
	Status int
}

// Authorization is the request's Authorization header.
func (r *Request) Authorization() string { return r.Header.Get("Authorization") }

// HasMethod reports whether the request carried the JSON-RPC method m.
func (r *Request) HasMethod(m string) bool { return slices.Contains(r.RPCMethods, m) }

// Call is one tools/call the Server answered.
type Call struct {
	Tool      string
	Arguments json.RawMessage
	// Meta is the params' _meta, as the client sent it.
	Meta json.RawMessage
	// Header holds the HTTP headers of the request that carried it.
	Header http.Header
}

// Server is a running MCP server. Its methods are safe for concurrent use.
type Server struct {
	url    string
	token  string
	annot  map[string]map[string]any
	logf   func(format string, args ...any)
	srv    *http.Server
	served chan struct{}

	mu       sync.Mutex
	closed   bool
	handlers sync.WaitGroup
	requests []*Request
	calls    []Call
	sessions map[string]bool // id -> open
	arrived  chan struct{}   // closed and replaced on each request
}

// Start listens on 127.0.0.1 on a free port and serves until Close.
func Start(opts Options) (*Server, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, fmt.Errorf("mcpecho: listening: %w", err)
	}
	s := &Server{
		url:      "http://" + ln.Addr().String() + "/mcp",
		token:    opts.Token,
		annot:    opts.Annotations,
		logf:     opts.Logf,
		served:   make(chan struct{}),
		sessions: map[string]bool{},
		arrived:  make(chan struct{}),
	}
	if s.logf == nil {
		s.logf = func(string, ...any) {}
	}
	s.srv = &http.Server{Handler: http.HandlerFunc(s.serveHTTP), ReadHeaderTimeout: 10 * time.Second}
	go func() {
		defer close(s.served)
		_ = s.srv.Serve(ln)
	}()
	return s, nil
}

// URL is the MCP endpoint, "http://127.0.0.1:<port>/mcp".
func (s *Server) URL() string { return s.url }

// Close stops the Server, closes every connection and waits for every
// handler to return. It is idempotent.
func (s *Server) Close() {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		<-s.served
		return
	}
	s.closed = true
	close(s.arrived)
	s.mu.Unlock()
	_ = s.srv.Close()
	s.handlers.Wait()
	<-s.served
}

// Requests returns a copy of every request received so far, in order.
func (s *Server) Requests() []Request {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.snapshotLocked()
}

func (s *Server) snapshotLocked() []Request {
	out := make([]Request, len(s.requests))
	for i, r := range s.requests {
		c := *r
		c.Header = r.Header.Clone()
		c.Body = bytes.Clone(r.Body)
		c.RPCMethods = slices.Clone(r.RPCMethods)
		out[i] = c
	}
	return out
}

// Calls returns every tools/call answered so far, in order.
func (s *Server) Calls() []Call {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]Call, len(s.calls))
	for i, c := range s.calls {
		c.Header = c.Header.Clone()
		out[i] = c
	}
	return out
}

// WaitRequests waits until at least n requests have been received and
// returns them all.
func (s *Server) WaitRequests(ctx context.Context, n int) ([]Request, error) {
	return s.WaitFor(ctx, func(rs []Request) bool { return len(rs) >= n })
}

// WaitFor waits until done, called with every request so far after each
// arrival, returns true; it returns the requests it was true for.
func (s *Server) WaitFor(ctx context.Context, done func([]Request) bool) ([]Request, error) {
	for {
		s.mu.Lock()
		rs := s.snapshotLocked()
		closed, ch := s.closed, s.arrived
		s.mu.Unlock()
		if done(rs) {
			return rs, nil
		}
		if closed {
			return nil, fmt.Errorf("waiting with %d requests: %w", len(rs), ErrClosed)
		}
		select {
		case <-ch:
		case <-ctx.Done():
			return nil, fmt.Errorf("waiting with %d requests: %w", len(rs), ctx.Err())
		}
	}
}

func (s *Server) enter() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return false
	}
	s.handlers.Add(1)
	return true
}

// record stores req with its final status and wakes the waiters.
func (s *Server) record(req *Request, status int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	req.Status = status
	req.Seq = len(s.requests)
	s.requests = append(s.requests, req)
	if !s.closed {
		close(s.arrived)
		s.arrived = make(chan struct{})
	}
	s.logf("mcpecho: #%d %s %s %v -> %d", req.Seq, req.Method, req.Path, req.RPCMethods, status)
}

// message is one JSON-RPC message as received.
type message struct {
	ID     json.RawMessage `json:"id,omitempty"`
	Method string          `json:"method,omitempty"`
	Params json.RawMessage `json:"params,omitempty"`
}

func (m *message) isRequest() bool { return m.Method != "" && len(m.ID) > 0 && string(m.ID) != "null" }

type rpcError struct {
	Code    int    `json:"code"`
	Message string `json:"message"`
}

type reply struct {
	JSONRPC string          `json:"jsonrpc"`
	ID      json.RawMessage `json:"id"`
	Result  any             `json:"result,omitempty"`
	Error   *rpcError       `json:"error,omitempty"`
}

func (s *Server) serveHTTP(w http.ResponseWriter, r *http.Request) {
	if !s.enter() {
		http.Error(w, "mcpecho: closed", http.StatusServiceUnavailable)
		return
	}
	defer s.handlers.Done()
	req := &Request{Received: time.Now(), Method: r.Method, Path: r.URL.Path, Header: r.Header.Clone()}
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, maxBody))
	req.Body = body
	var msgs []message
	batch := false
	if err == nil && r.Method == http.MethodPost {
		msgs, batch, err = parseBody(body)
		for _, m := range msgs {
			req.RPCMethods = append(req.RPCMethods, m.Method)
		}
	}

	switch {
	case r.URL.Path != pathOf(s.url):
		s.fail(w, req, http.StatusNotFound, "no such path")
	case s.token != "" && !s.authorized(r):
		w.Header().Set("WWW-Authenticate", `Bearer realm="mcpecho"`)
		s.fail(w, req, http.StatusUnauthorized, "missing or wrong bearer token")
	case r.Method == http.MethodGet:
		// The server-to-client stream is optional; 405 says there is none.
		w.Header().Set("Allow", "POST, DELETE")
		s.fail(w, req, http.StatusMethodNotAllowed, "no server-to-client stream")
	case r.Method == http.MethodDelete:
		s.mu.Lock()
		delete(s.sessions, r.Header.Get("Mcp-Session-Id"))
		s.mu.Unlock()
		s.record(req, http.StatusOK)
		w.WriteHeader(http.StatusOK)
	case r.Method != http.MethodPost:
		s.fail(w, req, http.StatusMethodNotAllowed, "method not allowed")
	case err != nil:
		s.record(req, http.StatusBadRequest)
		writeJSON(w, http.StatusBadRequest, nil, reply{JSONRPC: "2.0", ID: json.RawMessage("null"),
			Error: &rpcError{Code: codeParseError, Message: "parse error: " + err.Error()}})
	default:
		s.post(w, r, req, msgs, batch)
	}
}

func (s *Server) authorized(r *http.Request) bool {
	want := "Bearer " + s.token
	got := r.Header.Get("Authorization")
	return subtle.ConstantTimeCompare([]byte(got), []byte(want)) == 1
}

func (s *Server) fail(w http.ResponseWriter, req *Request, status int, msg string) {
	s.record(req, status)
	http.Error(w, "mcpecho: "+msg, status)
}

// post answers the JSON-RPC messages of one POST.
func (s *Server) post(w http.ResponseWriter, r *http.Request, req *Request, msgs []message, batch bool) {
	header := http.Header{}
	var replies []reply
	for _, m := range msgs {
		if !m.isRequest() {
			continue // notifications and responses need no answer
		}
		result, rerr := s.handle(&m, r, header)
		rep := reply{JSONRPC: "2.0", ID: m.ID, Result: result, Error: rerr}
		if rerr == nil && result == nil {
			rep.Result = struct{}{}
		}
		replies = append(replies, rep)
	}
	if len(replies) == 0 {
		s.record(req, http.StatusAccepted)
		w.WriteHeader(http.StatusAccepted)
		return
	}
	s.record(req, http.StatusOK)
	if batch {
		writeJSON(w, http.StatusOK, header, replies)
		return
	}
	writeJSON(w, http.StatusOK, header, replies[0])
}

// handle answers one request; it may set response headers.
func (s *Server) handle(m *message, r *http.Request, header http.Header) (any, *rpcError) {
	switch m.Method {
	case "initialize":
		var p struct {
			ProtocolVersion string `json:"protocolVersion"`
		}
		_ = json.Unmarshal(m.Params, &p)
		version := ProtocolVersion
		if slices.Contains(knownVersions, p.ProtocolVersion) {
			version = p.ProtocolVersion
		}
		id := newSessionID()
		s.mu.Lock()
		s.sessions[id] = true
		s.mu.Unlock()
		header.Set("Mcp-Session-Id", id)
		return map[string]any{
			"protocolVersion": version,
			"capabilities":    map[string]any{"tools": map[string]any{"listChanged": false}},
			"serverInfo":      map[string]any{"name": ServerName, "version": "0.1.0"},
			"instructions":    Instructions,
		}, nil
	case "ping":
		return struct{}{}, nil
	case "tools/list":
		return map[string]any{"tools": s.tools()}, nil
	case "tools/call":
		return s.call(m, r)
	case "resources/list":
		return map[string]any{"resources": []any{}}, nil
	case "resources/templates/list":
		return map[string]any{"resourceTemplates": []any{}}, nil
	case "prompts/list":
		return map[string]any{"prompts": []any{}}, nil
	}
	return nil, &rpcError{Code: codeMethodNotFound, Message: "method not found: " + m.Method}
}

func (s *Server) tools() []map[string]any {
	echo := map[string]any{
		"name":        "echo",
		"description": "Echo back the given text.",
		"inputSchema": map[string]any{
			"type":       "object",
			"properties": map[string]any{"text": map[string]any{"type": "string", "description": "what to echo"}},
			"required":   []string{"text"},
		},
	}
	fail := map[string]any{
		"name":        "fail",
		"description": "Always fails.",
		"inputSchema": map[string]any{"type": "object", "properties": map[string]any{}},
	}
	out := []map[string]any{echo, fail}
	for _, t := range out {
		if a, ok := s.annot[t["name"].(string)]; ok {
			t["annotations"] = a
		}
	}
	return out
}

func (s *Server) call(m *message, r *http.Request) (any, *rpcError) {
	var p struct {
		Name      string          `json:"name"`
		Arguments json.RawMessage `json:"arguments"`
		Meta      json.RawMessage `json:"_meta"`
	}
	if err := json.Unmarshal(m.Params, &p); err != nil {
		return nil, &rpcError{Code: codeInvalidParams, Message: "bad tools/call params: " + err.Error()}
	}
	s.mu.Lock()
	s.calls = append(s.calls, Call{Tool: p.Name, Arguments: bytes.Clone(p.Arguments), Meta: bytes.Clone(p.Meta), Header: r.Header.Clone()})
	s.mu.Unlock()
	switch p.Name {
	case "echo":
		var args struct {
			Text string `json:"text"`
		}
		_ = json.Unmarshal(p.Arguments, &args)
		return map[string]any{
			"content":           []any{map[string]any{"type": "text", "text": "echo: " + args.Text}},
			"structuredContent": map[string]any{"echoed": args.Text},
			"isError":           false,
		}, nil
	case "fail":
		return map[string]any{
			"content": []any{map[string]any{"type": "text", "text": "the fail tool failed, as it always does"}},
			"isError": true,
		}, nil
	}
	return nil, &rpcError{Code: codeInvalidParams, Message: "unknown tool: " + p.Name}
}

// parseBody reads one JSON-RPC message or a batch of them.
func parseBody(body []byte) ([]message, bool, error) {
	body = bytes.TrimSpace(body)
	if len(body) > 0 && body[0] == '[' {
		var msgs []message
		if err := json.Unmarshal(body, &msgs); err != nil {
			return nil, true, err
		}
		if len(msgs) == 0 {
			return nil, true, errors.New("empty batch")
		}
		return msgs, true, nil
	}
	var m message
	if err := json.Unmarshal(body, &m); err != nil {
		return nil, false, err
	}
	if m.Method == "" && len(m.ID) == 0 {
		return nil, false, fmt.Errorf("not a JSON-RPC message (code %d)", codeInvalidRequest)
	}
	return []message{m}, false, nil
}

func writeJSON(w http.ResponseWriter, status int, header http.Header, v any) {
	for k, vs := range header {
		for _, x := range vs {
			w.Header().Add(k, x)
		}
	}
	b, err := json.Marshal(v)
	if err != nil {
		http.Error(w, "mcpecho: encoding the reply: "+err.Error(), http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_, _ = w.Write(b)
}

func newSessionID() string {
	var b [16]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

// pathOf is the path part of a URL made by Start.
func pathOf(url string) string {
	for i := len("http://"); i < len(url); i++ {
		if url[i] == '/' {
			return url[i:]
		}
	}
	return "/"
}
