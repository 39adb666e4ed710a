package codexproc

import (
	"os"
	"sync"

	"github.com/meshweaver/supervisor/procs"
	"github.com/meshweaver/supervisor/store"
)

// PidRecord is the pid record (store.ProcRecord) of the app-servers
// started for one home, one process after another: a daemon killed
// outright leaves its app-server running, and its next start reaps the
// process the record names (procs.ReapRecord). Start writes the record
// once the process runs; the process's exit removes it if it still names
// that process, and leaves alone a newer process's record, written
// meanwhile. One PidRecord serves every process of the home, so that
// those writes and removals are ordered.
type PidRecord struct {
	// Path is where the record is kept.
	Path string
	// Member is the cluster member starting the processes ("" outside a
	// cluster). With a member the record also names this kernel's boot
	// (store.ProcRecord v2), so that no other member's start reaps it and
	// no other machine signals its pid.
	Member string

	mu sync.Mutex // orders the writes and the read-compare-removes of Path
}

// write records the process pid, started at start, as running exe.
func (r *PidRecord) write(pid int, start uint64, exe string) error {
	rec := store.ProcRecord{PID: pid, StartTime: start, Exe: exe, Member: r.Member}
	if rec.Member != "" {
		if boot, err := procs.BootID(); err == nil {
			rec.Boot = boot
		}
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	return store.WriteProcRecord(r.Path, rec)
}

// remove deletes the record if it still names the process pid started at
// start: a newer process's record is never the one removed.
func (r *PidRecord) remove(pid int, start uint64) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if rec, err := store.ReadProcRecord(r.Path); err == nil && rec.PID == pid && rec.StartTime == start {
		_ = os.Remove(r.Path)
	}
}
