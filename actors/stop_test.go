package actors

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/meshweaver/supervisor/messages"
	"github.com/meshweaver/supervisor/testkit/fakeappserver"
	"github.com/meshweaver/supervisor/testkit/proctest"
)

// Stopping an app-server ends its process group.

// TestSupervisionStopEndsAppServerGroup: an app-server is started in its
// own process group so that a stop reaches everything it started, and a
// stop also ends the descendants it finds outside that group (a command in
// a session of its own, like the real CLI's shell-snapshot shell). When the
// app-server exits politely at stdin EOF, neither may outlive it.
func TestSupervisionStopEndsAppServerGroup(t *testing.T) {
	l, err := fakeappserver.Relaunch(fakeappserver.Config{}, "")
	if err != nil {
		t.Fatal(err)
	}
	// The launcher leaves a background process in the app-server's group,
	// and one in a session of its own, as codex does with the shell it runs
	// for its snapshot.
	script := filepath.Join(t.TempDir(), "codex")
	body := "#!/bin/sh\nsleep 60 </dev/null >/dev/null 2>&1 &\nsetsid sleep 61 </dev/null >/dev/null 2>&1 &\n" +
		"exec '" + l.Path + "' \"$@\"\n"
	if err := os.WriteFile(script, []byte(body), 0o755); err != nil {
		t.Fatal(err)
	}
	h := supHarness(t, func(c *tree) {
		c.CodexBin, c.CodexArgs = script, l.Args
		c.CodexEnv = append(c.CodexEnv, l.Env...)
		c.StopGrace = 200 * time.Millisecond
	})
	c := h.caller()
	mustStatus(t, h.round(c, messages.StartRound{User: "alice", Thread: "mesh/g", Text: "hi"}), messages.StatusCompleted)
	group := liveAppServerPID(t, h, "alice")
	poll(t, waitFor, "the launcher's two sleeps", func() bool { return len(appServersUnder(h.cfg.Homes)) == 3 })
	ctx, cancel := context.WithTimeout(context.Background(), waitFor)
	defer cancel()
	<-h.engine.PoisonCtx(ctx, h.root).Done()
	waitGone(t, group, waitFor)
	// The strays are SIGKILLed by the stop; one may still be on its way out
	// (state R with the kill pending) for a moment after it.
	var left []string
	deadline := time.Now().Add(waitFor)
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	for {
		left = left[:0]
		for _, pid := range appServersUnder(h.cfg.Homes) {
			left = append(left, proctest.Describe(pid))
		}
		if len(left) == 0 || time.Now().After(deadline) {
			break
		}
		<-tick.C
	}
	if len(left) > 0 {
		t.Errorf("the app-server exited at stdin EOF and its stop left its process group behind: %s",
			strings.Join(left, "; "))
	}
}
