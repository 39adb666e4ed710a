package actors

import (
	"encoding/json"
	"sync/atomic"
	"time"

	"github.com/meshweaver/supervisor/actors/eventmap"
	"github.com/meshweaver/supervisor/codexproto"
	"github.com/meshweaver/supervisor/codexrpc"
	"github.com/meshweaver/supervisor/contain"
	"github.com/meshweaver/supervisor/messages"
	"github.com/meshweaver/supervisor/store"
	"github.com/meshweaver/supervisor/third_party/hollywood/actor"
)

// Messages between the daemon's own actors. They never cross the remote.

// roundRequest is a validated StartRound with its reply target resolved.
type roundRequest struct {
	messages.StartRound
	replyTo *actor.PID
	release func() // ends the hold on replyTo's address; nil when none
	// fenced is set by the root when it fences the user actor the round
	// went to (sendUser stamps it): the round log then ends the round
	// failed and retryable, not interrupted. Nil in tests that build
	// requests by hand.
	fenced *atomic.Bool
	trace  *roundTrace // its spans (roundtrace.go); nil when none are made
}

// settle is the end of an admitted round, called once with its verdict:
// the round leaves the drain gate and its caller's address is let go.
func (q roundRequest) settle(cfg *tree) {
	q.trace.finished(nil) // ended already when its verdict was known
	cfg.rounds.leave()
	if q.release != nil {
		q.release()
	}
}

// attachRequest is a validated AttachRound with its reply target
// resolved and a hold on its address (release; nil when none).
type attachRequest struct {
	messages.AttachRound
	replyTo *actor.PID
	release func()
}

// userIdle is a user actor's offer to be reaped: it has been idle for
// UserIdle after receiving received messages from the root. The root
// stops it only if it has sent it no more than that.
type userIdle struct {
	user     string
	pid      *actor.PID
	received uint64
}

// userGone tells the root that a user actor has stopped (and left the
// registry), so its id can be spawned again.
type userGone struct {
	user string
	pid  *actor.PID
}

// appServerLive tells the user actor whether its app-server has a live
// process (a user with one is not reaped).
type appServerLive struct{ live bool }

// userTick is the user actor's idle check.
type userTick struct{}

// openThread asks the app-server actor for a codex thread to run a round
// in: threadID resumed (or, loaded already with the same settings, taken
// as it is), or a fresh thread when threadID is "". It is answered with
// threadOpenResult, after which the thread's notifications are routed to
// round. A warm-up's has no round: warmReply gets WarmedUp.
type openThread struct {
	round       *actor.PID
	threadID    string
	settings    threadSettings
	autoApprove bool
	// secrets the process may be handed (an MCP bearer token): redacted
	// from its stderr from now on.
	secrets   []string
	warmReply *actor.PID
	trace     codexrpc.Trace // for thread/start or thread/resume; none for a warm-up
}

// threadOpenResult answers openThread. Unavailable marks an err that is
// about having a process at all (it could not start, or cools down).
type threadOpenResult struct {
	threadID    string
	resumed     bool
	warm        bool               // it was loaded with the same settings: no resume was made
	model       string             // the thread's model, as thread/start or thread/resume answered
	version     codexproto.Version // the CLI's version, for what turn/start may carry
	err         error
	unavailable bool
}

// appCall asks the app-server actor to make one call and answer to with
// appAnswer{tag}; thread names the thread it is about, if any. Pin keeps
// the process for to (a login session) until unpinClient.
type appCall struct {
	method string
	params any
	thread string
	to     *actor.PID
	tag    any
	pin    bool
	// setup is the login actor's credentials call: it runs at once on the
	// live process, ahead of the commands waiting for a key check; ifLive
	// runs it only if a process is live (else it is dropped, unanswered).
	setup, ifLive bool
	// secrets the call carries: redacted from the process's stderr.
	secrets []string
}

// appAnswer answers appCall: the call's result, or why there is none
// (unavailable: no process could be had for it).
type appAnswer struct {
	tag         any
	result      json.RawMessage
	err         error
	unavailable bool
}

// warmUp asks the app-server actor to start and, for a mesh thread that
// has a codex thread, load it with settings; reply gets WarmedUp.
type warmUp struct {
	key      string
	settings threadSettings
	secrets  []string
	reply    *actor.PID
}

