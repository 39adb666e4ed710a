package client

import (
	"context"
	"errors"

	"github.com/meshweaver/supervisor/messages"
)

// Interrupt asks the daemon to interrupt the running round of req.User on
// req.Thread (only round req.RoundID if set) and returns its answer; the
// round itself then ends with its verdict (status interrupted). An answer
// with OK false (no such round) is not an error.
func (c *Client) Interrupt(ctx context.Context, req messages.InterruptRound) (messages.RoundControlled, error) {
	m, err := c.request(ctx, req, is[messages.RoundControlled])
	if err != nil {
		return messages.RoundControlled{}, err
	}
	return m.(messages.RoundControlled), nil
}

// Steer adds req.Text to the running round of req.User on req.Thread (only
// round req.RoundID if set) and returns the daemon's answer. An answer with
// OK false is not an error.
func (c *Client) Steer(ctx context.Context, req messages.SteerRound) (messages.RoundControlled, error) {
	m, err := c.request(ctx, req, is[messages.RoundControlled])
	if err != nil {
		return messages.RoundControlled{}, err
	}
	return m.(messages.RoundControlled), nil
}

// Answer answers a request a round with on_request ask put to its caller
// (a KindRequest event): req.RequestID is the event's
// Request.RequestID. The answer's OK is false when the request is no
// longer open (answered, expired, or the round ended): not an error.
func (c *Client) Answer(ctx context.Context, req messages.AnswerRequest) (messages.RoundControlled, error) {
	m, err := c.request(ctx, req, is[messages.RoundControlled])
	if err != nil {
		return messages.RoundControlled{}, err
	}
	return m.(messages.RoundControlled), nil
}

// Login runs a ChatGPT device-code login for user: onChallenge (if not
// nil) gets the URL and code to show the person, on the caller's
// goroutine, and Login returns the outcome, whose Success says whether the
// user is logged in (a failed, expired or cancelled login is not an
// error). The link to the daemon is held open while the person types the
// code. If ctx ends first, Login asks the daemon to cancel the login
// (best effort) and returns ctx's error; to cancel and still learn the
// outcome, call [Client.CancelLogin] from another goroutine instead.
func (c *Client) Login(ctx context.Context, user string, onChallenge func(messages.LoginChallenge)) (messages.LoginFinished, error) {
	defer c.rem.Hold(c.target.Address)()
	m, err := c.request(ctx, messages.StartLogin{User: user}, func(m any) bool {
		if ch, ok := m.(messages.LoginChallenge); ok {
			if onChallenge != nil {
				onChallenge(ch)
			}
			return false
		}
		return is[messages.LoginFinished](m)
	})
	if err != nil {
		if ctx.Err() != nil && !errors.Is(err, ErrClosed) {
			_ = c.CancelLogin(context.WithoutCancel(ctx), user)
		}
		return messages.LoginFinished{}, err
	}
	return m.(messages.LoginFinished), nil
}

// CancelLogin asks the daemon to cancel user's pending login, which then
// ends with a LoginFinished whose Success is false. It has no answer of
// its own: it returns once the message is on its way.
func (c *Client) CancelLogin(ctx context.Context, user string) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	mb, err := c.open()
	if err != nil {
		return err
	}
	defer c.release(mb)
	return c.send(mb, messages.CancelLogin{User: user})
}

// SetAPIKey stores an OpenAI API key as user's credential; codex uses it
// from the user's next round on.
func (c *Client) SetAPIKey(ctx context.Context, user, apiKey string) error {
	_, err := c.request(ctx, messages.SetAPIKey{User: user, APIKey: apiKey}, is[messages.APIKeyStored])
	return err
}

// Logout removes user's codex credentials.
func (c *Client) Logout(ctx context.Context, user string) error {
	_, err := c.request(ctx, messages.Logout{User: user}, is[messages.LoggedOut])
	return err
}

// Account reads user's codex account. A failure to read it is in the
// answer's Error, with a nil error.
func (c *Client) Account(ctx context.Context, user string) (messages.AccountResponse, error) {
	m, err := c.request(ctx, messages.AccountRequest{User: user}, is[messages.AccountResponse])
	if err != nil {
		return messages.AccountResponse{}, err
	}
	return m.(messages.AccountResponse), nil
}

// Models lists the models user's codex offers. A failure to list them is
// in the answer's Error, with a nil error.
func (c *Client) Models(ctx context.Context, user string) (messages.ModelsResponse, error) {
	return c.ListModels(ctx, messages.ModelsRequest{User: user})
}

// ListModels is [Client.Models] with every field of the request, such as
// IncludeHidden.
func (c *Client) ListModels(ctx context.Context, req messages.ModelsRequest) (messages.ModelsResponse, error) {
	m, err := c.request(ctx, req, is[messages.ModelsResponse])
	if err != nil {
		return messages.ModelsResponse{}, err
	}
	return m.(messages.ModelsResponse), nil
}

// Usage asks what user's app-server and all it runs use of the node, against
// the user's limits.
func (c *Client) Usage(ctx context.Context, user string) (messages.UsageResponse, error) {
	m, err := c.request(ctx, messages.UsageRequest{User: user}, is[messages.UsageResponse])
	if err != nil {
		return messages.UsageResponse{}, err
	}
	return m.(messages.UsageResponse), nil
}

// Codex calls one of the methods of user's app-server the daemon passes
// on (messages.CodexReads, messages.CodexControls): its configuration and
// requirements, its MCP servers' status, their reload.
func (c *Client) Codex(ctx context.Context, req messages.CodexRequest) (messages.CodexResponse, error) {
	m, err := c.request(ctx, req, is[messages.CodexResponse])
	if err != nil {
		return messages.CodexResponse{}, err
	}
	return m.(messages.CodexResponse), nil
}

// RateLimits asks for the rate limits of user's codex account.
func (c *Client) RateLimits(ctx context.Context, user string) (messages.RateLimitsResponse, error) {
	m, err := c.request(ctx, messages.RateLimitsRequest{User: user}, is[messages.RateLimitsResponse])
	if err != nil {
		return messages.RateLimitsResponse{}, err
	}
	return m.(messages.RateLimitsResponse), nil
}

// is reports whether m is a T.
func is[T any](m any) bool {
	_, ok := m.(T)
	return ok
}

// WarmUp asks the daemon to start req.User's codex app-server and, given
// req.Thread, to load that mesh thread's codex thread with the settings
// the next round will send (req.DeveloperInstructions, MCPURL, MCPToken),
// so that the round runs warm. It returns once the daemon answers; an
// answer whose Error says why nothing could be made ready is not an error.
func (c *Client) WarmUp(ctx context.Context, req messages.WarmUp) (messages.WarmedUp, error) {
	m, err := c.request(ctx, req, is[messages.WarmedUp])
	if err != nil {
		return messages.WarmedUp{}, err
	}
	return m.(messages.WarmedUp), nil
}
