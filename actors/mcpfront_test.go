package actors

import (
	"bytes"
	"encoding/json"
	"net/http"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/meshweaver/supervisor/mcpfront"
	"github.com/meshweaver/supervisor/messages"
	"github.com/meshweaver/supervisor/testkit/fakeappserver"
)

// newFront is a front closed when the test ends (after the tree).
func newFront(t *testing.T) *mcpfront.Front {
	t.Helper()
	// The upstreams here are on loopback, which the daemon's front refuses.
	f, err := mcpfront.New(mcpfront.Options{Logger: testLogger(t), CheckDestination: func(netip.Addr) error { return nil }})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = f.Close() })
	return f
}

// meshURL is the MCP server URL a thread was loaded with by the request
// (thread/start or thread/resume) params.
func meshURL(t *testing.T, params json.RawMessage) (url string, headers bool) {
	t.Helper()
	var p struct {
		Config struct {
			MCPServers map[string]struct {
				URL         string         `json:"url"`
				HTTPHeaders map[string]any `json:"http_headers"`
			} `json:"mcp_servers"`
		} `json:"config"`
	}
	if err := json.Unmarshal(params, &p); err != nil {
		t.Fatal(err)
	}
	s := p.Config.MCPServers["meshweaver"]
	return s.URL, s.HTTPHeaders != nil
}

// With the front, a thread's overlay names the mesh thread's front URL
// and no token: a round with a new token runs on the loaded thread (no
// thread/resume); a new MCP URL reloads it with a new front URL (the old
// one answers 404), and so does a round without
// one, which also has the front forget the key; the process's end does
// too. The token is in nothing the CLI gets.
func TestMCPFrontTokenNeedsNoReload(t *testing.T) {
	front := newFront(t)
	record := filepath.Join(t.TempDir(), "received.jsonl")
	h := supHarness(t, withFake(t, fakeappserver.Config{RecordPath: record}), func(c *tree) { c.MCPFront = front })
	c := h.caller()
	const upstream, upstream2 = "https://mesh.example/mcp", "https://mesh2.example/mcp"
	run := func(url, token string) roundResult {
		t.Helper()
		r := h.round(c, messages.StartRound{User: "fay", Thread: "mesh/f", Text: "hi", MCPURL: url, MCPToken: token})
		mustStatus(t, r, messages.StatusCompleted)
		return r
	}
	loads := func() []recordedRequest {
		var out []recordedRequest
		for _, r := range recordedRequests(t, record) {
			if r.Method == "thread/start" || r.Method == "thread/resume" {
				out = append(out, r)
			}
		}
		return out
	}

	run(upstream, "tok-one")
	run(upstream, "tok-two")
	l := loads()
	if len(l) != 1 || l[0].Method != "thread/start" {
		t.Fatalf("loads %v: want one thread/start, no resume for a new token", l)
	}
	url, headers := meshURL(t, l[0].Params)
	if !strings.HasPrefix(url, "http://"+front.Addr()+mcpfront.PathPrefix) || headers {
		t.Errorf("the thread's MCP server is %q (headers %v), want the front's URL and no headers", url, headers)
	}
	if front.Len() != 1 {
		t.Errorf("front keys %d, want 1", front.Len())
	}

	run(upstream2, "tok-two")
	l = loads()
	if len(l) != 2 || l[1].Method != "thread/resume" {
		t.Fatalf("loads %v: want a resume for a new MCP URL", l)
	}
	url2, _ := meshURL(t, l[1].Params)
	if url2 == url || !strings.HasPrefix(url2, "http://"+front.Addr()+mcpfront.PathPrefix) {
		t.Errorf("resumed with %q, want a new front URL (not %q): the old MCP session must not reach the new server", url2, url)
	}
	if resp, err := http.Post(url, "application/json", strings.NewReader("{}")); err != nil || resp.StatusCode != http.StatusNotFound {
		t.Errorf("the old front URL answered %v, %v; want 404", resp, err)
	} else {
		resp.Body.Close()
	}

	run("", "")
	if l = loads(); len(l) != 3 {
		t.Fatalf("loads %v: want a resume for a round without MCP", l)
	}
	if u, _ := meshURL(t, l[2].Params); !strings.HasSuffix(u, "/disabled") {
		t.Errorf("a round without MCP loaded %q, want the disabled overlay", u)
	}
	if front.Len() != 0 {
		t.Errorf("front keys %d after a round without MCP, want 0 (forgotten)", front.Len())
	}

	run(upstream, "tok-three")
	if front.Len() != 1 {
		t.Errorf("front keys %d, want 1", front.Len())
	}
	if u, _ := meshURL(t, loads()[3].Params); u == url || !strings.HasPrefix(u, "http://"+front.Addr()) {
		t.Errorf("after a forget the thread got %q, want a new front URL (not %q)", u, url)
	}
	pid := liveAppServerPID(t, h, "fay")
	poll(t, waitFor, "the idle app-server to stop", func() bool {
		h.engine.Send(h.childPID("user/fay/codex/main"), evictNow{})
		return syscall.Kill(pid, 0) != nil
	})
	poll(t, waitFor, "the front to forget the key", func() bool { return front.Len() == 0 })

	data, err := os.ReadFile(record)
	if err != nil {
		t.Fatal(err)
	}
	for _, tok := range []string{"tok-one", "tok-two", "tok-three"} {
		if bytes.Contains(data, []byte(tok)) {
			t.Errorf("token %q reached the CLI", tok)
		}
	}
}

