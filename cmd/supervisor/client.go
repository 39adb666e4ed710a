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

	"github.com/vmihailenco/msgpack/v5"

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

// Exit codes of `round`, one per verdict status, so that a script can tell
// them apart. A status this caller does not know counts as failed.
const (
	exitFailed      = 1 // failed, or a status this version does not know; also any other error
	exitInterrupted = 3
	exitBusy        = 4
	exitUnavailable = 5
	exitRejected    = 6
	exitNoVerdict   = 7 // no verdict: the daemon unreachable, refusing the message, or the --timeout passed
)

// roundExit is the exit code of a verdict status.
func roundExit(s messages.VerdictStatus) int {
	switch s {
	case messages.StatusCompleted:
		return 0
	case messages.StatusInterrupted:
		return exitInterrupted
	case messages.StatusBusy:
		return exitBusy
	case messages.StatusUnavailable:
		return exitUnavailable
	case messages.StatusRejected:
		return exitRejected
	}
	return exitFailed
}

const roundUsage = `usage: supervisor round --user ID --thread KEY [flags] MESSAGE...

Sends one chat round to the daemon and streams its answer: the text to
stdout, reasoning, tools and the final status line to stderr ("--json":
one JSON object a line on stdout, each with "type", "round_id" and "time",
the fields named as on the wire). Flags may follow the message; "--" ends
them. The MCP bearer token comes from $SUPERVISOR_MCP_TOKEN; --addr and
--tls-* default to $SUPERVISOR_ADDR and $SUPERVISOR_TLS_CERT, _KEY, _CA.

Exit status: 0 completed, 1 failed (or another error), 2 usage,
3 interrupted, 4 busy, 5 unavailable, 6 rejected, 7 no verdict (daemon
unreachable, message refused, or --timeout passed).

`

