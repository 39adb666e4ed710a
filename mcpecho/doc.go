// Package mcpecho is a loopback MCP server speaking the streamable HTTP
// transport, whose tools echo: the MCP upstream of `supervisor bench`'s MCP
// rows, and the mesh's MCP back-connection in tests of the real codex CLI.
//
// [Start] listens on 127.0.0.1 and serves the endpoint [Server.URL]
// (".../mcp"): POST carries one JSON-RPC message (or a batch) and a request
// is answered with a plain application/json body, never an SSE stream; a
// notification or a response gets 202 Accepted. GET (the optional
// server-to-client stream) gets 405, which the transport allows. DELETE ends
// the session. initialize mints an Mcp-Session-Id.
//
// The server offers two tools: "echo" (argument "text"; it answers the text
// content "echo: <text>" and the structured content {"echoed": <text>}) and
// "fail" (always a tool error, isError true). [Options.Annotations] adds MCP
// tool annotations such as readOnlyHint to a tool.
//
// Every HTTP request is recorded with its headers, body and JSON-RPC methods
// ([Server.Requests], [Server.WaitRequests]), and every tools/call with its
// arguments ([Server.Calls]), so a test can check what the client sent, e.g.
// its Authorization header. With [Options.Token] set, a request without
// "Authorization: Bearer <Token>" is refused with 401 (and still recorded).
//
// The package does not import "testing".
package mcpecho
