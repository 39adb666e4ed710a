package actors

// The app-server actor's calls to its CLI: each sent without blocking
// Receive (codexrpc.Conn.Go), bounded by a timer of the actor's, retried
// when refused as overloaded, and answered in wire order with the
// notifications (callDone).

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/cenkalti/backoff/v5"

	"github.com/meshweaver/supervisor/codexproto"
	"github.com/meshweaver/supervisor/codexrpc"
)

// call is a call to the CLI in flight: the app-server actor's own, or one
// it makes for another actor (then answers it with appAnswer).
type call struct {
	seq     uint64
	gen     uint64
	id      int64 // the Conn's id, for Forget
	method  string
	params  any
	thread  string // the thread the call is about, if any
	attempt int
	waits   backoff.BackOff // after the first overloaded answer
	timer   *time.Timer
	probe   bool // a health call: its deadline passing means hung
	then    func(result json.RawMessage, err error)
}

// call sends a call to the current process; then runs in Receive with its
// answer, its error, or its deadline's passing (context.DeadlineExceeded).
// It returns the call's seq.
func (a *appServerActor) call(method string, params any, thread string, then func(json.RawMessage, error)) uint64 {
	a.calls.seq++
	k := &call{seq: a.calls.seq, gen: a.gen, method: method, params: params, thread: thread, attempt: 0,
		then: then}
	a.calls.inflight[k.seq] = k
	if lt, ok := a.threads.loaded[thread]; ok {
		lt.lastUse = time.Now()
		a.threads.loaded[thread] = lt
	}
	d := a.cfg.CallTimeout
	if method == codexproto.MethodThreadLoadedList {
		k.probe, d = true, a.healthTimeout()
	}
	engine, self, seq := a.engine, a.self, k.seq
	k.timer = time.AfterFunc(d, func() { engine.Send(self, callExpired{seq: seq}) })
	a.send(k)
	return seq
}

// send writes k to the process (again, after an overloaded answer).
func (a *appServerActor) send(k *call) {
	k.attempt++
	if a.proc == nil || k.gen != a.gen {
		a.answered(k, nil, fmt.Errorf("%s: %w", k.method, codexrpc.ErrClosed))
		return
	}
	engine, self, seq := a.engine, a.self, k.seq
	id, err := a.proc.Conn().Go(k.method, k.params, func(res json.RawMessage, err error) {
		engine.Send(self, callDone{seq: seq, result: res, err: err})
	})
	if err != nil {
		a.answered(k, nil, err)
		return
	}
	k.id = id
}

// answered settles call k, unless the server refused it as overloaded and
// it may be tried again (with the jittered exponential backoff of Conn.Call).
func (a *appServerActor) answered(k *call, res json.RawMessage, err error) {
	var we *codexrpc.WireError
	if errors.As(err, &we) && we.Code == codexrpc.CodeOverloaded && k.attempt < codexrpc.DefaultRetry.Attempts {
		if k.waits == nil {
			k.waits = codexrpc.DefaultRetry.NewBackOff()
		}
		d := k.waits.NextBackOff()
		engine, self, seq := a.engine, a.self, k.seq
		time.AfterFunc(d, func() { engine.Send(self, callRetry{seq: seq}) })
		return
	}
	delete(a.calls.inflight, k.seq)
	k.timer.Stop()
	if k.probe {
		a.health.probing = false
		if err == nil || errors.As(err, &we) {
			a.health.lastHeard = time.Now() // any answer shows the process reads and writes
		}
		return
	}
	if err != nil && k.thread != "" && !errors.As(err, &we) {
		// The connection ended under the call (the process died): a
		// limit it met reaches the thread's round before this answer.
		a.limitBeforeLoss(k.thread)
	}
	k.then(res, err)
	a.touch()
	a.holdCap()
}

// expired ends a call whose deadline passed. A health call's means the
// process is hung; any other's asks for a health call.
func (a *appServerActor) expired(seq uint64) {
	k := a.calls.inflight[seq]
	if k == nil {
		return
	}
	delete(a.calls.inflight, seq)
	if a.proc != nil && k.gen == a.gen {
		a.proc.Conn().Forget(k.id)
	}
	if k.probe {
		a.health.probing = false
		a.hung(k.gen)
		return
	}
	k.then(nil, fmt.Errorf("%s: %w", k.method, context.DeadlineExceeded))
	if k.gen == a.gen {
		a.probe()
	}
}

// healthTimeout bounds a health call: a live app-server answers one in
// milliseconds.
func (a *appServerActor) healthTimeout() time.Duration {
	return min(a.cfg.CallTimeout, 10*time.Second)
}

// probe makes a health call to the current process, unless one is in
// flight: a call that runs out of its deadline (healthTimeout) means the
// process is hung.
func (a *appServerActor) probe() {
	if !a.phase.live() || a.health.probing {
		return
	}
	a.health.probing = true
	a.call(codexproto.MethodThreadLoadedList, struct{}{}, "", nil)
}
