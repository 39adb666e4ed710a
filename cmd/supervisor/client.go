package main

import (
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	"github.com/meshweaver/supervisor/third_party/hollywood/actor"
	"github.com/meshweaver/supervisor/third_party/hollywood/remote"

	"github.com/meshweaver/supervisor/messages"
)

// remoteClient is a caller in its own engine: it sends to a daemon over the
// remote and receives the replies in an inbox.
type remoteClient struct {
	engine *actor.Engine
	rem    *remote.Remote
	pid    *actor.PID
	inbox  chan any
	target *actor.PID
}

func newRemoteClient(daemonAddr, listen string) (*remoteClient, error) {
	return newRemoteClientTLS(daemonAddr, listen, nil)
}

// newRemoteClientTLS is newRemoteClient over mutual TLS when tlsConf is set.
func newRemoteClientTLS(daemonAddr, listen string, tlsConf *tls.Config) (*remoteClient, error) {
	return newRemoteClientWith(daemonAddr, listen, tlsConf)
}

// newRemoteClientWith is newRemoteClientTLS with adjustments of the
// remote's config (limits, in tests).
func newRemoteClientWith(daemonAddr, listen string, tlsConf *tls.Config, with ...func(remote.Config) remote.Config) (*remoteClient, error) {
	if listen == "" {
		var err error
		if listen, err = freeLoopbackAddr(); err != nil {
			return nil, err
		}
	}
	e, rem, err := newRemoteEngine(listen, tlsConf, with...)
	if err != nil {
		return nil, err
	}
	c := &remoteClient{engine: e, rem: rem, inbox: make(chan any, 1<<16), target: rootPID(daemonAddr)}
	c.pid = e.Spawn(func() actor.Receiver { return c }, "caller", actor.WithID("cli"))
	e.Subscribe(c.pid) // to learn that the daemon is unreachable
	return c, nil
}

// errUnreachable reports a daemon the caller cannot reach.
var errUnreachable = errors.New("the daemon is unreachable")

// Receive decodes what the daemon sends; it never blocks (the inbox is
// large, and a full one drops with a note rather than stalling the engine).
func (c *remoteClient) Receive(ctx *actor.Context) {
	var m any
	switch msg := ctx.Message().(type) {
	case actor.RemoteUnreachableEvent:
		if msg.ListenAddr != c.target.Address {
			return
		}
		m = fmt.Errorf("%w at %s", errUnreachable, msg.ListenAddr)
	default:
		_, known := messages.Name(msg)
		if !known && !messages.IsEnvelope(msg) {
			return // lifecycle messages and the engine's other events
		}
		var err error
		if m, err = messages.Unwrap(msg); err != nil {
			m = err
		}
	}
	select {
	case c.inbox <- m:
	default:
	}
}

func (c *remoteClient) send(msg any) error {
	env, err := messages.Encode(msg)
	if err != nil {
		return err
	}
	c.engine.SendWithSender(c.target, env, c.pid)
	return nil
}

func (c *remoteClient) close() {
	c.engine.Unsubscribe(c.pid)
	<-c.engine.Poison(c.pid).Done()
	c.rem.Stop().Wait()
}

// roundOptions are the round command's flags.
type roundOptions struct {
	tls                        tlsOptions
	addr, listen, user, thread string
	json, autoApprove          bool
	mcpURL, model, effort      string
	instructions, roundID      string
	timeout                    time.Duration
}

