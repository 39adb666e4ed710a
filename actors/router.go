package actors

import (
	"github.com/meshweaver/supervisor/codexrpc"
	"github.com/meshweaver/supervisor/third_party/hollywood/actor"
)

// threadRouter maps the app-server's threads to the rounds subscribed to
// them. Notifications of a thread nobody is subscribed to yet are kept, at
// most limit in all, for a subscription that may be on its way (an MCP
// server's startup status races the subscribe right after thread/start).
// A thread whose round left is not waited for: what it says later (an MCP
// server that took longer to fail than the round to end) belongs to that
// round, which is gone, and is never kept for the next one, until a round
// reopens the thread. It is a plain value owned by the app-server actor: no
// messages, no clock.
type threadRouter struct {
	limit  int
	subs   map[string]subscribe
	early  map[string][]*codexrpc.Notification
	nEarly int
	left   map[string]bool // threads whose round left, at most limit
	order  []string        // left's threads, oldest first
}

func newThreadRouter(limit int) threadRouter {
	return threadRouter{limit: limit, subs: make(map[string]subscribe), early: make(map[string][]*codexrpc.Notification), left: make(map[string]bool)}
}

// subscribe routes s.threadID to s.round from now on, and returns what the
// thread said before, to be delivered first.
func (r *threadRouter) subscribe(s subscribe) (kept []*codexrpc.Notification) {
	r.subs[s.threadID] = s
	r.reopen(s.threadID)
	kept = r.early[s.threadID]
	r.forgetEarly(s.threadID)
	return kept
}

// unsubscribe ends round's subscription to threadID (another round's is
// kept). What the thread says from now on belongs to no round: it is not
// kept for the next one.
func (r *threadRouter) unsubscribe(threadID string, round *actor.PID) {
	if s, ok := r.subs[threadID]; ok && s.round.Equals(round) {
		delete(r.subs, threadID)
		if !r.left[threadID] {
			if len(r.order) >= r.limit {
				delete(r.left, r.order[0])
				r.order = r.order[1:]
			}
			r.left[threadID] = true
			r.order = append(r.order, threadID)
		}
	}
	r.forgetEarly(threadID)
}

// reopen is a round opening threadID again (a resume): what the thread
// says from now on is kept for that round's subscription.
func (r *threadRouter) reopen(threadID string) {
	if !r.left[threadID] {
		return
	}
	delete(r.left, threadID)
	for i, id := range r.order {
		if id == threadID {
			r.order = append(r.order[:i], r.order[i+1:]...)
			break
		}
	}
}

func (r *threadRouter) forgetEarly(threadID string) {
	r.nEarly -= len(r.early[threadID])
	delete(r.early, threadID)
}

// route returns the round subscribed to threadID; with none, it keeps n
// (dropping everything kept when the limit is reached), unless the
// thread's round left.
func (r *threadRouter) route(threadID string, n *codexrpc.Notification) (round *actor.PID, ok bool) {
	if s, ok := r.subs[threadID]; ok {
		return s.round, true
	}
	if r.left[threadID] {
		return nil, false
	}
	if r.nEarly >= r.limit {
		r.early = make(map[string][]*codexrpc.Notification)
		r.nEarly = 0
	}
	r.early[threadID] = append(r.early[threadID], n)
	r.nEarly++
	return nil, false
}

// keeps reports whether what threadID says with no round subscribed is
// kept for a subscription on its way (not when the thread's round left).
func (r *threadRouter) keeps(threadID string) bool { return !r.left[threadID] }

// lookup is threadID's subscription.
func (r *threadRouter) lookup(threadID string) (subscribe, bool) {
	s, ok := r.subs[threadID]
	return s, ok
}

// rounds are the subscribed rounds, each once.
func (r *threadRouter) rounds() []*actor.PID {
	var out []*actor.PID
	seen := make(map[string]bool, len(r.subs))
	for _, s := range r.subs {
		if !seen[s.round.String()] {
			seen[s.round.String()] = true
			out = append(out, s.round)
		}
	}
	return out
}

// active is the number of subscriptions.
func (r *threadRouter) active() int { return len(r.subs) }

// reset forgets everything (the process is gone) and returns the rounds
// that were subscribed.
func (r *threadRouter) reset() (rounds []*actor.PID) {
	for _, s := range r.subs {
		rounds = append(rounds, s.round)
	}
	*r = newThreadRouter(r.limit)
	return rounds
}
