package actors

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"log"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/meshweaver/supervisor/codexproto"
	"github.com/meshweaver/supervisor/demomodel"
	"github.com/meshweaver/supervisor/messages"
	"github.com/meshweaver/supervisor/store"
	"github.com/meshweaver/supervisor/testkit/fakeissuer"
	"github.com/meshweaver/supervisor/testkit/proctest"
)

// replyTimeout bounds every wait for a reply. A device-code login polls
// once a second; the CLI starts in a few seconds even under -race.
const replyTimeout = 45 * time.Second

// logBuffer keeps every log line of a harness, for the checks that no
// secret reaches them.
type logBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func newLogBuffer() *logBuffer { return &logBuffer{} }

func (b *logBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *logBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// loginHarness is a harness whose codex talks to a fake issuer and whose
// logger keeps every line, at debug level.
type loginHarness struct {
	*harness
	issuer *fakeissuer.Issuer
	logs   *logBuffer
}

func newLoginHarness(t *testing.T, opts fakeissuer.Options, mutate func(*tree)) *loginHarness {
	t.Helper()
	var homes string
	// Registered first, so it runs last: after the tree has stopped, no
	// codex of this test may be alive.
	t.Cleanup(func() {
		if homes == "" {
			return
		}
		if pids := codexPIDs(homes); len(pids) > 0 {
			for _, pid := range pids {
				t.Errorf("codex process left after the test: %s", proctest.Describe(pid))
				_ = syscall.Kill(pid, syscall.SIGKILL)
			}
		}
	})
	iss, err := fakeissuer.Start(opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(iss.Close)
	logs := newLogBuffer()
	var w io.Writer = logs
	if os.Getenv("TEST_LOG") != "" {
		w = io.MultiWriter(logs, os.Stderr)
	}
	h := newHarness(t, func(c *tree) {
		c.Logger = slog.New(slog.NewTextHandler(w, &slog.HandlerOptions{Level: slog.LevelDebug}))
		// RUST_LOG=info: the CLI writes its tracing to stderr, so the
		// relayed stderr is there to check for keys. (Its only warning at
		// the default level, about helper links in a home under TMPDIR,
		// is gone since codexproc.TempDirOutside.)
		c.CodexEnv = append(c.CodexEnv,
			"CODEX_APP_SERVER_LOGIN_ISSUER="+iss.URL,
			"CODEX_REVOKE_TOKEN_URL_OVERRIDE="+iss.RevokeURL(),
			"RUST_LOG=info")
		if mutate != nil {
			mutate(c)
		}
	})
	homes = h.cfg.Homes
	return &loginHarness{harness: h, issuer: iss, logs: logs}
}

func (h *loginHarness) send(c *caller, msg any) { h.engine.SendWithSender(h.root, msg, c.pid) }

func (h *loginHarness) home(user string) string { return filepath.Join(h.cfg.Homes, user, ".codex") }

func (h *loginHarness) ctx() context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), replyTimeout)
	h.t.Cleanup(cancel)
	return ctx
}

// next is the caller's next reply.
func (c *caller) next(t testing.TB) any {
	t.Helper()
	timer := time.NewTimer(replyTimeout)
	defer timer.Stop()
	select {
	case m := <-c.ch:
		return m
	case <-timer.C:
		t.Fatalf("no reply within %v", replyTimeout)
		return nil
	}
}

// expect is the caller's next reply, which must be a T.
func expect[T any](t testing.TB, c *caller) T {
	t.Helper()
	m := c.next(t)
	v, ok := m.(T)
	if !ok {
		var zero T
		t.Fatalf("got %T %+v, want a %T", m, m, zero)
	}
	return v
}

// quiet checks the caller has nothing more queued.
func (c *caller) quiet(t testing.TB) {
	t.Helper()
	select {
	case m := <-c.ch:
		t.Errorf("unexpected extra reply %T %+v", m, m)
	default:
	}
}

// codexPIDs lists the processes, zombies too, whose CODEX_HOME is under
// homes.
func codexPIDs(homes string) []int {
	var pids []int
	for _, p := range proctest.ListAll(proctest.NotSelf, proctest.UnderHome(homes)) {
		pids = append(pids, p.PID)
	}
	return pids
}

