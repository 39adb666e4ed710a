package actors

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"os"
	"slices"
	"strings"
	"time"

	"github.com/meshweaver/supervisor/third_party/hollywood/actor"
)

// Version is the daemon's version, sent as clientInfo.version.
const Version = "0.1.0"

// userTag is a stable short hash of a user id: logs name users by it, never
// by the raw id.
func userTag(user string) string {
	sum := sha256.Sum256([]byte("user:" + user))
	return "u-" + hex.EncodeToString(sum[:4])
}

// environ is the daemon's environment, filtered by codexrpc.AllowedEnv
// before any child sees it.
func environ() []string { return os.Environ() }

// setEnv returns env with each KEY=VALUE of set replacing that key's value.
func setEnv(env, set []string) []string {
	out := slices.Clone(env)
	for _, kv := range set {
		k, _, _ := strings.Cut(kv, "=")
		out = slices.DeleteFunc(out, func(e string) bool { return strings.HasPrefix(e, k+"=") })
		out = append(out, kv)
	}
	return out
}

// acquireWait bounds the wait for a client: a start may wait out a
// backoff, reap a leftover process (up to three stop steps), exec, and
// initialize and write the stored key (each bounded by CallTimeout).
func acquireWait(cfg *Config) time.Duration {
	return 3*cfg.CallTimeout + cfg.RestartBackoffMax + 4*cfg.StopGrace
}

// ask sends a local actor a request built around a buffered reply channel
// and waits for the answer, the deadline or ctx, whichever comes first.
func ask[T any](ctx context.Context, timeout time.Duration, e *actor.Engine, pid *actor.PID, build func(chan T) any) (T, error) {
	ch := make(chan T, 1)
	e.Send(pid, build(ch))
	t := time.NewTimer(timeout)
	defer t.Stop()
	var zero T
	select {
	case v := <-ch:
		return v, nil
	case <-t.C:
		return zero, context.DeadlineExceeded
	case <-ctx.Done():
		return zero, ctx.Err()
	}
}
