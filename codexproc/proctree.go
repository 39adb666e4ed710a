package codexproc

import (
	"os"
	"syscall"

	"github.com/meshweaver/supervisor/procs"
)

// envCodexHome names a process's CODEX_HOME in its environment.
const envCodexHome = "CODEX_HOME"

// orphansOf lists the orphans (parent init) of this user that run with
// exactly home as their CODEX_HOME and started no earlier than since (the
// app-server's own start): what an app-server of that home left behind
// when a helper double-forked or its parent died first.
func orphansOf(home string, since uint64) []procs.ID {
	return orphans(func(h string) bool { return h == home }, since)
}

// orphans lists the orphans (parent init), started no earlier than since,
// whose CODEX_HOME satisfies match and that run as the daemon's user or as
// the user owning that CODEX_HOME (an app-server started under a uid of
// its own, see package isolate): never anyone else's process.
func orphans(match func(codexHome string) bool, since uint64) []procs.ID {
	uid, self := os.Getuid(), os.Getpid()
	return procs.Host().Scan(func(p procs.Proc) bool {
		if p.PID <= 1 || p.PID == self || p.PPID != 1 || p.Start < since {
			return false
		}
		owner, err := p.UID()
		if err != nil {
			return false
		}
		home, ok := p.Getenv(envCodexHome)
		return ok && match(home) && (owner == uid || ownerOf(home) == owner)
	})
}

// KillOrphans SIGKILLs this user's orphaned processes (parent init) whose
// CODEX_HOME satisfies match, each only while it is still the process that
// was found (pid and start time), and reports how many it signalled.
func KillOrphans(match func(codexHome string) bool) int {
	found := orphans(match, 0)
	procs.KillIfSame(found)
	return len(found)
}

// ownerOf is the uid owning path, or -1.
func ownerOf(path string) int {
	fi, err := os.Stat(path)
	if err != nil {
		return -1
	}
	if st, ok := fi.Sys().(*syscall.Stat_t); ok {
		return int(st.Uid)
	}
	return -1
}