func roundCmd(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("round", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var o roundOptions
	fs.StringVar(&o.addr, "addr", "127.0.0.1:4100", "`HOST:PORT` of the daemon")
	fs.StringVar(&o.listen, "listen", "", "`HOST:PORT` this caller listens on for replies (default: a free loopback port)")
	fs.StringVar(&o.user, "user", "", "mesh user id (required)")
	fs.StringVar(&o.thread, "thread", "", "mesh thread key (required)")
	fs.BoolVar(&o.json, "json", false, "print one JSON object per event per line, the last {\"type\":\"done\",...}")
	fs.BoolVar(&o.autoApprove, "auto-approve", false, "approve codex's command and patch requests")
	fs.StringVar(&o.mcpURL, "mcp-url", "", "the mesh's MCP back-connection `URL`; its bearer token comes from $SUPERVISOR_MCP_TOKEN")
	fs.StringVar(&o.model, "model", "", "codex model (default: the user's default)")
	fs.StringVar(&o.effort, "effort", "", "reasoning effort")
	fs.StringVar(&o.instructions, "developer-instructions", "", "developer instructions for the thread")
	fs.StringVar(&o.roundID, "round-id", "", "round id (default: minted by the daemon)")
	fs.DurationVar(&o.timeout, "timeout", 30*time.Minute, "give up waiting for the verdict after this long")
	o.tls.register(fs)
	if err := fs.Parse(args); err != nil {
		return parseError(err)
	}
	tlsConf, err := o.tls.config()
	if err != nil {
		return err
	}
	text := strings.Join(fs.Args(), " ")
	if o.user == "" || o.thread == "" || text == "" {
		fmt.Fprintln(stderr, "supervisor round: --user, --thread and a message are required")
		return errUsage
	}
	if o.roundID == "" {
		o.roundID = fmt.Sprintf("cli-%d", time.Now().UnixNano())
	}
	c, err := newRemoteClientTLS(o.addr, o.listen, tlsConf)
	if err != nil {
		return err
	}
	defer c.close()
	req := messages.StartRound{
		RoundID: o.roundID, User: o.user, Thread: o.thread, Text: text,
		AutoApprove: o.autoApprove, MCPURL: o.mcpURL, MCPToken: os.Getenv("SUPERVISOR_MCP_TOKEN"),
		Model: o.model, Effort: o.effort, DeveloperInstructions: o.instructions,
	}
	if err := c.send(req); err != nil {
		return err
	}
	// A round may run longer than the remote's idle limit: keep the link
	// to the daemon up (keepalives) until the verdict.
	defer c.rem.Hold(o.addr)()
	p := &printer{w: stdout, errw: stderr, json: o.json}
	v, err := c.awaitVerdict(ctx, o, p)
	if err != nil {
		return err
	}
	if v.Status != messages.StatusCompleted {
		return exitError{code: 1}
	}
	return nil
}

// awaitVerdict prints events until the verdict. Ctrl-C asks the daemon to
// interrupt the round, and still waits for its verdict.
func (c *remoteClient) awaitVerdict(ctx context.Context, o roundOptions, p *printer) (messages.RoundFinished, error) {
	deadline := time.NewTimer(o.timeout)
	defer deadline.Stop()
	interrupted := false
	for {
		select {
		case m := <-c.inbox:
			switch m := m.(type) {
			case messages.RoundEvent:
				if m.RoundID == o.roundID {
					p.event(m)
				}
			case messages.RoundFinished:
				if m.RoundID == o.roundID {
					p.done(m)
					return m, nil
				}
			case messages.Rejected:
				return messages.RoundFinished{}, fmt.Errorf("the daemon rejected the request: %s", m.Reason)
			case error:
				if errors.Is(m, errUnreachable) {
					return messages.RoundFinished{}, m
				}
				return messages.RoundFinished{}, fmt.Errorf("undecodable reply: %w", m)
			}
		case <-ctx.Done():
			if interrupted {
				return messages.RoundFinished{}, errors.New("interrupted twice; not waiting for the verdict")
			}
			interrupted = true
			if err := c.send(messages.InterruptRound{User: o.user, Thread: o.thread, RoundID: o.roundID}); err != nil {
				return messages.RoundFinished{}, err
			}
			ctx = context.Background() // a second signal ends the process the usual way
		case <-deadline.C:
			return messages.RoundFinished{}, fmt.Errorf("no verdict within %v", o.timeout)
		}
	}
}

// printer writes a round's events: the answer text to stdout as it
// streams, the rest as short lines on stderr; or everything as JSON lines.
type printer struct {
	w, errw io.Writer
	json    bool
	midLine bool
}

func (p *printer) event(e messages.RoundEvent) {
	if p.json {
		p.writeJSON(eventJSON(e))
		return
	}
	switch e.Kind {
	case messages.KindText:
		fmt.Fprint(p.w, e.Text)
		p.midLine = !strings.HasSuffix(e.Text, "\n")
		return
	case messages.KindReasoning:
		p.note("thinking: " + e.Text)
	case messages.KindToolCall:
		p.note(fmt.Sprintf("tool %s %s", e.Tool.Name, e.Tool.Args))
	case messages.KindToolResult:
		s := fmt.Sprintf("tool %s done", e.Result.Name)
		if e.Result.Failed {
			s = fmt.Sprintf("tool %s failed: %s", e.Result.Name, e.Result.Fault)
		}
		p.note(s)
	case messages.KindNotice, messages.KindError, messages.KindQuestion:
		p.note(string(e.Kind) + ": " + e.Text)
	}
}

func (p *printer) note(s string) {
	if p.midLine {
		fmt.Fprintln(p.w)
		p.midLine = false
	}
	fmt.Fprintf(p.errw, "[%s]\n", strings.TrimSpace(s))
}

func (p *printer) done(v messages.RoundFinished) {
	if p.json {
		p.writeJSON(map[string]any{"type": "done", "status": v.Status, "error": v.Error,
			"codex_error_info": v.CodexErrorInfo, "codex_thread_id": v.CodexThreadID,
			"resumed": v.Resumed, "fell_back": v.FellBack})
		return
	}
	if p.midLine {
		fmt.Fprintln(p.w)
		p.midLine = false
	}
	if v.Status != messages.StatusCompleted {
		fmt.Fprintf(p.errw, "[round %s: %s]\n", v.Status, v.Error)
	}
}

func (p *printer) writeJSON(v any) {
	b, err := json.Marshal(v)
	if err != nil {
		return
	}
	fmt.Fprintln(p.w, string(b))
}

func eventJSON(e messages.RoundEvent) map[string]any {
	m := map[string]any{"type": string(e.Kind), "seq": e.Seq}
	if e.Text != "" {
		m["text"] = e.Text
	}
	if e.ItemID != "" {
		m["item_id"] = e.ItemID
	}
	if e.Tool != nil {
		m["tool"] = e.Tool
	}
	if e.Result != nil {
		m["result"] = e.Result
	}
	if e.Usage != nil {
		m["usage"] = e.Usage
	}
	return m
}

// controlCmd sends an interrupt or a steer and prints the answer.
func controlCmd(ctx context.Context, what string, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet(what, flag.ContinueOnError)
	fs.SetOutput(stderr)
	addr := fs.String("addr", "127.0.0.1:4100", "`HOST:PORT` of the daemon")
	listen := fs.String("listen", "", "`HOST:PORT` this caller listens on for the answer")
	user := fs.String("user", "", "mesh user id (required)")
	thread := fs.String("thread", "", "mesh thread key (required)")
	roundID := fs.String("round-id", "", "only this round")
	timeout := fs.Duration("timeout", 30*time.Second, "how long to wait for the answer")
	var to tlsOptions
	to.register(fs)
	if err := fs.Parse(args); err != nil {
		return parseError(err)
	}
	tlsConf, err := to.config()
	if err != nil {
		return err
	}
	text := strings.Join(fs.Args(), " ")
	if *user == "" || *thread == "" || (what == "steer" && text == "") {
		fmt.Fprintf(stderr, "supervisor %s: --user and --thread are required (and a message to steer with)\n", what)
		return errUsage
	}
	c, err := newRemoteClientTLS(*addr, *listen, tlsConf)
	if err != nil {
		return err
	}
	defer c.close()
	var msg any = messages.InterruptRound{User: *user, Thread: *thread, RoundID: *roundID}
	if what == "steer" {
		msg = messages.SteerRound{User: *user, Thread: *thread, RoundID: *roundID, Text: text}
	}
	if err := c.send(msg); err != nil {
		return err
	}
	t := time.NewTimer(*timeout)
	defer t.Stop()
	for {
		select {
		case m := <-c.inbox:
			switch m := m.(type) {
			case messages.RoundControlled:
				if !m.OK {
					return fmt.Errorf("%s refused: %s", what, m.Error)
				}
				fmt.Fprintf(stdout, "%s accepted\n", what)
				return nil
			case messages.Rejected:
				return fmt.Errorf("the daemon rejected the request: %s", m.Reason)
			case error:
				return m
			}
		case <-ctx.Done():
			return ctx.Err()
		case <-t.C:
			return fmt.Errorf("no answer within %v", *timeout)
		}
	}
}
