package client_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/meshweaver/supervisor/client"
	"github.com/meshweaver/supervisor/messages"
	"github.com/meshweaver/supervisor/testkit/fakeappserver"
)

// testCtx is a context that ends with the test, bounded so that a hang
// fails instead of stalling the run.
func testCtx(t *testing.T) context.Context {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	t.Cleanup(cancel)
	return ctx
}

func dial(t *testing.T, addr string, opts ...client.Option) *client.Client {
	t.Helper()
	c, err := client.Dial(testCtx(t), addr, opts...)
	if err != nil {
		t.Fatalf("Dial: %v", err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// holdingDaemon is a second daemon whose turns pause after their first
// text delta, until interrupted.
func holdingDaemon(t *testing.T) string {
	t.Helper()
	addr, stop, err := startDaemon(fakeappserver.Config{ReplyText: "one two three", HoldTurns: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := stop(); err != nil {
			t.Errorf("stopping the daemon: %v", err)
		}
	})
	return addr
}

// firstEvent waits for the round's first text event.
func firstText(t *testing.T, r *client.Round) messages.RoundEvent {
	t.Helper()
	for e := range r.Events() {
		if e.Kind == messages.KindText {
			return e
		}
	}
	v, err := r.Wait()
	t.Fatalf("the round ended before any text: %+v, %v", v, err)
	return messages.RoundEvent{}
}

// Events come in seq order, one verdict ends them, and the round id the
// client minted is the one on every reply.
func TestRoundEventsInOrder(t *testing.T) {
	c := dial(t, daemonAddr)
	r, err := c.Round(testCtx(t), messages.StartRound{User: "order", Thread: "t", Text: "hi"})
	if err != nil {
		t.Fatal(err)
	}
	if r.ID() == "" {
		t.Fatal("no round id minted")
	}
	var last uint64
	n := 0
	for e := range r.Events() {
		if e.RoundID != r.ID() || e.Seq <= last {
			t.Errorf("event %+v after seq %d of round %s", e, last, r.ID())
		}
		last = e.Seq
		n++
	}
	v, err := r.Wait()
	if err != nil || v.Status != messages.StatusCompleted || v.RoundID != r.ID() {
		t.Fatalf("Wait = %+v, %v; want completed for %s", v, err, r.ID())
	}
	if n == 0 {
		t.Error("no events")
	}
	// Waiting again gives the same verdict.
	if v2, err := r.Wait(); err != nil || v2 != v {
		t.Errorf("second Wait = %+v, %v", v2, err)
	}
}

// Interrupt stops a running round, which still gets its verdict; Steer
// reaches a running round (the fake then completes it); both answer OK
// false when no round runs.
func TestInterruptAndSteer(t *testing.T) {
	addr := holdingDaemon(t)
	c := dial(t, addr)
	ctx := testCtx(t)
	r, err := c.Round(ctx, messages.StartRound{User: "ctl", Thread: "t", Text: "hold on"})
	if err != nil {
		t.Fatal(err)
	}
	firstText(t, r)
	if a, err := c.Interrupt(ctx, messages.InterruptRound{User: "ctl", Thread: "t", RoundID: r.ID()}); err != nil || !a.OK {
		t.Errorf("Interrupt = %+v, %v; want OK", a, err)
	}
	if v, err := r.Wait(); err != nil || v.Status != messages.StatusInterrupted {
		t.Errorf("Wait = %+v, %v; want interrupted", v, err)
	}
	if a, err := c.Interrupt(ctx, messages.InterruptRound{User: "ctl", Thread: "t"}); err != nil || a.OK || a.Error == "" {
		t.Errorf("Interrupt with no round running = %+v, %v; want not OK with a reason", a, err)
	}

	r, err = c.Round(ctx, messages.StartRound{User: "ctl", Thread: "t", Text: "hold on again"})
	if err != nil {
		t.Fatal(err)
	}
	firstText(t, r)
	if a, err := c.Steer(ctx, messages.SteerRound{User: "ctl", Thread: "t", RoundID: r.ID(), Text: "and more"}); err != nil || !a.OK {
		t.Errorf("Steer = %+v, %v; want OK", a, err)
	}
	if v, err := r.Wait(); err != nil || v.Status != messages.StatusCompleted {
		t.Errorf("Wait after the steer = %+v, %v; want completed", v, err)
	}
	if a, err := c.Steer(ctx, messages.SteerRound{User: "ctl", Thread: "t", Text: "nobody listens"}); err != nil || a.OK {
		t.Errorf("Steer with no round running = %+v, %v; want not OK", a, err)
	}
}

// A round's context ending stops the waiting with its error; Close ends
// a round still waited for with ErrClosed, and every later call too.
func TestCancelAndClose(t *testing.T) {
	addr := holdingDaemon(t)
	c := dial(t, addr)
	ctx, cancel := context.WithCancel(testCtx(t))
	r, err := c.Round(ctx, messages.StartRound{User: "cc", Thread: "t1", Text: "hold on"})
	if err != nil {
		t.Fatal(err)
	}
	firstText(t, r)
	cancel()
	if _, err := r.Wait(); !errors.Is(err, context.Canceled) {
		t.Errorf("Wait after cancel = %v, want context.Canceled", err)
	}

	r2, err := c.Round(testCtx(t), messages.StartRound{User: "cc", Thread: "t2", Text: "hold on"})
	if err != nil {
		t.Fatal(err)
	}
	firstText(t, r2)
	c.Close()
	if _, err := r2.Wait(); !errors.Is(err, client.ErrClosed) {
		t.Errorf("Wait after Close = %v, want ErrClosed", err)
	}
	if _, err := c.Account(testCtx(t), "cc"); !errors.Is(err, client.ErrClosed) {
		t.Errorf("Account after Close = %v, want ErrClosed", err)
	}
	if _, err := c.Round(testCtx(t), messages.StartRound{User: "cc", Thread: "t3", Text: "x"}); !errors.Is(err, client.ErrClosed) {
		t.Errorf("Round after Close = %v, want ErrClosed", err)
	}
}

// A daemon nobody listens for fails the call with ErrUnreachable, not a
// timeout.
func TestUnreachable(t *testing.T) {
	addr, err := freeAddr()
	if err != nil {
		t.Fatal(err)
	}
	c := dial(t, addr)
	_, err = c.Account(testCtx(t), "ann")
	if !errors.Is(err, client.ErrUnreachable) {
		t.Fatalf("Account of an absent daemon = %v, want ErrUnreachable", err)
	}
	r, err := c.Round(testCtx(t), messages.StartRound{User: "ann", Thread: "t", Text: "x"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := r.Wait(); !errors.Is(err, client.ErrUnreachable) {
		t.Errorf("Wait on an absent daemon = %v, want ErrUnreachable", err)
	}
}

// Concurrent calls each get their own answer.
func TestConcurrentCallsDoNotMix(t *testing.T) {
	c := dial(t, daemonAddr)
	users := []string{"mix-a", "mix-b", "mix-c", "mix-d"}
	type res struct {
		user string
		got  messages.AccountResponse
		err  error
	}
	out := make(chan res, len(users))
	for _, u := range users {
		go func() {
			a, err := c.Account(testCtx(t), u)
			out <- res{u, a, err}
		}()
	}
	for range users {
		r := <-out
		if r.err != nil || r.got.User != r.user {
			t.Errorf("Account(%s) = %+v, %v", r.user, r.got, r.err)
		}
	}
}

// Options are checked: a bad address, TLS files that do not load.
func TestDialErrors(t *testing.T) {
	if _, err := client.Dial(testCtx(t), "no-port"); err == nil {
		t.Error("Dial of an address without a port succeeded")
	}
	if _, err := client.Dial(testCtx(t), daemonAddr, client.WithTLSFiles("/nonexistent/c", "/nonexistent/k", "/nonexistent/ca")); err == nil {
		t.Error("Dial with missing TLS files succeeded")
	}
}

// SetAPIKey and Logout are answered, an invalid key refused. (The fake's
// account is fixed: that the key shows in the account is checked with the
// real codex CLI, by cmd/supervisor's TestAccountCommands.)
func TestCredentials(t *testing.T) {
	c := dial(t, daemonAddr)
	ctx := testCtx(t)
	const user = "cred"
	if err := c.SetAPIKey(ctx, user, "sk-test-0123456789abcdef"); err != nil {
		t.Fatalf("SetAPIKey: %v", err)
	}
	if err := c.Logout(ctx, user); err != nil {
		t.Fatalf("Logout: %v", err)
	}
	if err := c.SetAPIKey(ctx, user, "has spaces"); !errors.As(err, new(*client.RejectedError)) {
		t.Errorf("SetAPIKey of an invalid key = %v, want a *client.RejectedError", err)
	}
}

// WithListenAddr is where the daemon dials back: the replies come there.
func TestListenAddr(t *testing.T) {
	listen, err := freeAddr()
	if err != nil {
		t.Fatal(err)
	}
	c, err := client.Dial(testCtx(t), daemonAddr, client.WithListenAddr(listen))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if got := c.ListenAddr(); got != listen {
		t.Errorf("ListenAddr = %s, want %s", got, listen)
	}
	if a, err := c.Account(testCtx(t), "listener"); err != nil || a.User != "listener" {
		t.Errorf("Account through %s = %+v, %v", listen, a, err)
	}
	// The address is taken while the client lives.
	if _, err := client.Dial(testCtx(t), daemonAddr, client.WithListenAddr(listen)); err == nil {
		t.Error("a second client listening on the same address started")
	}
}
