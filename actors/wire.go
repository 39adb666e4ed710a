package actors

import (
	"fmt"
	"log/slog"
	"runtime/debug"

	"github.com/meshweaver/supervisor/messages"
	"github.com/meshweaver/supervisor/third_party/hollywood/actor"
)

// deliver sends msg to pid: the struct as it is to a local actor, wrapped in
// the protobuf envelope to a remote one (hollywood's remote carries only
// protobuf; anything else sent there would crash the daemon).
func deliver(e *actor.Engine, pid *actor.PID, msg any, log *slog.Logger) {
	if pid == nil {
		return
	}
	if pid.Address == e.Address() {
		e.Send(pid, msg)
		return
	}
	env, err := messages.Encode(msg)
	if err != nil {
		log.Error("cannot encode a reply; dropped", "type", fmt.Sprintf("%T", msg), "err", err)
		return
	}
	e.Send(pid, env)
}

// toPID converts a wire PID to hollywood's, nil for none.
func toPID(p *messages.PID) *actor.PID {
	if p == nil || p.Address == "" || p.ID == "" {
		return nil
	}
	return actor.NewPID(p.Address, p.ID)
}

// guard recovers a panic in Receive so that hollywood's restart path is
// never taken (past MaxRestarts it kills the whole process, and a restart
// replays a round's start). onPanic decides what the actor does instead.
func guard(log *slog.Logger, onPanic func(c *actor.Context, v any)) actor.MiddlewareFunc {
	return func(next actor.ReceiveFunc) actor.ReceiveFunc {
		return func(c *actor.Context) {
			defer func() {
				if v := recover(); v != nil {
					log.Error("actor panicked; contained", "pid", HashUserInPID(c.PID().String()),
						"msg", fmt.Sprintf("%T", c.Message()), "panic", fmt.Sprint(v), "stack", string(debug.Stack()))
					c.Engine().BroadcastEvent(PanicContained{PID: c.PID().String()})
					if onPanic != nil {
						onPanic(c, v)
					}
				}
			}()
			next(c)
		}
	}
}

// spawnOpts are the options every actor of the tree gets: a deterministic
// id, the panic guard, and restarts that can never reach hollywood's
// process-killing limit.
func spawnOpts(id string, log *slog.Logger, onPanic func(*actor.Context, any)) []actor.OptFunc {
	return []actor.OptFunc{
		actor.WithID(id),
		// hollywood preallocates 1024 slots per inbox (about 27 KiB); the
		// ring grows on demand, and most of these actors are idle.
		actor.WithInboxSize(64),
		actor.WithMaxRestarts(-1),
		actor.WithMiddleware(guard(log, onPanic)),
	}
}
