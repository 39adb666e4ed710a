// Package codexrpc is the JSON-RPC transport of `codex app-server`:
// newline-delimited JSON-RPC over any reader and writer (in the daemon, the
// stdio of the child process that codexproc starts).
//
// A [Conn] matches responses to calls, delivers notifications in arrival
// order, answers the server's own requests through a [RequestHandler], and
// retries calls the server refuses as overloaded. [Conn.Go] sends a call
// without waiting: a write goroutine writes it, and its answer is delivered
// on the read goroutine in wire order with the notifications, which is how
// the daemon's app-server actor sees a call's answer exactly where the
// server put it. Errors ([WireError], [ExitError], [ErrClosed]) and their
// classification ([Classify]) are here too; the codex protocol's methods
// and types are in codexproto, the child process in codexproc.
//
// The wire facts this package relies on are in docs/PROTOCOL.md.
package codexrpc
