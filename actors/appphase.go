package actors

// The app-server actor's process lifecycle as a state machine: its phases,
// the table of the changes allowed between them, and the one function
// every change goes through.

import (
	"strconv"
	"time"
)

// appPhase is where the app-server actor's process lifecycle is. Phase is
// the only record of it: no boolean of the actor encodes a phase, and only
// Receive reads it or changes it, through enter. A phase's data is kept
// beside it: the process (proc, version) in key-check and ready, the key
// check waited for (keys.waiting) in key-check, the backoff's timer
// (restarts.delay) in backoff. Two things that look like phases are not:
// a health call (health.probing) may be in flight in key-check as in
// ready, and its deadline passing is a loss like a death; and an evicted
// process stops on a goroutine of its own while the actor, idle at once,
// may already start the next one (stopping is no phase of the actor's).
type appPhase uint8

const (
	// phaseIdle: no process, and none being started: never started,
	// stopped when idle, or gone with nothing waiting for it.
	phaseIdle appPhase = iota
	// phaseBackoff: a start waits out its backoff, as processes died
	// recently; commands queue.
	phaseBackoff
	// phaseStarting: a start's goroutine runs (reap, exec, initialize);
	// commands queue.
	phaseStarting
	// phaseKeyCheck: the process runs, and the queued commands wait for
	// the login actor's key check (at every start and before every
	// command).
	phaseKeyCheck
	// phaseReady: the process runs commands as they come.
	phaseReady
	// phaseCooling: the process died RestartLimit times within
	// RestartWindow; commands are refused as unavailable until the
	// cool-down ends.
	phaseCooling
	// phaseStopped: the actor stopped (Stopped): every process it started
	// is stopped, and nothing starts again.
	phaseStopped
	numPhases // the count of phases, for the tests
)

func (p appPhase) String() string {
	switch p {
	case phaseIdle:
		return "idle"
	case phaseBackoff:
		return "backoff"
	case phaseStarting:
		return "starting"
	case phaseKeyCheck:
		return "key-check"
	case phaseReady:
		return "ready"
	case phaseCooling:
		return "cooling"
	case phaseStopped:
		return "stopped"
	}
	return "phase(" + strconv.Itoa(int(p)) + ")"
}

// live reports a running process: the phases that hold one.
func (p appPhase) live() bool { return p == phaseKeyCheck || p == phaseReady }

// coming reports a start under way: commands queue for it.
func (p appPhase) coming() bool { return p == phaseBackoff || p == phaseStarting }

// phaseMoves is every change of phase allowed, with what makes it. enter
// refuses any other.
var phaseMoves = []struct {
	from, to appPhase
	why      string
}{
	{phaseIdle, phaseBackoff, "a command, after recent deaths"},
	{phaseIdle, phaseStarting, "a command"},
	{phaseBackoff, phaseStarting, "the backoff ended (startNow)"},
	{phaseStarting, phaseKeyCheck, "started; the login actor checks the key"},
	{phaseStarting, phaseReady, "started, with no login actor"},
	{phaseStarting, phaseIdle, "the start failed, or the process died starting"},
	{phaseStarting, phaseCooling, "the start failed, or the process died starting, at the restart limit"},
	{phaseKeyCheck, phaseReady, "the key check answered (keyChecked)"},
	{phaseKeyCheck, phaseIdle, "the process died, hung or was evicted (a start for the queue follows)"},
	{phaseKeyCheck, phaseCooling, "the process died or hung, at the restart limit"},
	{phaseReady, phaseKeyCheck, "a command: the key is checked before it runs"},
	{phaseReady, phaseIdle, "the process died, hung, or was stopped (idle, the node's cap, its home removed)"},
	{phaseReady, phaseCooling, "the process died or hung, at the restart limit"},
	{phaseCooling, phaseIdle, "the cool-down ended"},
	{phaseIdle, phaseStopped, "the actor stopped"},
	{phaseBackoff, phaseStopped, "the actor stopped"},
	{phaseStarting, phaseStopped, "the actor stopped"},
	{phaseKeyCheck, phaseStopped, "the actor stopped"},
	{phaseReady, phaseStopped, "the actor stopped"},
	{phaseCooling, phaseStopped, "the actor stopped"},
}

// phaseAllowed reports whether phaseMoves has from → to.
func phaseAllowed(from, to appPhase) bool {
	for _, m := range phaseMoves {
		if m.from == from && m.to == to {
			return true
		}
	}
	return false
}

// phaseChange is one change of an app-server actor's phase, as the test
// hook (hooks.onPhase) hears it; refused changes were not made.
type phaseChange struct {
	user     string
	from, to appPhase
	refused  bool
}

// enter changes the phase to to. Every change goes through here: one
// phaseMoves does not allow is logged as an error and not made. It
// reports whether the change was made.
func (a *appServerActor) enter(to appPhase) bool {
	from := a.phase
	ok := phaseAllowed(from, to)
	if hook := a.cfg.onPhase; hook != nil {
		hook(phaseChange{user: a.user, from: from, to: to, refused: !ok})
	}
	if !ok {
		a.log.Error("app-server phase change refused", "from", from, "to", to)
		return false
	}
	a.phase = to
	a.log.Debug("app-server phase", "from", from, "to", to)
	return true
}

// rest is where the end of a process (or of its start) leaves the
// lifecycle: cooling if that death began a cool-down, else idle.
func (a *appServerActor) rest() {
	if _, cooling := a.restarts.cooling(time.Now()); cooling {
		a.enter(phaseCooling)
		return
	}
	a.enter(phaseIdle)
}

// cooled says why no start may be tried now (a cool-down in force), or
// nil; a cool-down that ended leaves phaseCooling for phaseIdle.
func (a *appServerActor) cooled() error {
	err := a.coolingErr()
	if err == nil && a.phase == phaseCooling {
		a.enter(phaseIdle)
	}
	return err
}
