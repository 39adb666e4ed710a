// Package codexproto is the part of the codex app-server protocol the
// daemon speaks: method and notification names, the params and results of
// each call, the CLI version from initialize's userAgent, and [Client], the
// typed blocking face of a codexrpc.Conn (used where a caller may block: the
// start of a process, tools and tests; the daemon's actors send the same
// params through the app-server actor instead).
//
// The wire facts are in docs/PROTOCOL.md and the recordings of the real CLI.
package codexproto
