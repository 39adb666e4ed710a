package mcpfront

import (
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/meshweaver/supervisor/mcpecho"
)

// BenchmarkToolsCall is one MCP tools/call (the test server's echo, over
// a kept-alive connection) made to the server directly and through the
// front; the difference is what the front adds per call.
//
//	go test -run XXX -bench ToolsCall -benchmem ./mcpfront/
func BenchmarkToolsCall(b *testing.B) {
	srv, err := mcpecho.Start(mcpecho.Options{})
	if err != nil {
		b.Fatal(err)
	}
	defer srv.Close()
	f, _ := newFront(b, Options{})
	key := Key{User: "bench", Thread: "t"}
	if err := f.Set(key, srv.URL(), "tok"); err != nil {
		b.Fatal(err)
	}
	hc := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 4}}
	defer hc.CloseIdleConnections()
	post := func(b *testing.B, url, session, body string) string {
		req, _ := http.NewRequest(http.MethodPost, url, strings.NewReader(body))
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Accept", "application/json, text/event-stream")
		if session != "" {
			req.Header.Set("Mcp-Session-Id", session)
		}
		resp, err := hc.Do(req)
		if err != nil {
			b.Fatal(err)
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			b.Fatalf("status %d", resp.StatusCode)
		}
		return resp.Header.Get("Mcp-Session-Id")
	}
	const initialize = `{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-03-26","capabilities":{},"clientInfo":{"name":"bench","version":"1"}}}`
	const call = `{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"echo","arguments":{"text":"hi"}}}`
	for _, tc := range []struct{ name, url string }{{"direct", srv.URL()}, {"front", f.Bind(key)}} {
		b.Run(tc.name, func(b *testing.B) {
			sess := post(b, tc.url, "", initialize)
			for b.Loop() {
				post(b, tc.url, sess, call)
			}
		})
	}
}