// killCodex SIGKILLs the process group of the user's codex app-server
// (the process running the codex binary with the user's CODEX_HOME).
func (h *loginHarness) killCodex(user string) int {
	h.t.Helper()
	home := h.home(user)
	bin, err := filepath.EvalSymlinks(h.cfg.CodexBin)
	if err != nil {
		h.t.Fatal(err)
	}
	var pid int
	for _, p := range proctest.ListAll(proctest.NotSelf, proctest.UnderHome(h.cfg.Homes)) {
		if p.Exe() == bin && p.Home() == home {
			pid = p.PID
			break
		}
	}
	if pid == 0 {
		h.t.Fatalf("no codex process with CODEX_HOME=%s", home)
	}
	pgid, err := syscall.Getpgid(pid)
	if err != nil {
		h.t.Fatalf("getpgid(%d): %v", pid, err)
	}
	if pgid == syscall.Getpgrp() {
		h.t.Fatalf("codex %d runs in the test's own process group", pid)
	}
	if err := syscall.Kill(-pgid, syscall.SIGKILL); err != nil {
		h.t.Fatalf("killing process group %d: %v", pgid, err)
	}
	return pid
}

// authFile reads {home}/auth.json, checking its mode.
func authFile(t testing.TB, home string) map[string]any {
	t.Helper()
	v, err := readAuth(home)
	if err != nil {
		t.Fatal(err)
	}
	return v
}

// readAuth reads {home}/auth.json, which must have mode 0600.
func readAuth(home string) (map[string]any, error) {
	path := filepath.Join(home, "auth.json")
	fi, err := os.Stat(path)
	if err != nil {
		return nil, fmt.Errorf("auth.json: %w", err)
	}
	if m := fi.Mode().Perm(); m != 0o600 {
		return nil, fmt.Errorf("auth.json mode %o, want 600", m)
	}
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var v map[string]any
	if err := json.Unmarshal(data, &v); err != nil {
		return nil, fmt.Errorf("auth.json is not JSON: %w", err)
	}
	return v, nil
}

func checkChallenge(t testing.TB, h *loginHarness, ch messages.LoginChallenge, before, after time.Time, grant time.Duration) {
	t.Helper()
	if ch.User != "alice" || ch.LoginID == "" {
		t.Errorf("challenge %+v", ch)
	}
	if ch.VerificationURL != h.issuer.VerificationURL() {
		t.Errorf("VerificationURL = %q, want %q", ch.VerificationURL, h.issuer.VerificationURL())
	}
	codes := h.issuer.Codes()
	if len(codes) == 0 || ch.UserCode != codes[len(codes)-1].UserCode {
		t.Errorf("UserCode = %q, issued %+v", ch.UserCode, codes)
	}
	exp := ch.ExpiresAt()
	if exp.Before(before.Add(grant).Truncate(time.Millisecond)) || exp.After(after.Add(grant)) {
		t.Errorf("ExpiresAt = %v, want within [%v, %v]", exp, before.Add(grant), after.Add(grant))
	}
}

// requireOpenAIAuth makes the mock provider require an OpenAI login. The
// CLI reports the logged-in account (account/read) only when the active
// provider requires one: with the harness's requires_openai_auth=false it
// answers account:null whatever auth.json holds.
func requireOpenAIAuth(c *tree) {
	c.Overrides = slicesReplace(c.Overrides, "model_providers.mock.requires_openai_auth=true")
}

// slicesReplace returns kvs with the pair of kv's key replaced by kv (or
// kv appended).
func slicesReplace(kvs []string, kv string) []string {
	key, _, _ := strings.Cut(kv, "=")
	out := make([]string, 0, len(kvs)+1)
	for _, x := range kvs {
		if k, _, _ := strings.Cut(x, "="); k != key {
			out = append(out, x)
		}
	}
	return append(out, kv)
}

