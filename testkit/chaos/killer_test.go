package chaos

import (
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"time"

	"github.com/meshweaver/supervisor/actors"
	"github.com/meshweaver/supervisor/procs"
	"github.com/meshweaver/supervisor/store"
)

// Kill modes: how the killer picks its moment.
const (
	modeRandom   = "random"   // any live app-server, after a random pause
	modeStream   = "stream"   // while the model streams an answer of one of its rounds
	modeApproval = "approval" // once the model asked for a command: approval, then the command
	modeOpen     = "open"     // right after a round is sent: acquire, thread/start or resume, turn/start
	modeInit     = "init"     // kill, then kill the replacement as soon as it appears: initialize
)

var killModes = []string{modeRandom, modeStream, modeApproval, modeOpen, modeInit}

// Phases: what was going on at a kill, from what the suite saw.
const (
	phaseInit     = "initialize"          // the app-server had not reported ready
	phaseStream   = "mid-stream"          // a round's answer or command request was streaming
	phaseApproval = "approval/command"    // the model had asked for a command; approval and run
	phaseResume   = "open: thread/resume" // a round sent, no model request yet, codex thread on record
	phaseStart    = "open: thread/start"  // the same without a codex thread on record
	phaseBetween  = "turn ending"         // after the last stream, before the verdict
	phaseIdle     = "idle"                // no round of the user in flight
)

var phaseRank = map[string]int{phaseInit: 6, phaseStream: 5, phaseApproval: 4, phaseResume: 3, phaseStart: 2, phaseBetween: 1, phaseIdle: 0}

// killRec is one SIGKILL of an app-server's process group.
type killRec struct {
	at       time.Time
	mode     string
	phase    string
	user     string
	pid      int
	epoch    int
	inFlight []string // rounds of the user in flight
	// cgroup is the killed process's own cgroup (under the user's, with
	// the daemon's default limits); left counts the processes still in it
	// 10 s after the kill: what outlived its app-server.
	cgroup string
	left   int
}

// ownCgroup is the cgroup a start of the daemon gave pid (its "p-…"
// folder: v1's pids hierarchy, or v2's), or "" where limits are off.
func ownCgroup(pid int) string {
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/cgroup", pid))
	if err != nil {
		return ""
	}
	for _, line := range strings.Split(string(data), "\n") {
		parts := strings.SplitN(line, ":", 3)
		if len(parts) != 3 || !strings.Contains(parts[2], "/p-") {
			continue
		}
		switch {
		case parts[1] == "pids":
			return filepath.Join("/sys/fs/cgroup/pids", parts[2])
		case parts[0] == "0" && parts[1] == "":
			return filepath.Join("/sys/fs/cgroup", parts[2])
		}
	}
	return ""
}

// cgroupLeft counts the processes still in dir (0 once it is removed).
func cgroupLeft(dir string) int {
	data, err := os.ReadFile(filepath.Join(dir, "cgroup.procs"))
	if err != nil {
		return 0
	}
	return len(strings.Fields(string(data)))
}

// daemonKillRec is one SIGKILL of the daemon.
type daemonKillRec struct {
	at          time.Time
	epoch       int
	inFlight    []string
	appServers  int           // app-servers the daemon had
	pdeathsig   int           // of those, gone within 2s of the kill without anyone's help
	pdeathAfter time.Duration // when the last of those was gone
	others      int           // other processes of the run alive at the kill (shell snapshots, commands)
	othersLeft  int           // of those, still alive once the app-servers were gone (before the next start)
	records     int           // appserver.pid records left behind
	recordsLeft int           // records still naming a dead process after the next start
	reapedLog   int           // app-servers the next daemon says it reaped
	survivors   []proc        // processes of the old daemon alive 10s after the next start
	restart     time.Duration // SIGKILL to the next daemon serving
}

