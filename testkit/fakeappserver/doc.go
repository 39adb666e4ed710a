// Package fakeappserver is a scripted fake of `codex app-server` (recorded
// from codex-cli 0.169.0; it reports the version under test, [Version]) for the faults the real CLI cannot show on cue: garbage and huge
// lines, crashes at a chosen message, hangs, overload errors, unknown
// notifications, server-initiated requests, ignored EOF and SIGTERM, MCP
// servers that fail to start after their round ended.
//
// # Baseline
//
// The zero [Fake] behaves like the real server, speaking the shapes recorded
// in /work/shared/codex-protocol (newline-delimited JSON, no "jsonrpc"
// field, `emittedAtMs` on every notification, -32600 for nearly every
// error, with the real texts):
//
//   - initialize → {userAgent:"<name>/<Version> (Debian 12.0.0; x86_64) xterm
//     (<name>; <version>)", codexHome, platformFamily, platformOs}; a second
//     one → "Already initialized"; any other request first → "Not
//     initialized". The "initialized" notification needs no answer.
//   - thread/start → result, then thread/started. thread/resume → result
//     then thread/status/changed idle for a thread it knows (loaded, in
//     KnownThreads, or with a rollout under CodexHome), "no rollout found for
//     thread id <id>" for an unknown UUID, "invalid session id: ..." for
//     anything else. thread/name/set → {} then thread/name/updated.
//     thread/read, thread/loaded/list, thread/unsubscribe, thread/archive
//     answer minimally.
//   - turn/start → result {turn:{...,status:"inProgress"}}, then
//     thread/status/changed active, turn/started, the userMessage item
//     (started/completed, clientUserMessageId echoed as clientId), the
//     agentMessage item (item/started, one delta per word of ReplyText,
//     item/completed), thread/tokenUsage/updated, account/rateLimits/updated,
//     thread/status/changed idle, turn/completed {status:"completed"}.
//     turn/start during a running turn returns that turn and adds the input
//     to it. turn/interrupt → {} then turn/completed "interrupted" (or "no
//     active turn to interrupt"); turn/steer → {turnId} plus a userMessage
//     in the running turn (or the real errors). Turns finish while
//     turn/start is handled unless HoldTurns or ServerRequests pause them.
//   - model/list (the recorded catalogue: hidden models with includeHidden,
//     pages by limit and cursor), mcpServerStatus/list,
//     account/read, account/rateLimits/read (the error without a ChatGPT
//     login, or RateLimits), account/login/start (apiKey, chatgpt,
//     chatgptDeviceCode), account/login/cancel, account/logout: the recorded
//     answers and notifications.
//   - A method the real server does not know → "Invalid request: unknown
//     variant `x`, expected one of ..." with the real list; one it knows but
//     the fake does not implement → -32600 "fakeappserver: method `x` is
//     not implemented"; no params → "Invalid request: missing field
//     `params`"; a line that is not JSON → no answer, a log line on stderr.
//   - stdin EOF → exit with ExitCode (0), as the real server does.
//
// Every field of [Fake] adds one behaviour; see their docs for the exact
// semantics. The fake-only notification `fake/answer` echoes each answer the
// client gives to a server request.
//
// # In-process and as a process
//
// [Fake.Serve] runs the fake on any reader and writer, e.g. io.Pipe ends.
// To run it as a real child process (for exit codes, signals and pipes),
// re-execute the test binary:
//
//	func TestMain(m *testing.M) {
//		if os.Getenv(fakeappserver.EnvVar) != "" {
//			fakeappserver.Main() // never returns
//		}
//		goleak.VerifyTestMain(m)
//	}
//
// and start it with [Command], or hand [Relaunch]'s path, args and env to
// your own launcher. [Env] gives just the FAKE_APPSERVER_CONFIG assignment.
package fakeappserver
