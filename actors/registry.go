package actors

import (
	"errors"
	"log/slog"
	"os"
	"path/filepath"
	"sort"
	"time"

	"golang.org/x/sys/unix"

	"github.com/meshweaver/supervisor/messages"
	"github.com/meshweaver/supervisor/store"
	"github.com/meshweaver/supervisor/third_party/hollywood/actor"
)

// registryActor is the one writer of a user's thread records and turn
// journal ({Homes}/<user>/meshweaver/threads and journal: the daemon's
// folder of the user, beside CODEX_HOME, which the user's app-server may
// write all of and so must not hold what the daemon trusts). Damaged files
// read as unknown, are logged, and get rewritten by the next record: never
// a crash, never a stuck thread.
type registryActor struct {
	cfg     *tree
	user    string
	dir     string // the user's folder: {Homes}/<user>
	ledger  userLedger
	reg     *store.Registry
	journal *store.Journal
	home    string
	log     *slog.Logger

	// Writes that failed, kept for the thread's next round, which retries
	// them (and meanwhile reads them from here).
	unsavedRecords map[string]string
	unsavedTurns   map[string][]store.Turn
}

// maxUnsavedTurns bounds the turns kept in memory for a journal that
// cannot be written.
const maxUnsavedTurns = 64

func newRegistryActor(cfg *tree, user, home string) actor.Producer {
	return func() actor.Receiver {
		return &registryActor{
			cfg: cfg, user: user, dir: filepath.Dir(home),
			reg:     store.NewRegistry(filepath.Dir(home)),
			journal: store.NewJournal(filepath.Dir(home)),
			home:    home,
			log:     cfg.Logger.With("user", userTag(user), "actor", "registry"),

			unsavedRecords: make(map[string]string),
			unsavedTurns:   make(map[string][]store.Turn),
		}
	}
}

func (a *registryActor) Receive(c *actor.Context) {
	switch m := c.Message().(type) {
	case actor.Started:
		a.moveLegacy()
		a.removeStaleTemps()
		a.loadLedger()
	case actor.Stopped:
		a.flush()
	case lookupThread:
		if m.admit {
			if low := a.diskLow(); low != "" {
				c.Send(m.round, threadLookup{key: m.key, lowDisk: low})
				return
			}
			if info := a.admit(); info != nil {
				c.Send(m.round, threadLookup{key: m.key, budget: info})
				return
			}
		}
		l := a.lookup(m.key)
		l.key = m.key
		c.Send(m.round, l)
	case chargeTokens:
		a.charge(c, m)
	case usageTokens:
		m.resp.Tokens = a.tokenUsage()
		deliver(c.Engine(), m.to, m.resp, a.log)
	case flushLedger:
		a.flush()
	case recordThread:
		err := a.record(m.key, m.threadID)
		if m.round != nil {
			c.Send(m.round, saved{what: "thread record", err: err})
		}
	case forgetThread:
		delete(a.unsavedRecords, m.key)
		if err := a.reg.Forget(m.key); err != nil {
			a.log.Error("forgetting thread", "thread", store.KeyPrefix(m.key), "err", err)
		}
	case appendTurns:
		all, err := a.writeTurns(m.key, m.turns)
		if m.round != nil {
			c.Send(m.round, saved{what: "journal", err: err})
		}
		if err == nil {
			// After the answer: the verdict does not wait for the disk
			// (see syncTurns).
			_ = a.syncTurns(m.key, all)
		}
	case messages.ListThreads:
		deliver(c.Engine(), c.Sender(), a.list(m), a.log)
	}
}