// inBudget: the daemon marks a user unavailable for a minute after
// RestartLimit (5) deaths within a minute; the killer stays below that (at
// most budget kills per user per minute and daemon), so cool-downs are not
// what the run measures.
func (h *harness) inBudget(user string, need int) bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	n := 0
	for _, k := range h.kills {
		if k.user == user && int64(k.epoch) == h.epoch.Load() && time.Since(k.at) < time.Minute+5*time.Second {
			n++
		}
	}
	return n+need <= h.cfg.userBudget
}

// phaseLocked classifies the moment for user's app-server pid. h.mu held.
func (h *harness) phaseLocked(d *daemonProc, user string, ready bool, now time.Time) (string, []string) {
	if !ready {
		return phaseInit, h.inFlightLocked(d, user)
	}
	best := phaseIdle
	ids := h.inFlightLocked(d, user)
	for _, id := range ids {
		r := h.rounds[id]
		var ph string
		switch {
		case r.requests == 0 && h.threadKnown[r.thread]:
			ph = phaseResume
		case r.requests == 0:
			ph = phaseStart
		case now.Before(r.streamUntil):
			ph = phaseStream
		case !r.callAt.IsZero() && r.requests == 1:
			ph = phaseApproval
		default:
			ph = phaseBetween
		}
		if phaseRank[ph] > phaseRank[best] {
			best = ph
		}
	}
	return best, ids
}

// inFlightLocked lists user's rounds in flight on daemon d ("" = any user).
func (h *harness) inFlightLocked(d *daemonProc, user string) []string {
	var ids []string
	for _, r := range h.order {
		if r.d == d && (user == "" || r.user == user) && r.inFlight() {
			ids = append(ids, r.id)
		}
	}
	return ids
}

// serverOf finds user's app-server of the current daemon.
func (h *harness) serverOf(user string) (proc, bool) {
	for _, p := range appServers(h.d.pid, h.codex) {
		if userOfHome(h.homes, p.home) == user {
			return p, true
		}
	}
	return proc{}, false
}

// killServer SIGKILLs user's app-server (its process group) if it is
// still p, and books the kill.
func (h *harness) killServer(user string, p proc, mode string) bool {
	h.gate.RLock()
	defer h.gate.RUnlock()
	d := h.d
	if p.ppid != d.pid || !sameProc(p) {
		return false
	}
	_, ready := d.log.readyAt(p.pid)
	now := time.Now()
	h.mu.Lock()
	phase, ids := h.phaseLocked(d, user, ready, now)
	h.mu.Unlock()
	cgroup := ownCgroup(p.pid)
	if !killGroup(p) {
		return false
	}
	k := &killRec{at: now, mode: mode, phase: phase, user: user, pid: p.pid, epoch: d.epoch, inFlight: ids, cgroup: cgroup}
	if cgroup != "" {
		// Nothing the app-server started outlives it: the daemon empties
		// its cgroup when it sees the exit.
		poll(nil, 10*time.Second, func() bool { return cgroupLeft(cgroup) == 0 })
		k.left = cgroupLeft(cgroup)
	}
	h.mu.Lock()
	h.kills = append(h.kills, k)
	h.mu.Unlock()
	return true
}

// poll calls cond every 2ms until it reports true, stop closes, or d passes.
func poll(stop <-chan struct{}, d time.Duration, cond func() bool) bool {
	deadline := time.Now().Add(d)
	for time.Now().Before(deadline) {
		if cond() {
			return true
		}
		select {
		case <-stop:
			return false
		case <-time.After(2 * time.Millisecond):
		}
	}
	return false
}

func (h *harness) sleep(stop <-chan struct{}, d time.Duration) bool {
	select {
	case <-stop:
		return false
	case <-time.After(d):
		return true
	}
}

// killer SIGKILLs app-servers: kill i once plan[i] rounds were sent, in a
// mode picked at random.
func (h *harness) killer(stop <-chan struct{}, plan []int64) {
	for i, at := range plan {
		if !poll(stop, time.Hour, func() bool { return h.sent.Load() >= at }) {
			h.skip(len(plan)-i, "the rounds ended first")
			return
		}
		mode := killModes[h.rand(len(killModes))]
		if !h.killOnce(stop, mode) {
			// One retry in random mode, so that the count holds.
			if !h.killOnce(stop, modeRandom) {
				h.skip(1, "no target within budget ("+mode+")")
			}
		}
	}
}

