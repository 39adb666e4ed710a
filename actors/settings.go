package actors

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"

	"github.com/meshweaver/supervisor/codexproto"
	"github.com/meshweaver/supervisor/mcpfront"
	"github.com/meshweaver/supervisor/messages"
)

// toolSpecs are a round's tools as the CLI declares them.
func toolSpecs(tools []messages.DynamicTool) []codexproto.DynamicToolSpec {
	var out []codexproto.DynamicToolSpec
	for _, t := range tools {
		out = append(out, codexproto.DynamicToolSpec{Type: "function", Name: t.Name, Description: t.Description,
			InputSchema: json.RawMessage(t.InputSchema)})
	}
	return out
}

// threadSettings are what a thread is loaded with (thread/start or
// thread/resume): a thread loaded in an app-server keeps them, and ignores
// a later resume's.
type threadSettings struct {
	Cwd                   string         `json:"cwd"`
	Sandbox               string         `json:"sandbox"`
	ApprovalPolicy        string         `json:"approvalPolicy"`
	DeveloperInstructions string         `json:"developerInstructions"`
	Config                map[string]any `json:"config"` // the MCP overlay (see bind)
	// MCPUpstream is the mesh's MCP URL the thread's MCP server reaches
	// through the front ("" when the round has none). It is not sent to
	// the CLI, but is part of the fingerprint: the CLI's MCP session
	// (Mcp-Session-Id) must not go on with another server.
	MCPUpstream string `json:"mcpUpstream,omitempty"`
	// DynamicTools are the round's tools, given to a fresh thread (the
	// CLI takes them at thread/start only).
	DynamicTools []codexproto.DynamicToolSpec `json:"dynamicTools,omitempty"`

	// mcp is the round's MCP back-connection, turned into Config by bind.
	// Its token is left out of the fingerprint (unexported): a new token
	// needs no reload, the front adds the current one.
	mcp mcpRoute
}

// mcpRoute is a round's MCP back-connection: the mesh thread it is for,
// the URL and its bearer token (a secret).
type mcpRoute struct {
	key        mcpfront.Key
	url, token string
	bound      bool // bind set the key in the front: the open holds it
}

// fingerprint identifies the settings: a thread loaded with the same
// fingerprint runs a round as it is, without an unload and a resume. It is
// a hash of every setting sent to the CLI (the overlay with the thread's
// front URL among them) and of the MCP upstream, but not of the bearer
// token, which the front adds to each request. Without a front the token
// is in the overlay, so a new token reloads the thread.
func (s threadSettings) fingerprint() string {
	b, err := json.Marshal(s) // map keys are sorted: the encoding is stable
	if err != nil {
		return "" // cannot happen: plain data; "" never matches a loaded thread's
	}
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:])
}

// roundSettings are the settings a round (or a warm-up for it) loads its
// thread with; key names the mesh thread, for the MCP front. Its overlay
// is made by bind, when the thread is opened.
func roundSettings(cfg *tree, key mcpfront.Key, developerInstructions, mcpURL, mcpToken string) threadSettings {
	return threadSettings{Cwd: cfg.Workspace, Sandbox: cfg.Sandbox, ApprovalPolicy: cfg.ApprovalPolicy,
		DeveloperInstructions: developerInstructions, mcp: mcpRoute{key: key, url: mcpURL, token: mcpToken}}
}

// bind readies settings for an open, just before it: with a front (one
// per daemon), a round with an MCP URL gets the overlay pointing at its
// mesh thread's front URL, and the front forwards that URL to the round's
// MCP URL with its token from now on (the open of a warm thread included:
// its next tool call carries the new token); a round without one clears
// the key and gets the disabled overlay. Without a front the URL and the
// token go into the overlay. bound reports a front key now in use.
func (s threadSettings) bind(front *mcpfront.Front) (threadSettings, error) {
	switch {
	case front == nil:
		s.Config = overlay(s.mcp.url, s.mcp.token)
	case s.mcp.url == "":
		front.Clear(s.mcp.key)
		s.Config = overlay("", "")
	default:
		// Another upstream than the key's gets a new front URL (Route):
		// the CLI's MCP session must not reach it.
		u, err := front.Route(s.mcp.key, s.mcp.url, s.mcp.token)
		if err != nil {
			return s, err // names neither the URL nor the token
		}
		s.Config, s.MCPUpstream, s.mcp.bound = overlay(u, ""), s.mcp.url, true
	}
	return s, nil
}

// The app-server actor keeps a mesh thread's front URL while a thread it
// holds, or an open in flight, was given it (opening counts those), and
// has the front forget it when the last goes: a later round binds a new
// URL, whose overlay differs, so it reloads its thread.

// bindOpen binds the settings of an open (see bind); unbindOpen must
// follow, once the open is done (opened) or failed (openFailed).
func (a *appServerActor) bindOpen(m openThread) (openThread, error) {
	s, err := m.settings.bind(a.cfg.MCPFront)
	if err != nil {
		return m, err
	}
	m.settings = s
	if s.mcp.bound {
		a.threads.opening[s.mcp.key]++
		// The URL's id stands for the token on the host's loopback: out of
		// the CLI's stderr and its MCP startup errors in the log too.
		a.redact.Add(a.cfg.MCPFront.Bind(s.mcp.key))
	}
	return m, nil
}

// unbindOpen ends the hold an open had on its front key.
func (a *appServerActor) unbindOpen(m openThread) {
	if !m.settings.mcp.bound {
		return
	}
	k := m.settings.mcp.key
	if a.threads.opening[k]--; a.threads.opening[k] <= 0 {
		delete(a.threads.opening, k)
	}
	a.release(k)
}

// release has the front forget key unless an open in flight or a loaded
// thread still uses it.
func (a *appServerActor) release(key mcpfront.Key) {
	if a.cfg.MCPFront == nil || a.threads.opening[key] > 0 {
		return
	}
	for _, lt := range a.threads.loaded {
		if lt.front && lt.key == key {
			return
		}
	}
	a.cfg.MCPFront.Forget(key)
}

// unload drops threadID from the threads the process holds, releasing its
// front key.
func (a *appServerActor) unload(threadID string) {
	lt, ok := a.threads.loaded[threadID]
	if !ok {
		return
	}
	delete(a.threads.loaded, threadID)
	if lt.front {
		a.release(lt.key)
	}
}

// unloadAll drops every thread (the process is gone); at the actor's end
// (final) the keys of opens in flight go too.
func (a *appServerActor) unloadAll(final bool) {
	for id := range a.threads.loaded {
		a.unload(id)
	}
	if final && a.cfg.MCPFront != nil {
		for k := range a.threads.opening {
			a.cfg.MCPFront.Forget(k)
		}
		clear(a.threads.opening)
	}
}
