package codexrpc

import (
	"testing"
	"time"
)

// The waits between tries keep the bounds of the hand-written backoff they
// replace: the n-th wait in [d/2, d], d doubling from Base, at most Max;
// and they are jittered over that whole range, not a constant.
func TestRetryBackOffBounds(t *testing.T) {
	ms := time.Millisecond
	for _, tc := range []struct {
		name   string
		policy RetryPolicy
		want   []time.Duration // d for the 1st, 2nd, … wait
	}{
		{"default", DefaultRetry, []time.Duration{50 * ms, 100 * ms, 200 * ms, 400 * ms, 800 * ms, 1600 * ms, 2000 * ms, 2000 * ms}},
		{"capped early", RetryPolicy{Attempts: 4, Base: ms, Max: 4 * ms}, []time.Duration{ms, 2 * ms, 4 * ms, 4 * ms, 4 * ms}},
		{"a cap that is no power of two", RetryPolicy{Attempts: 4, Base: 30 * ms, Max: 100 * ms}, []time.Duration{30 * ms, 60 * ms, 100 * ms, 100 * ms}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			const draws = 400
			low, high := make([]time.Duration, len(tc.want)), make([]time.Duration, len(tc.want))
			for i := range draws {
				waits := tc.policy.NewBackOff()
				for n, d := range tc.want {
					w := waits.NextBackOff()
					if w < d/2 || w > d {
						t.Fatalf("wait %d = %v, want within [%v, %v]", n+1, w, d/2, d)
					}
					if i == 0 || w < low[n] {
						low[n] = w
					}
					if i == 0 || w > high[n] {
						high[n] = w
					}
				}
			}
			for n, d := range tc.want {
				// 400 uniform draws all in one fifth of the range: p = 0.8^400.
				if low[n] > d/2+d/10 || high[n] < d-d/10 {
					t.Errorf("wait %d over %d draws spans [%v, %v], want it to cover [%v, %v] nearly", n+1, draws, low[n], high[n], d/2, d)
				}
			}
		})
	}
}
