// Package store keeps the supervisor's small on-disk state: per-user homes,
// the record of which Codex thread runs each mesh thread, a bounded journal
// of earlier turns (the fallback transcript when a resume fails), stored API
// keys, and process records used to reap orphaned app-servers after the
// daemon was killed.
//
// Every file is small, versioned and written atomically with
// [WriteFileAtomic]: a temporary file in the same directory is written,
// synced and renamed over the target, and the directory is synced. Each file
// has exactly one writer (the actor that owns the user or the child), so the
// package takes no locks, starts no goroutines and holds no global state.
//
// Readers are strict: a file that is empty, truncated, of an unknown format
// or version, or otherwise damaged is reported as [ErrCorrupt] (wrapped, with
// the path) and none of its content is trusted. Writers overwrite such files.
//
// Layout, for one user under a homes root:
//
//	{root}/{user}/.codex/                          CODEX_HOME (see HomeDir)
//	{root}/{user}/.codex/meshweaver/threads/P.txt   thread record (Registry)
//	{root}/{user}/.codex/meshweaver/journal/P.jsonl turn journal (Journal)
//	{root}/{user}/meshweaver/openai-api-key         API key (Credentials)
//
// where P is [KeyPrefix] of the mesh thread key: the first 16 hex digits of
// its SHA-256.
package store
