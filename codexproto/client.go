package codexproto

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"github.com/meshweaver/supervisor/codexrpc"
)

// Client is the typed face of a Conn: one method per call the daemon makes.
type Client struct {
	Conn    *codexrpc.Conn
	Version Version // set by Initialize
}

// NewClient wraps a connection.
func NewClient(c *codexrpc.Conn) *Client { return &Client{Conn: c} }

// Initialize performs the handshake (initialize, then the initialized
// notification) and records the CLI version from the userAgent.
func (c *Client) Initialize(ctx context.Context, info ClientInfo) (InitializeResult, error) {
	var res InitializeResult
	err := c.Conn.Call(ctx, MethodInitialize, InitializeParams{
		ClientInfo:   info,
		Capabilities: Capabilities{ExperimentalAPI: true},
	}, &res)
	if err != nil {
		return res, err
	}
	v, err := ParseUserAgent(res.UserAgent)
	if err != nil {
		return res, fmt.Errorf("initialize: %w", err)
	}
	c.Version = v
	if err := c.Conn.Notify(MethodInitialized, nil); err != nil {
		return res, err
	}
	return res, nil
}

// ThreadStart starts a thread.
func (c *Client) ThreadStart(ctx context.Context, p ThreadStartParams) (ThreadResult, error) {
	var res ThreadResult
	err := c.Conn.Call(ctx, MethodThreadStart, p, &res)
	return res, err
}

// ThreadResume resumes a thread; a gone rollout classifies as ClassNoRollout.
func (c *Client) ThreadResume(ctx context.Context, p ThreadResumeParams) (ThreadResult, error) {
	var res ThreadResult
	err := c.Conn.Call(ctx, MethodThreadResume, p, &res)
	return res, err
}

// ThreadNameSet names a thread.
func (c *Client) ThreadNameSet(ctx context.Context, threadID, name string) error {
	return c.Conn.Call(ctx, MethodThreadNameSet, ThreadNameSetParams{ThreadID: threadID, Name: name}, nil)
}

// ThreadUnsubscribe unloads a thread from this connection; a later resume
// loads it again with the resume's settings.
func (c *Client) ThreadUnsubscribe(ctx context.Context, threadID string) error {
	return c.Conn.Call(ctx, MethodThreadUnsub, ThreadReadParams{ThreadID: threadID}, nil)
}

// ThreadRead reads a thread without resuming it.
func (c *Client) ThreadRead(ctx context.Context, p ThreadReadParams) (ThreadResult, error) {
	var res ThreadResult
	err := c.Conn.Call(ctx, MethodThreadRead, p, &res)
	return res, err
}

// TurnStart starts a turn; its events arrive as notifications.
func (c *Client) TurnStart(ctx context.Context, p TurnStartParams) (Turn, error) {
	var res TurnResult
	err := c.Conn.Call(ctx, MethodTurnStart, p, &res)
	return res.Turn, err
}

// TurnInterrupt interrupts a running turn.
func (c *Client) TurnInterrupt(ctx context.Context, threadID, turnID string) error {
	return c.Conn.Call(ctx, MethodTurnInterrupt, TurnInterruptParams{ThreadID: threadID, TurnID: turnID}, nil)
}

// TurnSteer appends input to the running turn.
func (c *Client) TurnSteer(ctx context.Context, p TurnSteerParams) (string, error) {
	var res TurnSteerResult
	err := c.Conn.Call(ctx, MethodTurnSteer, p, &res)
	return res.TurnID, err
}

// ModelList reads one page of the models the CLI offers.
func (c *Client) ModelList(ctx context.Context, p ModelListParams) (ModelListResult, error) {
	var res ModelListResult
	err := c.Conn.Call(ctx, MethodModelList, p, &res)
	return res, err
}

// MaxModelPages bounds the pages ModelListAll reads.
const MaxModelPages = 64

// ModelListAll reads every page of model/list, following nextCursor, with
// hidden models when includeHidden. A server that repeats a cursor, or
// has more than MaxModelPages pages, is an error.
func (c *Client) ModelListAll(ctx context.Context, includeHidden bool) ([]ModelInfo, error) {
	var all []ModelInfo
	p := ModelListParams{IncludeHidden: includeHidden}
	seen := map[string]bool{}
	for range MaxModelPages {
		res, err := c.ModelList(ctx, p)
		if err != nil {
			if p.Cursor != nil {
				return nil, fmt.Errorf("model/list at cursor %q: %w", *p.Cursor, err)
			}
			return nil, err
		}
		all = append(all, res.Data...)
		if res.NextCursor == nil {
			return all, nil
		}
		if seen[*res.NextCursor] {
			return nil, fmt.Errorf("model/list repeated the cursor %q", *res.NextCursor)
		}
		seen[*res.NextCursor] = true
		p.Cursor = res.NextCursor
	}
	return nil, fmt.Errorf("model/list has more than %d pages", MaxModelPages)
}

// AccountRead reports the login state.
func (c *Client) AccountRead(ctx context.Context) (AccountReadResult, error) {
	var res AccountReadResult
	err := c.Conn.Call(ctx, MethodAccountRead, struct{}{}, &res)
	return res, err
}

// LoginStart starts a login (API key or device code).
func (c *Client) LoginStart(ctx context.Context, p LoginStartParams) (LoginStartResult, error) {
	var res LoginStartResult
	err := c.Conn.Call(ctx, MethodLoginStart, p, &res)
	return res, err
}

// LoginCancel cancels a pending login.
func (c *Client) LoginCancel(ctx context.Context, loginID string) (string, error) {
	var res LoginCancelResult
	err := c.Conn.Call(ctx, MethodLoginCancel, LoginCancelParams{LoginID: loginID}, &res)
	return res.Status, err
}

// RateLimits reads the account's rate limits (a ChatGPT login's; without
// one the server answers an error).
func (c *Client) RateLimits(ctx context.Context) (RateLimitsResult, error) {
	var res RateLimitsResult
	err := c.Conn.Call(ctx, MethodRateLimitsRead, json.RawMessage("null"), &res)
	return res, err
}

// Logout removes the home's login. The method takes no params: the schema
// wants "params":null (the CLI accepts {} too, but the schema does not).
func (c *Client) Logout(ctx context.Context) error {
	return c.Conn.Call(ctx, MethodLogout, json.RawMessage("null"), nil)
}

// CommandExec runs one command the way the CLI runs a round's shell
// commands: in its sandbox (p.SandboxPolicy, else the home's configured
// one), in p.Cwd, output captured.
func (c *Client) CommandExec(ctx context.Context, p CommandExecParams) (CommandExecResult, error) {
	var res CommandExecResult
	err := c.Conn.Call(ctx, MethodCommandExec, p, &res)
	return res, err
}

// Ping makes the cheapest call the CLI answers on its own, with no model
// and no disk involved (thread/loaded/list). Any answer, an error answer
// included, shows the process still reads and writes; only a transport
// failure or ctx's end is returned.
func (c *Client) Ping(ctx context.Context) error {
	err := c.Conn.Call(ctx, MethodThreadLoadedList, struct{}{}, nil)
	var we *codexrpc.WireError
	if errors.As(err, &we) {
		return nil
	}
	return err
}
