// Package schema checks JSON-RPC lines against the JSON Schema that the pinned
// codex CLI generates for its app-server protocol
// (`codex app-server generate-json-schema --out DIR`).
//
// How the generated bundle is laid out (codex-cli 0.169.0):
//
//   - ClientRequest.json, ServerRequest.json, ServerNotification.json and
//     ClientNotification.json are draft-07 documents whose root is a `oneOf`
//     union. Every branch is an object schema keyed by a one-value `method`
//     enum, with `params` pointing into the file's own `definitions`.
//     Request branches require `id`, `method` and `params` (a few param-less
//     methods, such as account/logout, have no `params` at all).
//   - No branch sets `additionalProperties: false` at the top level and none
//     mentions `jsonrpc`. The real server never writes `jsonrpc` and accepts
//     it from clients, so a line validates the same with or without it; the
//     validator does not look at it.
//   - ServerNotification.json declares the top-level `emittedAtMs` (an
//     integer) in root-level `properties`, next to the `oneOf`. Because the
//     validator compiles one branch per method (see below), it checks
//     `emittedAtMs` separately against that root-level property schema when
//     the line has it. It does not require it: the schema doesn't either,
//     although the real server always sends it.
//   - The results of server→client requests have one file each at the top
//     level (e.g. CommandExecutionRequestApprovalResponse.json); the results
//     of client→server requests live in v2/ (e.g. v2/TurnStartResponse.json)
//     and v1/ (v1/InitializeResponse.json). The result schema for a method is
//     found by renaming its params definition (XParams → XResponse), with a
//     small table for the param-less methods whose names don't follow that.
//
// Instead of validating a line against a whole union, which turns one
// mistake into a hundred "oneOf: none matched" causes, the [Validator]
// compiles every branch on its own (`ClientRequest.json#/oneOf/N`) and picks
// the branch by the line's `method`. Load compiles all union branches; the
// hundred-odd result files are read into memory by Load but compiled on
// first use, which keeps Load near half a second (a second under -race
// instead of ten). A method that is not in the union fails
// with [ErrUnknownMethod]. Failures are reported as *[Error], which names the
// method, the JSON pointer into the message and the schema keyword that
// failed, relative to the bundle directory.
//
// The release train: [Compare] checks a newer CLI's [Bundle] against the
// pinned one's for what the daemon uses ([DaemonUses]: codexproto's
// methods with the Go types it writes and reads). New methods, fields and
// enum values pass and are reported; a removed method the daemon uses, a
// removed or retyped field it sends or reads, a newly required param, an
// enum value gone from a field it sends fail, naming the method and field.
// The tests run it when the newest CLI is installed
// (scripts/install-codex --newest, or CODEX_BIN_NEWEST; [FindNewestCLI]).
//
// The decisions: [Decisions] says, for every method, notification and
// thread item type of the CLI's protocol, whether the daemon uses it,
// passes it through, refuses it or does not use it, and why. The tests
// hold it to the CLI's [Surface] (generated with --experimental, which
// is what the daemon's app-servers offer it: [BuildSurface]) of the pin
// and of the newest CLI, to DaemonUses, to actors/policy, and to the
// table in docs/PROTOCOL.md that [RenderDecisions] writes
// (`go generate ./testkit/schema/`).
//
// Tests get a ready validator from [ForTest], which finds the CLI the same
// way the rest of the project does (CODEX_BIN, then the project-local
// .codex-cli install, then PATH) and generates the bundle once per test
// process.
package schema