// list answers a ListThreads from the thread records: the user's mesh
// threads, most recently active first (the later of the record's and the
// journal's last write), with those whose record could not be written yet.
func (a *registryActor) list(m messages.ListThreads) messages.Threads {
	out := messages.Threads{User: m.User}
	entries, skipped, err := a.reg.List()
	if err != nil {
		a.log.Error("listing threads", "err", err)
		out.Error = "the thread records could not be read"
		return out
	}
	if skipped > 0 {
		a.log.Info("thread records not listed (older format or damaged; rewritten at their next round)", "count", skipped)
	}
	seen := make(map[string]bool, len(entries))
	for _, e := range entries {
		seen[e.Key] = true
		last := e.Modified
		if fi, err := os.Stat(a.journal.Path(e.Key)); err == nil && fi.ModTime().After(last) {
			last = fi.ModTime()
		}
		id := e.ThreadID
		if u, ok := a.unsavedRecords[e.Key]; ok {
			id = u
		}
		out.Threads = append(out.Threads, messages.ThreadInfo{Thread: e.Key, CodexThreadID: id, LastActivityUnix: last.Unix()})
	}
	for key, id := range a.unsavedRecords {
		if !seen[key] {
			out.Threads = append(out.Threads, messages.ThreadInfo{Thread: key, CodexThreadID: id, LastActivityUnix: time.Now().Unix()})
		}
	}
	sort.SliceStable(out.Threads, func(i, j int) bool {
		ti, tj := out.Threads[i], out.Threads[j]
		if ti.LastActivityUnix != tj.LastActivityUnix {
			return ti.LastActivityUnix > tj.LastActivityUnix
		}
		return ti.Thread < tj.Thread
	})
	limit := m.Limit
	if limit <= 0 || limit > messages.MaxThreadsListed {
		limit = messages.MaxThreadsListed
	}
	if len(out.Threads) > limit {
		out.Threads, out.Truncated = out.Threads[:limit], true
	}
	return out
}

// record writes a thread record; one that cannot be written is kept for
// the thread's next round.
func (a *registryActor) record(key, threadID string) error {
	if err := a.reg.Record(key, threadID); err != nil {
		a.log.Error("recording thread", "thread", store.KeyPrefix(key), "err", err)
		a.unsavedRecords[key] = threadID
		return err
	}
	delete(a.unsavedRecords, key)
	return nil
}

// appendTurns appends turns to the journal after those an earlier append
// could not write, and syncs them; what cannot be written is kept for the
// next round.
func (a *registryActor) appendTurns(key string, turns []store.Turn) error {
	all, err := a.writeTurns(key, turns)
	if err != nil {
		return err
	}
	return a.syncTurns(key, all)
}

// writeTurns writes turns to the journal after those an earlier append
// could not write, without syncing them: once written they survive the
// daemon (a killed or restarted daemon reads them back), which is what a
// round's verdict says of them. It returns all it wrote, for syncTurns;
// what cannot be written is kept for the next round.
func (a *registryActor) writeTurns(key string, turns []store.Turn) ([]store.Turn, error) {
	all := append(a.unsavedTurns[key], turns...)
	if err := a.journal.Write(key, all...); err != nil {
		a.log.Error("appending to the journal", "thread", store.KeyPrefix(key), "err", err)
		a.unsavedTurns[key] = all[max(0, len(all)-maxUnsavedTurns):]
		return nil, err
	}
	delete(a.unsavedTurns, key)
	return all, nil
}

// syncTurns puts what writeTurns wrote (all) on disk, so that it survives
// the machine too. A round's verdict does not wait for it: codex does not
// sync the thread's own rollout either, so a machine that crashes loses
// the turn there whatever the journal holds, and the sync (an fdatasync,
// the slowest step of a warm round's end, and the one other disk users
// slow down) is the one wait of the verdict that bought nothing the
// thread has. A failed sync cuts the file back; the turns are kept, and
// the thread's next round writes them again or names them in not_saved.
func (a *registryActor) syncTurns(key string, all []store.Turn) error {
	if err := a.journal.Sync(key); err != nil {
		a.log.Error("syncing the journal", "thread", store.KeyPrefix(key), "err", err)
		a.unsavedTurns[key] = all[max(0, len(all)-maxUnsavedTurns):] // writeTurns left none other
		return err
	}
	return nil
}

// removeStaleTemps deletes the temporary files of writes a killed daemon
// cut short; this actor is the only writer of these folders, so none is
// in use. The files they were meant to replace are intact.
func (a *registryActor) removeStaleTemps() {
	for _, dir := range []string{filepath.Dir(a.reg.Path("x")), filepath.Dir(a.journal.Path("x"))} {
		stale, _ := filepath.Glob(filepath.Join(dir, ".*.tmp*"))
		for _, f := range stale {
			if err := os.Remove(f); err == nil {
				a.log.Info("removed the temporary file of an interrupted write", "file", filepath.Base(f))
			}
		}
	}
}