func roundCmd(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("round", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var o roundOptions
	fs.StringVar(&o.addr, "addr", "127.0.0.1:4100", "`HOST:PORT` of the daemon (default from $SUPERVISOR_ADDR)")
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
	fs.Usage = func() { fmt.Fprint(fs.Output(), roundUsage); fs.PrintDefaults() }
	words, err := parseCaller(fs, args, someArgs)
	if err != nil {
		return err
	}
	tlsConf, err := o.tls.config()
	if err != nil {
		return err
	}
	text := strings.Join(words, " ")
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
	p := &printer{w: stdout, errw: stderr, json: o.json, roundID: o.roundID, start: time.Now()}
	if err := c.send(req); err != nil {
		return err
	}
	// A round may run longer than the remote's idle limit: keep the link
	// to the daemon up (keepalives) until the verdict.
	defer c.rem.Hold(o.addr)()
	v, err := c.awaitVerdict(ctx, o, p)
	if err != nil {
		return exitError{code: exitNoVerdict, err: err}
	}
	if code := roundExit(v.Status); code != 0 {
		return exitError{code: code}
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

// printer writes a round's events for a person: the answer text to w as it
// streams; reasoning gathered into whole lines, tools, notices and a final
// status line (status, duration, tokens) on errw. With json, one JSON
// object a line on w instead, named as on the wire.
type printer struct {
	w, errw io.Writer
	json    bool
	roundID string
	start   time.Time

	prefix    string // printed before the answer's text, after notes (the demo's "codex> ")
	midLine   bool
	inText    bool            // the answer's text is being printed: no note since
	reasoning strings.Builder // reasoning deltas not printed yet
	reasonID  string          // the item they belong to
	usage     *messages.Usage // the latest token counts
}

func (p *printer) event(e messages.RoundEvent) {
	if e.Usage != nil {
		p.usage = e.Usage
	}
	if p.json {
		p.writeJSON(string(e.Kind), e, nil)
		return
	}
	if e.Kind == messages.KindReasoning && (p.reasoning.Len() == 0 || e.ItemID == p.reasonID) {
		p.reasonID = e.ItemID
		p.reasoning.WriteString(e.Text)
		return
	}
	p.flushReasoning()
	switch e.Kind {
	case messages.KindText:
		if !p.inText && p.prefix != "" && e.Text != "" {
			fmt.Fprint(p.w, p.prefix)
		}
		p.inText = true
		fmt.Fprint(p.w, e.Text)
		p.midLine = !strings.HasSuffix(e.Text, "\n")
		return
	case messages.KindReasoning: // a new reasoning item
		p.reasonID = e.ItemID
		p.reasoning.WriteString(e.Text)
	case messages.KindStatus:
		p.note(e.Text + "…")
	case messages.KindToolCall:
		var shell struct{ Command string }
		if e.Tool.Name == "shell" && json.Unmarshal([]byte(e.Tool.Args), &shell) == nil {
			p.note("shell $ " + shell.Command)
			break
		}
		p.note(fmt.Sprintf("tool %s %s", e.Tool.Name, e.Tool.Args))
	case messages.KindToolResult:
		s := fmt.Sprintf("tool %s done", e.Result.Name)
		if e.Result.ExitCode != nil {
			s += fmt.Sprintf(" (exit %d)", *e.Result.ExitCode)
		}
		if e.Result.Failed {
			s = fmt.Sprintf("tool %s failed: %s", e.Result.Name, e.Result.Fault)
		}
		if out := strings.TrimSpace(e.Result.Output); out != "" && !e.Result.Failed {
			s += ":\n" + indent(out)
		}
		p.note(s)
	case messages.KindNotice, messages.KindError, messages.KindQuestion:
		p.note(string(e.Kind) + ": " + e.Text)
	}
}

// flushReasoning prints the reasoning gathered so far, one line per
// paragraph.
func (p *printer) flushReasoning() {
	if p.reasoning.Len() == 0 {
		return
	}
	text := p.reasoning.String()
	p.reasoning.Reset()
	for _, para := range strings.Split(text, "\n\n") {
		if para = strings.Join(strings.Fields(para), " "); para != "" {
			p.note("thinking: " + para)
		}
	}
}

func indent(s string) string {
	return "  " + strings.ReplaceAll(s, "\n", "\n  ")
}

func (p *printer) note(s string) {
	p.inText = false
	if p.midLine {
		fmt.Fprintln(p.w)
		p.midLine = false
	}
	fmt.Fprintf(p.errw, "[%s]\n", strings.TrimSpace(s))
}

func (p *printer) done(v messages.RoundFinished) {
	if p.json {
		// The verdict's fields are all there, empty ones included (the
		// wire omits them), so that a script can read every key.
		p.writeJSON("done", v, map[string]any{"error": "", "codex_error_info": "", "codex_thread_id": "",
			"resumed": false, "fell_back": false})
		return
	}
	p.flushReasoning()
	if p.midLine {
		fmt.Fprintln(p.w)
		p.midLine = false
	}
	line := fmt.Sprintf("round %s in %.1fs", v.Status, time.Since(p.start).Seconds())
	if u := p.usage; u != nil {
		line += fmt.Sprintf(", tokens: %d in (%d cached), %d out (%d reasoning)",
			u.InputTokens, u.CachedInputTokens, u.OutputTokens, u.ReasoningOutputTokens)
	}
	if v.Error != "" {
		line += ": " + v.Error
	}
	fmt.Fprintf(p.errw, "[%s]\n", line)
}

// writeJSON prints v (a wire message) as one JSON object: its fields under
// their wire (msgpack) names, defaults for those the wire left out, plus
// "type", "round_id" and "time".
func (p *printer) writeJSON(typ string, v any, defaults map[string]any) {
	m, err := wireMap(v)
	if err != nil {
		m = map[string]any{"error": err.Error()}
	}
	for k, d := range defaults {
		if _, ok := m[k]; !ok {
			m[k] = d
		}
	}
	m["type"] = typ
	m["round_id"] = p.roundID
	m["time"] = time.Now().UTC().Format(time.RFC3339Nano)
	b, err := json.Marshal(m)
	if err != nil {
		return
	}
	fmt.Fprintln(p.w, string(b))
}

// wireMap is v's fields under their wire names, nested values included:
// v through msgpack and back into maps, so JSON output never shows a Go
// field name.
func wireMap(v any) (map[string]any, error) {
	b, err := msgpack.Marshal(v)
	if err != nil {
		return nil, err
	}
	var m map[string]any
	if err := msgpack.Unmarshal(b, &m); err != nil {
		return nil, err
	}
	if m == nil {
		m = map[string]any{}
	}
	return m, nil
}

// controlCmd sends an interrupt or a steer and prints the answer.
func controlCmd(ctx context.Context, what string, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet(what, flag.ContinueOnError)
	fs.SetOutput(stderr)
	addr := fs.String("addr", "127.0.0.1:4100", "`HOST:PORT` of the daemon (default from $SUPERVISOR_ADDR)")
	listen := fs.String("listen", "", "`HOST:PORT` this caller listens on for the answer")
	user := fs.String("user", "", "mesh user id (required)")
	thread := fs.String("thread", "", "mesh thread key (required)")
	roundID := fs.String("round-id", "", "only this round")
	timeout := fs.Duration("timeout", 30*time.Second, "how long to wait for the answer")
	var to tlsOptions
	to.register(fs)
	policy := noArgs
	if what == "steer" {
		policy = someArgs
	}
	words, err := parseCaller(fs, args, policy)
	if err != nil {
		return err
	}
	tlsConf, err := to.config()
	if err != nil {
		return err
	}
	text := strings.Join(words, " ")
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
