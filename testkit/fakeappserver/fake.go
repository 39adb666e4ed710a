package fakeappserver

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
	"time"

	"github.com/meshweaver/supervisor/codexproto"
)

// Version is the codex CLI version the fake imitates: the pinned one
// (codexproto/cli-version). Fake.Version makes one fake report another.
var Version = codexproto.PinnedCLIVersion

// defaultReply is the agent's answer when ReplyText is empty.
const defaultReply = "Hello from the fake app-server."

// garbageLines are the lines GarbageLines interleaves: not JSON, JSON that
// is not an object, an empty line, and control bytes.
var garbageLines = []string{
	"this is not json",
	`{"truncated":`,
	`[1,2,3]`,
	`"just a string"`,
	"",
	"\x00\x01\x02 binary noise",
	"null",
}

// junkLines are the lines JunkLines writes: garbageLines, a forged answer,
// and a notification with bad params (JSON-RPC, so a client hands it on).
var junkLines = append(append([]string(nil), garbageLines...),
	`{"id":987654321,"result":{"thread":{"id":"forged"}}}`,
	`{"method":"item/agentMessage/delta","params":"not an object"}`)

// Serve speaks the app-server protocol on r and w until r reaches EOF
// (then it returns nil, or with IgnoreStdinEOF waits for ctx), ctx ends
// (ctx.Err()), a knob makes it exit (*ExitError) or writing fails. It
// writes StderrLines to stderr first and again before it returns. It does
// not close w.
//
// Serve reads r on one goroutine of its own. When it returns before r
// reached EOF it closes r if r is an io.Closer (as a process exit closes
// its stdin) and waits for that goroutine; otherwise the goroutine stays
// blocked in r.Read until r returns.
func (f *Fake) Serve(ctx context.Context, r io.Reader, w io.Writer, stderr io.Writer) (err error) {
	s := newSession(f, w, stderr)
	s.stderrLines()
	defer s.stderrLines()

	if f.CodexHome != "" {
		if fi, err := os.Stat(f.CodexHome); err != nil || !fi.IsDir() {
			what := "does not exist"
			if err == nil {
				what = "is not a directory"
			}
			fmt.Fprintf(stderr, "WARNING: proceeding, even though we could not create PATH aliases: CODEX_HOME points to %q, but that path %s\nError: CODEX_HOME points to %q, but that path %s\n", f.CodexHome, what, f.CodexHome, what)
			return &ExitError{Code: 1, Reason: "CODEX_HOME " + what}
		}
	}
	if f.RecordPath != "" {
		rec, err := os.OpenFile(f.RecordPath, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o644)
		if err != nil {
			return fmt.Errorf("opening record file: %w", err)
		}
		defer rec.Close()
		s.record = rec
	}

	lines := make(chan []byte)
	readErr := make(chan error, 1)
	readDone := make(chan struct{})
	stopRead := make(chan struct{})
	go func() {
		defer close(readDone)
		br := bufio.NewReaderSize(r, 64<<10)
		for {
			line, err := br.ReadBytes('\n')
			if len(line) > 0 {
				select {
				case lines <- line:
				case <-stopRead:
					return
				}
			}
			if err != nil {
				readErr <- err
				return
			}
		}
	}()
	defer func() {
		close(stopRead)
		select {
		case <-readDone:
			return
		default:
		}
		if c, ok := r.(io.Closer); ok {
			_ = c.Close()
			<-readDone
		}
	}()

	s.flush() // anything written before the first line
	defer s.flush()
	var retries <-chan time.Time
	if f.UpstreamRetryMs > 0 {
		t := time.NewTicker(time.Duration(f.UpstreamRetryMs) * time.Millisecond)
		defer t.Stop()
		retries = t.C
	}
	for {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-retries:
			s.retryTick()
			s.flush()
			if s.werr != nil {
				return fmt.Errorf("writing: %w", s.werr)
			}
		case line := <-lines:
			err := s.handleLine(line)
			s.flush()
			if err != nil {
				return err
			}
			if s.werr != nil {
				return fmt.Errorf("writing: %w", s.werr)
			}
		case err := <-readErr:
			if !errors.Is(err, io.EOF) {
				return fmt.Errorf("reading: %w", err)
			}
			if !f.IgnoreStdinEOF {
				return nil
			}
			fmt.Fprintln(stderr, "fakeappserver: stdin closed; ignoring EOF")
			<-ctx.Done()
			return ctx.Err()
		}
	}
}