func TestLoginDeviceCodeSuccess(t *testing.T) {
	h := newLoginHarness(t, fakeissuer.Options{Email: "alice@example.test", PlanType: "pro", UserID: "user-alice"}, requireOpenAIAuth)
	c := h.caller()
	before := time.Now()
	h.send(c, messages.StartLogin{User: "alice"})
	ch := expect[messages.LoginChallenge](t, c)
	checkChallenge(t, h, ch, before, time.Now(), 15*time.Minute)

	// Approve only once the CLI is polling: the pending answer must not
	// end anything.
	if err := h.issuer.WaitPolls(h.ctx(), 1); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(h.home("alice"), "auth.json")); err == nil {
		t.Fatal("auth.json exists before the approval")
	}
	if n := h.issuer.Approve(); n != 1 {
		t.Fatalf("approved %d codes, want 1", n)
	}
	fin := expect[messages.LoginFinished](t, c)
	if !fin.Success || fin.LoginID != ch.LoginID || fin.User != "alice" || fin.Error != "" {
		t.Fatalf("LoginFinished = %+v", fin)
	}

	auth := authFile(t, h.home("alice"))
	if auth["auth_mode"] != "chatgpt" {
		t.Errorf("auth_mode = %v", auth["auth_mode"])
	}
	issued := h.issuer.Issued()
	if len(issued) != 1 {
		t.Fatalf("%d token sets issued, want 1", len(issued))
	}
	if tokens, _ := auth["tokens"].(map[string]any); tokens["refresh_token"] != issued[0].RefreshToken {
		t.Errorf("auth.json tokens = %v, want the issued refresh token", tokens)
	}

	// The CLI redeemed the code the way DEVICE-LOGIN.md says.
	var tokenReq *fakeissuer.Request
	for _, r := range h.issuer.Requests() {
		if r.Kind == fakeissuer.KindOAuthToken {
			tokenReq = &r
		}
	}
	if tokenReq == nil || tokenReq.Status != 200 {
		t.Fatalf("no successful /oauth/token request: %+v", tokenReq)
	}
	if f := tokenReq.Form; f.Get("grant_type") != "authorization_code" || f.Get("redirect_uri") != h.issuer.CallbackURL() {
		t.Errorf("token request form %v", f)
	}
	if n := h.issuer.Count(fakeissuer.KindUserCode); n != 1 {
		t.Errorf("%d usercode requests, want 1", n)
	}

	h.send(c, messages.AccountRequest{User: "alice"})
	acct := expect[messages.AccountResponse](t, c)
	if acct.Error != "" || acct.Type != "chatgpt" || acct.Email != "alice@example.test" || acct.PlanType != "pro" {
		t.Errorf("AccountResponse = %+v", acct)
	}

	// Logout revokes at the (overridden) issuer and removes auth.json.
	h.send(c, messages.Logout{User: "alice"})
	expect[messages.LoggedOut](t, c)
	if _, err := os.Stat(filepath.Join(h.home("alice"), "auth.json")); !os.IsNotExist(err) {
		t.Errorf("auth.json after logout: %v", err)
	}
	if err := h.issuer.Wait(h.ctx(), fakeissuer.KindRevoke, 1); err != nil {
		t.Errorf("no revoke request: %v", err)
	}
	for _, r := range h.issuer.Requests() {
		// The CLI revokes the refresh token, as JSON.
		if r.Kind == fakeissuer.KindRevoke && (r.JSON["token"] != issued[0].RefreshToken || r.JSON["token_type_hint"] != "refresh_token") {
			t.Errorf("revoke request %s %q", r.Header.Get("Content-Type"), r.JSON)
		}
	}
	h.send(c, messages.AccountRequest{User: "alice"})
	if acct := expect[messages.AccountResponse](t, c); acct.Type != "" || acct.Error != "" {
		t.Errorf("AccountResponse after logout = %+v", acct)
	}
	c.quiet(t)
}

// noRedeem checks that no device code is redeemed within window: the CLI's
// login must be over. Every pending code is approved first, so a login the
// CLI still polled would redeem it at its next poll (the interval is 1s).
// This is a bounded wait for something that must not happen.
func (h *loginHarness) noRedeem(window time.Duration) {
	h.t.Helper()
	h.issuer.Approve()
	ctx, cancel := context.WithTimeout(context.Background(), window)
	defer cancel()
	err := h.issuer.WaitFor(ctx, func(reqs []fakeissuer.Request, _ []fakeissuer.DeviceCode) bool {
		for _, r := range reqs {
			if r.Kind == fakeissuer.KindOAuthToken || r.Kind == fakeissuer.KindPoll && r.Status == 200 {
				return true
			}
		}
		return false
	})
	if err == nil {
		h.t.Errorf("a finished login still redeemed its code: %+v", h.issuer.Requests())
	}
	if _, err := os.Stat(filepath.Join(h.home("alice"), "auth.json")); !os.IsNotExist(err) {
		h.t.Errorf("auth.json after a failed login: %v", err)
	}
}

