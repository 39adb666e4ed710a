package actors

import "time"

// restartPolicy decides the restarts of one user's app-server. Deaths
// within window count; a start after recent deaths waits a jittered
// exponential backoff; limit deaths within window start a cool-down of
// cooldown, in which nothing starts. It is a plain value: every method
// takes the time, so it is tested without a clock.
type restartPolicy struct {
	limit      int
	window     time.Duration
	cooldown   time.Duration
	base, most time.Duration // the first backoff, and the longest

	crashes   []time.Time // deaths within window, oldest first
	coolUntil time.Time
}

func newRestartPolicy(cfg *tree) restartPolicy {
	return restartPolicy{
		limit: cfg.RestartLimit, window: cfg.RestartWindow, cooldown: cfg.Cooldown,
		base: cfg.RestartBackoff, most: cfg.RestartBackoffMax,
	}
}

// crashed counts a death at now. It reports whether that death starts a
// cool-down (the count then starts over).
func (p *restartPolicy) crashed(now time.Time) (cooling bool) {
	p.crashes = append(p.crashes[:0], p.within(now)...)
	p.crashes = append(p.crashes, now)
	if len(p.crashes) < p.limit {
		return false
	}
	p.coolUntil = now.Add(p.cooldown)
	p.crashes = nil
	return true
}

// within is the deaths that still count at now.
func (p *restartPolicy) within(now time.Time) []time.Time {
	var kept []time.Time
	for _, t := range p.crashes {
		if now.Sub(t) < p.window {
			kept = append(kept, t)
		}
	}
	return kept
}

// backoff is the wait before a start at now: none after a clean history,
// else d/2 + jitter(d/2) where d doubles with every death that counts,
// from base up to most. jitter(k) must return a value in [0, k].
func (p *restartPolicy) backoff(now time.Time, jitter func(k time.Duration) time.Duration) time.Duration {
	n := len(p.within(now))
	if n == 0 {
		return 0
	}
	d := min(p.base<<min(n-1, 16), p.most)
	return d/2 + jitter(d/2)
}

// cooling reports a cool-down in force at now, and its end.
func (p *restartPolicy) cooling(now time.Time) (until time.Time, ok bool) {
	return p.coolUntil, now.Before(p.coolUntil)
}