// session is the state of one Serve call. Only Serve's loop touches it.
type session struct {
	f         *Fake
	hog       []byte        // HogOnMethod's memory, held
	junked    bool          // JunkLines were written
	w         *bufio.Writer // flushed after each line handled (see Serve): a turn's flood is a few writes, not one per line
	stderr    io.Writer
	werr      error
	record    *os.File
	replyText string
	codexHome string

	garbage     int
	received    int
	initialized bool
	experiment  bool
	clientName  string
	clientVer   string
	overloads   map[string]int
	threads     map[string]*thread
	known       map[string]bool
	logins      map[string]bool
	nextReqID   int64
	pending     map[int64]*pendingRequest
	turns       int
	calls       int
	realMethods map[string]bool
	mcpHeld     []obj // final MCP startup statuses waiting for MCPStartupOn
	version     string
}

func newSession(f *Fake, w, stderr io.Writer) *session {
	s := &session{
		f:           f,
		w:           bufio.NewWriterSize(w, 64<<10),
		stderr:      stderr,
		replyText:   f.ReplyText,
		codexHome:   f.CodexHome,
		overloads:   map[string]int{},
		threads:     map[string]*thread{},
		known:       map[string]bool{},
		logins:      map[string]bool{},
		pending:     map[int64]*pendingRequest{},
		realMethods: map[string]bool{},
	}
	if s.version = f.Version; s.version == "" {
		s.version = Version
	}
	if s.replyText == "" {
		s.replyText = defaultReply
	}
	if s.codexHome == "" {
		s.codexHome = "/tmp/fakeappserver-codex-home"
	}
	for _, id := range f.KnownThreads {
		s.known[id] = true
	}
	for _, m := range realMethods {
		s.realMethods[m] = true
	}
	return s
}

func (s *session) stderrLines() {
	for _, l := range s.f.StderrLines {
		fmt.Fprintln(s.stderr, l)
	}
}

// incoming is any client line: request, notification or response.
type incoming struct {
	ID     json.RawMessage `json:"id"`
	Method *string         `json:"method"`
	Params json.RawMessage `json:"params"`
	Result json.RawMessage `json:"result"`
	Error  json.RawMessage `json:"error"`
}

func (s *session) handleLine(line []byte) error {
	trimmed := bytes.TrimSpace(line)
	if len(trimmed) == 0 {
		return nil
	}
	s.received++
	if s.record != nil {
		if _, err := s.record.Write(append(bytes.TrimRight(line, "\r\n"), '\n')); err != nil {
			return fmt.Errorf("recording: %w", err)
		}
	}
	if n := s.f.ExitAfterMessages; n > 0 && s.received >= n {
		return &ExitError{Code: s.f.ExitCode, Reason: fmt.Sprintf("received message %d (ExitAfterMessages)", s.received)}
	}
	var m incoming
	if err := json.Unmarshal(trimmed, &m); err != nil {
		// The real server logs this and keeps going without a reply.
		fmt.Fprintf(s.stderr, "ERROR fakeappserver: Failed to deserialize JSONRPCMessage: %v\n", err)
		return nil
	}
	if m.Method != nil && *m.Method == s.f.HogOnMethod && s.f.HogOnMethod != "" && bytes.Contains(m.Params, []byte(s.f.HogOnText)) {
		s.hog = make([]byte, s.f.HogBytes)
		for i := 0; i < len(s.hog); i += 4096 {
			s.hog[i] = 1
		}
	}
	if m.Method != nil && *m.Method == s.f.ExitOnMethod && s.f.ExitOnMethod != "" {
		return &ExitError{Code: s.f.ExitCode, Reason: "received " + *m.Method + " (ExitOnMethod)"}
	}
	switch {
	case m.Method != nil && m.ID != nil:
		if *m.Method == s.f.MCPStartupOn {
			for _, st := range s.mcpHeld {
				s.notify("mcpServer/startupStatus/updated", st)
			}
			s.mcpHeld = nil
		}
		s.request(m.ID, *m.Method, m.Params)
		s.junk(*m.Method, m.Params)
	case m.Method != nil:
		// Client notifications: "initialized" needs nothing.
	case m.ID != nil:
		s.response(m.ID, m.Result, m.Error)
	default:
		fmt.Fprintf(s.stderr, "ERROR fakeappserver: Failed to deserialize JSONRPCMessage: neither method nor id\n")
	}
	return nil
}

