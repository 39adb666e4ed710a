package actors

import (
	"errors"
	"log/slog"
	"os"
	"path/filepath"

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
	reg     *store.Registry
	journal *store.Journal
	home    string
	log     *slog.Logger
}

func newRegistryActor(cfg *Config, user, home string) actor.Producer {
	return func() actor.Receiver {
		return &registryActor{
			reg:     store.NewRegistry(filepath.Dir(home)),
			journal: store.NewJournal(filepath.Dir(home)),
			home:    home,
			log:     cfg.Logger.With("user", userTag(user), "actor", "registry"),
		}
	}
}

func (a *registryActor) Receive(c *actor.Context) {
	switch m := c.Message().(type) {
	case actor.Started:
		a.moveLegacy()
		a.removeStaleTemps()
	case lookupThread:
		m.reply <- a.lookup(m.key)
	case recordThread:
		if err := a.reg.Record(m.key, m.threadID); err != nil {
			a.log.Error("recording thread", "thread", store.KeyPrefix(m.key), "err", err)
		}
	case forgetThread:
		if err := a.reg.Forget(m.key); err != nil {
			a.log.Error("forgetting thread", "thread", store.KeyPrefix(m.key), "err", err)
		}
	case appendTurns:
		if err := a.journal.Append(m.key, m.turns...); err != nil {
			a.log.Error("appending to the journal", "thread", store.KeyPrefix(m.key), "err", err)
		}
	}
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

func (a *registryActor) lookup(key string) threadLookup {
	var out threadLookup
	id, err := a.reg.Lookup(key)
	switch {
	case errors.Is(err, store.ErrCorrupt):
		a.log.Warn("thread record damaged; starting a fresh thread", "thread", store.KeyPrefix(key), "err", err)
	case err != nil:
		a.log.Error("reading thread record", "thread", store.KeyPrefix(key), "err", err)
	default:
		out.threadID = id
	}
	turns, err := a.journal.Turns(key)
	switch {
	case errors.Is(err, store.ErrCorrupt):
		a.log.Warn("journal damaged; it starts over", "thread", store.KeyPrefix(key), "err", err)
		if ferr := a.journal.Forget(key); ferr != nil {
			a.log.Error("removing damaged journal", "err", ferr)
		}
	case err != nil:
		a.log.Error("reading journal", "thread", store.KeyPrefix(key), "err", err)
	default:
		out.turns = turns
	}
	return out
}

// moveLegacy moves the records and journal of an older daemon, which kept
// them in CODEX_HOME/meshweaver/, to the daemon's folder of the user, once
// (when the new folder has none yet).
func (a *registryActor) moveLegacy() {
	for _, dir := range []string{filepath.Dir(a.reg.Path("x")), filepath.Dir(a.journal.Path("x"))} {
		old := filepath.Join(a.home, "meshweaver", filepath.Base(dir))
		fi, err := os.Lstat(old)
		if err != nil || !fi.IsDir() {
			continue // none, or not a plain folder (never followed)
		}
		if _, err := os.Lstat(dir); err == nil {
			continue
		}
		if err := os.MkdirAll(filepath.Dir(dir), 0o700); err != nil {
			a.log.Warn("moving thread records out of the home", "err", err)
			continue
		}
		if err := os.Rename(old, dir); err != nil {
			a.log.Warn("moving thread records out of the home", "err", err)
			continue
		}
		a.log.Info("moved thread records out of the home", "folder", filepath.Base(dir))
	}
	_ = os.Remove(filepath.Join(a.home, "meshweaver")) // only when empty
}
