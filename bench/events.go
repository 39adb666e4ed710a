package bench

import (
	"context"
	"errors"
	"fmt"
	"net"
	"path/filepath"
	"time"

	"github.com/meshweaver/supervisor/actors"
	"github.com/meshweaver/supervisor/messages"
	"github.com/meshweaver/supervisor/third_party/hollywood/actor"
	"github.com/meshweaver/supervisor/third_party/hollywood/remote"
	"google.golang.org/protobuf/types/known/anypb"
)

// events: an app-server streams Events deltas in one turn (ServeFlood,
// run through Options.FloodLaunch); the rate at which they reach the
// caller over the remote (deltas produced per second, send to verdict)
// against hollywood's raw one-way throughput of the same envelope between
// two engines, in the same run.
func (r *run) events(ctx context.Context) (err error) {
	n := r.opts.Events
	r.progress("  %d deltas a round, %d rounds and raw bursts", n, r.opts.Floods)
	bin, args, env, err := r.opts.FloodLaunch(n)
	if err != nil {
		return err
	}
	cfg := actors.Config{
		Homes: filepath.Join(r.opts.Dir, "homes-events"), Workspace: r.workspace,
		CodexBin: bin, CodexArgs: args, CodexEnv: env,
	}
	d, c, err := r.startDaemon(cfg, quiet())
	if err != nil {
		return err
	}
	defer func() {
		c.Close()
		err = errors.Join(err, d.Stop())
	}()
	raw, err := newRawPair()
	if err != nil {
		return err
	}
	defer raw.stop()
	if _, err := daemonRound(ctx, c, "flood", "f", "go"); err != nil { // the app-server starts
		return err
	}
	var daemon, base []float64
	got := 0
	for range r.opts.Floods {
		err := r.inTurn(func() error {
			o, err := daemonRound(ctx, c, "flood", "f", "go")
			if err == nil {
				daemon = append(daemon, float64(n)/o.Verdict.Seconds())
				got = o.events
			}
			return err
		}, func() error {
			took, err := raw.burst(ctx, n)
			if err == nil {
				base = append(base, float64(n)/took.Seconds())
			}
			return err
		})
		if err != nil {
			return err
		}
	}
	r.rows = append(r.rows, row("deltas end to end over the remote", "events/s", daemon, "raw remote one-way", base,
		fmt.Sprintf("a round of %d deltas reached the caller as %d events (the outbox merges deltas past its burst)", n, got)))
	return nil
}

// rawPair is two engines with remotes on loopback: a sender and a sink
// that counts what arrives.
type rawPair struct {
	send, recv       *actor.Engine
	sendRem, recvRem *remote.Remote
	sink             *actor.PID
	counted          chan int
}

func freeAddr() (string, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", err
	}
	addr := ln.Addr().String()
	return addr, ln.Close()
}

func newRawPair() (*rawPair, error) {
	p := &rawPair{counted: make(chan int, 1)}
	var err error
	mk := func() (*actor.Engine, *remote.Remote, error) {
		addr, err := freeAddr()
		if err != nil {
			return nil, nil, err
		}
		rem := remote.New(addr, remote.NewConfig())
		e, err := actor.NewEngine(actor.NewEngineConfig().WithRemote(rem))
		return e, rem, err
	}
	if p.send, p.sendRem, err = mk(); err != nil {
		return nil, err
	}
	if p.recv, p.recvRem, err = mk(); err != nil {
		p.sendRem.Stop().Wait()
		return nil, err
	}
	var count, want int
	p.sink = p.recv.SpawnFunc(func(c *actor.Context) {
		switch m := c.Message().(type) {
		case int: // a burst of m begins
			count, want = 0, m
		case *anypb.Any:
			count++
			if count == want {
				p.counted <- count
			}
		}
	}, "sink")
	return p, nil
}

// burst sends n envelopes of one text event one way and times them until
// the sink has counted the last.
func (p *rawPair) burst(ctx context.Context, n int) (time.Duration, error) {
	env, err := messages.Encode(messages.RoundEvent{RoundID: "raw", Kind: messages.KindText, Text: "w "})
	if err != nil {
		return 0, err
	}
	p.recv.Send(p.sink, n)
	start := time.Now()
	remotePID := actor.NewPID(p.recvRem.Address(), p.sink.ID)
	for range n {
		p.send.Send(remotePID, env)
	}
	ctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	select {
	case <-p.counted:
		return time.Since(start), nil
	case <-ctx.Done():
		return 0, fmt.Errorf("raw remote burst: %w", ctx.Err())
	}
}

func (p *rawPair) stop() {
	<-p.recv.Poison(p.sink).Done()
	p.sendRem.Stop().Wait()
	p.recvRem.Stop().Wait()
}
