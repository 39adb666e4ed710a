// Package mockmodel is a loopback mock of the OpenAI Responses API, made to be
// the model behind a real `codex app-server` in tests and in the daemon's demo.
//
// [Start] listens on 127.0.0.1 and answers POST {URL}/responses with a
// Server-Sent Events stream in the format the codex CLI 0.169.0 accepts. Each
// request is answered by the next [Script] in a FIFO queue ([Server.Enqueue]),
// or, when the queue is empty, by a [Responder] ([DemoResponder] unless
// Options or [Server.SetResponder] say otherwise).
//
// A Script is either an SSE stream of [Event]s, usually built with [Respond]
// from output [Item]s ([Message], [Reasoning], [ExecCommand], [ApplyPatch],
// [MCPCall], ...), or a plain HTTP error ([HTTPError] and friends). Scripts can
// be slowed down ([Script.WithDelay]), cut mid-stream ([Script.Cut]), or left
// hanging until the client goes away ([Script.Hang]).
//
// Every request is recorded as a [Request], with helpers that read what the
// CLI sent: the input items, the last user text, tool-call outputs, and the
// request kind from the x-codex-turn-metadata header. [Server.WaitRequests]
// blocks until a number of requests have arrived, without sleeping.
//
// The package does not import "testing", so non-test code may embed it.
package mockmodel
