package main

import (
	"cmp"
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

	"github.com/meshweaver/supervisor/client"
	"github.com/meshweaver/supervisor/messages"
)

// dialDaemon starts a caller of the daemon at addr: listening on listen
// (a free loopback port when empty), over mutual TLS when tlsConf is set.
// serverID, when set, is the identity the daemon's certificate must carry
// (client.WithServerID).
func dialDaemon(ctx context.Context, addr, listen string, tlsConf *tls.Config, serverID string) (*client.Client, error) {
	opts := []client.Option{client.WithTLS(tlsConf)}
	if serverID != "" {
		opts = append(opts, client.WithServerID(serverID))
	}
	if listen != "" {
		opts = append(opts, client.WithListenAddr(listen))
	}
	return client.Dial(ctx, addr, opts...)
}

// roundOptions are the round command's flags.
type roundOptions struct {
	tls                        tlsOptions
	addr, listen, user, thread string
	json, autoApprove, raw     bool
	mcpURL, model, effort      string
	instructions, roundID      string
	sandbox, approval          string
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
	exitBudget      = 8 // the user's token budget is spent: refused before the model, or interrupted at the budget
)

// verdictExit is the exit code of a verdict: its status's, but a round
// refused or stopped by its user's token budget has its own.
func verdictExit(v messages.RoundFinished) int {
	if v.ErrorInfo != nil && v.ErrorInfo.Class == messages.ErrorBudget && v.Status != messages.StatusCompleted {
		return exitBudget
	}
	return roundExit(v.Status)
}

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

func roundCmd(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("round", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var o roundOptions
	fs.StringVar(&o.addr, "addr", "127.0.0.1:4100", "`HOST:PORT` of the daemon (default from $SUPERVISOR_ADDR)")
	fs.StringVar(&o.listen, "listen", "", "`HOST:PORT` this caller listens on for replies (default: a free loopback port)")
	fs.StringVar(&o.user, "user", "", "mesh user id (required)")
	fs.StringVar(&o.thread, "thread", "", "mesh thread key (required)")
	fs.BoolVar(&o.json, "json", false, "print one JSON object per event per line, the last {\"type\":\"done\",...}")
	fs.BoolVar(&o.raw, "raw-events", false, "also show every notification of codex that no other event carries (with --json, as raw events: method and params)")
	fs.BoolVar(&o.autoApprove, "auto-approve", false, "approve codex's command and patch requests (codex asks only under an approval policy other than never: see --approval-policy)")
	fs.StringVar(&o.approval, "approval-policy", "", "the round's approval policy: never, on-request or untrusted, within what the daemon allows (default: the daemon's)")
	fs.StringVar(&o.sandbox, "sandbox", "", "the round's sandbox: read-only, workspace-write or danger-full-access, within the daemon's bound (default: the daemon's)")
	fs.StringVar(&o.mcpURL, "mcp-url", "", "the mesh's MCP back-connection `URL`; its bearer token comes from $SUPERVISOR_MCP_TOKEN")
	fs.StringVar(&o.model, "model", "", "codex model (default: the user's default)")
	fs.StringVar(&o.effort, "effort", "", "reasoning effort")
	fs.StringVar(&o.instructions, "developer-instructions", "", "developer instructions for the thread")
	fs.StringVar(&o.roundID, "round-id", "", "round id (default: minted by the daemon)")
	fs.DurationVar(&o.timeout, "timeout", 30*time.Minute, "give up waiting for the verdict after this long")
	o.tls.registerCaller(fs)
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
	c, err := dialDaemon(ctx, o.addr, o.listen, tlsConf, o.tls.serverID)
	if err != nil {
		return err
	}
	defer c.Close()
	req := messages.StartRound{
		RoundID: o.roundID, User: o.user, Thread: o.thread, Text: text,
		AutoApprove: o.autoApprove, MCPURL: o.mcpURL, MCPToken: os.Getenv("SUPERVISOR_MCP_TOKEN"),
		Model: o.model, Effort: o.effort, DeveloperInstructions: o.instructions,
		Sandbox: o.sandbox, ApprovalPolicy: o.approval, RawEvents: o.raw,
	}
	if err := req.Validate(); err != nil {
		fmt.Fprintf(stderr, "supervisor round: %v\n", err)
		return errUsage
	}
	p := &printer{w: stdout, errw: stderr, json: o.json, roundID: o.roundID, start: time.Now()}
	v, err := streamRound(ctx, c, req, p, o.timeout)
	if err != nil {
		return exitError{code: exitNoVerdict, err: explainUnreachable(err, o.addr, tlsConf != nil)}
	}
	if code := verdictExit(v); code != 0 {
		return exitError{code: code}
	}
	return nil
}

// streamRound runs one round, printing its events and its verdict, and
// waits at most timeout for the verdict. The end of ctx (Ctrl-C) asks the
// daemon to interrupt the round, and still waits for its verdict.
func streamRound(ctx context.Context, c *client.Client, req messages.StartRound, p *printer, timeout time.Duration) (messages.RoundFinished, error) {
	waitCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), timeout)
	defer cancel()
	r, err := c.Round(waitCtx, req)
	if err != nil {
		return messages.RoundFinished{}, err
	}
	// The interrupt runs on the goroutine context.AfterFunc starts; it is
	// joined before the return, and the client is closed after that.
	interrupted := make(chan struct{})
	stop := context.AfterFunc(ctx, func() {
		defer close(interrupted)
		// The answer does not matter: the verdict says what happened.
		_, _ = c.Interrupt(waitCtx, messages.InterruptRound{User: req.User, Thread: req.Thread, RoundID: r.ID()})
	})
	defer func() {
		if !stop() {
			<-interrupted
		}
	}()
	for e := range r.Events() {
		p.event(e)
	}
	v, err := r.Wait()
	if errors.Is(err, context.DeadlineExceeded) {
		return v, fmt.Errorf("no verdict within %v", timeout)
	}
	if err != nil {
		return v, err
	}
	p.done(v)
	return v, nil
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
	failed    []string        // the tools that failed, by name, in order
}

