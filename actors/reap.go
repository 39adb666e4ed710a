package actors

import (
	"log/slog"
	"path/filepath"
	"strings"
	"time"

	"github.com/meshweaver/supervisor/codexproc"
	"github.com/meshweaver/supervisor/procs"
)

// ReapOrphans ends the app-servers a previous daemon instance left running
// under homes (it was killed outright, so it could not stop them). Each
// user's live app-server is recorded in {homes}/<user>/meshweaver/appserver.pid
// (ProcRecordPath) with its start time; such a process is signalled only when its start time
// proves it is the recorded one. The orphans those CLIs left outside their
// process group are ended too (see sweepStrays). It returns how many
// processes were ended.
func ReapOrphans(homes string, grace time.Duration, log *slog.Logger) int {
	return ReapMemberOrphans(homes, grace, "", log)
}

// ReapMemberOrphans is ReapOrphans for one member of a cluster sharing
// homes (member "" is ReapOrphans): only the records that member wrote are
// acted on (procs.ReapMemberRecord), and the stray sweep is skipped, as
// the other members' app-servers live under the same homes, possibly on
// this machine. What another member left is reaped by the user's next
// owner before it starts an app-server.
func ReapMemberOrphans(homes string, grace time.Duration, member string, log *slog.Logger) int {
	records, err := filepath.Glob(filepath.Join(homes, "*", "meshweaver", ProcRecordName))
	if err != nil {
		log.Error("looking for leftover app-servers", "err", err)
		return 0
	}
	n := 0
	if member == "" {
		n = sweepStrays(homes, log)
	}
	for _, rec := range records {
		reaped, err := procs.ReapMemberRecord(rec, grace, member)
		switch {
		case err != nil:
			log.Warn("reaping a leftover app-server", "record", rec, "err", err)
		case reaped:
			n++
			log.Warn("ended an app-server a previous daemon left running", "record", rec)
		}
	}
	return n
}

// sweepStrays ends what the CLIs of a killed daemon started outside their
// process group (commands run without a sandbox, login-shell snapshots):
// Pdeathsig ends the app-server itself, but not those. They are known by
// three marks together: the daemon's user owns them, their environment has
// a CODEX_HOME under homes, and they are orphans (their parent is init),
// as everything is whose app-server died. At the start of a daemon none of
// them can be its own. A person's own codex session in a home has a shell
// for a parent and is left alone.
func sweepStrays(homes string, log *slog.Logger) int {
	root := filepath.Clean(homes) + string(filepath.Separator)
	n := codexproc.KillOrphans(func(home string) bool {
		return strings.HasPrefix(filepath.Clean(home)+string(filepath.Separator), root)
	})
	if n > 0 {
		log.Warn("ended processes a previous daemon's codex left running", "count", n)
	}
	return n
}