func (h *harness) skip(n int, why string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	for range n {
		h.skipped = append(h.skipped, why)
	}
}

// target is a user with a live app-server, within the kill budget.
type target struct {
	user string
	p    proc
}

func (h *harness) targets(need int) []target {
	h.gate.RLock()
	defer h.gate.RUnlock()
	var out []target
	for _, p := range appServers(h.d.pid, h.codex) {
		u := userOfHome(h.homes, p.home)
		if u != "" && h.inBudget(u, need) {
			out = append(out, target{u, p})
		}
	}
	return out
}

// killOnce makes one kill (two in init mode) in mode; false if it found
// no moment within its patience.
func (h *harness) killOnce(stop <-chan struct{}, mode string) bool {
	const patience = 8 * time.Second
	switch mode {
	case modeRandom:
		if !h.sleep(stop, h.randDur(400*time.Millisecond)) {
			return false
		}
		var ts []target
		poll(stop, patience, func() bool { ts = h.targets(1); return len(ts) > 0 })
		if len(ts) == 0 {
			return false
		}
		t := ts[h.rand(len(ts))]
		return h.killServer(t.user, t.p, mode)

	case modeStream, modeApproval:
		var pick *roundRec
		ok := poll(stop, patience, func() bool {
			now := time.Now()
			h.mu.Lock()
			var cands []*roundRec
			for _, r := range h.order {
				if !r.inFlight() || int64(r.epoch) != h.epoch.Load() {
					continue
				}
				if mode == modeStream && now.After(r.streamFrom) && now.Add(50*time.Millisecond).Before(r.streamUntil) {
					cands = append(cands, r)
				}
				if mode == modeApproval && !r.callAt.IsZero() && now.After(r.callAt) && r.requests == 1 {
					cands = append(cands, r)
				}
			}
			h.mu.Unlock()
			for _, i := range h.perm(len(cands)) {
				if h.inBudget(cands[i].user, 1) {
					pick = cands[i]
					return true
				}
			}
			return false
		})
		if !ok {
			return false
		}
		if mode == modeStream {
			h.mu.Lock()
			left := time.Until(pick.streamUntil)
			h.mu.Unlock()
			h.sleep(stop, h.randDur(left*4/5))
		} else {
			h.sleep(stop, h.randDur(100*time.Millisecond))
		}
		p, ok := h.serverOfLocked(pick.user)
		return ok && h.killServer(pick.user, p, mode)

	case modeOpen:
		n0 := h.sent.Load()
		var pick *roundRec
		ok := poll(stop, patience, func() bool {
			if h.sent.Load() == n0 {
				return false
			}
			h.mu.Lock()
			r := h.order[len(h.order)-1]
			h.mu.Unlock()
			n0 = h.sent.Load()
			if !r.final && h.inBudget(r.user, 1) {
				if _, ok := h.serverOfLocked(r.user); ok {
					pick = r
					return true
				}
			}
			return false
		})
		if !ok {
			return false
		}
		h.sleep(stop, h.randDur(60*time.Millisecond))
		p, ok := h.serverOfLocked(pick.user)
		return ok && h.killServer(pick.user, p, mode)

	case modeInit:
		ts := h.targets(2)
		if len(ts) == 0 {
			return false
		}
		t := ts[h.rand(len(ts))]
		if !h.killServer(t.user, t.p, mode) {
			return false
		}
		var next proc
		if !poll(stop, patience, func() bool {
			p, ok := h.serverOfLocked(t.user)
			if ok && p.pid != t.p.pid {
				next = p
				return true
			}
			return false
		}) {
			return true // the first kill counts
		}
		h.sleep(stop, h.randDur(40*time.Millisecond))
		h.killServer(t.user, next, mode)
		return true
	}
	return false
}

