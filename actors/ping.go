package actors

import (
	"context"
	"fmt"

	"github.com/meshweaver/supervisor/third_party/hollywood/actor"
)

// pingRequest asks the root to answer at once (Ping).
type pingRequest struct{ reply chan struct{} }

// Ping reports whether the root under e answers within ctx: its mailbox
// is being served, which is what the daemon feeds systemd's watchdog on
// (a wedged tree stops the feeding and systemd restarts the daemon). It is
// cheap: the root only closes a channel. A stopped root never answers.
func Ping(ctx context.Context, e *actor.Engine, root *actor.PID) error {
	reply := make(chan struct{})
	e.Send(root, pingRequest{reply: reply})
	select {
	case <-reply:
		return nil
	case <-ctx.Done():
		return fmt.Errorf("the actor tree's root did not answer: %w", ctx.Err())
	}
}
