// Package gateway serves the daemon's messages over HTTP for callers
// outside Go: rounds, attaches and device-code logins as Server-Sent
// Events, the other calls as JSON, every message with its wire names
// (docs/REMOTE.md, "HTTP gateway"). It authorizes like the remote edge:
// the same client certificates, identities, policy and per-peer rates
// (edge.Gate.Admit). Inside the daemon each request gets a reply actor in
// the daemon's own engine, which talks to the root actor; a stream whose
// client goes away ends its reply actor, which the round's log sees as the
// caller's departure (its grace period starts).
package gateway