// Bounds of a failed tool's output as the printer shows it: its last
// lines, which say why it failed.
const (
	failedOutputLines = 20
	failedOutputBytes = 2000
)

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
		out := strings.TrimSpace(e.Result.Output)
		if e.Result.Failed {
			p.failed = append(p.failed, e.Result.Name)
			s = fmt.Sprintf("tool %s failed: %s", e.Result.Name, cmp.Or(e.Result.Fault, "no reason given"))
			out = lastLines(out, failedOutputLines, failedOutputBytes)
		}
		if out != "" {
			s += ":\n" + indent(out)
		}
		p.note(s)
	case messages.KindNotice, messages.KindError, messages.KindQuestion:
		p.note(string(e.Kind) + ": " + e.Text)
	case messages.KindRaw:
		if e.Raw != nil {
			p.note("codex " + e.Raw.Method + " " + textcutRunes(e.Raw.Params, 200))
		}
	}
}

// textcutRunes is s cut at n runes, marked.
func textcutRunes(s string, n int) string {
	r := []rune(s)
	if len(r) <= n {
		return s
	}
	return string(r[:n]) + "…"
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

// lastLines is the end of s: at most n lines and about max bytes (cut at
// a line, or within the one last line), after a line saying how many
// lines were left out.
func lastLines(s string, n, max int) string {
	lines := strings.Split(s, "\n")
	keep := 0
	size := 0
	for i := len(lines) - 1; i >= 0 && keep < n; i-- {
		if size += len(lines[i]) + 1; size > max && keep > 0 {
			break
		}
		keep++
	}
	tail := lines[len(lines)-keep:]
	if keep == 1 && len(tail[0]) > max {
		tail = []string{"…" + strings.ToValidUTF8(tail[0][len(tail[0])-max:], "")}
	}
	if skipped := len(lines) - keep; skipped > 0 {
		return fmt.Sprintf("… (%d lines above)\n%s", skipped, strings.Join(tail, "\n"))
	}
	return strings.Join(tail, "\n")
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
	if len(p.failed) > 0 {
		// A completed round may rest on a tool that failed, whatever the
		// answer says of it.
		line += fmt.Sprintf("; %d tool call(s) failed: %s", len(p.failed), strings.Join(p.failed, ", "))
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
	to.registerCaller(fs)
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
	c, err := dialDaemon(ctx, *addr, *listen, tlsConf, to.serverID)
	if err != nil {
		return err
	}
	defer c.Close()
	callCtx, cancel := context.WithTimeout(ctx, *timeout)
	defer cancel()
	var answer messages.RoundControlled
	if what == "steer" {
		answer, err = c.Steer(callCtx, messages.SteerRound{User: *user, Thread: *thread, RoundID: *roundID, Text: text})
	} else {
		answer, err = c.Interrupt(callCtx, messages.InterruptRound{User: *user, Thread: *thread, RoundID: *roundID})
	}
	if err != nil {
		return noAnswer(ctx, explainUnreachable(err, *addr, tlsConf != nil), *timeout)
	}
	if !answer.OK {
		return fmt.Errorf("%s refused: %s", what, answer.Error)
	}
	fmt.Fprintf(stdout, "%s accepted\n", what)
	return nil
}

// noAnswer words a failed call: the --timeout passed, or err as it is.
func noAnswer(ctx context.Context, err error, timeout time.Duration) error {
	if errors.Is(err, context.DeadlineExceeded) && ctx.Err() == nil {
		return fmt.Errorf("no answer within %v", timeout)
	}
	return err
}
