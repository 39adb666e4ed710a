package edge

import (
	"sync"
	"time"

	"golang.org/x/time/rate"
)

// peerLimits is the bounded table of per-peer limiters: one for the
// messages a peer sends, one for the refusals the daemon answers it with.
// Past max entries, the ones idle for longer than idle are dropped, and if
// that frees nothing, the least recently seen one: a dropped peer starts
// again with a full bucket, which costs at most one burst.
type peerLimits struct {
	mu       sync.Mutex
	m        map[string]*peerLimit
	max      int
	idle     time.Duration
	msgRate  rate.Limit
	msgBurst int
	repRate  rate.Limit
	repBurst int
}

type peerLimit struct {
	msgs, replies *rate.Limiter
	last          time.Time
}

func newPeerLimits(max int, idle time.Duration, msgRate rate.Limit, msgBurst int, repRate rate.Limit, repBurst int) *peerLimits {
	return &peerLimits{m: make(map[string]*peerLimit), max: max, idle: idle,
		msgRate: msgRate, msgBurst: msgBurst, repRate: repRate, repBurst: repBurst}
}

// get returns key's limiters at now, making them (and making room) if new.
func (p *peerLimits) get(key string, now time.Time) *peerLimit {
	if l, ok := p.m[key]; ok {
		l.last = now
		return l
	}
	if len(p.m) >= p.max {
		p.evict(now)
	}
	l := &peerLimit{
		msgs:    rate.NewLimiter(p.msgRate, p.msgBurst),
		replies: rate.NewLimiter(p.repRate, p.repBurst),
		last:    now,
	}
	p.m[key] = l
	return l
}

func (p *peerLimits) evict(now time.Time) {
	var oldest string
	var oldestAt time.Time
	for k, l := range p.m {
		if now.Sub(l.last) >= p.idle {
			delete(p.m, k)
			continue
		}
		if oldest == "" || l.last.Before(oldestAt) {
			oldest, oldestAt = k, l.last
		}
	}
	if len(p.m) >= p.max && oldest != "" {
		delete(p.m, oldest)
	}
}

// allowMsg takes one message token of key's bucket.
func (p *peerLimits) allowMsg(key string, now time.Time) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.get(key, now).msgs.AllowN(now, 1)
}

// allowReply takes one refusal-reply token of key's bucket.
func (p *peerLimits) allowReply(key string, now time.Time) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.get(key, now).replies.AllowN(now, 1)
}

// len is the number of peers tracked.
func (p *peerLimits) len() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return len(p.m)
}

// Sampler decides which log lines about refused input are written: the
// first n per reason in each window, then, with the first line of a later
// window, one summary of how many were left out. It is safe for
// concurrent use.
type Sampler struct {
	mu     sync.Mutex
	n      int
	window time.Duration
	by     map[string]*sampleWindow
}

type sampleWindow struct {
	start      time.Time
	logged     int
	suppressed int
}

// NewSampler lets n lines per reason through in each window.
func NewSampler(n int, window time.Duration) *Sampler {
	return &Sampler{n: n, window: window, by: make(map[string]*sampleWindow)}
}

// Take reports whether a line about reason may be written at now, and how
// many lines of that reason were left out before it (to be reported in a
// summary first).
func (s *Sampler) Take(reason string, now time.Time) (ok bool, skipped int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	w := s.by[reason]
	if w == nil {
		w = &sampleWindow{start: now}
		s.by[reason] = w
	}
	if now.Sub(w.start) >= s.window {
		skipped = w.suppressed
		*w = sampleWindow{start: now}
	}
	if w.logged < s.n {
		w.logged++
		return true, skipped
	}
	w.suppressed++
	return false, skipped
}
