package actors

import (
	"bytes"
	"log/slog"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
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
	n := sweepStrays(homes, log)
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

// sweepStrays ends what the CLIs of a killed daemon started outside their
// process group (commands run without a sandbox, login-shell snapshots):
// Pdeathsig ends the app-server itself, but not those. They are known by
// the CODEX_HOME under homes in their environment; at the start of a daemon
// none of them can be its own, so every one left is a leftover. Only this
// user's processes are looked at.
func sweepStrays(homes string, log *slog.Logger) int {
	root := filepath.Clean(homes) + string(filepath.Separator)
	entries, err := os.ReadDir("/proc")
	if err != nil {
		return 0
	}
	self, uid := os.Getpid(), os.Getuid()
	n := 0
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil || pid == self || pid <= 1 {
			continue
		}
		fi, err := os.Stat("/proc/" + e.Name())
		if err != nil {
			continue
		}
		if st, ok := fi.Sys().(*syscall.Stat_t); !ok || int(st.Uid) != uid {
			continue
		}
		env, err := os.ReadFile("/proc/" + e.Name() + "/environ")
		if err != nil {
			continue
		}
		for _, kv := range bytes.Split(env, []byte{0}) {
			home, ok := strings.CutPrefix(string(kv), "CODEX_HOME=")
			if ok && strings.HasPrefix(filepath.Clean(home)+string(filepath.Separator), root) {
				if syscall.Kill(pid, syscall.SIGKILL) == nil {
					n++
					log.Warn("ended a process a previous daemon's codex left running", "pid", pid)
				}
				break
			}
		}
	}
	return n
}
