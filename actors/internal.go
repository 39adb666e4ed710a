package actors

import (
	"time"

	"github.com/meshweaver/supervisor/codexrpc"
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
}

// settle is the end of an admitted round, called once with its verdict:
// the round leaves the drain gate and its caller's address is let go.
func (q roundRequest) settle(cfg *Config) {
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

// userTick is the user actor's idle check.
type userTick struct{}

// Requests between local actors carry a buffered reply channel, written
// once: the asker can stop waiting when its context ends, which hollywood's
// Request cannot do.

// acquireClient asks the codex actor for a ready client.
// A round's or a login call's acquire takes a lease: the process is not
// idle (not evicted) until the lease is given back by subscribe or
// releaseClient.
type acquireClient struct {
	lease bool
	// pin keeps the process for a login session: account notifications and
	// the process's death go to pin until unpinClient.
	pin   *actor.PID
	reply chan clientReady // buffered 1
	// secrets the process may be handed (an MCP bearer token): redacted
	// from its stderr from now on.
	secrets []string
	// starting, if set, is told appServerStarting when the request has to
	// wait for a process to start.
	starting *actor.PID
}

// approvalAnswered tells a round that codex asked an approval for it and
// how the daemon answered (approved when the round has auto_approve).
type approvalAnswered struct {
	req      *codexrpc.Request
	approved bool
}

// appServerStarting tells an acquireClient's starting PID that the user's
// app-server is being started for it.
type appServerStarting struct{}

// releaseClient gives back a lease taken on the process of generation gen.
type releaseClient struct{ gen uint64 }

// threadOpened tells a round which codex thread it runs in, before any of
// the thread's notifications can reach it.
type threadOpened struct {
	threadID    string
	resumed     bool
	fellBack    bool
	contextLost bool
}

// unpinClient ends a pin.
type unpinClient struct{ pin *actor.PID }

// applyAPIKey asks the codex actor to write the stored API key into the
// home now, when a process runs (otherwise the next start does).
type applyAPIKey struct{}

// accountNote is an account/* notification, for the pinned login actor.
type accountNote struct{ note *codexrpc.Notification }

// clientReady answers acquireClient.
type clientReady struct {
	client *codexrpc.Client
	gen    uint64
	err    error
}

// codexStarted and codexStartFailed end a start attempt.
type codexStarted struct {
	gen    uint64
	proc   *codexrpc.Process
	client *codexrpc.Client
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

// codexNote is a notification from the process of generation gen.
type codexNote struct {
	gen  uint64
	note *codexrpc.Notification
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

// subscribe routes a thread's notifications to a round.
type subscribe struct {
	gen         uint64 // the process the round's calls go to
	threadID    string
	round       *actor.PID
	autoApprove bool
}

type unsubscribe struct {
	threadID string
	round    *actor.PID
}

// reopenThread tells the codex actor that a round is about to resume
// threadID: what the thread says from now on is kept for the round's
// subscription, even if an earlier round left it.
type reopenThread struct{ threadID string }

// roundNote is a routed notification, delivered to the round actor.
type roundNote struct{ note *codexrpc.Notification }

// questionAsked surfaces a requestUserInput question to the round.
type questionAsked struct{ text string }

// checkHealth asks the codex actor to make sure the process of generation
// gen still answers: a call to it ran out of time.
type checkHealth struct{ gen uint64 }

// healthChecked is the end of a health call to the process of generation
// gen: nil when it answered.
type healthChecked struct {
	gen uint64
	err error
}

// codexLost tells a round its process died.
type codexLost struct{ err error }

// Registry actor messages.
type lookupThread struct {
	key   string
	reply chan threadLookup // buffered 1
}
type threadLookup struct {
	threadID string
	turns    []store.Turn // the journal, for a transcript
	damaged  bool         // the record or the journal was damaged or unreadable
	notSaved []string     // earlier writes retried now and failing still
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
type turnStarted struct {
	turnID string
}
type driverFailed struct {
	status messages.VerdictStatus
	err    error
}
type roundDone struct {
	key     string
	roundID string
}
