package cluster

import "time"

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

// RenewEvery is how often the lease is renewed: a third of what the
// margin leaves, so two renewals in a row may fail before the fence.
func (d Deadline) RenewEvery() time.Duration {
	e := (d.TTL - d.Margin) / 3
	if e < 50*time.Millisecond {
		e = 50 * time.Millisecond
	}
	return e
}
