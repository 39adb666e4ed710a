package peeruid

import (
	"fmt"
	"log/slog"
	"sync"
	"time"
)

// Reporter logs refusals without letting a flood of them flood the log:
// one line per listener and uid (per reason when the owner is unknown)
// per Every, and at most MaxKeys such keys remembered (past it, those
// older than Every are forgotten, else all). Count, when set, is called for
// every refusal.
type Reporter struct {
	Log     *slog.Logger
	Every   time.Duration // default one minute
	MaxKeys int           // default 1024
	Count   func(listener, reason string)

	mu   sync.Mutex
	seen map[string]time.Time
}

// Report counts r and logs it unless its key was logged within Every.
func (p *Reporter) Report(r Refusal) {
	if p.Count != nil {
		p.Count(r.Listener, r.Reason)
	}
	if p.Log == nil || !p.due(r) {
		return
	}
	if r.Reason == ReasonUserUID {
		p.Log.Warn("refused a connection from a user's uid (a user's agent may not use this listener)",
			"listener", r.Listener, "uid", r.UID, "peer", r.Peer.String())
		return
	}
	p.Log.Warn("refused a local connection whose owner cannot be told",
		"listener", r.Listener, "peer", r.Peer.String(), "err", r.Err)
}

func (p *Reporter) due(r Refusal) bool {
	every, max := p.Every, p.MaxKeys
	if every <= 0 {
		every = time.Minute
	}
	if max <= 0 {
		max = 1024
	}
	key := r.Listener + "/" + r.Reason
	if r.Reason == ReasonUserUID {
		key += fmt.Sprint("/", r.UID)
	}
	now := time.Now()
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.seen == nil {
		p.seen = map[string]time.Time{}
	}
	if at, ok := p.seen[key]; ok && now.Sub(at) < every {
		return false
	}
	if len(p.seen) >= max {
		for k, at := range p.seen { // forget what is older than Every, else everything
			if now.Sub(at) >= every {
				delete(p.seen, k)
			}
		}
		if len(p.seen) >= max {
			clear(p.seen)
		}
	}
	p.seen[key] = now
	return true
}
