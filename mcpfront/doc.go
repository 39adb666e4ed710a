// Package mcpfront is the daemon's loopback MCP front: one HTTP reverse
// proxy on 127.0.0.1 per daemon, through which a codex thread reaches the
// mesh's MCP back-connection.
//
// A codex thread takes its MCP servers (their URL and headers) from the
// config it was loaded with, and codex 0.169.0 offers no per-turn field for
// them. The mesh's bearer token changes every round, so putting it into the
// thread's config would force a reload (thread/unsubscribe, thread/resume)
// before every round. Instead the thread's config names the front, at a
// URL that stays the same for the thread's whole life ([Front.Bind]), and
// each round tells the front where to forward and which token to add
// ([Front.Set]). The thread never sees the token.
//
// The front forwards the Streamable HTTP transport of MCP as it is: POST,
// GET and DELETE, with their headers (Mcp-Session-Id among them) and
// bodies, and streams Server-Sent Events answers as they come, never
// buffering them. It replaces any Authorization header the client sent
// with the current token's. A path that names no bound key, or a key with
// no upstream (never set, or cleared), is 404; an upstream that cannot be
// reached is a 502 naming no URL and no token; an answer whose headers do
// not come within Options.HeaderTimeout is a 504; a request body past
// Options.MaxBody is a 413.
//
// The path's id is 128 random bits: other local users of the machine can
// reach a loopback port, so the URL is a secret that guards the token the
// front adds. Where each user's app-server runs as a uid of its own
// (Options.UserUID), the front also asks the kernel which uid owns each
// connection's peer, and a uid of the users' range may use only its own
// user's URLs ([Front.SetOwner]).
package mcpfront
