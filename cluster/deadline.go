package cluster

import (
	"fmt"
	"time"
)

// Deadline is the fencing arithmetic of one lease, a plain value: every
// method takes the time.
//
// etcd starts a lease's TTL again when it receives a keepalive, which is
// after the member sent it; so the lease cannot expire before sent+TTL
// (with clocks that run at the same rate; etcd's leader also extends
// leases on election, never shortens them). The member stops its
// app-servers at sent+TTL-Margin: the margin covers stopping them and the
// scheduling delays of a loaded machine.
type Deadline struct {
	TTL    time.Duration
	Margin time.Duration
	sent   time.Time // when the last keepalive that succeeded was sent
}

// NewDeadline starts the arithmetic for a lease granted by a request sent
// at sent.
func NewDeadline(ttl, margin time.Duration, sent time.Time) Deadline {
	return Deadline{TTL: ttl, Margin: margin, sent: sent}
}

// Renewed records a keepalive sent at sent that etcd acknowledged. An
// older acknowledgement than the one recorded changes nothing.
func (d *Deadline) Renewed(sent time.Time) {
	if sent.After(d.sent) {
		d.sent = sent
	}
}

// Expiry is the earliest time the lease could expire.
func (d Deadline) Expiry() time.Time { return d.sent.Add(d.TTL) }

// FenceAt is when the member must stop its app-servers unless it renews
// the lease before.
func (d Deadline) FenceAt() time.Time { return d.sent.Add(d.TTL - d.Margin) }

// Valid reports whether the member may still act as an owner at now.
func (d Deadline) Valid(now time.Time) bool { return now.Before(d.FenceAt()) }

// RenewEvery is how often the lease is renewed: a sixth of what the
// margin leaves (the fence window), so that most of the window is left
// for retries when a renewal fails.
func (d Deadline) RenewEvery() time.Duration {
	return max((d.TTL-d.Margin)/6, 50*time.Millisecond)
}

// Attempt bounds one keepalive sent to one etcd endpoint: a sixth of the
// fence window, between 100ms and 1s. A renewal that fails is tried again
// at once on the next endpoint, until the fence time: an endpoint that
// hangs (its member dead, frozen or cut off) costs one attempt, not the
// window.
func (d Deadline) Attempt() time.Duration {
	return min(max((d.TTL-d.Margin)/6, 100*time.Millisecond), time.Second)
}

// CheckTimings says whether a member with these lease settings outlasts
// an etcd leader election whose timeout (etcd's --election-timeout) is
// election. When the leader dies just after a renewal, the next renewal
// starts RenewEvery later and fails until a new leader is elected: a
// follower calls an election between one and two election timeouts after
// the leader's last heartbeat. Renewal attempts then start every quarter
// Attempt (Node's try), so one starts at most that long after the
// election. The fence window (TTL − Margin) must hold
// RenewEvery + 2 × election + Attempt/4; with less, a member's death can
// fence the survivors.
func CheckTimings(ttl, margin, election time.Duration) error {
	d := NewDeadline(ttl, margin, time.Time{})
	window := ttl - margin
	if need := d.RenewEvery() + 2*election + d.Attempt()/4; window < need {
		return fmt.Errorf("the fence window (lease TTL %v less fence margin %v = %v) must hold a renewal interval (%v), two etcd election timeouts (2 × %v) and a quarter attempt (%v): %v at least; raise the TTL, lower the margin or the election timeout",
			ttl, margin, window, d.RenewEvery(), election, d.Attempt()/4, need)
	}
	return nil
}
