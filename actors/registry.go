package actors

import (
	"errors"
	"log/slog"

	"github.com/anthdm/hollywood/actor"
	"github.com/meshweaver/supervisor/store"
)

// registryActor is the one writer of a user's thread records and turn
// journal (CODEX_HOME/meshweaver/). Damaged files read as unknown, are
// logged, and get rewritten by the next record: never a crash, never a
// stuck thread.
type registryActor struct {
	reg     *store.Registry
	journal *store.Journal
	log     *slog.Logger
}

func newRegistryActor(cfg *Config, user, home string) actor.Producer {
	return func() actor.Receiver {
		return &registryActor{
			reg:     store.NewRegistry(home),
			journal: store.NewJournal(home),
			log:     cfg.Logger.With("user", userTag(user), "actor", "registry"),
		}
	}
}

func (a *registryActor) Receive(c *actor.Context) {
	switch m := c.Message().(type) {
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
