package actors

import (
	"time"

	"github.com/meshweaver/supervisor/codexproto"
	"github.com/meshweaver/supervisor/messages"
)

// Events the tree broadcasts on its engine's event stream
// (actor.Engine.Subscribe), beside DrainStarted and the MCP servers'
// startup: what an operator's probe or a test waits for instead of a log
// line. They carry the user's id, not its log tag: the stream does not
// leave the process. An event is sent after the state it names holds.
type (
	// AppServerReady: a user's app-server answered initialize and serves.
	// Version is the CLI's, from initialize's userAgent; Tested is false
	// outside the tested range (codexproto.TestedRange), which the start
	// logs as a warning.
	AppServerReady struct {
		User    string
		PID     int
		Version codexproto.Version
		Tested  bool
	}
	// AppServerDied: a user's app-server exited without being asked to
	// (a crash, a kill, a failed health call).
	AppServerDied struct {
		User string
		PID  int
	}
	// AppServerEvicted: a user's idle app-server is being stopped, for
	// being idle past IdleTimeout (Why "idle for ...") or to make room
	// under MaxLive (Why "cap ..."). At is when the actor decided it.
	AppServerEvicted struct {
		User string
		PID  int
		Why  string
		At   time.Time
	}
	// LeftoverEnded: a process a previous daemon left running for this
	// user's home was ended before the user's start.
	LeftoverEnded struct{ User string }
	// UserReaped: the root stops an idle user actor.
	UserReaped struct{ User string }
	// CallerGone: every caller of a running round is gone; the round goes
	// on for CallerGrace in case one attaches again.
	CallerGone struct{ RoundID string }
	// CallerGraceOver: nobody attached within the grace; the round is
	// being interrupted.
	CallerGraceOver struct{ RoundID string }
	// RoundEnded: a round has its verdict (sent to its caller unless the
	// caller is gone).
	RoundEnded struct {
		User    string
		RoundID string
		Status  messages.VerdictStatus
	}
	// PanicContained: an actor of the tree panicked in Receive; the guard
	// recovered it (wire.go).
	PanicContained struct{ PID string }
	// APIKeyWritten: the login actor wrote the user's stored API key into
	// the app-server's home.
	APIKeyWritten struct{ User string }
)
