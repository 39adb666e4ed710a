package actors

import (
	"sort"
	"sync"
	"time"

	"github.com/meshweaver/supervisor/third_party/hollywood/actor"
)

// liveSet is the node's table of live app-servers, shared by the users'
// codex actors so that one starting past the MaxLive cap can ask the least
// recently used idle one to stop. It is the one piece of state shared
// between actors; its lock is never held across a send.
type liveSet struct {
	mu      sync.Mutex
	m       map[string]*liveEntry // by codex actor PID
	onCount func(n int)           // reports the count after each change
}

type liveEntry struct {
	pid     *actor.PID
	lastUse time.Time
	busy    bool
}

func newLiveSet() *liveSet { return &liveSet{m: make(map[string]*liveEntry)} }

// set records pid as live with its last use and whether it is busy.
func (l *liveSet) set(pid *actor.PID, lastUse time.Time, busy bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.m[pid.String()] = &liveEntry{pid: pid, lastUse: lastUse, busy: busy}
	if l.onCount != nil {
		l.onCount(len(l.m))
	}
}

func (l *liveSet) remove(pid *actor.PID) {
	l.mu.Lock()
	defer l.mu.Unlock()
	delete(l.m, pid.String())
	if l.onCount != nil {
		l.onCount(len(l.m))
	}
}

// victims picks the least recently used idle app-servers other than self,
// as many as the node is over max (none when it is not).
func (l *liveSet) victims(self *actor.PID, max int) []*actor.PID {
	l.mu.Lock()
	defer l.mu.Unlock()
	over := len(l.m) - max
	if over <= 0 {
		return nil
	}
	var idle []*liveEntry
	for _, e := range l.m {
		if !e.busy && (self == nil || !e.pid.Equals(self)) {
			idle = append(idle, e)
		}
	}
	sort.Slice(idle, func(i, j int) bool { return idle[i].lastUse.Before(idle[j].lastUse) })
	var out []*actor.PID
	for _, e := range idle[:min(over, len(idle))] {
		out = append(out, e.pid)
	}
	return out
}

// has reports whether pid's app-server is live.
func (l *liveSet) has(pid *actor.PID) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	_, ok := l.m[pid.String()]
	return ok
}
