package client_test

import (
	"errors"
	"testing"

	"github.com/meshweaver/supervisor/client"
	"github.com/meshweaver/supervisor/messages"
)

// A thread that ran a round is listed with its codex thread; a bad
// request is a RejectedError.
func TestListThreads(t *testing.T) {
	c := dial(t, daemonAddr)
	r, err := c.Round(testCtx(t), messages.StartRound{User: "lister", Thread: "mesh/listed", Text: "hi"})
	if err != nil {
		t.Fatal(err)
	}
	v, err := r.Wait()
	if err != nil || v.Status != messages.StatusCompleted {
		t.Fatalf("round = %+v, %v", v, err)
	}
	got, err := c.ListThreads(testCtx(t), messages.ListThreads{User: "lister"})
	if err != nil || got.Error != "" || len(got.Threads) != 1 {
		t.Fatalf("ListThreads = %+v, %v; want one thread", got, err)
	}
	if th := got.Threads[0]; th.Thread != "mesh/listed" || th.CodexThreadID != v.CodexThreadID || th.LastActivityUnix == 0 {
		t.Errorf("thread = %+v, want mesh/listed on %s", th, v.CodexThreadID)
	}
	var rej *client.RejectedError
	if _, err := c.ListThreads(testCtx(t), messages.ListThreads{User: "lister", Limit: 9999}); !errors.As(err, &rej) {
		t.Errorf("ListThreads with a bad limit = %v, want a RejectedError", err)
	}
}
