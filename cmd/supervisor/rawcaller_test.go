package main

import (
	"crypto/tls"
	"errors"
	"fmt"

	"github.com/meshweaver/supervisor/messages"
	"github.com/meshweaver/supervisor/third_party/hollywood/actor"
	"github.com/meshweaver/supervisor/third_party/hollywood/remote"
)

// The commands call the daemon through package client. The tests below
// also need a caller that sends anything (undecodable, unauthorized,
// redirected messages) and sees every reply as it comes: remoteClient, a
// raw hollywood caller kept for them.

// remoteClient is a caller in its own engine: it sends to a daemon over the
// remote and receives the replies in an inbox.
type remoteClient struct {
	engine *actor.Engine
	rem    *remote.Remote
	pid    *actor.PID
	inbox  chan any
	target *actor.PID
}

func newRemoteClient(daemonAddr, listen string) (*remoteClient, error) {
	return newRemoteClientTLS(daemonAddr, listen, nil)
}

// newRemoteClientTLS is newRemoteClient over mutual TLS when tlsConf is set.
func newRemoteClientTLS(daemonAddr, listen string, tlsConf *tls.Config) (*remoteClient, error) {
	return newRemoteClientWith(daemonAddr, listen, tlsConf)
}

// newRemoteClientWith is newRemoteClientTLS with adjustments of the
// remote's config (limits, in tests).
func newRemoteClientWith(daemonAddr, listen string, tlsConf *tls.Config, with ...func(remote.Config) remote.Config) (*remoteClient, error) {
	if listen == "" {
		var err error
		if listen, err = freeLoopbackAddr(); err != nil {
			return nil, err
		}
	}
	// A caller takes answers on its outbound connection (a refusal the
	// daemon cannot dial back), as client.Dial's does.
	with = append([]func(remote.Config) remote.Config{func(rc remote.Config) remote.Config { return rc.WithAnswers() }}, with...)
	e, rem, err := newRemoteEngine(listen, tlsConf, with...)
	if err != nil {
		return nil, err
	}
	c := &remoteClient{engine: e, rem: rem, inbox: make(chan any, 1<<16), target: rootPID(daemonAddr)}
	c.pid = e.Spawn(func() actor.Receiver { return c }, "caller", actor.WithID("cli"))
	e.Subscribe(c.pid) // to learn that the daemon is unreachable
	return c, nil
}

// errUnreachable reports a daemon the caller cannot reach.
var errUnreachable = errors.New("the daemon is unreachable")

// Receive decodes what the daemon sends; it never blocks (the inbox is
// large, and a full one drops with a note rather than stalling the engine).
func (c *remoteClient) Receive(ctx *actor.Context) {
	var m any
	switch msg := ctx.Message().(type) {
	case actor.RemoteUnreachableEvent:
		if msg.ListenAddr != c.target.Address {
			return
		}
		m = fmt.Errorf("%w at %s", errUnreachable, msg.ListenAddr)
	default:
		_, known := messages.Name(msg)
		if !known && !messages.IsEnvelope(msg) {
			return // lifecycle messages and the engine's other events
		}
		var err error
		if m, err = messages.Unwrap(msg); err != nil {
			m = err
		}
	}
	select {
	case c.inbox <- m:
	default:
	}
}

func (c *remoteClient) send(msg any) error {
	env, err := messages.Encode(msg)
	if err != nil {
		return err
	}
	c.engine.SendWithSender(c.target, env, c.pid)
	return nil
}

func (c *remoteClient) close() {
	c.engine.Unsubscribe(c.pid)
	<-c.engine.Poison(c.pid).Done()
	c.rem.Stop().Wait()
}
