package main

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/meshweaver/supervisor/testkit/fakeissuer"
	"github.com/meshweaver/supervisor/testkit/syncbuf"
)

// The account commands, end to end: supervisor login (device code against a
// loopback issuer, then Ctrl-C on a second one), login --api-key-stdin,
// account, models and logout, each a remote caller of a running daemon.
// They run without isolation and, as root, with a uid per user and
// bubblewrap, where the app-server writes auth.json as the user's uid.
func TestAccountCommands(t *testing.T) {
	t.Run("shared", func(t *testing.T) { testAccountCommands(t, "") })
	if os.Geteuid() == 0 {
		t.Run("uid+bwrap", func(t *testing.T) { testAccountCommands(t, "uid+bwrap") })
	}
}

func testAccountCommands(t *testing.T, mode string) {
	issuer, err := fakeissuer.Start(fakeissuer.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(issuer.Close)
	e := newEnv(t, func(c *daemonSetup) {
		c.CodexEnv = append(c.CodexEnv,
			"CODEX_APP_SERVER_LOGIN_ISSUER="+issuer.URL,
			"CODEX_REVOKE_TOKEN_URL_OVERRIDE="+issuer.RevokeURL())
		// account/read reports an account only for a provider that needs one.
		c.Overrides = append(c.Overrides, "model_providers.mock.requires_openai_auth=true")
		if mode != "" {
			isolated(t, mode, false, true)(c)
		}
	})
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cli := func(ctx context.Context, stdin string, args ...string) (int, string, string) {
		var out, errOut syncbuf.Buffer // a command's output, read while it runs
		code := runCLI(ctx, args, strings.NewReader(stdin), &out, &errOut)
		return code, out.String(), errOut.String()
	}
	addr := "--addr=" + e.addr

	// Device code: the command prints the URL and the code, waits, and
	// exits 0 once the issuer approves.
	var (
		wg       sync.WaitGroup
		code     int
		out, eo  string
		loginOut = make(chan struct{})
	)
	wg.Add(1)
	go func() {
		defer wg.Done()
		code, out, eo = cli(ctx, "", "login", addr, "--user=ann")
		close(loginOut)
	}()
	if err := issuer.WaitUserCodes(ctx, 1); err != nil {
		t.Fatalf("no device code was requested: %v", err)
	}
	if issuer.Approve() != 1 {
		t.Fatal("no pending code to approve")
	}
	select {
	case <-loginOut:
	case <-ctx.Done():
		t.Fatal("login did not end")
	}
	wg.Wait()
	if code != 0 || !strings.Contains(out, issuer.VerificationURL()) || !strings.Contains(out, "Logged in.") {
		t.Fatalf("login: exit %d\nstdout: %s\nstderr: %s", code, out, eo)
	}
	if code, out, eo := cli(ctx, "", "account", addr, "--user=ann"); code != 0 || !strings.Contains(out, "chatgpt account") {
		t.Errorf("account after login: exit %d, %q %q", code, out, eo)
	}
	if mode != "" {
		checkOwned(t, filepath.Join(e.home("ann"), "auth.json"), 0o600)
	}
	if code, out, eo := cli(ctx, "", "logout", addr, "--user=ann"); code != 0 || !strings.Contains(out, "Logged out.") {
		t.Errorf("logout: exit %d, %q %q", code, out, eo)
	}
	if _, err := os.Stat(filepath.Join(e.home("ann"), "auth.json")); !os.IsNotExist(err) {
		t.Errorf("auth.json after logout: %v", err)
	}

	// Ctrl-C cancels a pending login, and the command exits non-zero.
	lctx, interrupt := context.WithCancel(ctx)
	done := make(chan int, 1)
	go func() {
		c, _, _ := cli(lctx, "", "login", addr, "--user=bea")
		done <- c
	}()
	if err := issuer.WaitUserCodes(ctx, 2); err != nil {
		t.Fatalf("no second device code: %v", err)
	}
	interrupt()
	select {
	case c := <-done:
		if c == 0 {
			t.Errorf("a cancelled login exited 0")
		}
	case <-ctx.Done():
		t.Fatal("the cancelled login did not end")
	}

	// An API key from stdin, then the models through the daemon.
	const key = "sk-test-cli-0123456789abcdef"
	if code, out, eo := cli(ctx, key+"\n", "login", addr, "--user=cid", "--api-key-stdin"); code != 0 || strings.Contains(out+eo, key) {
		t.Errorf("login --api-key-stdin: exit %d, %q %q", code, out, eo)
	}
	if code, out, eo := cli(ctx, "", "account", addr, "--user=cid"); code != 0 || out != "logged in with an API key (apiKey account)\n" {
		t.Errorf("account with an API key: exit %d, %q %q", code, out, eo)
	}
	if mode != "" {
		checkOwned(t, filepath.Join(e.home("cid"), "auth.json"), 0o600)
	}
	code, out, eo = cli(ctx, "", "models", addr, "--user=cid")
	if code != 0 || !strings.Contains(out, "efforts:") || !strings.Contains(out, "(default)") || strings.Contains(out, "(hidden)") {
		t.Errorf("models: exit %d, %q %q", code, out, eo)
	}
	// --all asks for the hidden models too (the mock catalog has none).
	if code, all, eo := cli(ctx, "", "models", addr, "--user=cid", "--all"); code != 0 || !strings.Contains(all, out) {
		t.Errorf("models --all: exit %d, %q %q (without --all: %q)", code, all, eo, out)
	}
	if strings.Contains(e.logs.String(), key) {
		t.Errorf("the API key is in the daemon's log")
	}
	// A bad command line is exit 2.
	if code, _, _ := cli(ctx, "", "login", addr); code != 2 {
		t.Errorf("login without --user: exit %d, want 2", code)
	}
}
