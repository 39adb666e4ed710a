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

// ReadThread reads the user and assistant messages of req.Thread, oldest
// first. A failure (no such thread, codex refused) is in the answer's
// Error, with a nil error.
func (c *Client) ReadThread(ctx context.Context, req messages.ReadThread) (messages.ThreadTurns, error) {
	m, err := c.request(ctx, req, is[messages.ThreadTurns])
	if err != nil {
		return messages.ThreadTurns{}, err
	}
	return m.(messages.ThreadTurns), nil
}

// ArchiveThread archives req.Thread's codex thread and forgets the mesh
// thread. A failure is in the answer's Error, with a nil error.
func (c *Client) ArchiveThread(ctx context.Context, req messages.ArchiveThread) (messages.ThreadArchived, error) {
	m, err := c.request(ctx, req, is[messages.ThreadArchived])
	if err != nil {
		return messages.ThreadArchived{}, err
	}
	return m.(messages.ThreadArchived), nil
}

// ForkThread makes req.NewThread a new mesh thread from a copy of
// req.Thread's codex thread. A failure is in the answer's Error, with a
// nil error.
func (c *Client) ForkThread(ctx context.Context, req messages.ForkThread) (messages.ThreadForked, error) {
	m, err := c.request(ctx, req, is[messages.ThreadForked])
	if err != nil {
		return messages.ThreadForked{}, err
	}
	return m.(messages.ThreadForked), nil
}

// CompactThread compacts req.Thread's history; it answers once codex has
// compacted it. A failure is in the answer's Error, with a nil error.
func (c *Client) CompactThread(ctx context.Context, req messages.CompactThread) (messages.ThreadCompacted, error) {
	m, err := c.request(ctx, req, is[messages.ThreadCompacted])
	if err != nil {
		return messages.ThreadCompacted{}, err
	}
	return m.(messages.ThreadCompacted), nil
}