// serverOfLocked is serverOf under the gate.
func (h *harness) serverOfLocked(user string) (proc, bool) {
	h.gate.RLock()
	defer h.gate.RUnlock()
	return h.serverOf(user)
}

func (h *harness) perm(n int) []int {
	h.rngMu.Lock()
	defer h.rngMu.Unlock()
	return h.rng.Perm(n)
}

// daemonKiller SIGKILLs the daemon once plan[i] rounds were sent (waiting
// a little for a round to be mid-stream), then starts the next one on the
// same homes and address.
func (h *harness) daemonKiller(stop <-chan struct{}, plan []int64) {
	for _, at := range plan {
		if !poll(stop, time.Hour, func() bool { return h.sent.Load() >= at }) {
			return
		}
		poll(stop, 3*time.Second, func() bool {
			now := time.Now()
			h.mu.Lock()
			defer h.mu.Unlock()
			for _, r := range h.order {
				if r.inFlight() && now.Before(r.streamUntil) {
					return true
				}
			}
			return false
		})
		if err := h.killDaemon(); err != nil {
			h.breakRun("%v", err)
			return
		}
	}
}

// killDaemon SIGKILLs the daemon by its PID and starts the next one. It
// records what happened to the old daemon's app-servers: gone by
// Pdeathsig at once, or reaped by the next daemon from the pid records.
func (h *harness) killDaemon() error {
	h.gate.Lock()
	defer h.gate.Unlock()
	old := h.d
	servers := appServers(old.pid, h.codex)
	all := runProcs(h.root, h.codex, h.marker, old.pid)
	var others []proc
	isServer := map[int]bool{}
	for _, p := range servers {
		isServer[p.pid] = true
	}
	for _, p := range all {
		if !isServer[p.pid] {
			others = append(others, p)
		}
	}
	rec := &daemonKillRec{epoch: old.epoch, appServers: len(servers), others: len(others)}
	h.mu.Lock()
	rec.inFlight = h.inFlightLocked(old, "")
	h.mu.Unlock()

	rec.at = time.Now()
	old.kill()

	left := waitGone(servers, 2*time.Second)
	rec.pdeathsig = len(servers) - len(left)
	rec.pdeathAfter = time.Since(rec.at)
	rec.othersLeft = len(waitGone(others, 0))
	rec.records = len(pidRecords(h.homes))
	// What the killed daemon was writing is either all there or not at all.
	h.checkFiles(false)

	h.d = nil
	d, err := startDaemon(h.bin, old.epoch+1, filepath.Join(h.logDir, fmt.Sprintf("daemon-%d.log", old.epoch+1)), h.homeDir, h.args)
	if err != nil {
		return fmt.Errorf("restarting the daemon after SIGKILL: %w", err)
	}
	rec.restart = time.Since(rec.at)
	h.d = d
	h.epoch.Store(int64(d.epoch))
	h.epochs = append(h.epochs, d)
	d.log.scan()
	d.log.mu.Lock()
	rec.reapedLog = d.log.reaped
	d.log.mu.Unlock()
	for _, path := range pidRecords(h.homes) {
		if pr, err := store.ReadProcRecord(path); err == nil && !procs.IsSame(procs.ID{PID: pr.PID, Start: pr.StartTime}) {
			rec.recordsLeft++
		}
	}
	rec.survivors = waitGone(append(left, others...), 10*time.Second)
	h.mu.Lock()
	h.daemonKills = append(h.daemonKills, rec)
	h.mu.Unlock()
	return nil
}

// pidRecords lists the appserver.pid records under homes.
func pidRecords(homes string) []string {
	recs, _ := filepath.Glob(filepath.Join(homes, "*", "meshweaver", actors.ProcRecordName))
	sort.Strings(recs)
	return recs
}

// fileExists is a stat that ignores errors other than absence.
func fileExists(path string) bool {
	_, err := os.Stat(path)
	return err == nil
}