func TestLoginDenied(t *testing.T) {
	h := newLoginHarness(t, fakeissuer.Options{}, nil)
	c := h.caller()
	h.send(c, messages.StartLogin{User: "alice"})
	ch := expect[messages.LoginChallenge](t, c)
	if err := h.issuer.WaitPolls(h.ctx(), 1); err != nil {
		t.Fatal(err)
	}
	if n := h.issuer.Deny(); n != 1 {
		t.Fatalf("denied %d codes", n)
	}
	fin := expect[messages.LoginFinished](t, c)
	if fin.Success || fin.LoginID != ch.LoginID || !strings.Contains(fin.Error, "device auth failed with status 400") {
		t.Fatalf("LoginFinished = %+v, want the CLI's reason", fin)
	}
	if _, err := os.Stat(filepath.Join(h.home("alice"), "auth.json")); !os.IsNotExist(err) {
		t.Errorf("auth.json after a denied login: %v", err)
	}
	if n := h.issuer.Count(fakeissuer.KindOAuthToken); n != 0 {
		t.Errorf("%d token requests after a denial", n)
	}

	// The session is over: a new request starts a new login.
	h.send(c, messages.StartLogin{User: "alice"})
	ch2 := expect[messages.LoginChallenge](t, c)
	if ch2.LoginID == ch.LoginID || ch2.UserCode == ch.UserCode {
		t.Errorf("second challenge %+v repeats the first %+v", ch2, ch)
	}
	h.send(c, messages.CancelLogin{User: "alice"})
	if fin := expect[messages.LoginFinished](t, c); fin.Success || fin.LoginID != ch2.LoginID {
		t.Errorf("LoginFinished = %+v", fin)
	}
	c.quiet(t)
}

func TestLoginExpires(t *testing.T) {
	const grant = 2 * time.Second
	h := newLoginHarness(t, fakeissuer.Options{}, func(c *tree) { c.LoginGrant = grant })
	c := h.caller()
	before := time.Now()
	h.send(c, messages.StartLogin{User: "alice"})
	ch := expect[messages.LoginChallenge](t, c)
	checkChallenge(t, h, ch, before, time.Now(), grant)
	fin := expect[messages.LoginFinished](t, c)
	if fin.Success || fin.LoginID != ch.LoginID || !strings.Contains(fin.Error, "expired") {
		t.Fatalf("LoginFinished = %+v, want an expiry", fin)
	}
	if time.Now().Before(ch.ExpiresAt()) {
		t.Errorf("expired at %v, before the announced %v", time.Now(), ch.ExpiresAt())
	}
	// The CLI's login was cancelled too.
	h.noRedeem(3 * time.Second)
	c.quiet(t)
}

func TestLoginCancelled(t *testing.T) {
	h := newLoginHarness(t, fakeissuer.Options{}, nil)
	c := h.caller()
	h.send(c, messages.StartLogin{User: "alice"})
	ch := expect[messages.LoginChallenge](t, c)
	if err := h.issuer.WaitPolls(h.ctx(), 1); err != nil {
		t.Fatal(err)
	}
	h.send(c, messages.CancelLogin{User: "alice"})
	fin := expect[messages.LoginFinished](t, c)
	if fin.Success || fin.LoginID != ch.LoginID || fin.Error == "" {
		t.Fatalf("LoginFinished = %+v", fin)
	}
	t.Logf("cancelled: %q", fin.Error)
	h.noRedeem(3 * time.Second)
	// Without a pending login, CancelLogin does nothing.
	h.send(c, messages.CancelLogin{User: "alice"})
	h.send(c, messages.AccountRequest{User: "alice"})
	expect[messages.AccountResponse](t, c)
	c.quiet(t)
}

