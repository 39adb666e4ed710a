package bench

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/meshweaver/supervisor/mcpecho"
	"github.com/meshweaver/supervisor/mcpfront"
)

// mcpFront: what the loopback MCP front adds to one MCP call (tools/call
// of mcpecho's echo, over a kept-alive connection), against the
// same call made to the server directly.
func (r *run) mcpFront(ctx context.Context) error {
	r.progress("  %d MCP calls per side", r.opts.MCPCalls)
	srv, err := mcpecho.Start(mcpecho.Options{})
	if err != nil {
		return err
	}
	defer srv.Close()
	up, err := url.Parse(srv.URL())
	if err != nil {
		return err
	}
	// mcpecho is on loopback, which the front reaches only by name.
	front, err := mcpfront.New(mcpfront.Options{Logger: slog.New(slog.DiscardHandler), Allow: []string{up.Host}})
	if err != nil {
		return err
	}
	defer front.Close()
	key := mcpfront.Key{User: "bench", Thread: "mcp"}
	if err := front.Set(key, srv.URL(), "bench-token"); err != nil {
		return err
	}
	hc := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 4}, Timeout: time.Minute}
	defer hc.CloseIdleConnections()
	post := func(url, session, body string) (string, time.Duration, error) {
		req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, strings.NewReader(body))
		if err != nil {
			return "", 0, err
		}
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Accept", "application/json, text/event-stream")
		req.Header.Set("Authorization", "Bearer bench-token")
		if session != "" {
			req.Header.Set("Mcp-Session-Id", session)
		}
		start := time.Now()
		resp, err := hc.Do(req)
		if err != nil {
			return "", 0, err
		}
		defer resp.Body.Close()
		b, err := io.ReadAll(resp.Body)
		took := time.Since(start)
		if err == nil && resp.StatusCode != http.StatusOK {
			err = fmt.Errorf("MCP call: %s: %s", resp.Status, b)
		}
		return resp.Header.Get("Mcp-Session-Id"), took, err
	}
	const initialize = `{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-03-26","capabilities":{},"clientInfo":{"name":"bench","version":"1"}}}`
	const call = `{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"echo","arguments":{"text":"hi"}}}`
	viaFront := front.Bind(key)
	sessDirect, _, err := post(srv.URL(), "", initialize)
	if err != nil {
		return err
	}
	sessFront, _, err := post(viaFront, "", initialize)
	if err != nil {
		return err
	}
	var throughFront, direct []time.Duration
	for range r.opts.MCPCalls {
		_, a, err := post(viaFront, sessFront, call)
		if err != nil {
			return err
		}
		_, b, err := post(srv.URL(), sessDirect, call)
		if err != nil {
			return err
		}
		throughFront, direct = append(throughFront, a), append(direct, b)
	}
	r.rows = append(r.rows, row("MCP tools/call through the front", "µs", us(throughFront), "the MCP server directly", us(direct), ""))
	return nil
}
