package bench

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"sync"
	"syscall"
	"time"

	"github.com/meshweaver/supervisor/codexproto"
	"github.com/meshweaver/supervisor/codexrpc"
)

// DirectConfig is how a Direct client starts its CLI: what the daemon
// gives its app-servers, so that both sides run the same thing.
type DirectConfig struct {
	Bin       string   // the codex binary
	Home      string   // CODEX_HOME (created 0700)
	Dir       string   // working directory, and every thread's cwd
	Overrides []string // -c key=value, as the daemon passes them
	Env       []string // the whole environment, CODEX_HOME excepted
	Sandbox   string   // thread sandbox (the daemon's)
	Approval  string   // thread approval policy (the daemon's)
	// ThreadConfig, when set, is the config overlay of thread/start and
	// thread/resume.
	ThreadConfig map[string]any
	// OwnSession starts the CLI in a session of its own, as bubblewrap
	// (--new-session) starts a sandboxed one: where the kernel groups
	// processes by session for the scheduler (autogroup), it then gets
	// its own share of the CPU, not a share of the bench's.
	OwnSession bool
}

// Direct is a minimal stdio client of `codex app-server`: what a user
// would write instead of using the daemon. One turn runs at a time per
// thread; its notifications are read by the Conn's one goroutine.
type Direct struct {
	cfg  DirectConfig
	cmd  *exec.Cmd
	conn *codexrpc.Conn

	mu    sync.Mutex
	turns map[string]*turnWatch // by thread id: the turn running there
}

// turnWatch times one turn from the moment turn/start was sent.
type turnWatch struct {
	first chan struct{} // closed at the first agent text delta
	done  chan string   // the turn/completed status
	once  sync.Once
}

// Timing is one round's latencies from the send.
type Timing struct {
	FirstDelta time.Duration
	Verdict    time.Duration
}

// StartDirect spawns the CLI and initializes the connection.
func StartDirect(ctx context.Context, cfg DirectConfig) (*Direct, error) {
	if err := os.MkdirAll(cfg.Home, 0o700); err != nil {
		return nil, err
	}
	var args []string
	for _, kv := range cfg.Overrides {
		args = append(args, "-c", kv)
	}
	cmd := exec.Command(cfg.Bin, append(args, "app-server")...)
	cmd.Dir = cfg.Dir
	cmd.Env = append(append([]string(nil), cfg.Env...), "CODEX_HOME="+cfg.Home)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if cfg.OwnSession {
		cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	}
	cmd.Stderr = io.Discard
	stdin, err := cmd.StdinPipe()
	if err != nil {
		return nil, err
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("starting %s: %w", cfg.Bin, err)
	}
	d := &Direct{cfg: cfg, cmd: cmd, turns: map[string]*turnWatch{}}
	d.conn = codexrpc.NewConn(stdout, stdin, codexrpc.Options{
		OnNotification: d.note,
		Logger:         slog.New(slog.DiscardHandler),
	})
	var init json.RawMessage
	err = d.conn.Call(ctx, "initialize", map[string]any{
		"clientInfo":   map[string]any{"name": "bench-direct", "version": "1"},
		"capabilities": map[string]any{"experimentalApi": true},
	}, &init)
	if err == nil {
		err = d.conn.Notify("initialized", nil)
	}
	if err != nil {
		d.Close()
		return nil, fmt.Errorf("initializing the direct client: %w", err)
	}
	return d, nil
}

// PID is the CLI's process id.
func (d *Direct) PID() int { return d.cmd.Process.Pid }

// note routes a notification to the turn of its thread.
func (d *Direct) note(n *codexrpc.Notification) {
	if n.Method != codexproto.NoteAgentMessageDelta && n.Method != codexproto.NoteTurnCompleted {
		return
	}
	var p struct {
		ThreadID string `json:"threadId"`
		Turn     struct {
			Status string `json:"status"`
		} `json:"turn"`
	}
	if json.Unmarshal(n.Params, &p) != nil {
		return
	}
	d.mu.Lock()
	w := d.turns[p.ThreadID]
	if n.Method == codexproto.NoteTurnCompleted {
		delete(d.turns, p.ThreadID)
	}
	d.mu.Unlock()
	if w == nil {
		return
	}
	w.once.Do(func() { close(w.first) })
	if n.Method == codexproto.NoteTurnCompleted {
		w.done <- p.Turn.Status
	}
}