// A CancelLogin that arrives before the CLI answered ends the session at
// once; the CLI's login, when it comes, is cancelled, and a new login
// started right away works: its challenge names a login the CLI keeps
// alive until it is approved.
//
// The CLI holds at most one login per app-server: account/login/start
// cancels the one in progress (account/login/completed {loginId: old,
// success: false, error: "Login was not completed"}), and it handles the
// starts in the order they reach its stdin. So the login actor must never
// have two starts in flight: when the abandoned session's start and the new
// one both wait for the app-server to come up, whichever goroutine writes
// last wins in the CLI, and if that is the abandoned one the new session's
// login dies. That is a race, so several users run it at once.
func TestLoginCancelledBeforeChallenge(t *testing.T) {
	h := newLoginHarness(t, fakeissuer.Options{}, nil)
	users := []string{"alice", "bob", "carol", "dave", "erin", "frank"}
	callers := make([]*caller, len(users))
	for i, u := range users {
		callers[i] = h.caller()
		// All three before the app-server is up.
		h.send(callers[i], messages.StartLogin{User: u})
		h.send(callers[i], messages.CancelLogin{User: u})
		h.send(callers[i], messages.StartLogin{User: u})
	}
	challenges := make([]messages.LoginChallenge, len(users))
	for i, c := range callers {
		first := c.next(t)
		if ch, ok := first.(messages.LoginChallenge); ok {
			t.Logf("%s: the challenge (%s) won the race with the cancel", users[i], ch.LoginID)
			first = c.next(t)
		}
		if fin, ok := first.(messages.LoginFinished); !ok || fin.Success {
			t.Fatalf("%s: got %T %+v, want a failed LoginFinished", users[i], first, first)
		}
		challenges[i] = expect[messages.LoginChallenge](t, c)
	}
	for i, ch := range challenges {
		if !h.issuer.ApproveCode(ch.UserCode) {
			t.Errorf("%s: no pending code %q: %+v", users[i], ch.UserCode, h.issuer.Codes())
		}
	}
	failed := 0
	for i, c := range callers {
		fin := expect[messages.LoginFinished](t, c)
		if !fin.Success || fin.LoginID != challenges[i].LoginID {
			failed++
			t.Errorf("BUG: %s: LoginFinished = %+v; the challenge %s named a login the CLI did not keep",
				users[i], fin, challenges[i].LoginID)
			continue
		}
		authFile(t, h.home(users[i]))
		c.quiet(t)
	}
	if failed > 0 {
		t.Logf("%d of %d users lost their login; %d usercode requests", failed, len(users), h.issuer.Count(fakeissuer.KindUserCode))
	}
}

func TestLoginSecondRequestJoins(t *testing.T) {
	h := newLoginHarness(t, fakeissuer.Options{}, nil)
	early, late, other := h.caller(), h.caller(), h.caller()
	// Two requests before the CLI answered, one after.
	h.send(early, messages.StartLogin{User: "alice"})
	h.send(other, messages.StartLogin{User: "alice"})
	ch := expect[messages.LoginChallenge](t, early)
	if ch2 := expect[messages.LoginChallenge](t, other); ch2 != ch {
		t.Errorf("joined before the answer: challenge %+v, want %+v", ch2, ch)
	}
	h.send(late, messages.StartLogin{User: "alice"})
	if ch3 := expect[messages.LoginChallenge](t, late); ch3 != ch {
		t.Errorf("joined after the answer: challenge %+v, want %+v", ch3, ch)
	}
	if n := h.issuer.Count(fakeissuer.KindUserCode); n != 1 {
		t.Errorf("%d usercode requests reached the issuer, want 1", n)
	}
	if n := h.issuer.Approve(); n != 1 {
		t.Fatalf("approved %d codes", n)
	}
	for i, c := range []*caller{early, other, late} {
		if fin := expect[messages.LoginFinished](t, c); !fin.Success || fin.LoginID != ch.LoginID {
			t.Errorf("requester %d: LoginFinished = %+v", i, fin)
		}
		c.quiet(t)
	}
	if n := h.issuer.Count(fakeissuer.KindUserCode); n != 1 {
		t.Errorf("%d usercode requests reached the issuer, want 1", n)
	}
}

func TestLoginCodexKilled(t *testing.T) {
	h := newLoginHarness(t, fakeissuer.Options{}, nil)
	c := h.caller()
	h.send(c, messages.StartLogin{User: "alice"})
	ch := expect[messages.LoginChallenge](t, c)
	if err := h.issuer.WaitPolls(h.ctx(), 1); err != nil {
		t.Fatal(err)
	}
	pid := h.killCodex("alice")
	fin := expect[messages.LoginFinished](t, c)
	if fin.Success || fin.LoginID != ch.LoginID || !strings.Contains(fin.Error, "died") {
		t.Fatalf("LoginFinished = %+v, want one naming the death", fin)
	}
	t.Logf("killed codex %d: %q", pid, fin.Error)

	h.send(c, messages.StartLogin{User: "alice"})
	ch2 := expect[messages.LoginChallenge](t, c)
	if ch2.LoginID == ch.LoginID || ch2.UserCode == ch.UserCode {
		t.Errorf("the new challenge %+v repeats the old %+v", ch2, ch)
	}
	if n := h.issuer.Count(fakeissuer.KindUserCode); n != 2 {
		t.Errorf("%d usercode requests, want 2", n)
	}
	if !h.issuer.ApproveCode(ch2.UserCode) {
		t.Fatalf("no pending code %q", ch2.UserCode)
	}
	if fin := expect[messages.LoginFinished](t, c); !fin.Success || fin.LoginID != ch2.LoginID {
		t.Fatalf("LoginFinished = %+v", fin)
	}
	if auth := authFile(t, h.home("alice")); auth["auth_mode"] != "chatgpt" {
		t.Errorf("auth_mode = %v", auth["auth_mode"])
	}
	if pids := codexPIDs(h.cfg.Homes); len(pids) != 1 || pids[0] == pid {
		t.Errorf("codex processes %v after the restart (killed %d)", pids, pid)
	}
	c.quiet(t)
}