// pinClient pins the process for a login session (see appCall.pin).
type pinClient struct{ pin *actor.PID }

// approvalAnswered tells a round that codex asked an approval for it and
// how the daemon answered (approved when the round has auto_approve).
type approvalAnswered struct {
	req      *codexrpc.Request
	approved bool
}

// appServerStarting tells a round that the user's app-server is being
// started for it.
type appServerStarting struct{}

// unpinClient ends a pin.
type unpinClient struct{ pin *actor.PID }

// loginIs tells the app-server actor which actor sets its home's
// credentials up.
type loginIs struct{ pid *actor.PID }

// keyCheck asks the login actor to make sure the home holds the stored
// credentials before the app-server actor runs what waits; keyChecked
// answers it (after the key was written, when it had to be).
type keyCheck struct{ seq uint64 }
type keyChecked struct{ seq uint64 }

// accountNote is an account/* notification, for the pinned login actor.
type accountNote struct{ note *codexrpc.Notification }

// codexStarted and codexStartFailed end a start attempt.
type codexStarted struct {
	gen     uint64
	proc    appProcess
	version codexproto.Version
	group   *contain.Group // the user's cgroup, when limits are on
}

type codexStartFailed struct {
	gen uint64
	err error
}

// codexExited reports the end of the process of generation gen.
type codexExited struct {
	gen uint64
	err error // *codexrpc.ExitError for a death, codexrpc.ErrClosed for a stop
}

// codexNotes is notifications from the process of generation gen, in
// wire order: those its reader read together (codexrpc.Options.
// OnNotifications), one hand-off for a flood of deltas.
type codexNotes struct {
	gen   uint64
	notes []*codexrpc.Notification
}

// codexServerRequest is a server request to answer (a Request); the answer
// is serverAnswer.
type codexServerRequest struct {
	gen   uint64
	req   *codexrpc.Request
	reply chan serverAnswer // buffered 1
}

type serverAnswer struct {
	result any
	err    error
	// wait, when set, is no answer: the request was put to a round's
	// caller, and the handler waits this much longer for the answer.
	wait time.Duration
}

// subscribe is a round's subscription to a thread's notifications.
type subscribe struct {
	threadID    string
	round       *actor.PID
	autoApprove bool
}

// unsubscribe ends a round's subscription. Keep leaves the thread loaded
// (its turn ended cleanly); otherwise the next round reloads it.
type unsubscribe struct {
	threadID string
	round    *actor.PID
	keep     bool
}

// roundNote is a notification delivered to the round actor outside a
// batch (one the thread said before the round subscribed); the round reads
// its header.
type roundNote struct{ note *codexrpc.Notification }

// roundNotes is routed notifications of one round, in wire order: a
// codexNotes batch's run of notifications for the same round, with their
// headers (heads[i] is notes[i]'s).
type roundNotes struct {
	notes []*codexrpc.Notification
	heads []eventmap.Header
}

// questionAsked surfaces a requestUserInput question to the round.
type questionAsked struct{ text string }

// codexLost tells a round its process died.
type codexLost struct{ err error }

// Registry actor messages.
type lookupThread struct {
	key   string
	round *actor.PID // gets threadLookup
	admit bool       // a round's (or a compaction's): refused when the user's budget is spent
}
type threadLookup struct {
	key      string
	threadID string
	turns    []store.Turn        // the journal, for a transcript: read only when threadID is empty
	damaged  bool                // the record or the journal was damaged or unreadable
	notSaved []string            // earlier writes retried now and failing still
	budget   *messages.ErrorInfo // the refusal of a user whose budget is spent (admit): nothing else is set
	lowDisk  string              // the refusal (admit) when the records' file system is below its floor: nothing else is set
}

// recordThread and appendTurns are answered with saved, to round.
type recordThread struct {
	key, threadID string
	round         *actor.PID
}
type forgetThread struct{ key string }
type appendTurns struct {
	key   string
	turns []store.Turn
	round *actor.PID
}

// saved answers a write to the registry: err is why what was not written
// (kept in memory and retried on the thread's next round).
type saved struct {
	what string
	err  error
}

// Round actor messages.
type roundDone struct {
	key     string
	roundID string
}