// junk writes JunkLines once, after the first request of JunkOnMethod
// (initialize when empty) whose params hold JunkOnText was handled.
func (s *session) junk(method string, params json.RawMessage) {
	on := s.f.JunkOnMethod
	if on == "" {
		on = "initialize"
	}
	if s.f.JunkLines <= 0 || s.junked || method != on || !bytes.Contains(params, []byte(s.f.JunkOnText)) {
		return
	}
	s.junked = true
	for i := 0; i < s.f.JunkLines && s.werr == nil; i++ {
		_, s.werr = io.WriteString(s.w, junkLines[i%len(junkLines)]+"\n")
	}
}

// obj is a JSON object under construction.
type obj = map[string]any

func marshal(v any) []byte {
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		panic(fmt.Sprintf("fakeappserver: marshaling %T: %v", v, err)) // a bug in the fake
	}
	return bytes.TrimSuffix(b.Bytes(), []byte("\n"))
}

// flush writes what the session's lines left in its buffer.
func (s *session) flush() {
	if s.werr == nil {
		s.werr = s.w.Flush()
	}
}

func (s *session) writeLine(line []byte) {
	if s.werr != nil {
		return
	}
	if s.f.GarbageLines {
		g := garbageLines[s.garbage%len(garbageLines)]
		s.garbage++
		if _, s.werr = io.WriteString(s.w, g+"\n"); s.werr != nil {
			return
		}
	}
	_, s.werr = s.w.Write(append(line, '\n'))
}

// notificationLine builds {"method","params","emittedAtMs"} in the real
// server's key order.
func notificationLine(method string, params any, emittedAtMs int64) []byte {
	var b bytes.Buffer
	b.WriteString(`{"method":`)
	b.Write(marshal(method))
	b.WriteString(`,"params":`)
	b.Write(marshal(params))
	b.WriteString(`,"emittedAtMs":`)
	b.WriteString(strconv.FormatInt(emittedAtMs, 10))
	b.WriteByte('}')
	return b.Bytes()
}

func (s *session) notify(method string, params any) {
	s.writeLine(notificationLine(method, params, nowMs()))
}

func (s *session) reply(id json.RawMessage, result any) {
	var b bytes.Buffer
	b.WriteString(`{"id":`)
	b.Write(id)
	b.WriteString(`,"result":`)
	b.Write(marshal(result))
	b.WriteByte('}')
	s.writeLine(b.Bytes())
}

func (s *session) replyError(id json.RawMessage, code int, message string) {
	var b bytes.Buffer
	b.WriteString(`{"error":`)
	b.Write(marshal(obj{"code": code, "message": message}))
	b.WriteString(`,"id":`)
	b.Write(id)
	b.WriteByte('}')
	s.writeLine(b.Bytes())
}

func (s *session) invalid(id json.RawMessage, message string) {
	s.replyError(id, -32600, message)
}

func (s *session) sendRequest(id int64, method string, params json.RawMessage) {
	var b bytes.Buffer
	b.WriteString(`{"method":`)
	b.Write(marshal(method))
	b.WriteString(`,"id":`)
	b.WriteString(strconv.FormatInt(id, 10))
	b.WriteString(`,"params":`)
	b.Write(params)
	b.WriteByte('}')
	s.writeLine(b.Bytes())
}

func nowMs() int64 { return time.Now().UnixMilli() }

// unknownVariant is the real server's answer to a method it cannot
// deserialize.
func unknownVariant(method string) string {
	var b strings.Builder
	b.WriteString("Invalid request: unknown variant `")
	b.WriteString(method)
	b.WriteString("`, expected one of ")
	for i, m := range realMethods {
		if i > 0 {
			b.WriteString(", ")
		}
		b.WriteString("`" + m + "`")
	}
	return b.String()
}
