package main

import (
	"bufio"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"strings"
	"time"

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
	a.tls.register(fs)
}

// client connects to the daemon the flags name.
func (a *accountFlags) client() (*remoteClient, error) {
	conf, err := a.tls.config()
	if err != nil {
		return nil, err
	}
	return newRemoteClientTLS(a.addr, a.listen, conf)
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
	c, err := af.client()
	if err != nil {
		return err
	}
	defer c.close()
	if *apiKeyStdin {
		key, err := bufio.NewReader(io.LimitReader(stdin, 8<<10)).ReadString('\n')
		if err != nil && !errors.Is(err, io.EOF) {
			return fmt.Errorf("reading the API key: %w", err)
		}
		key = strings.TrimSpace(key)
		if key == "" {
			return errors.New("no API key on stdin")
		}
		if err := c.send(messages.SetAPIKey{User: af.user, APIKey: key}); err != nil {
			return err
		}
		m, err := c.await(ctx, af.timeout, func(m any) bool {
			switch m.(type) {
			case messages.APIKeyStored, messages.Rejected, error:
				return true
			}
			return false
		})
		if err != nil {
			return err
		}
		switch m := m.(type) {
		case messages.Rejected:
			return fmt.Errorf("the daemon refused the key: %s", m.Reason)
		case error:
			return m
		}
		fmt.Fprintln(stdout, "API key stored for the user; codex uses it from the next round on.")
		return nil
	}

	if err := c.send(messages.StartLogin{User: af.user}); err != nil {
		return err
	}
	// A device-code login waits minutes for the user: keep the link to
	// the daemon up (keepalives) until the outcome.
	defer c.rem.Hold(c.target.Address)()
	deadline := time.NewTimer(af.timeout)
	defer deadline.Stop()
	cancelled := false
	for {
		select {
		case m := <-c.inbox:
			switch m := m.(type) {
			case messages.LoginChallenge:
				fmt.Fprintf(stdout, "Open %s and enter the code %s\n", m.VerificationURL, m.UserCode)
				if m.ExpiresAtUnixMilli > 0 {
					fmt.Fprintf(stdout, "The code expires at %s.\n", m.ExpiresAt().Format(time.Kitchen))
				}
			case messages.LoginFinished:
				if m.Success {
					fmt.Fprintln(stdout, "Logged in.")
					return nil
				}
				fmt.Fprintf(stderr, "login failed: %s\n", m.Error)
				return exitError{code: 1}
			case messages.Rejected:
				return fmt.Errorf("the daemon rejected the login: %s", m.Reason)
			case error:
				return m
			}
		case <-ctx.Done():
			if cancelled {
				return errors.New("interrupted twice")
			}
			cancelled = true
			fmt.Fprintln(stderr, "cancelling the login…")
			if err := c.send(messages.CancelLogin{User: af.user}); err != nil {
				return err
			}
			ctx = context.Background()
		case <-deadline.C:
			return fmt.Errorf("no outcome within %v", af.timeout)
		}
	}
}

// simpleCmd sends one account message and prints its answer.
func simpleCmd(ctx context.Context, name string, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	fs.SetOutput(stderr)
	var af accountFlags
	af.register(fs, time.Minute)
	if _, err := parseCaller(fs, args, noArgs); err != nil {
		return err
	}
	if af.user == "" {
		fmt.Fprintf(stderr, "supervisor %s: --user is required\n", name)
		return errUsage
	}
	c, err := af.client()
	if err != nil {
		return err
	}
	defer c.close()
	var msg any
	switch name {
	case "logout":
		msg = messages.Logout{User: af.user}
	case "models":
		msg = messages.ModelsRequest{User: af.user}
	case "account":
		msg = messages.AccountRequest{User: af.user}
	}
	if err := c.send(msg); err != nil {
		return err
	}
	m, err := c.await(ctx, af.timeout, func(m any) bool {
		switch m.(type) {
		case messages.LoggedOut, messages.ModelsResponse, messages.AccountResponse, messages.Rejected, error:
			return true
		}
		return false
	})
	if err != nil {
		return err
	}
	switch m := m.(type) {
	case error:
		return m
	case messages.Rejected:
		return fmt.Errorf("the daemon refused: %s", m.Reason)
	case messages.LoggedOut:
		fmt.Fprintln(stdout, "Logged out.")
	case messages.AccountResponse:
		if m.Error != "" {
			return fmt.Errorf("account: %s", m.Error)
		}
		switch {
		case m.Type == "":
			fmt.Fprintf(stdout, "not logged in (requires OpenAI auth: %v)\n", m.RequiresOpenAIAuth)
		case m.Email != "":
			fmt.Fprintf(stdout, "%s account %s, plan %s\n", m.Type, m.Email, m.PlanType)
		default:
			fmt.Fprintf(stdout, "%s account\n", m.Type)
		}
	case messages.ModelsResponse:
		if m.Error != "" {
			return fmt.Errorf("models: %s", m.Error)
		}
		for _, md := range m.Models {
			def := ""
			if md.IsDefault {
				def = " (default)"
			}
			fmt.Fprintf(stdout, "%s%s\tefforts: %s (default %s)\n", md.ID, def, strings.Join(md.Efforts, ", "), md.DefaultEffort)
		}
	}
	return nil
}

// await returns the first inbox message done accepts.
func (c *remoteClient) await(ctx context.Context, timeout time.Duration, done func(any) bool) (any, error) {
	t := time.NewTimer(timeout)
	defer t.Stop()
	for {
		select {
		case m := <-c.inbox:
			if done(m) {
				return m, nil
			}
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-t.C:
			return nil, fmt.Errorf("no answer within %v", timeout)
		}
	}
}
