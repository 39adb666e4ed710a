package actors

import (
	"log/slog"
	"path/filepath"
	"time"

	"github.com/meshweaver/supervisor/store"
)

// ReapOrphans ends the app-servers a previous daemon instance left running
// under homes (it was killed outright, so it could not stop them). Each
// user's live app-server is recorded in CODEX_HOME/meshweaver/appserver.pid
// with its start time; a process is signalled only when its start time
// proves it is the recorded one. It returns how many were ended.
func ReapOrphans(homes string, grace time.Duration, log *slog.Logger) int {
	records, err := filepath.Glob(filepath.Join(homes, "*", ".codex", "meshweaver", ProcRecordName))
	if err != nil {
		log.Error("looking for leftover app-servers", "err", err)
		return 0
	}
	n := 0
	for _, rec := range records {
		reaped, err := store.ReapProcRecord(rec, grace)
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
