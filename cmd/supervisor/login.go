package main

import (
	"bufio"
	"cmp"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/docker/go-units"

	"github.com/meshweaver/supervisor/client"
	"github.com/meshweaver/supervisor/codexproto"
	"github.com/meshweaver/supervisor/contain"
	"github.com/meshweaver/supervisor/messages"
)

// accountFlags are the flags every account command shares.
type accountFlags struct {
	addr, listen, user string
	timeout            time.Duration
	tls                tlsOptions
}

func (a *accountFlags) register(fs *flag.FlagSet, timeout time.Duration) {
	fs.StringVar(&a.addr, "addr", "127.0.0.1:4100", "`HOST:PORT` of the daemon (default from $SUPERVISOR_ADDR)")
	fs.StringVar(&a.listen, "listen", "", "`HOST:PORT` this caller listens on for answers (default: a free loopback port)")
	fs.StringVar(&a.user, "user", "", "mesh user id (required)")
	fs.DurationVar(&a.timeout, "timeout", timeout, "how long to wait for the daemon")
	a.tls.registerCaller(fs)
}

// explain is explainUnreachable for the daemon the flags name.
func (a *accountFlags) explain(err error) error {
	return explainUnreachable(err, a.addr, a.tls.enabled())
}

// dial connects to the daemon the flags name.
func (a *accountFlags) dial(ctx context.Context) (*client.Client, error) {
	conf, err := a.tls.config()
	if err != nil {
		return nil, err
	}
	return dialDaemon(ctx, a.addr, a.listen, conf, a.tls.serverID)
}

// loginCmd runs a ChatGPT device-code login (or stores an API key read from
// stdin): it prints the URL and the code, waits, and exits 0 only on
// success. Ctrl-C cancels the session.
func loginCmd(ctx context.Context, args []string, stdin io.Reader, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("login", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var af accountFlags
	af.register(fs, 20*time.Minute)
	apiKeyStdin := fs.Bool("api-key-stdin", false, "read an OpenAI API key from stdin and store it as the user's credential")
	if _, err := parseCaller(fs, args, noArgs); err != nil {
		return err
	}
	if af.user == "" {
		fmt.Fprintln(stderr, "supervisor login: --user is required")
		return errUsage
	}
	c, err := af.dial(ctx)
	if err != nil {
		return err
	}
	defer c.Close()
	if *apiKeyStdin {
		key, err := bufio.NewReader(io.LimitReader(stdin, 8<<10)).ReadString('\n')
		if err != nil && !errors.Is(err, io.EOF) {
			return fmt.Errorf("reading the API key: %w", err)
		}
		key = strings.TrimSpace(key)
		if key == "" {
			return errors.New("no API key on stdin")
		}
		callCtx, cancel := context.WithTimeout(ctx, af.timeout)
		defer cancel()
		if err := c.SetAPIKey(callCtx, af.user, key); err != nil {
			if rej, ok := errors.AsType[*client.RejectedError](err); ok {
				return fmt.Errorf("the daemon refused the key: %s", rej.Reason)
			}
			return noAnswer(ctx, af.explain(err), af.timeout)
		}
		fmt.Fprintln(stdout, "API key stored for the user; codex uses it from the next round on.")
		return nil
	}

	// Ctrl-C cancels the login; its outcome (not logged in) still comes.
	// The cancel runs on the goroutine context.AfterFunc starts, joined
	// before the return.
	loginCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), af.timeout)
	defer cancel()
	cancelled := make(chan struct{})
	stop := context.AfterFunc(ctx, func() {
		defer close(cancelled)
		fmt.Fprintln(stderr, "cancelling the login…")
		_ = c.CancelLogin(loginCtx, af.user)
	})
	defer func() {
		if !stop() {
			<-cancelled
		}
	}()
	done, err := c.Login(loginCtx, af.user, func(m messages.LoginChallenge) {
		fmt.Fprintf(stdout, "Open %s and enter the code %s\n", m.VerificationURL, m.UserCode)
		if m.ExpiresAtUnixMilli > 0 {
			fmt.Fprintf(stdout, "The code expires at %s.\n", m.ExpiresAt().Format(time.Kitchen))
		}
	})
	if err != nil {
		if rej, ok := errors.AsType[*client.RejectedError](err); ok {
			return fmt.Errorf("the daemon rejected the login: %s", rej.Reason)
		}
		if errors.Is(err, context.DeadlineExceeded) {
			return fmt.Errorf("no outcome within %v", af.timeout)
		}
		return af.explain(err)
	}
	if !done.Success {
		fmt.Fprintf(stderr, "login failed: %s\n", done.Error)
		return exitError{code: 1}
	}
	fmt.Fprintln(stdout, "Logged in.")
	return nil
}