func randomKey(t testing.TB) string {
	t.Helper()
	var b [16]byte
	if _, err := rand.Read(b[:]); err != nil {
		t.Fatal(err)
	}
	return "sk-test-" + hex.EncodeToString(b[:])
}

// noShellSnapshot keeps codex from snapshotting the login shell at thread
// start. The snapshot shell runs in a process group of its own (the user's
// ~/.bashrc with it: here pyenv init and rehash, which take seconds), so
// stopping the app-server's group leaves it running for a while after the
// tree has stopped, and the leak check would see it.
func noShellSnapshot(c *tree) {
	c.Overrides = slicesReplace(c.Overrides, "features.shell_snapshot=false")
}

func TestAPIKeyLifecycle(t *testing.T) {
	// hollywood logs to slog.Default: capture it too, for the whole test.
	// slog.SetDefault also points the log package's output at the new
	// handler, and setting back a default logger that writes through the
	// log package does not undo that: the log package's writer and flags
	// are put back here too. Left pointing at this test's logBuffer, every
	// later test's hollywood warnings went to it, from inside synctest
	// bubbles and outside, and the buffer's channel, made in one bubble and
	// closed outside it, crashed the test binary.
	prev, prevOut, prevFlags := slog.Default(), log.Writer(), log.Flags()
	t.Cleanup(func() {
		slog.SetDefault(prev)
		log.SetOutput(prevOut)
		log.SetFlags(prevFlags)
	})
	h := newLoginHarness(t, fakeissuer.Options{}, func(c *tree) {
		requireOpenAIAuth(c)
		noShellSnapshot(c)
	})
	slog.SetDefault(h.cfg.Logger)
	events := tapEvents(t, h.engine)
	key, key2 := randomKey(t), randomKey(t)
	c := h.caller()
	var replies []any
	next := func() any {
		m := c.next(t)
		replies = append(replies, m)
		return m
	}
	home := h.home("alice")
	credPath := filepath.Join(h.cfg.Homes, "alice", "meshweaver", store.APIKeyFile)
	setKey := func(k string) {
		t.Helper()
		h.send(c, messages.SetAPIKey{User: "alice", APIKey: k})
		if m, ok := next().(messages.APIKeyStored); !ok || m.User != "alice" {
			t.Fatalf("SetAPIKey answered %T %+v", m, m)
		}
		if fi, err := os.Stat(credPath); err != nil || fi.Mode().Perm() != 0o600 {
			t.Fatalf("credential file: %v %v", fi, err)
		}
		if data, _ := os.ReadFile(credPath); !strings.Contains(string(data), k) {
			t.Errorf("the credential file does not hold the key")
		}
	}
	round := func(thread string) {
		t.Helper()
		h.model.Enqueue(demomodel.Text("ok"))
		r := h.round(c, messages.StartRound{User: "alice", Thread: thread, Text: "hello"})
		replies = append(replies, r.verdict)
		for _, e := range r.events {
			replies = append(replies, e)
		}
		if r.verdict.Status != messages.StatusCompleted {
			t.Fatalf("round verdict %+v", r.verdict)
		}
	}
	checkAuth := func(when, want string) {
		t.Helper()
		auth, err := readAuth(home)
		if err != nil {
			t.Errorf("%s: %v", when, err)
			return
		}
		if auth["auth_mode"] != "apikey" || auth["OPENAI_API_KEY"] != want {
			t.Errorf("%s: auth.json: auth_mode %v, holds the key: %v", when, auth["auth_mode"], auth["OPENAI_API_KEY"] == want)
		}
	}
	// Stored while no codex runs: nothing is started for it.
	setKey(key)
	if _, err := os.Stat(filepath.Join(home, "auth.json")); !os.IsNotExist(err) {
		t.Errorf("auth.json before any codex ran: %v", err)
	}
	// The first round starts the codex, which writes the key into the home.
	round("mesh/k1")
	checkAuth("after the first round", key)
	h.send(c, messages.AccountRequest{User: "alice"})
	if m, ok := next().(messages.AccountResponse); !ok || m.Type != "apiKey" || m.Error != "" {
		t.Errorf("AccountRequest answered %T %+v", m, m)
	}
	procs := codexPIDs(h.cfg.Homes)

	// A new key while the codex runs is written at once.
	setKey(key2)
	waitEventN[APIKeyWritten](t, events, 0, 2, replyTimeout, "(the first round's and the new key's)")
	checkAuth("after replacing the key", key2)

	// auth.json alone vanishes: the next round writes the key again, on
	// the same codex.
	if err := os.Remove(filepath.Join(home, "auth.json")); err != nil {
		t.Fatal(err)
	}
	round("mesh/k2")
	checkAuth("after a round whose home lost auth.json", key2)
	if now := codexPIDs(h.cfg.Homes); !slices.Equal(now, procs) {
		t.Errorf("codex processes %v, want the same %v", now, procs)
	}

	// The whole home vanishes under the running codex; the next round
	// recreates it and writes the key again.
	if err := os.RemoveAll(home); err != nil {
		t.Fatal(err)
	}
	round("mesh/k3")
	checkAuth("after a round in a recreated home", key2)

	// And when the codex died and the home went with it.
	from := events.mark()
	h.killCodex("alice")
	waitEvent(t, events, from, replyTimeout, "of alice's killed codex", func(e AppServerDied) bool { return e.User == "alice" })
	if err := os.RemoveAll(home); err != nil {
		t.Fatal(err)
	}
	round("mesh/k4")
	checkAuth("after a round in a recreated home, new codex", key2)

	h.send(c, messages.Logout{User: "alice"})
	if m, ok := next().(messages.LoggedOut); !ok || m.User != "alice" {
		t.Fatalf("Logout answered %T %+v", m, m)
	}
	if _, err := os.Stat(credPath); !os.IsNotExist(err) {
		t.Errorf("credential file after logout: %v", err)
	}
	if _, err := os.Stat(filepath.Join(home, "auth.json")); !os.IsNotExist(err) {
		t.Errorf("auth.json after logout: %v", err)
	}
	h.send(c, messages.AccountRequest{User: "alice"})
	if m, ok := next().(messages.AccountResponse); !ok || m.Type != "" {
		t.Errorf("AccountRequest after logout answered %T %+v", m, m)
	}

	// Invalid keys are refused without being quoted.
	for _, bad := range []string{key + " " + key, "", "sk-test-\n" + key[8:], key + "\x7f", strings.Repeat(key, 40)} {
		h.send(c, messages.SetAPIKey{User: "alice", APIKey: bad})
		m, ok := next().(messages.Rejected)
		if !ok {
			t.Errorf("invalid key answered %T %+v", m, m)
			continue
		}
		if m.Reason == "" || strings.Contains(m.Reason, key[8:]) {
			t.Errorf("Rejected %+v quotes the key", m)
		}
	}
	if _, err := os.Stat(credPath); !os.IsNotExist(err) {
		t.Errorf("an invalid key was stored: %v", err)
	}
	c.quiet(t)

	logs := h.logs.String()
	for _, k := range []string{key, key2} {
		secret := k[len("sk-test-"):] // the random part
		for _, m := range replies {
			if s := fmt.Sprintf("%v %+v %#v", m, m, m); strings.Contains(s, secret) {
				t.Errorf("a reply carries a key: %T", m)
			}
		}
		if strings.Contains(logs, secret) {
			t.Errorf("the logs carry a key")
		}
	}
	if strings.Count(logs, "API key written into the home") < 4 || !strings.Contains(logs, "level=DEBUG") || !strings.Contains(logs, "codex stderr") {
		t.Errorf("the captured logs look incomplete (%d bytes)", len(logs))
	}
}

