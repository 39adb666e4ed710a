package client

import (
	"context"

	"github.com/meshweaver/supervisor/messages"
)

// ListThreads lists the mesh threads of req.User the daemon knows, most
// recently active first. A failure to list them is in the answer's Error,
// with a nil error.
func (c *Client) ListThreads(ctx context.Context, req messages.ListThreads) (messages.Threads, error) {
	m, err := c.request(ctx, req, is[messages.Threads])
	if err != nil {
		return messages.Threads{}, err
	}
	return m.(messages.Threads), nil
}
