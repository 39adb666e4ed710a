package fakeappserver_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/meshweaver/supervisor/testkit/fakeappserver"
	"github.com/meshweaver/supervisor/testkit/schema"
)

func TestMain(m *testing.M) {
	// The re-exec tests run this binary as the fake.
	if os.Getenv(fakeappserver.EnvVar) != "" {
		fakeappserver.Main()
	}
	goleak.VerifyTestMain(m)
}

// timeout bounds every wait for the fake; nothing here sleeps.
const timeout = 10 * time.Second

type wireError struct {
	Code    int    `json:"code"`
	Message string `json:"message"`
}

// msg is one line the fake wrote.
type msg struct {
	raw         []byte
	ID          json.RawMessage `json:"id"`
	Method      string          `json:"method"`
	Params      json.RawMessage `json:"params"`
	Result      json.RawMessage `json:"result"`
	Error       *wireError      `json:"error"`
	EmittedAtMs *int64          `json:"emittedAtMs"`
}

func (m msg) isNotification() bool  { return m.Method != "" && m.ID == nil }
func (m msg) isServerRequest() bool { return m.Method != "" && m.ID != nil }
func (m msg) isResponse() bool      { return m.Method == "" && m.ID != nil }

func (m msg) String() string {
	if len(m.raw) > 300 {
		return string(m.raw[:300]) + "..."
	}
	return string(m.raw)
}

// dig returns the value at path inside raw JSON (numbers are float64), or
// nil.
func dig(raw json.RawMessage, path ...string) any {
	var v any
	if json.Unmarshal(raw, &v) != nil {
		return nil
	}
	for _, p := range path {
		switch x := v.(type) {
		case map[string]any:
			v = x[p]
		case []any:
			i, err := strconv.Atoi(p)
			if err != nil || i < 0 || i >= len(x) {
				return nil
			}
			v = x[i]
		default:
			return nil
		}
	}
	return v
}

func str(raw json.RawMessage, path ...string) string {
	s, _ := dig(raw, path...).(string)
	return s
}

// lockedBuffer is the fake's stderr.
type lockedBuffer struct {
	mu     sync.Mutex
	buf    bytes.Buffer
	notify chan struct{} // closed by the next Write
}

func (b *lockedBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.notify != nil {
		close(b.notify)
		b.notify = nil
	}
	return b.buf.Write(p)
}

// changed returns a channel that the next Write closes.
func (b *lockedBuffer) changed() <-chan struct{} {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.notify == nil {
		b.notify = make(chan struct{})
	}
	return b.notify
}