// lookup reads what the registry knows of a mesh thread, retrying first
// the writes an earlier round could not make. The journal is read only
// when there is no codex thread to resume: a round needs it only to seed
// a fresh thread, and a round whose resume is refused looks the thread up
// again once it is forgotten. Reading it on every round cost a warm round
// a parse of up to MaxBytes of JSON before its turn could start.
func (a *registryActor) lookup(key string) threadLookup {
	var out threadLookup
	if id, ok := a.unsavedRecords[key]; ok {
		if err := a.record(key, id); err != nil {
			out.notSaved = append(out.notSaved, "thread record: "+err.Error())
		}
	}
	if len(a.unsavedTurns[key]) > 0 {
		if err := a.appendTurns(key, nil); err != nil {
			out.notSaved = append(out.notSaved, "journal: "+err.Error())
		}
	}
	id, version, err := a.reg.LookupVersion(key)
	if err == nil && version == 1 {
		// An older daemon's record: rewritten with the key, so that
		// ListThreads can name the thread. It stays readable if this fails.
		if werr := a.reg.Record(key, id); werr != nil {
			a.log.Warn("upgrading a thread record", "thread", store.KeyPrefix(key), "err", werr)
		}
	}
	switch {
	case errors.Is(err, store.ErrCorrupt):
		a.log.Warn("thread record damaged; starting a fresh thread", "thread", store.KeyPrefix(key), "err", err)
		out.damaged = true
	case err != nil:
		a.log.Error("reading thread record", "thread", store.KeyPrefix(key), "err", err)
		out.damaged = true
	default:
		out.threadID = id
	}
	if id, ok := a.unsavedRecords[key]; ok {
		out.threadID, out.damaged = id, false // known here, not yet on disk
	}
	if out.threadID != "" {
		return out
	}
	turns, err := a.journal.Turns(key)
	switch {
	case errors.Is(err, store.ErrCorrupt):
		a.log.Warn("journal damaged; it starts over", "thread", store.KeyPrefix(key), "err", err)
		out.damaged = true
		if ferr := a.journal.Forget(key); ferr != nil {
			a.log.Error("removing damaged journal", "err", ferr)
		}
	case err != nil:
		a.log.Error("reading journal", "thread", store.KeyPrefix(key), "err", err)
		out.damaged = true
	default:
		out.turns = turns
	}
	out.turns = append(out.turns, a.unsavedTurns[key]...)
	return out
}

// moveLegacy moves the records and journal of an older daemon, which kept
// them in CODEX_HOME/meshweaver/, to the daemon's folder of the user, once
// (when the new folder has none yet). The home may belong to the user's
// uid, whose agent could have put a symlink or a folder of its own there to
// make the daemon move someone else's files: only folders the daemon owns
// are moved, reached through a descriptor of the checked folder (openat),
// never through a symlink.
func (a *registryActor) moveLegacy() {
	oldDir := filepath.Join(a.home, "meshweaver")
	fd, err := unix.Open(oldDir, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return // none, or not a plain folder
	}
	defer unix.Close(fd)
	euid := uint32(os.Geteuid())
	var st unix.Stat_t
	if unix.Fstat(fd, &st) != nil || st.Uid != euid {
		return
	}
	for _, dir := range []string{filepath.Dir(a.reg.Path("x")), filepath.Dir(a.journal.Path("x"))} {
		name := filepath.Base(dir)
		if unix.Fstatat(fd, name, &st, unix.AT_SYMLINK_NOFOLLOW) != nil || st.Mode&unix.S_IFMT != unix.S_IFDIR || st.Uid != euid {
			continue
		}
		if _, err := os.Lstat(dir); err == nil {
			continue
		}
		if err := os.MkdirAll(filepath.Dir(dir), 0o700); err != nil {
			a.log.Warn("moving thread records out of the home", "err", err)
			continue
		}
		if err := unix.Renameat(fd, name, unix.AT_FDCWD, dir); err != nil {
			a.log.Warn("moving thread records out of the home", "err", err)
			continue
		}
		a.log.Info("moved thread records out of the home", "folder", name)
	}
	_ = unix.Unlinkat(fd, ProcRecordName, 0)                    // an old pid record: ignored now
	_ = unix.Unlinkat(unix.AT_FDCWD, oldDir, unix.AT_REMOVEDIR) // only when empty
}
