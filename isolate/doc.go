// Package isolate keeps the users of one node apart. It chooses from what
// the host allows (Detect): a uid of each user's own, from a configured
// range, when the daemon may switch uids; and a private mount, pid and IPC
// namespace made by bubblewrap, which shows an app-server only its own
// CODEX_HOME, the workspace and the system. A Node owns the allocation of
// uids (the home's owner is the record) and the ownership and modes of the
// homes, and builds how each user's app-server is started (Prepare).
package isolate