func TestModelsAndAccountWithoutLogin(t *testing.T) {
	h := newLoginHarness(t, fakeissuer.Options{}, requireOpenAIAuth)
	c := h.caller()
	h.send(c, messages.ModelsRequest{User: "alice"})
	res := expect[messages.ModelsResponse](t, c)
	if res.Error != "" || len(res.Models) == 0 || res.User != "alice" {
		t.Fatalf("ModelsResponse = %+v", res)
	}
	withEfforts, defaults := 0, 0
	for _, m := range res.Models {
		if m.ID == "" {
			t.Errorf("a model without an id: %+v", m)
		}
		if len(m.Efforts) > 0 && m.DefaultEffort != "" && slices.Contains(m.Efforts, m.DefaultEffort) {
			withEfforts++
		}
		if m.IsDefault {
			defaults++
		}
	}
	if withEfforts == 0 || defaults != 1 {
		t.Errorf("%d models with efforts and a default effort, %d default models: %+v", withEfforts, defaults, res.Models)
	}
	// Every model says what input it takes; hidden ones come only when
	// asked for, marked.
	hiddenIn := func(ms []messages.Model) (n int) {
		for _, m := range ms {
			if !slices.Contains(m.InputModalities, "text") {
				t.Errorf("%s: input modalities %v, want text among them", m.ID, m.InputModalities)
			}
			if m.Hidden {
				n++
			}
		}
		return n
	}
	if n := hiddenIn(res.Models); n != 0 {
		t.Errorf("%d hidden models listed without include_hidden", n)
	}
	h.send(c, messages.ModelsRequest{User: "alice", IncludeHidden: true})
	all := expect[messages.ModelsResponse](t, c)
	if n := hiddenIn(all.Models); all.Error != "" || n == 0 || len(all.Models) != len(res.Models)+n {
		t.Errorf("with include_hidden: %d models, %d hidden (error %q); want the %d visible ones and some hidden", len(all.Models), n, all.Error, len(res.Models))
	}

	h.send(c, messages.AccountRequest{User: "alice"})
	acct := expect[messages.AccountResponse](t, c)
	if acct.Error != "" || acct.Type != "" || acct.Email != "" || !acct.RequiresOpenAIAuth {
		t.Errorf("AccountResponse = %+v, want no account and requiresOpenaiAuth", acct)
	}
	if n := len(h.issuer.Requests()); n != 0 {
		t.Errorf("%d requests reached the issuer", n)
	}

	// Invalid account messages are rejected by the root.
	for _, m := range []any{messages.StartLogin{}, messages.StartLogin{User: "../bob"}, messages.AccountRequest{User: "a/b"}} {
		h.send(c, m)
		if r := expect[messages.Rejected](t, c); r.Reason == "" {
			t.Errorf("%T rejected without a reason", m)
		}
	}
	c.quiet(t)
}