// StartThread starts a thread with the daemon's settings.
func (d *Direct) StartThread(ctx context.Context) (string, error) {
	var res struct {
		Thread struct {
			ID string `json:"id"`
		} `json:"thread"`
	}
	p := map[string]any{"cwd": d.cfg.Dir, "sandbox": d.cfg.Sandbox, "approvalPolicy": d.cfg.Approval}
	if d.cfg.ThreadConfig != nil {
		p["config"] = d.cfg.ThreadConfig
	}
	err := d.conn.Call(ctx, "thread/start", p, &res)
	if err == nil && res.Thread.ID == "" {
		err = errors.New("thread/start answered no thread id")
	}
	return res.Thread.ID, err
}

// ResumeThread loads a thread from its rollout, with the daemon's settings.
func (d *Direct) ResumeThread(ctx context.Context, threadID string) error {
	p := map[string]any{
		"threadId": threadID, "cwd": d.cfg.Dir, "sandbox": d.cfg.Sandbox,
		"approvalPolicy": d.cfg.Approval, "excludeTurns": true,
	}
	if d.cfg.ThreadConfig != nil {
		p["config"] = d.cfg.ThreadConfig
	}
	return d.conn.Call(ctx, "thread/resume", p, nil)
}

// Unsubscribe unloads a thread from the connection, as the daemon does
// before each resume.
func (d *Direct) Unsubscribe(ctx context.Context, threadID string) error {
	return d.conn.Call(ctx, "thread/unsubscribe", map[string]any{"threadId": threadID}, nil)
}

// Turn runs one turn on a loaded thread and times it from the moment
// turn/start is sent (start, when not zero, is that moment instead).
func (d *Direct) Turn(ctx context.Context, threadID, text string, start time.Time) (Timing, error) {
	w := &turnWatch{first: make(chan struct{}), done: make(chan string, 1)}
	d.mu.Lock()
	d.turns[threadID] = w
	d.mu.Unlock()
	if start.IsZero() {
		start = time.Now()
	}
	err := d.conn.Call(ctx, "turn/start", map[string]any{
		"threadId": threadID, "summary": "auto",
		"input": []map[string]any{{"type": "text", "text": text}},
	}, nil)
	if err != nil {
		d.mu.Lock()
		delete(d.turns, threadID)
		d.mu.Unlock()
		return Timing{}, fmt.Errorf("turn/start: %w", err)
	}
	var t Timing
	select {
	case <-w.first:
		t.FirstDelta = time.Since(start)
	case <-ctx.Done():
		return t, ctx.Err()
	}
	select {
	case status := <-w.done:
		t.Verdict = time.Since(start)
		if status != codexproto.TurnCompleted {
			return t, fmt.Errorf("the turn ended %s", status)
		}
	case <-ctx.Done():
		return t, ctx.Err()
	}
	return t, nil
}

// Close ends the CLI as a client would: stdin closed, then SIGTERM and
// SIGKILL of its process group if it lingers; it waits for the exit.
func (d *Direct) Close() {
	d.conn.Close()
	exited := make(chan struct{})
	go func() { _ = d.cmd.Wait(); close(exited) }()
	for _, step := range []syscall.Signal{0, syscall.SIGTERM, syscall.SIGKILL} {
		if step != 0 {
			_ = syscall.Kill(-d.cmd.Process.Pid, step)
		}
		select {
		case <-exited:
			_ = syscall.Kill(-d.cmd.Process.Pid, syscall.SIGKILL) // what it left in its group
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			_ = d.conn.Wait(ctx)
			cancel()
			return
		case <-time.After(2 * time.Second):
		}
	}
	<-exited
}