func (b *lockedBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// conn drives an in-process fake over io.Pipe with raw JSON lines. When v
// is set, every line the fake writes is checked against the real schema
// (fake-only methods excepted), and so is every request the test sends
// through call and every answer it sends through answer.
type conn struct {
	t        *testing.T
	stdin    *io.PipeWriter
	lines    chan []byte
	done     chan error
	served   bool
	serveErr error
	stderr   *lockedBuffer
	cancel   context.CancelFunc
	nextID   int
	sent     map[string]string // request id → method
	v        *schema.Validator
	fakeOnly map[string]bool
	// tolerant skips non-JSON lines (counted in garbage) instead of failing.
	tolerant  bool
	garbage   int
	validated int
}

func serve(t *testing.T, f fakeappserver.Fake) *conn {
	t.Helper()
	return serveWith(t, f, schema.ForTest(t))
}

func serveWith(t *testing.T, f fakeappserver.Fake, v *schema.Validator) *conn {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	inR, inW := io.Pipe()
	outR, outW := io.Pipe()
	c := &conn{
		t:        t,
		stdin:    inW,
		lines:    make(chan []byte, 4096),
		done:     make(chan error, 1),
		stderr:   &lockedBuffer{},
		cancel:   cancel,
		sent:     map[string]string{},
		v:        v,
		fakeOnly: map[string]bool{"fake/answer": true},
	}
	for _, m := range f.UnknownNotifications {
		c.fakeOnly[m] = true
	}
	for _, r := range f.ServerRequests {
		if v != nil && !v.HasResultSchema(schema.ServerRequest, r.Method) {
			c.fakeOnly[r.Method] = true // unknown to the schema on purpose
		}
	}
	go func() {
		err := f.Serve(ctx, inR, outW, c.stderr)
		outW.Close()
		c.done <- err
	}()
	stop := make(chan struct{})
	readerDone := make(chan struct{})
	go func() {
		defer close(readerDone)
		defer close(c.lines)
		br := bufio.NewReader(outR)
		for {
			line, err := br.ReadBytes('\n')
			if len(line) > 0 {
				select {
				case c.lines <- line:
				case <-stop:
					return
				}
			}
			if err != nil {
				return
			}
		}
	}()
	t.Cleanup(func() {
		cancel()
		inW.Close()
		close(stop)
		outR.Close()
		if !c.served {
			select {
			case <-c.done:
			case <-time.After(timeout):
				t.Errorf("Serve did not return within %v of cleanup", timeout)
			}
		}
		<-readerDone
	})
	return c
}

// send writes one raw line to the fake's stdin.
func (c *conn) send(line string) {
	c.t.Helper()
	errc := make(chan error, 1)
	go func() {
		_, err := io.WriteString(c.stdin, line+"\n")
		errc <- err
	}()
	select {
	case err := <-errc:
		if err != nil {
			c.t.Fatalf("writing to the fake: %v", err)
		}
	case <-time.After(timeout):
		c.t.Fatalf("writing to the fake: blocked for %v", timeout)
	}
}

func (c *conn) closeStdin() { c.stdin.Close() }

// nextRaw returns the next line the fake wrote, without its newline, and
// false at EOF.
func (c *conn) nextRaw() ([]byte, bool) {
	c.t.Helper()
	select {
	case line, ok := <-c.lines:
		if !ok {
			return nil, false
		}
		if !bytes.HasSuffix(line, []byte("\n")) {
			c.t.Errorf("line without a newline at EOF: %q", line)
		}
		return bytes.TrimSuffix(line, []byte("\n")), true
	case <-time.After(timeout):
		c.t.Fatalf("no line from the fake within %v; stderr:\n%s", timeout, c.stderr)
		return nil, false
	}
}

// next returns the next JSON message, checked against the schema.
func (c *conn) next() msg {
	c.t.Helper()
	for {
		raw, ok := c.nextRaw()
		if !ok {
			c.t.Fatalf("fake's stdout closed; stderr:\n%s", c.stderr)
		}
		var m msg
		if err := json.Unmarshal(raw, &m); err != nil || raw[0] != '{' {
			if c.tolerant {
				c.garbage++
				continue
			}
			c.t.Fatalf("fake wrote a non-object line %q", raw)
		}
		m.raw = raw
		c.check(m)
		return m
	}
}

// check validates one message against the schema and the framing facts of
// NOTES §0.
func (c *conn) check(m msg) {
	c.t.Helper()
	switch {
	case m.isNotification():
		if m.EmittedAtMs == nil {
			c.t.Errorf("notification without emittedAtMs: %v", m)
		}
	case m.isServerRequest(), m.isResponse():
		if m.EmittedAtMs != nil {
			c.t.Errorf("emittedAtMs on a non-notification: %v", m)
		}
	default:
		c.t.Errorf("message is neither notification, request nor response: %v", m)
	}
	if bytes.Contains(m.raw, []byte(`"jsonrpc"`)) {
		c.t.Errorf("fake wrote a jsonrpc field: %v", m)
	}
	if c.v == nil {
		return
	}
	var err error
	switch {
	case m.isNotification():
		if c.fakeOnly[m.Method] {
			return
		}
		err = c.v.ValidateServerNotification(m.raw)
	case m.isServerRequest():
		if c.fakeOnly[m.Method] {
			return
		}
		err = c.v.ValidateServerRequest(m.raw)
	case m.isResponse():
		method := c.sent[string(m.ID)]
		switch {
		case m.Error != nil:
			if m.Error.Code == 0 || m.Error.Message == "" || m.Result != nil {
				err = fmt.Errorf("malformed error response")
			}
		case method != "" && c.v.HasResultSchema(schema.ClientRequest, method):
			err = c.v.ValidateResult(method, m.Result)
		}
	}
	if err != nil {
		c.t.Errorf("fake wrote a message the real schema rejects: %v\n%v", err, m)
	}
	c.validated++
}

// request sends a request with a fresh integer id (no jsonrpc field, like
// the supervisor) and returns the id.
func (c *conn) request(method string, params any) string {
	c.t.Helper()
	c.nextID++
	id := strconv.Itoa(c.nextID)
	req := map[string]any{"id": c.nextID, "method": method}
	if params != nil {
		req["params"] = params
	}
	line, err := json.Marshal(req)
	if err != nil {
		c.t.Fatal(err)
	}
	if c.v != nil {
		if err := c.v.ValidateClientRequest(line); err != nil {
			c.t.Fatalf("test sends an invalid request: %v", err)
		}
	}
	c.sent[id] = method
	c.send(string(line))
	return id
}

// call sends a request and collects messages until its response.
func (c *conn) call(method string, params any) (resp msg, before []msg) {
	c.t.Helper()
	return c.await(c.request(method, params))
}

// await collects messages until the response with the given id.
func (c *conn) await(id string) (resp msg, before []msg) {
	c.t.Helper()
	for {
		m := c.next()
		if m.isResponse() && string(m.ID) == id {
			return m, before
		}
		before = append(before, m)
	}
}

// callOK is call for a request that must succeed.
func (c *conn) callOK(method string, params any) (result json.RawMessage, before []msg) {
	c.t.Helper()
	resp, before := c.call(method, params)
	if resp.Error != nil {
		c.t.Fatalf("%s failed: %d %s", method, resp.Error.Code, resp.Error.Message)
	}
	return resp.Result, before
}

// callErr is call for a request that must fail; it returns the error.
func (c *conn) callErr(method string, params any) wireError {
	c.t.Helper()
	resp, _ := c.call(method, params)
	if resp.Error == nil {
		c.t.Fatalf("%s succeeded with %s, want an error", method, resp.Result)
	}
	return *resp.Error
}

// until collects messages until a notification or server request with the
// given method.
func (c *conn) until(method string) (m msg, before []msg) {
	c.t.Helper()
	for {
		m := c.next()
		if m.Method == method {
			return m, before
		}
		before = append(before, m)
	}
}

// answer replies to a server request, checking the result against the
// schema when the method is known to it.
func (c *conn) answer(req msg, result any) {
	c.t.Helper()
	b, err := json.Marshal(result)
	if err != nil {
		c.t.Fatal(err)
	}
	if c.v != nil && c.v.HasResultSchema(schema.ServerRequest, req.Method) {
		if err := c.v.ValidateServerRequestResponse(req.Method, b); err != nil {
			c.t.Fatalf("test sends an invalid answer: %v", err)
		}
	}
	c.send(fmt.Sprintf(`{"id":%s,"result":%s}`, req.ID, b))
}

// wait returns what Serve returned.
func (c *conn) wait() error {
	c.t.Helper()
	if c.served {
		return c.serveErr
	}
	select {
	case c.serveErr = <-c.done:
		c.served = true
		return c.serveErr
	case <-time.After(timeout):
		c.t.Fatalf("Serve did not return within %v", timeout)
		return nil
	}
}

// expectEOF drains the fake's output and requires it to end.
func (c *conn) expectEOF() []msg {
	c.t.Helper()
	var rest []msg
	for {
		raw, ok := c.nextRaw()
		if !ok {
			return rest
		}
		var m msg
		if json.Unmarshal(raw, &m) == nil {
			m.raw = raw
			rest = append(rest, m)
		}
	}
}

// initialize performs the handshake the supervisor does.
func (c *conn) initialize() json.RawMessage {
	c.t.Helper()
	res, _ := c.callOK("initialize", map[string]any{"clientInfo": map[string]any{"name": "meshweaver", "version": "1.2.3"}})
	c.send(`{"method":"initialized"}`)
	return res
}

// startThread starts a thread and returns its id, consuming thread/started.
func (c *conn) startThread() string {
	c.t.Helper()
	res, _ := c.callOK("thread/start", map[string]any{"cwd": "/work/x", "sandbox": "read-only", "approvalPolicy": "never"})
	id := str(res, "thread", "id")
	started, _ := c.until("thread/started")
	if got := str(started.Params, "thread", "id"); got != id {
		c.t.Fatalf("thread/started for %q, want %q", got, id)
	}
	return id
}

func textInput(text string) []any {
	return []any{map[string]any{"type": "text", "text": text}}
}

func methods(ms []msg) []string {
	var out []string
	for _, m := range ms {
		if m.Method != "" {
			out = append(out, m.Method)
		} else {
			out = append(out, "response")
		}
	}
	return out
}

func exitCode(t *testing.T, err error) int {
	t.Helper()
	var exit *fakeappserver.ExitError
	if !errors.As(err, &exit) {
		t.Fatalf("Serve returned %v, want an *ExitError", err)
	}
	return exit.Code
}

func countLines(s, line string) int {
	n := 0
	for _, l := range strings.Split(s, "\n") {
		if l == line {
			n++
		}
	}
	return n
}
