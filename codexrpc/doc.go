// Package codexrpc is a client for `codex app-server`: newline-delimited
// JSON-RPC over the stdio of a child process.
//
// A [Conn] speaks the protocol over any reader and writer: it matches
// responses to calls, delivers notifications in arrival order, answers the
// server's own requests through a [Handler], and retries calls the server
// refuses as overloaded. A [Process] starts the CLI in its own process group
// under a given CODEX_HOME, observes its exit at once, keeps a redacted tail
// of its stderr, and turns an unexpected death into an [ExitError] for every
// call still waiting. [Client] adds typed methods for the part of the
// protocol the daemon uses.
//
// The wire facts this package relies on are in docs/PROTOCOL.md.
package codexrpc
