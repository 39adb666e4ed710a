// Package codexproc owns the `codex app-server` child process: finding the
// binary ([ResolveBinary]), the environment it may see ([AllowedEnv]), its
// start in a process group of its own under a given CODEX_HOME ([Start]),
// its exit observed at once and turned into an ExitError for every call
// still waiting, a redacted tail of its stderr ([Redactor]), its pid record
// ([PidRecord]: written at the start, removed at the exit), and its stop,
// kill and the orphans it leaves ([KillOrphans]). Its Conn is a
// codexrpc.Conn.
package codexproc
