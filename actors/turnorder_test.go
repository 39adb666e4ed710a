package actors

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/meshweaver/supervisor/third_party/hollywood/actor"

	"github.com/meshweaver/supervisor/codexrpc"
	"github.com/meshweaver/supervisor/testkit/fakeappserver"
)

// Order of a turn's end and turn/start's answer.

// gatedWriter holds back every write that carries hold until gate closes.
type gatedWriter struct {
	io.WriteCloser
	hold []byte
	gate <-chan struct{}
}

func (w gatedWriter) Write(p []byte) (int, error) {
	if bytes.Contains(p, w.hold) {
		<-w.gate
	}
	return w.WriteCloser.Write(p)
}

// inProcessFake is a client of a fake app-server served in this process.
// Requests of the method hold are sent only once gate is closed.
func inProcessFake(t *testing.T, fc fakeappserver.Config, hold string, gate <-chan struct{}) *codexrpc.Client {
	t.Helper()
	toFakeR, toFakeW := io.Pipe()
	fromFakeR, fromFakeW := io.Pipe()
	served := make(chan struct{})
	go func() {
		defer close(served)
		_ = fc.Serve(context.Background(), toFakeR, fromFakeW, io.Discard)
		_ = fromFakeW.Close()
	}()
	w := gatedWriter{WriteCloser: toFakeW, hold: []byte(`"method":"` + hold + `"`), gate: gate}
	conn := codexrpc.NewConn(fromFakeR, w, codexrpc.Options{Logger: slog.New(slog.DiscardHandler)})
	t.Cleanup(func() {
		_ = conn.Close() // the fake sees EOF and returns
		<-served
		ctx, cancel := context.WithTimeout(context.Background(), waitFor)
		defer cancel()
		_ = conn.Wait(ctx)
	})
	client := codexrpc.NewClient(conn)
	ctx, cancel := context.WithTimeout(context.Background(), waitFor)
	defer cancel()
	if _, err := client.Initialize(ctx, codexrpc.ClientInfo{Name: "test", Version: "1"}); err != nil {
		t.Fatal(err)
	}
	return client
}

// TestSupervisionTurnEndBeforeTurnStarted: the turn's notifications reach
// the round through the codex actor, turn/start's answer through the
// driver goroutine; nothing orders the two. With an app-server that ends a
// turn quickly (the fake app-server ends its turns while answering
// turn/start; the real CLI when a turn fails at once) turn/completed often
// arrives first (measured: 3 rounds in 40 with -race, 14 in 40 without).
// Here a stub codex actor routes turn/completed as soon as the round
// subscribes, and turn/start reaches the fake only after that: the order
// is certain. The round must still name
// its thread in the verdict, unsubscribe (or the user's app-server counts
// as busy forever: no idle eviction, never an LRU victim) and journal the
// user's message.
func TestSupervisionTurnEndBeforeTurnStarted(t *testing.T) {
	tree := runStubRound(t, "mesh/race", func(c *actor.Context, m subscribe) {
		params, _ := json.Marshal(map[string]any{"threadId": m.threadID,
			"turn": map[string]any{"id": "0199a0a0-0000-7000-8000-0000000000aa", "status": "completed", "items": []any{}}})
		c.Send(m.round, roundNote{note: &codexrpc.Notification{Method: codexrpc.NoteTurnCompleted, Params: params}})
	})
	v := tree.verdict(t)
	thread := <-tree.threads
	var bugs []string
	if v.CodexThreadID != thread {
		bugs = append(bugs, fmt.Sprintf("the verdict names thread %q, not %q", v.CodexThreadID, thread))
	}
	select {
	case <-tree.unsubs:
	case <-time.After(time.Second):
		bugs = append(bugs, "the round never unsubscribed from the thread")
	}
	select {
	case <-tree.journal:
	case <-time.After(time.Second):
		bugs = append(bugs, "the user's message was not journaled")
	}
	if len(bugs) > 0 {
		t.Fatalf("turn/completed routed before the driver's turnStarted (verdict %+v): %s",
			v, strings.Join(bugs, "; "))
	}
}