func TestAccountWithoutLoginMockProvider(t *testing.T) {
	h := newLoginHarness(t, fakeissuer.Options{}, nil)
	c := h.caller()
	h.send(c, messages.AccountRequest{User: "alice"})
	acct := expect[messages.AccountResponse](t, c)
	if acct.Error != "" || acct.Type != "" || acct.RequiresOpenAIAuth {
		t.Errorf("AccountResponse = %+v", acct)
	}
}

// account/read says account:null after an API-key login when the provider
// does not require OpenAI auth (the mock's, as recorded with the real CLI):
// the daemon reports the stored key as an apiKey account, and nothing once
// the user logged out.
func TestAccountAPIKeyMockProvider(t *testing.T) {
	h := newLoginHarness(t, fakeissuer.Options{}, nil)
	c := h.caller()
	h.send(c, messages.SetAPIKey{User: "alice", APIKey: randomKey(t)})
	if m := expect[messages.APIKeyStored](t, c); m.User != "alice" {
		t.Fatalf("SetAPIKey answered %+v", m)
	}
	h.send(c, messages.AccountRequest{User: "alice"})
	if acct := expect[messages.AccountResponse](t, c); acct.Error != "" || acct.Type != codexproto.LoginAPIKey {
		t.Errorf("AccountResponse after SetAPIKey = %+v, want type apiKey", acct)
	}
	h.send(c, messages.Logout{User: "alice"})
	expect[messages.LoggedOut](t, c)
	h.send(c, messages.AccountRequest{User: "alice"})
	if acct := expect[messages.AccountResponse](t, c); acct.Error != "" || acct.Type != "" {
		t.Errorf("AccountResponse after logout = %+v, want no account", acct)
	}
}
