// Package client is the Go caller's side of the supervisor daemon: [Dial] a
// daemon, then run chat rounds ([Client.Round]), steer and interrupt them,
// log users in and read their account and models, all with the typed
// messages of package messages and none of the hollywood plumbing.
//
// The package builds on the project's patched copy of hollywood
// (github.com/meshweaver/supervisor/third_party/hollywood), which is part of
// this module: a module that imports it needs no replace directive.
//
// # The dial-back
//
// A hollywood remote carries messages one way per connection: the daemon
// answers by dialing the caller's own listener. A [Client] therefore
// listens too, on a free loopback port unless [WithListenAddr] says
// otherwise, and that address must be reachable from the daemon (use a
// routable address when the daemon runs on another host). Under mutual TLS
// the daemon checks, when it dials back, that the listener presents a
// certificate of the same identity as the one that sent the request (see
// "sender binding" in docs/SECURITY.md): the [WithTLS] configuration serves
// both directions, so give it the caller's one certificate.
//
// # Errors
//
// A call fails with an error wrapping [ErrUnreachable] when the daemon
// cannot be reached (hollywood reports it when a dial fails), with a
// [*RejectedError] when the daemon refused the message (authorization,
// validation, rate), with the context's error when its context ends first,
// and with [ErrClosed] once [Client.Close] has been called. Answers the
// daemon gives with an error field of their own (a [messages.RoundControlled]
// that is not OK, an [messages.AccountResponse] with Error set) are returned
// as they are, with a nil error.
//
// A reply that comes after its call ended (a verdict after [Round.Wait]
// gave up on its context; a second verdict, which the daemon must never
// send) is no later call's: reply addresses are never reused. It is
// logged at Debug, or handed to the function [WithLateReplies] gives, so
// that a caller can count such replies.
//
// # Goroutines
//
// The package starts no goroutine of its own beyond those of its hollywood
// engine and remote; [Client.Close] stops both and waits for them. Calls
// block the caller's goroutine; a [Round]'s events are pulled by the
// caller's loop over [Round.Events].
package client
