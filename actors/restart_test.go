package actors

import (
	"testing"
	"time"
)

// One row per rule of the restart policy, at explicit times: deaths count
// within the window, the backoff doubles per counted death between base and
// most with its jitter added to half of it, limit deaths start a cool-down
// that holds until its end, and the count then starts over.
func TestRestartPolicyTable(t *testing.T) {
	t0 := time.Date(2026, 12, 3, 7, 0, 0, 0, time.UTC)
	at := func(s float64) time.Time { return t0.Add(time.Duration(s * float64(time.Second))) }
	none := func(time.Duration) time.Duration { return 0 }
	full := func(k time.Duration) time.Duration { return k }
	for _, tt := range []struct {
		name        string
		deaths      []float64 // seconds after t0, in order
		now         float64
		jitter      func(time.Duration) time.Duration
		wantBackoff time.Duration
		wantCooling bool
		wantUntil   float64 // seconds after t0, when cooling
		coolsAt     int     // the death (1-based) that starts a cool-down; 0: none
	}{
		{name: "clean history", now: 0, jitter: full, wantBackoff: 0},
		{name: "one death, no jitter", deaths: []float64{0}, now: 1, jitter: none, wantBackoff: 50 * time.Millisecond},
		{name: "one death, full jitter", deaths: []float64{0}, now: 1, jitter: full, wantBackoff: 100 * time.Millisecond},
		{name: "two deaths double", deaths: []float64{0, 1}, now: 2, jitter: full, wantBackoff: 200 * time.Millisecond},
		{name: "four deaths reach the cap", deaths: []float64{0, 1, 2, 3}, now: 4, jitter: full, wantBackoff: 800 * time.Millisecond},
		{name: "capped", deaths: []float64{0, 1, 2, 3}, now: 4, jitter: none, wantBackoff: 400 * time.Millisecond},
		{name: "a death leaves the window", deaths: []float64{0, 30}, now: 60, jitter: full, wantBackoff: 100 * time.Millisecond},
		{name: "all deaths left the window", deaths: []float64{0, 1}, now: 62, jitter: full, wantBackoff: 0},
		{name: "old deaths are not counted toward the limit", deaths: []float64{0, 1, 2, 3, 70}, now: 71, jitter: none, wantBackoff: 50 * time.Millisecond},
		{name: "limit within the window cools down", deaths: []float64{0, 1, 2, 3, 4}, now: 5, jitter: full, wantCooling: true, wantUntil: 34, coolsAt: 5},
		{name: "cool-down holds to its end", deaths: []float64{0, 1, 2, 3, 4}, now: 33.9, jitter: full, wantCooling: true, wantUntil: 34, coolsAt: 5},
		{name: "after the cool-down the count starts over", deaths: []float64{0, 1, 2, 3, 4}, now: 34, jitter: full, wantBackoff: 0, coolsAt: 5},
		{name: "a death after the cool-down counts alone", deaths: []float64{0, 1, 2, 3, 4, 35}, now: 36, jitter: full, wantBackoff: 100 * time.Millisecond, coolsAt: 5},
	} {
		t.Run(tt.name, func(t *testing.T) {
			p := restartPolicy{limit: 5, window: time.Minute, cooldown: 30 * time.Second,
				base: 100 * time.Millisecond, most: 800 * time.Millisecond}
			for i, d := range tt.deaths {
				started := p.crashed(at(d))
				if wantStart := i+1 == tt.coolsAt; started != wantStart {
					t.Errorf("death %d at %vs: cool-down started %v, want %v", i+1, d, started, wantStart)
				}
			}
			until, cooling := p.cooling(at(tt.now))
			if cooling != tt.wantCooling || (cooling && !until.Equal(at(tt.wantUntil))) {
				t.Errorf("cooling at %vs = %v until %v, want %v until %v", tt.now, cooling, until, tt.wantCooling, at(tt.wantUntil))
			}
			if cooling {
				return
			}
			if got := p.backoff(at(tt.now), tt.jitter); got != tt.wantBackoff {
				t.Errorf("backoff at %vs = %v, want %v", tt.now, got, tt.wantBackoff)
			}
		})
	}
}
