package codexhome_test

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/meshweaver/supervisor/codexproc"
	"github.com/meshweaver/supervisor/demomodel"
	"github.com/meshweaver/supervisor/testkit/codexhome"
	"github.com/meshweaver/supervisor/testkit/syncbuf"
)

// waitTimeout bounds every wait on the real CLI. It is generous because CI
// machines are shared; a healthy wait takes well under a second.
const waitTimeout = 60 * time.Second

// wireMsg is one line from the app-server: a response, a notification or a
// server request.
type wireMsg struct {
	ID     json.RawMessage `json:"id,omitempty"`
	Method string          `json:"method,omitempty"`
	Params json.RawMessage `json:"params,omitempty"`
	Result json.RawMessage `json:"result,omitempty"`
	Error  json.RawMessage `json:"error,omitempty"`
	raw    string
}

// appServer drives a real `codex app-server` over raw newline-delimited JSON.
type appServer struct {
	t      testing.TB
	cmd    *exec.Cmd
	stdin  io.WriteCloser
	stderr *syncbuf.Buffer
	nextID int
	cursor int // index of the first message collect has not consumed

	readDone chan struct{} // closed when stdout hit EOF

	mu      sync.Mutex
	msgs    []wireMsg
	changed chan struct{} // closed and replaced on each message and at EOF
	eof     bool
}

// env is the per-test setup: a mock model and a CODEX_HOME that points at it.
type env struct {
	mock *demomodel.Server
	home string
	work string // an absolute, existing cwd for threads
}

func newEnv(t *testing.T, opts ...codexhome.Option) *env {
	t.Helper()
	mock, err := demomodel.Start(demomodel.Options{Logf: t.Logf})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(mock.Close) // registered first, so it runs after the CLI is gone
	dir := t.TempDir()
	home, err := codexhome.MkHome(dir, mock.URL(), opts...)
	if err != nil {
		t.Fatal(err)
	}
	work := filepath.Join(dir, "work")
	if err := os.Mkdir(work, 0o755); err != nil {
		t.Fatal(err)
	}
	return &env{mock: mock, home: home, work: work}
}

// startAppServer spawns the real CLI in its own process group and registers
// a cleanup that closes stdin, then kills the group, and waits.
func startAppServer(t *testing.T, e *env, extraArgs ...string) *appServer {
	t.Helper()
	bin, err := codexhome.CodexBin()
	if err != nil {
		t.Fatalf("the real codex CLI is required: %v", err) // fail, never skip
	}
	args := append([]string{"app-server"}, extraArgs...)
	cmd := exec.Command(bin, args...)
	// TMPDIR outside the test's folder: the CLI refuses to make its helper
	// links (codex-linux-sandbox, which its own sandbox execs) in a
	// CODEX_HOME under TMPDIR, and then a sandboxed patch can fail. HOME is
	// the CODEX_HOME, as the daemon gives it: the CLI's login-shell
	// snapshot must not read the machine's ~/.bashrc (here a pyenv init
	// whose rehash lock outlived the tests as orphans).
	env := append(codexhome.Env(os.Environ(), e.home), "TMPDIR=/var/tmp", "HOME="+e.home)
	cmd.Env = codexproc.PreferBundledBwrap(env, bin)
	cmd.Dir = e.work
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.WaitDelay = 5 * time.Second
	a := &appServer{t: t, cmd: cmd, stderr: &syncbuf.Buffer{}, readDone: make(chan struct{}), changed: make(chan struct{})}
	cmd.Stderr = a.stderr
	a.stdin, err = cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatalf("starting %s: %v", bin, err)
	}
	go a.read(stdout)
	t.Cleanup(a.stop)
	return a
}

// read owns stdout until EOF.
func (a *appServer) read(stdout io.Reader) {
	defer close(a.readDone)
	r := bufio.NewReaderSize(stdout, 1<<20)
	for {
		line, err := r.ReadBytes('\n')
		if len(bytes.TrimSpace(line)) > 0 {
			m := wireMsg{raw: string(line)}
			if jerr := json.Unmarshal(line, &m); jerr != nil {
				m.Method = "<non-json>"
			}
			a.mu.Lock()
			a.msgs = append(a.msgs, m)
			close(a.changed)
			a.changed = make(chan struct{})
			a.mu.Unlock()
		}
		if err != nil {
			a.mu.Lock()
			a.eof = true
			close(a.changed)
			a.changed = make(chan struct{})
			a.mu.Unlock()
			return
		}
	}
}

// stop ends the process politely (stdin EOF), then kills its process group,
// and waits for it and the reader.
func (a *appServer) stop() {
	_ = a.stdin.Close()
	select {
	case <-a.readDone:
	case <-time.After(5 * time.Second):
		a.t.Logf("app-server did not exit on stdin EOF; killing its process group")
	}
	// Kill whatever is left in the group (the CLI or commands it ran).
	_ = syscall.Kill(-a.cmd.Process.Pid, syscall.SIGKILL)
	select {
	case <-a.readDone:
	case <-time.After(waitTimeout):
		a.t.Errorf("app-server stdout still open %v after SIGKILL; something outside its group holds it", waitTimeout)
	}
	err := a.cmd.Wait() // closes stdout after the exit, ending the reader
	<-a.readDone
	var exitErr *exec.ExitError
	if err != nil && !errors.As(err, &exitErr) {
		a.t.Errorf("waiting for app-server: %v", err)
	}
	if a.t.Failed() || os.Getenv("CODEXHOME_DEBUG") != "" {
		a.t.Logf("app-server stderr:\n%s", tail(a.stderr.String(), 8000))
		a.mu.Lock()
		for i, m := range a.msgs {
			a.t.Logf("out[%d] %s", i, tail(strings.TrimSpace(m.raw), 600))
		}
		a.mu.Unlock()
	}
}

