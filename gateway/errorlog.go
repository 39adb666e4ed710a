package gateway

import (
	"log"
	"log/slog"
	"strings"
	"time"

	"github.com/meshweaver/supervisor/edge"
)

// errorLog is the http.Server's ErrorLog: net/http reports a failed TLS
// handshake only there, as "http: TLS handshake error from ADDR: ERR".
// Those lines are what an operator needs to see why a caller is refused
// (an unknown CA, a certificate no grant names), so they are logged at
// Warn as "gateway: TLS handshake refused" with the peer and the reason,
// the first 10 a minute, then one line with the count left out; every
// other line of net/http stays at Debug. Neither kind holds secrets: a
// handshake error names certificates and identities, never keys.
type errorLog struct {
	log    *slog.Logger
	sample *edge.Sampler
	now    func() time.Time
}

func newErrorLog(l *slog.Logger) *log.Logger {
	return (&errorLog{log: l, sample: edge.NewSampler(10, time.Minute), now: time.Now}).writer()
}

// writer is e as a *log.Logger, the way net/http writes to it.
func (e *errorLog) writer() *log.Logger { return log.New(e, "", 0) }

const handshakePrefix = "http: TLS handshake error from "

func (e *errorLog) Write(p []byte) (int, error) {
	line := strings.TrimSpace(string(p))
	rest, ok := strings.CutPrefix(line, handshakePrefix)
	if !ok {
		e.log.Debug(line)
		return len(p), nil
	}
	peer, reason, _ := strings.Cut(rest, ": ")
	if ok, skipped := e.sample.Take("handshake", e.now()); ok {
		if skipped > 0 {
			e.log.Warn("gateway: TLS handshakes refused and not logged", "count", skipped)
		}
		e.log.Warn("gateway: TLS handshake refused", "peer", peer, "err", reason)
	}
	return len(p), nil
}
