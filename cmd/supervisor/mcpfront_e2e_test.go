package main

import (
	"bytes"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/meshweaver/supervisor/actors"
	"github.com/meshweaver/supervisor/demomodel"
	"github.com/meshweaver/supervisor/mcpecho"
	"github.com/meshweaver/supervisor/messages"
)

// TestMCPFrontKeepsThreadWarm: the thread's MCP server is the daemon's
// front, which forwards to the round's MCPURL with the round's token. A
// second round with another token runs on the thread as it is loaded (no
// thread/resume) and its tool call reaches the MCP server with the new
// token; a round with another MCPURL reloads the thread (the CLI's MCP
// session must not go on with another server). After a restart, a
// WarmUp with a fourth token loads the thread, and the round after it
// runs warm with that token. No token reaches the daemon's log, the CLI's
// argv or environment, or a file of its home. Under isolation (a uid per
// user, bubblewrap) the sandboxed CLI reaches the front on the host's
// loopback: bubblewrap shares the host's network namespace.
func TestMCPFrontKeepsThreadWarm(t *testing.T) {
	t.Run("plain", func(t *testing.T) { testMCPFront(t, nil) })
	t.Run("uid+bwrap", func(t *testing.T) {
		if os.Geteuid() != 0 {
			t.Skip("the uid switch needs root; CI runs as root")
		}
		testMCPFront(t, isolated(t, "uid+bwrap", false, false))
	})
	t.Run("uid, front checks uids", func(t *testing.T) {
		if os.Geteuid() != 0 {
			t.Skip("the uid switch needs root; CI runs as root")
		}
		// The front lets the users' uids use their own user's URLs only,
		// as serve's does: the CLI's connections are its user's uid.
		eo := testEdge
		eo.userUIDs = testUIDs.Has
		testMCPFrontEdge(t, isolated(t, "uid", false, false), eo)
	})
}

func testMCPFront(t *testing.T, mutate func(*daemonSetup)) { testMCPFrontEdge(t, mutate, testEdge) }

func testMCPFrontEdge(t *testing.T, mutate func(*daemonSetup), eo edgeOptions) {
	readOnly := mcpecho.Options{Annotations: map[string]map[string]any{"echo": {"readOnlyHint": true}}}
	s1, err := mcpecho.Start(readOnly)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s1.Close)
	s2, err := mcpecho.Start(readOnly)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s2.Close)
	// After the servers: the daemon stops first (its CLI ends its MCP
	// sessions), then they do.
	metrics := actors.NewMetrics(nil)
	e := newEnvEdge(t, func(c *daemonSetup) {
		c.Metrics = metrics
		if mutate != nil {
			mutate(c)
		}
	}, eo, nil)
	e.allowMCP(s1.URL())
	e.allowMCP(s2.URL())
	const user, thread = "uma", "mcp/front"
	tokens := []string{"front-token-1-9d2c", "front-token-2-77ab", "front-token-3-e410", "front-token-4-5c3b"}
	round := func(i int, s *mcpecho.Server) {
		t.Helper()
		id := "call-front-" + strconv.Itoa(i)
		e.model.Enqueue(demomodel.Respond(demomodel.MCPCall(id, "meshweaver", "echo", `{"text":"`+id+`"}`)), demomodel.Text("done"))
		r := e.round(messages.StartRound{User: user, Thread: thread, Text: "use the mesh tool " + id,
			MCPURL: s.URL(), MCPToken: tokens[i]}).mustComplete(t)
		if _, res := toolPair(t, r, id); res != nil && (res.Failed || res.Output != "echo: "+id) {
			t.Errorf("round %d: result %+v, want the echo", i, *res)
		}
		var got []string
		for _, c := range s.Calls() {
			if strings.Contains(string(c.Arguments), id) {
				got = append(got, c.Header.Get("Authorization"))
			}
		}
		if len(got) != 1 || got[0] != "Bearer "+tokens[i] {
			t.Errorf("round %d: the tool call reached the server with Authorization %q, want [%q]", i, got, "Bearer "+tokens[i])
		}
	}
	counts := func() (resumes, warm float64) {
		return testutil.ToFloat64(metrics.ThreadResumes), testutil.ToFloat64(metrics.WarmThreads)
	}

	round(0, s1)
	resumes0, warm0 := counts()
	round(1, s1)
	if resumes, warm := counts(); resumes != resumes0 || warm != warm0+1 {
		t.Errorf("a new token: %v resumes and %v warm opens, want 0 and 1", resumes-resumes0, warm-warm0)
	}
	// The MCP session the CLI opened in round 0 went on in round 1.
	sessions := map[string]bool{}
	for _, r := range s1.Requests() {
		if id := r.Header.Get("Mcp-Session-Id"); id != "" {
			sessions[id] = true
		}
	}
	if len(sessions) != 1 {
		t.Errorf("the MCP server saw sessions %v, want one", sessions)
	}

	round(2, s2)
	if resumes, _ := counts(); resumes != resumes0+1 {
		t.Errorf("a new MCP URL: %v resumes, want 1", resumes-resumes0)
	}
	if n := len(s2.Calls()); n != 1 {
		t.Errorf("the new MCP server saw %d tool calls, want 1", n)
	}

	// A fresh app-server: the warm-up loads the thread with the next
	// round's settings, and that round runs on it as it is.
	e.restart(nil)
	e.send(messages.WarmUp{User: user, Thread: thread, MCPURL: s2.URL(), MCPToken: tokens[3]})
	w := e.awaitOther("WarmedUp", func(m any) bool { _, ok := m.(messages.WarmedUp); return ok }).(messages.WarmedUp)
	if w.Error != "" {
		t.Fatalf("WarmedUp %+v", w)
	}
	resumes1, warm1 := counts()
	if resumes1 != resumes0+2 {
		t.Errorf("the warm-up made %v resumes, want 1", resumes1-resumes0-1)
	}
	round(3, s2)
	if resumes, warm := counts(); resumes != resumes1 || warm != warm1+1 {
		t.Errorf("the round after the warm-up: %v resumes and %v warm opens, want 0 and 1", resumes-resumes1, warm-warm1)
	}

	var cmdline []byte
	var environ string
	if mutate == nil { // (under isolation bubblewrap is the daemon's child)
		p := e.appServer(user)
		cmdline, _ = os.ReadFile(filepath.Join("/proc", strconv.Itoa(p.PID), "cmdline"))
		environ = strings.Join(p.Environ(), "\n")
		if len(cmdline) == 0 {
			t.Errorf("no argv of the app-server")
		}
	}
	for _, tok := range tokens {
		if strings.Contains(e.logs.String(), tok) {
			t.Errorf("token %q is in the daemon's log", tok)
		}
		if bytes.Contains(cmdline, []byte(tok)) || strings.Contains(environ, tok) {
			t.Errorf("token %q is in the app-server's argv or environment", tok)
		}
	}
	err = filepath.WalkDir(filepath.Dir(e.home(user)), func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		data, err := os.ReadFile(path)
		if err != nil {
			return nil // a socket, or a file the CLI is replacing
		}
		for _, tok := range tokens {
			if bytes.Contains(data, []byte(tok)) {
				t.Errorf("token %q is in %s", tok, path)
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}
