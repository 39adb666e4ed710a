package actors

import (
	"encoding/json"
	"fmt"
	"os"
	"slices"
	"strings"
	"time"

	"github.com/meshweaver/supervisor/messages"
)

// Version is the daemon's version, sent as clientInfo.version.
const Version = "0.1.0"

// userTag is messages.UserTag: logs name users by it, never by the raw id.
func userTag(user string) string { return messages.UserTag(user) }

// environ is the daemon's environment, filtered by codexproc.AllowedEnv
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

// acquireWait bounds the wait for a process: a start may wait out a
// backoff, reap a leftover process (up to three stop steps), exec, and
// initialize and write the stored key (each bounded by CallTimeout).
func acquireWait(cfg *tree) time.Duration {
	return 3*cfg.CallTimeout + cfg.RestartBackoffMax + 4*cfg.StopGrace
}

// openWait bounds a round's opening: the wait for a process, then the
// registry, the unload, the resume, a fallback start and turn/start, each
// bounded by CallTimeout.
func openWait(cfg *tree) time.Duration {
	return acquireWait(cfg) + 5*cfg.CallTimeout
}

// decodeResult decodes a call's result.
func decodeResult(method string, raw json.RawMessage, v any) error {
	if err := json.Unmarshal(raw, v); err != nil {
		return fmt.Errorf("decoding %s result: %w", method, err)
	}
	return nil
}
