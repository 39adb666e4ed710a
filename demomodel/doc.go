// Package demomodel is the demo model: a loopback mock of the OpenAI
// Responses API that a real `codex app-server` talks to instead of OpenAI.
// It is the model of `supervisor demo`, `serve --demo-model` and `supervisor
// bench`, and the model behind the real CLI in the tests.
//
// [Start] listens on 127.0.0.1 and answers POST {URL}/responses with a
// Server-Sent Events stream in the format the codex CLI accepts (0.169.0 and
// 0.171.0: the real-CLI tests run on the pin). Each
// request is answered by the next [Script] in a FIFO queue ([Server.Enqueue]),
// or, when the queue is empty, by a [Responder] ([DemoResponder] unless
// Options or [Server.SetResponder] say otherwise). [ShowcaseResponder] is the
// demo's model.
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
// [Overrides] are the CLI settings (`codex app-server -c key=value`) that
// point codex at a Server.
package demomodel
