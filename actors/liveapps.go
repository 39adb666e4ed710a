package actors

import (
	"slices"
	"time"

	"github.com/meshweaver/supervisor/third_party/hollywood/actor"
)

// liveUse reports an app-server actor's live process to the cap actor: when
// it was last used and whether it serves anyone now. Started marks the
// report of a fresh start, which sheds the node's excess, never itself.
type liveUse struct {
	pid     *actor.PID
	lastUse time.Time
	busy    bool
	started bool
}

// liveGone tells the cap actor that an app-server actor's process is gone.
type liveGone struct{ pid *actor.PID }

// capActor keeps the node's live app-servers at MaxLive: the app-server
// actors report their use (liveUse, liveGone), and whenever the node is
// over the cap it asks the least recently used idle ones to stop
// (evictNow; one that has become busy meanwhile declines, and the next
// report picks another). It owns the live-app-servers gauge.
type capActor struct {
	cfg  *tree
	live map[string]liveUse // by app-server actor PID
}

func newCapActor(cfg *tree) actor.Producer {
	return func() actor.Receiver { return &capActor{cfg: cfg, live: make(map[string]liveUse)} }
}

func (a *capActor) Receive(c *actor.Context) {
	switch m := c.Message().(type) {
	case liveUse:
		a.live[m.pid.String()] = m
		a.cfg.Metrics.LiveAppServers.Set(float64(len(a.live)))
		var self *actor.PID
		if m.started {
			self = m.pid
		}
		for _, v := range victims(a.live, self, a.cfg.MaxLive) {
			c.Send(v, evictNow{})
		}
	case liveGone:
		delete(a.live, m.pid.String())
		a.cfg.Metrics.LiveAppServers.Set(float64(len(a.live)))
	}
}

// victims picks the least recently used idle app-servers other than self,
// as many as live is over max (none when it is not). It is a pure function
// of the table.
func victims(live map[string]liveUse, self *actor.PID, max int) []*actor.PID {
	over := len(live) - max
	if over <= 0 {
		return nil
	}
	var idle []liveUse
	for _, e := range live {
		if !e.busy && (self == nil || !e.pid.Equals(self)) {
			idle = append(idle, e)
		}
	}
	slices.SortFunc(idle, func(x, y liveUse) int { return x.lastUse.Compare(y.lastUse) })
	var out []*actor.PID
	for _, e := range idle[:min(over, len(idle))] {
		out = append(out, e.pid)
	}
	return out
}
