package bench

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/meshweaver/supervisor/codexproto"
	"github.com/meshweaver/supervisor/codexrpc"
)

// TestServeFlood drives ServeFlood as the daemon does, through a
// codexrpc.Conn: initialize (the pinned version), thread/start, two turns
// of exactly the deltas asked, each one word, completed; an unknown
// method gets the CLI's -32600; stdin's end ends it without an error.
func TestServeFlood(t *testing.T) {
	const deltas = 1000
	clientR, serverW := io.Pipe()
	serverR, clientW := io.Pipe()
	served := make(chan error, 1)
	go func() {
		err := ServeFlood(serverR, serverW, deltas)
		serverW.Close()
		served <- err
	}()
	type turnEnd struct {
		status string
		deltas int
		text   string
	}
	ended := make(chan turnEnd, 1)
	var n int
	var text strings.Builder
	conn := codexrpc.NewConn(clientR, clientW, codexrpc.Options{
		Logger: slog.New(slog.DiscardHandler),
		OnNotification: func(m *codexrpc.Notification) { // the read goroutine, in order
			var p struct {
				Delta string `json:"delta"`
				Turn  struct {
					Status string `json:"status"`
				} `json:"turn"`
			}
			if err := json.Unmarshal(m.Params, &p); err != nil {
				return
			}
			switch m.Method {
			case codexproto.NoteAgentMessageDelta:
				n++
				text.WriteString(p.Delta)
			case codexproto.NoteTurnCompleted:
				ended <- turnEnd{p.Turn.Status, n, text.String()}
				n = 0
				text.Reset()
			}
		},
	})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()

	var init codexproto.InitializeResult
	if err := conn.Call(ctx, codexproto.MethodInitialize, codexproto.InitializeParams{ClientInfo: codexproto.ClientInfo{Name: "meshweaver", Version: "1"}}, &init); err != nil {
		t.Fatal(err)
	}
	if v, err := codexproto.ParseUserAgent(init.UserAgent); err != nil || v.String() != codexproto.PinnedCLIVersion {
		t.Errorf("userAgent %q: version %v, %v; want %s", init.UserAgent, v, err, codexproto.PinnedCLIVersion)
	}
	var th codexproto.ThreadResult
	if err := conn.Call(ctx, codexproto.MethodThreadStart, codexproto.ThreadStartParams{Cwd: "/w"}, &th); err != nil || th.Thread.ID == "" {
		t.Fatalf("thread/start: %+v, %v", th, err)
	}
	for i := range 2 {
		var tr codexproto.TurnResult
		if err := conn.Call(ctx, codexproto.MethodTurnStart, codexproto.TurnStartParams{ThreadID: th.Thread.ID, Input: codexproto.TextInput("go")}, &tr); err != nil {
			t.Fatalf("turn %d: %v", i, err)
		}
		if tr.Turn.ID == "" || tr.Turn.Status != codexproto.TurnInProgress {
			t.Errorf("turn %d: turn/start answered %+v", i, tr)
		}
		select {
		case got := <-ended:
			if got.status != codexproto.TurnCompleted || got.deltas != deltas || got.text != strings.Repeat(floodDelta, deltas) {
				t.Errorf("turn %d: %s with %d deltas (%d bytes), want completed with %d deltas of %q", i, got.status, got.deltas, len(got.text), deltas, floodDelta)
			}
		case <-ctx.Done():
			t.Fatalf("turn %d: no turn/completed", i)
		}
	}
	var we *codexrpc.WireError
	if err := conn.Call(ctx, codexproto.MethodModelList, struct{}{}, nil); !errors.As(err, &we) || we.Code != -32600 {
		t.Errorf("model/list: %v, want a -32600 error", err)
	}
	if err := conn.Close(); err != nil {
		t.Error(err)
	}
	if err := <-served; err != nil {
		t.Errorf("ServeFlood after stdin closed: %v", err)
	}
	if err := conn.Wait(ctx); err != nil {
		t.Error(err)
	}
}
