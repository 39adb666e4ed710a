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
	records, err := filepath.Glob(filepath.Join(homes, "*", "meshweaver", ProcRecordName))
	if err != nil {
		log.Error("looking for leftover app-servers", "err", err)
		return 0
	}
	n := sweepStrays(homes, log)
	for _, rec := range records {
		reaped, err := procs.ReapRecord(rec, grace)
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
