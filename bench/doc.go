// Package bench measures the daemon against a minimal direct client of the
// same codex CLI, in one run, interleaved, so that the load of the machine
// falls on both sides alike. It is the logic of `supervisor bench`; the
// command gives it a way to start the daemon ([Options.StartDaemon]) and
// the events row's app-server, [ServeFlood] ([Options.FloodLaunch]). It
// links no test code: the model is package demomodel, the MCP server
// package mcpecho.
//
// Every row of the [Result] is a measurement of the daemon (or of one of
// its parts) against a baseline measured in the same run: a [Direct]
// client (the CLI spawned over stdio, initialize, thread/start or
// thread/resume, turn/start, notifications read), raw hollywood remote
// throughput, a direct MCP call, or the same round at a smaller size. Both
// sides share the CLI binary, the -c overrides, the loopback demo model
// (one instance) and an empty HOME.
package bench