func tail(s string, n int) string {
	if len(s) > n {
		return "…" + s[len(s)-n:]
	}
	return s
}

func (a *appServer) send(v any) {
	a.t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		a.t.Fatal(err)
	}
	if _, err := a.stdin.Write(append(b, '\n')); err != nil {
		a.t.Fatalf("writing to app-server: %v", err)
	}
}

// waitMsg waits until match accepts a message at index >= from, and returns
// its index. It fails the test on timeout or EOF.
func (a *appServer) waitMsg(from int, desc string, match func(wireMsg) bool) int {
	a.t.Helper()
	deadline := time.NewTimer(waitTimeout)
	defer deadline.Stop()
	for {
		a.mu.Lock()
		for i := from; i < len(a.msgs); i++ {
			if match(a.msgs[i]) {
				a.mu.Unlock()
				return i
			}
		}
		from = len(a.msgs)
		eof, ch := a.eof, a.changed
		a.mu.Unlock()
		if eof {
			a.t.Fatalf("app-server exited while waiting for %s", desc)
		}
		select {
		case <-ch:
		case <-deadline.C:
			a.t.Fatalf("timed out after %v waiting for %s", waitTimeout, desc)
		}
	}
}

// call sends a request and returns its result, failing on an error reply.
func (a *appServer) call(method string, params any) json.RawMessage {
	a.t.Helper()
	a.nextID++
	id := a.nextID
	a.send(map[string]any{"id": id, "method": method, "params": params})
	want := fmt.Sprint(id)
	i := a.waitMsg(0, "reply to "+method, func(m wireMsg) bool {
		return m.Method == "" && string(m.ID) == want
	})
	a.mu.Lock()
	m := a.msgs[i]
	a.mu.Unlock()
	if m.Error != nil {
		a.t.Fatalf("%s failed: %s", method, m.Error)
	}
	return m.Result
}

// collect returns the messages from the cursor up to and including the first
// notification with the method, and moves the cursor past it.
func (a *appServer) collect(method string) []wireMsg {
	a.t.Helper()
	i := a.waitMsg(a.cursor, method, func(m wireMsg) bool { return m.Method == method && m.ID == nil })
	a.mu.Lock()
	out := append([]wireMsg(nil), a.msgs[a.cursor:i+1]...)
	a.mu.Unlock()
	a.cursor = i + 1
	return out
}

// handshake sends initialize and initialized.
func (a *appServer) handshake() {
	a.t.Helper()
	a.call("initialize", map[string]any{
		"clientInfo":   map[string]any{"name": "codexhome-test", "version": "0.1"},
		"capabilities": map[string]any{"experimentalApi": true},
	})
	a.send(map[string]any{"method": "initialized"})
}

// startThread starts a never-ask thread in cwd with the sandbox mode
// ("read-only", "workspace-write", ...) and returns its id.
func (a *appServer) startThread(cwd, sandbox string) string {
	a.t.Helper()
	res := a.call("thread/start", map[string]any{"cwd": cwd, "sandbox": sandbox, "approvalPolicy": "never"})
	var v struct {
		Thread struct {
			ID string `json:"id"`
		} `json:"thread"`
	}
	if err := json.Unmarshal(res, &v); err != nil || v.Thread.ID == "" {
		a.t.Fatalf("thread/start result %s: %v", res, err)
	}
	return v.Thread.ID
}

// runTurn starts a turn and returns every message up to its turn/completed.
func (a *appServer) runTurn(threadID, text string) []wireMsg {
	a.t.Helper()
	a.call("turn/start", map[string]any{
		"threadId": threadID,
		"input":    []any{map[string]any{"type": "text", "text": text}},
		"summary":  "auto",
	})
	return a.collect("turn/completed")
}

// params decodes a message's params into v.
func params[T any](t testing.TB, m wireMsg) T {
	t.Helper()
	var v T
	if err := json.Unmarshal(m.Params, &v); err != nil {
		t.Fatalf("decoding %s params %s: %v", m.Method, m.Params, err)
	}
	return v
}

// byMethod filters msgs to the notifications with the method.
func byMethod(msgs []wireMsg, method string) []wireMsg {
	var out []wireMsg
	for _, m := range msgs {
		if m.Method == method && m.ID == nil {
			out = append(out, m)
		}
	}
	return out
}

// deltas joins the item/agentMessage/delta texts and lists them.
func deltas(t testing.TB, msgs []wireMsg) []string {
	t.Helper()
	var out []string
	for _, m := range byMethod(msgs, "item/agentMessage/delta") {
		out = append(out, params[struct {
			Delta string `json:"delta"`
		}](t, m).Delta)
	}
	return out
}

// turnCompleted is the params of turn/completed.
type turnCompleted struct {
	ThreadID string `json:"threadId"`
	Turn     struct {
		ID     string            `json:"id"`
		Status string            `json:"status"`
		Items  []json.RawMessage `json:"items"`
		Error  *struct {
			Message        string          `json:"message"`
			CodexErrorInfo json.RawMessage `json:"codexErrorInfo"`
		} `json:"error"`
	} `json:"turn"`
}

// lastTurn decodes the turn/completed that ends msgs.
func lastTurn(t testing.TB, msgs []wireMsg) turnCompleted {
	t.Helper()
	return params[turnCompleted](t, msgs[len(msgs)-1])
}
