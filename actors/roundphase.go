package actors

import (
	"slices"
	"strconv"
)

// roundPhase is where a round is in its life. A round is in exactly one
// phase, it changes phase only through enter, and enter makes only the
// changes in the table (next):
//
//	from                  to                   when
//	new                   lookup               Started: the registry is asked for the thread
//	lookup                resume | fresh       the registry named a codex thread | none
//	resume                turnstart | fallback opened | refused (no rollout, invalid id)
//	fallback              fresh                the journal came, to seed a fresh thread
//	fresh                 turnstart            opened
//	turnstart             running              the turn has an id (turn/start's answer or turn/started)
//	running               interrupting         turn/interrupt asked
//	lookup … interrupting saving               the verdict is decided
//	saving                concluded            the writes answered (or CallTimeout passed, or the stop)
//
// No boolean of the round encodes a phase. What the round keeps beside
// its phase is data it reads in more than one phase: how its thread was
// had (openedBy), whether its turn began (the journal keeps the message),
// an interrupt owed until the turn has an id, the outbox's state toward
// the caller, the stall's times.
type roundPhase uint8

const (
	// phaseNew: spawned, not started.
	phaseNew roundPhase = iota
	// phaseLookup: the registry is asked for the mesh thread's codex thread.
	phaseLookup
	// phaseResume: the app-server actor is asked for the thread the
	// registry named (taken as it is when loaded with the same settings).
	phaseResume
	// phaseFallBack: the resume was refused (no rollout, invalid id): the
	// record is forgotten and the registry asked for the journal, to seed a
	// fresh thread.
	phaseFallBack
	// phaseFresh: the app-server actor is asked for a fresh thread; its
	// first turn is seeded with a transcript when there is one.
	phaseFresh
	// phaseTurnStart: turn/start is on its way and the turn has no id yet.
	phaseTurnStart
	// phaseRunning: the turn has an id (turn/start's answer, or
	// turn/started); its notifications become the caller's events.
	phaseRunning
	// phaseInterrupting: turn/interrupt was asked (by a caller, a stall,
	// an overflowing outbox, a lost caller); the turn's end is awaited.
	phaseInterrupting
	// phaseSaving: the verdict is decided; it waits for the registry's
	// answers to the round's writes and for turn/start's answer, if they
	// are owed (at most CallTimeout).
	phaseSaving
	// phaseConcluded: the thread is let go, the verdict sent, the round
	// stopping.
	phaseConcluded
)

func (p roundPhase) String() string {
	switch p {
	case phaseNew:
		return "new"
	case phaseLookup:
		return "lookup"
	case phaseResume:
		return "resume"
	case phaseFallBack:
		return "fallback"
	case phaseFresh:
		return "fresh"
	case phaseTurnStart:
		return "turnstart"
	case phaseRunning:
		return "running"
	case phaseInterrupting:
		return "interrupting"
	case phaseSaving:
		return "saving"
	case phaseConcluded:
		return "concluded"
	}
	return "phase(" + strconv.Itoa(int(p)) + ")"
}

// next is the table of a round's phase changes: the phases a round in p
// may enter. Every phase from lookup to interrupting may end in saving:
// a failed call, the app-server's loss, a stall, the daemon's stop or a
// panic decides the verdict wherever the round is.
func (p roundPhase) next() []roundPhase {
	switch p {
	case phaseNew:
		return []roundPhase{phaseLookup}
	case phaseLookup:
		return []roundPhase{phaseResume, phaseFresh, phaseSaving}
	case phaseResume:
		return []roundPhase{phaseTurnStart, phaseFallBack, phaseSaving}
	case phaseFallBack:
		return []roundPhase{phaseFresh, phaseSaving}
	case phaseFresh:
		return []roundPhase{phaseTurnStart, phaseSaving}
	case phaseTurnStart:
		return []roundPhase{phaseRunning, phaseSaving}
	case phaseRunning:
		return []roundPhase{phaseInterrupting, phaseSaving}
	case phaseInterrupting:
		return []roundPhase{phaseSaving}
	case phaseSaving:
		return []roundPhase{phaseConcluded}
	}
	return nil
}

// decided says the round's verdict is decided: what comes from the
// thread, the caller or the clock no longer changes it.
func (p roundPhase) decided() bool { return p == phaseSaving || p == phaseConcluded }

// enter moves the round to phase to when the table (next) allows it from
// the phase it is in. A change the table does not allow is a bug: it is
// logged and not made, and enter says false.
func (r *roundActor) enter(to roundPhase) bool {
	from := r.phase
	if !slices.Contains(from.next(), to) {
		r.log.Error("a round phase change not in the table; not made", "from", from, "to", to)
		return false
	}
	r.phase = to
	r.req.trace.entered(to, r.thread.by)
	r.log.Debug("round phase", "from", from, "to", to)
	if hook := r.cfg.roundPhases; hook != nil {
		hook(r.req.RoundID, to)
	}
	return true
}