// simpleCmd sends one account message and prints its answer.
func simpleCmd(ctx context.Context, name string, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	fs.SetOutput(stderr)
	var af accountFlags
	af.register(fs, time.Minute)
	var all bool
	if name == "models" {
		fs.BoolVar(&all, "all", false, "also list the models codex hides from its picker (marked hidden)")
	}
	if _, err := parseCaller(fs, args, noArgs); err != nil {
		return err
	}
	if af.user == "" {
		fmt.Fprintf(stderr, "supervisor %s: --user is required\n", name)
		return errUsage
	}
	c, err := af.dial(ctx)
	if err != nil {
		return err
	}
	defer c.Close()
	callCtx, cancel := context.WithTimeout(ctx, af.timeout)
	defer cancel()
	failed := func(err error) error {
		if rej, ok := errors.AsType[*client.RejectedError](err); ok {
			return fmt.Errorf("the daemon refused: %s", rej.Reason)
		}
		return noAnswer(ctx, af.explain(err), af.timeout)
	}
	switch name {
	case "logout":
		if err := c.Logout(callCtx, af.user); err != nil {
			return failed(err)
		}
		fmt.Fprintln(stdout, "Logged out.")
	case "account":
		m, err := c.Account(callCtx, af.user)
		if err != nil {
			return failed(err)
		}
		if m.Error != "" {
			return fmt.Errorf("account: %s", m.Error)
		}
		switch {
		case m.Type == "":
			fmt.Fprintf(stdout, "not logged in (requires OpenAI auth: %v)\n", m.RequiresOpenAIAuth)
		case m.Type == codexproto.LoginAPIKey:
			fmt.Fprintln(stdout, "logged in with an API key (apiKey account)")
		case m.Email != "":
			fmt.Fprintf(stdout, "%s account %s, plan %s\n", m.Type, m.Email, m.PlanType)
		default:
			fmt.Fprintf(stdout, "%s account\n", m.Type)
		}
	case "usage":
		m, err := c.Usage(callCtx, af.user)
		if err != nil {
			return failed(err)
		}
		if m.Error != "" {
			return fmt.Errorf("usage: %s", m.Error)
		}
		printUsage(stdout, m)
	case "models":
		m, err := c.ListModels(callCtx, messages.ModelsRequest{User: af.user, IncludeHidden: all})
		if err != nil {
			return failed(err)
		}
		if m.Error != "" {
			return fmt.Errorf("models: %s", m.Error)
		}
		printModels(stdout, m.Models)
	}
	return nil
}

// printUsage writes a user's usage against the limits, one line each,
// then the tokens: in the budget's window and since the ledger began,
// per model.
func printUsage(w io.Writer, m messages.UsageResponse) {
	printTokens(w, m.Tokens)
	for _, l := range m.RateLimits {
		for _, win := range []struct {
			name string
			w    *messages.RateLimitWindow
		}{{"primary", l.Primary}, {"secondary", l.Secondary}} {
			if win.w == nil {
				continue
			}
			fmt.Fprintf(w, "codex rate limit	%s %s: %d%% used of %d minutes", cmp.Or(l.LimitID, "codex"), win.name, win.w.UsedPercent, win.w.WindowMinutes)
			if win.w.ResetsAtUnix > 0 {
				fmt.Fprintf(w, ", resets at %s", time.Unix(win.w.ResetsAtUnix, 0).UTC().Format(time.RFC3339))
			}
			fmt.Fprintln(w)
		}
	}
	if !m.Live {
		fmt.Fprintln(w, "no app-server has run for this user since its actor started (nothing to measure)")
		return
	}
	fmt.Fprintf(w, "memory\t%s of %s (peak %s, %d OOM kills)\n", human(m.MemoryBytes), contain.FormatSize(m.MemoryMaxBytes), human(m.MemoryPeak), m.OOMKills)
	fmt.Fprintf(w, "processes\t%d of %s (%d forks refused)\n", m.Pids, countOrMax(m.PidsMax), m.PidsRefusals)
	fmt.Fprintf(w, "cpu\t%.1fs used, at most %s cores\n", m.CPUSeconds, contain.FormatCPU(m.CPUMax))
	if m.DiskMaxBytes > 0 {
		fmt.Fprintf(w, "disk\t%s of %s\n", human(m.DiskBytes), contain.FormatSize(m.DiskMaxBytes))
	}
}

// printTokens writes a user's token ledger and budget.
func printTokens(w io.Writer, u *messages.TokenUsage) {
	if u == nil {
		return
	}
	window := (time.Duration(u.WindowSeconds) * time.Second).String()
	switch {
	case u.Budget > 0:
		fmt.Fprintf(w, "tokens\t%d of %d in the last %s", u.Spent, u.Budget, window)
		if u.FreesAtUnix > 0 {
			fmt.Fprintf(w, " (spent: the next round may run at %s)", time.Unix(u.FreesAtUnix, 0).UTC().Format(time.RFC3339))
		}
		fmt.Fprintln(w)
	default:
		fmt.Fprintf(w, "tokens\t%d in the last %s (no budget)\n", u.Spent, window)
	}
	if u.Damaged {
		fmt.Fprintln(w, "tokens\tthe ledger was damaged: it counts as the whole budget for a window")
	}
	for _, t := range u.Window {
		fmt.Fprintf(w, "  window\t%s\tinput %d (cached %d), output %d (reasoning %d)\n", t.Model, t.Input, t.CachedInput, t.Output, t.Reasoning)
	}
	for _, t := range u.Total {
		fmt.Fprintf(w, "  since %s\t%s\tinput %d (cached %d), output %d (reasoning %d)\n",
			time.Unix(u.SinceUnix, 0).UTC().Format(time.DateOnly), t.Model, t.Input, t.CachedInput, t.Output, t.Reasoning)
	}
}

func human(n int64) string { return units.BytesSize(float64(n)) }

func countOrMax(n int64) string {
	if n <= 0 {
		return "max"
	}
	return fmt.Sprint(n)
}

// printModels writes one line per model: its id, marks, efforts.
func printModels(w io.Writer, models []messages.Model) {
	for _, md := range models {
		marks := ""
		if md.IsDefault {
			marks = " (default)"
		}
		if md.Hidden {
			marks += " (hidden)"
		}
		fmt.Fprintf(w, "%s%s\tefforts: %s (default %s)\n", md.ID, marks, strings.Join(md.Efforts, ", "), md.DefaultEffort)
	}
}
