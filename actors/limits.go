package actors

// The app-server actor's view of its user's limits (package contain): the
// user's cgroup and home image, and what each running round has met of
// them.

import (
	"github.com/meshweaver/supervisor/contain"
	"github.com/meshweaver/supervisor/messages"
)

// limitMet tells a round that its user met a limit while it ran; it comes
// before the turn's end or the loss of the process.
type limitMet struct{ resource string }

// limitWatch is the user's cgroup and home image, the counts of the
// limits met when each running round's thread subscribed, and what was
// counted into the metrics. A plain value owned by the app-server actor.
type limitWatch struct {
	group *contain.Group // nil until the first start, or with no limits
	disk  *contain.Disk
	home  string
	base  map[string]contain.Hits // thread → the hits when its round began
	seen  contain.Hits            // what the metrics were told of
}

// begin notes where thread's round starts from.
func (w *limitWatch) begin(thread string) {
	if w.group == nil && w.disk.Size() == 0 {
		return
	}
	if w.base == nil {
		w.base = make(map[string]contain.Hits)
	}
	if w.group != nil {
		w.base[thread] = w.group.Hits()
	} else {
		w.base[thread] = contain.Hits{}
	}
}

// met says which limit (memory, pids, disk) the user met since thread's
// round began, "" for none, and forgets the round; new hits go to the
// metrics.
func (w *limitWatch) met(thread string, m *Metrics) string {
	base, ok := w.base[thread]
	if !ok {
		return ""
	}
	delete(w.base, thread)
	var now contain.Hits
	if w.group != nil {
		now = w.group.Hits()
		w.count(now, m)
	}
	switch {
	case now.OOMKills > base.OOMKills:
		return "memory"
	case now.Pids > base.Pids:
		return "pids"
	case w.disk.Size() > 0 && w.disk.Full(w.home):
		m.LimitHits.WithLabelValues("disk").Inc()
		return "disk"
	}
	return ""
}

// count adds to the metrics what the group met since it last did.
func (w *limitWatch) count(now contain.Hits, m *Metrics) {
	if d := now.OOMKills - w.seen.OOMKills; d > 0 {
		m.LimitHits.WithLabelValues("memory").Add(float64(d))
	}
	if d := now.Pids - w.seen.Pids; d > 0 {
		m.LimitHits.WithLabelValues("pids").Add(float64(d))
	}
	w.seen = now
}

// diskFloor is the limit of a round refused because the file system of
// the daemon's records has less than Config.MinFreeDisk free.
const diskFloor = "disk-floor"

// limitError is the verdict's classification of a met limit.
func limitError(resource string) (*messages.ErrorInfo, string) {
	info := &messages.ErrorInfo{Class: messages.ErrorResourceLimit, Resource: resource}
	switch resource {
	case "memory":
		return info, "the user's memory limit was met: a process of the round was killed"
	case "pids":
		return info, "the user's process limit was met: a fork was refused"
	case diskFloor:
		info.Resource = "disk"
		return info, "refused before it ran: the disk of the daemon's records is nearly full"
	default:
		return info, "the user's home is full: a write was refused"
	}
}

// usage answers an operator's UsageRequest from the user's cgroup and
// home image.
func (w *limitWatch) usage(user string, n *contain.Node) messages.UsageResponse {
	r := messages.UsageResponse{User: user}
	if w.group != nil {
		l := n.Limits()
		u, h := w.group.Usage(), w.group.Hits()
		r.Live = true
		r.MemoryBytes, r.MemoryPeak, r.MemoryMaxBytes = u.Memory, u.MemoryPeak, l.Memory
		r.Pids, r.PidsMax = u.Pids, l.Pids
		r.CPUSeconds, r.CPUMax = u.CPU.Seconds(), l.CPU
		r.OOMKills, r.PidsRefusals = h.OOMKills, h.Pids
	}
	if d, ok := w.disk.Usage(w.home); ok {
		r.DiskBytes, r.DiskMaxBytes = d.Used, d.Size
	}
	return r
}
