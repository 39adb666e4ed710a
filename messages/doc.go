// Package messages defines the messages that other actors of the agent mesh
// exchange with the supervisor daemon, and the codec that carries them over
// hollywood remote messaging.
//
// hollywood v1.0.5 remote carries protobuf messages only: sending any other
// value to a remote PID crashes the sender, and a proto type the receiver does
// not know drops the rest of the batch. So every message crosses the wire in
// one protobuf type, [anypb.Any]: TypeUrl is "meshweaver/" followed by the
// message's versioned name (for example "meshweaver/start_round.v1") and Value
// is the message struct encoded with msgpack. [Encode] and [Decode] convert
// between the two; [Unwrap] lets an actor accept both local structs (inside
// one engine plain values pass as they are) and remote envelopes.
//
// Messages are plain data with msgpack tags. Commands are verbs
// ([StartRound], [SteerRound]), events are in the past tense ([RoundFinished],
// [LoginFinished]), and the …Request/…Response names are kept for pairs that
// may be used with Engine.Request ([AccountRequest], [ModelsRequest]).
//
// Everything that arrives from a peer is untrusted. [Decode] bounds the body
// size, nesting depth and element count before msgpack sees it and never
// panics; the Validate methods of the commands the daemon receives check
// required fields and bounds. Errors never contain message bodies, tokens or
// keys, and the messages that carry secrets ([StartRound], [SetAPIKey]) redact
// them in String, GoString and LogValue.
//
// The package is a leaf: it imports nothing from this module. docs/REMOTE.md
// is the catalog of wire names, fields, directions and replies.
package messages