// A thread idle for ThreadIdle is unloaded and its front key forgotten;
// a warm-up binds it again and loads the thread with its front URL.
func TestMCPFrontForgetsIdleThread(t *testing.T) {
	front := newFront(t)
	record := filepath.Join(t.TempDir(), "received.jsonl")
	h := supHarness(t, withFake(t, fakeappserver.Config{RecordPath: record}), func(c *tree) {
		c.MCPFront, c.ThreadIdle = front, 100*time.Millisecond
	})
	c := h.caller()
	r := h.round(c, messages.StartRound{User: "gus", Thread: "mesh/g", Text: "hi", MCPURL: "https://mesh.example/mcp", MCPToken: "tok-g"})
	mustStatus(t, r, messages.StatusCompleted)
	poll(t, waitFor, "the idle thread to be unloaded", func() bool {
		return countMethod(recordedRequests(t, record), "thread/unsubscribe") == 1
	})
	if front.Len() != 0 {
		t.Errorf("front keys %d after the idle unload, want 0", front.Len())
	}
	h.engine.SendWithSender(h.root, messages.WarmUp{User: "gus", Thread: "mesh/g", MCPURL: "https://mesh.example/mcp", MCPToken: "tok-w"}, c.pid)
	deadline := time.After(waitFor)
	for warmed := false; !warmed; {
		select {
		case msg := <-c.ch:
			if w, ok := msg.(messages.WarmedUp); ok {
				if w.Error != "" {
					t.Fatalf("WarmedUp = %+v", w)
				}
				warmed = true
			}
		case <-deadline:
			t.Fatal("no WarmedUp")
		}
	}
	// (The thread may be unloaded again by now: ThreadIdle is short.)
	var resumes []recordedRequest
	for _, r := range recordedRequests(t, record) {
		if r.Method == "thread/resume" {
			resumes = append(resumes, r)
		}
	}
	if len(resumes) != 1 {
		t.Fatalf("the warm-up made %d thread/resume calls, want 1", len(resumes))
	}
	if u, _ := meshURL(t, resumes[0].Params); !strings.HasPrefix(u, "http://"+front.Addr()+mcpfront.PathPrefix) {
		t.Errorf("the warm-up loaded the thread with %q, want a front URL", u)
	}
}
