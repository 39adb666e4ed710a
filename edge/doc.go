// Package edge is the daemon's remote edge: the gate every message from a
// peer passes before it reaches the actor tree.
//
// The transport (third_party/hollywood/remote) reads a frame, checks it
// and binds its sender to the connection's peer; then it hands the message
// to a [Gate]. The gate refuses a message addressed to anything but the
// daemon's public root actor, or naming one of the daemon's own ids as its
// sender; it decodes the envelope (package messages), validates it,
// rate-limits the peer and authorizes the peer's identity against a
// [Policy]; what passes goes on to the root decoded. A refusal is counted
// (by reason), logged (sampled, so a flood cannot flood the log) and
// answered to the verified sender (rate-limited too, so a flood cannot make
// the daemon an amplifier): a RoundFinished with status rejected for a
// StartRound, a Rejected for everything else.
//
// The pure parts (policy matching, the kind of a message, the limiter
// table and the log sampler) take their clock as an argument and are
// tested on their own.
package edge
