package remote

import (
	"context"
	"crypto/tls"
	"fmt"
	"log/slog"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/time/rate"

	"github.com/meshweaver/supervisor/third_party/hollywood/actor"
	"storj.io/drpc/drpcmanager"
	"storj.io/drpc/drpcmux"
	"storj.io/drpc/drpcserver"
	"storj.io/drpc/drpcwire"
)

// Config holds the remote configuration.
type Config struct {
	TLSConfig *tls.Config
	BuffSize  int
	// Wg        *sync.WaitGroup

	// meshweaver patch: the edge's hooks and limits (edge.go).
	gate     Gate
	onRefuse func(Refusal)
	identify func(*tls.ConnectionState) string
	limits   Limits
	wrap     func(net.Listener) net.Listener
	answers  bool
	// dialVerify, when set, gives each TLS dial its own VerifyConnection
	// by the address dialled (WithDialVerify).
	dialVerify func(addr string) func(tls.ConnectionState) error
}

// NewConfig returns a new default remote configuration.
func NewConfig() Config {
	return Config{}
}

// WithTLS sets the TLS config of the remote which will set
// the transport of the Remote to TLS.
func (c Config) WithTLS(tlsconf *tls.Config) Config {
	c.TLSConfig = tlsconf
	return c
}

// Set the buffer size of the stream reader.
// meshweaver patch: it is the frame limit (Limits.MaxFrame, which wins when
// both are set); if neither is provided it is DefaultMaxFrame, not drpc's
// 4 MiB.
func (c Config) WithBufferSize(size int) Config {
	c.BuffSize = size
	return c
}

type Remote struct {
	addr   string
	engine *actor.Engine
	config Config
	limits Limits // meshweaver patch: config.limits with defaults
	state  atomic.Uint32

	// meshweaver patch: everything Start starts (the server, its
	// connections, the writers) ends when ctx is cancelled and is counted in
	// wg, which Stop returns.
	ctx    context.Context
	cancel context.CancelFunc
	wg     sync.WaitGroup

	mu       sync.Mutex
	stopping bool
	draining chan struct{} // closed by Stop: writers send their queue and end
	// unreachableLog samples the writers' "giving up" lines: the first 10,
	// then one a second.
	unreachableLog rate.Sometimes
	writers        map[string]*streamWriter
	holds          map[string]int
	ln             *listener
}

const (
	stateInvalid uint32 = iota
	stateInitialized
	stateRunning
	stateStopped
)

// New creates a new "Remote" object given a Config.
func New(addr string, config Config) *Remote {
	r := &Remote{
		addr:    addr,
		config:  config,
		limits:  config.limits,
		writers: map[string]*streamWriter{},
		holds:   map[string]int{},

		unreachableLog: rate.Sometimes{First: 10, Interval: time.Second},
	}
	// meshweaver patch: WithBufferSize stays the frame limit when no
	// Limits.MaxFrame is given.
	if r.limits.MaxFrame <= 0 && config.BuffSize > 0 {
		r.limits.MaxFrame = config.BuffSize
	}
	r.limits = r.limits.withDefaults()
	r.ctx, r.cancel = context.WithCancel(context.Background())
	r.draining = make(chan struct{})
	r.state.Store(stateInitialized)
	return r
}

func (r *Remote) Start(e *actor.Engine) error {
	if r.state.Load() != stateInitialized {
		return fmt.Errorf("remote already started")
	}
	r.state.Store(stateRunning)
	r.engine = e
	// meshweaver patch: TLS is layered by the listener (listener.go).
	inner, err := net.Listen("tcp", r.addr)
	if err != nil {
		return fmt.Errorf("remote failed to listen: %w", err)
	}
	if r.config.wrap != nil { // meshweaver patch: WithListener
		inner = r.config.wrap(inner)
	}
	ln := newListener(inner, r)
	r.ln = ln
	slog.Debug("listening", "addr", r.addr, "tls", r.config.TLSConfig != nil)
	mux := drpcmux.New()
	err = DRPCRegisterRemote(mux, newStreamReader(r))
	if err != nil {
		_ = inner.Close()
		return fmt.Errorf("failed to register remote: %w", err)
	}
	s := drpcserver.NewWithOptions(mux, drpcserver.Options{
		Manager: drpcmanager.Options{
			Reader: drpcwire.ReaderOptions{
				MaximumBufferSize: r.limits.MaxFrame,
			},
		},
		// meshweaver patch: per-connection errors are the peer's business,
		// reported as refusals where they matter.
		Log: func(err error) { slog.Debug("drpcserver connection", "err", err) },
	})

	r.wg.Add(1)
	go func() {
		defer r.wg.Done()
		// Serve returns when ctx is cancelled, after its connections ended.
		err := s.Serve(r.ctx, ln)
		if err != nil {
			slog.Error("drpcserver", "err", err)
		} else {
			slog.Debug("drpcserver stopped")
		}
	}()
	return nil
}

// Stop will stop the remote from listening.
// meshweaver patch: and close every outbound stream; the WaitGroup returned
// is done when every goroutine the remote started has ended. Sends after
// Stop are dropped.
func (r *Remote) Stop() *sync.WaitGroup {
	if r.state.Load() != stateRunning {
		slog.Warn("remote already stopped but stop was called", "state", r.state.Load())
		return &sync.WaitGroup{} // return empty waitgroup so the caller can still wait without panicking.
	}
	r.state.Store(stateStopped)
	// meshweaver patch: what was queued before Stop (a daemon's last
	// verdicts) still goes out. New sends are dropped from here on; each
	// writer sends its queue and ends, and only then, or after
	// Limits.StopFlush, are the server and what is left cut.
	r.mu.Lock()
	r.stopping = true
	writers := make([]*streamWriter, 0, len(r.writers))
	for _, w := range r.writers {
		writers = append(writers, w)
	}
	r.mu.Unlock()
	close(r.draining)
	r.wg.Add(1)
	go func() {
		defer r.wg.Done()
		t := time.NewTimer(r.limits.StopFlush)
		defer t.Stop()
		for _, w := range writers {
			select {
			case <-w.done:
			case <-t.C:
				r.cancel()
				return
			}
		}
		r.cancel()
	}()
	return &r.wg
}

// Send sends the given message to the process with the given pid over the network.
// Optional a "Sender PID" can be given to inform the receiving process who sent the
// message.
// meshweaver patch: it queues on the address's writer, which dials on its
// own goroutine; it never blocks on the network.
func (r *Remote) Send(pid *actor.PID, msg any, sender *actor.PID) {
	d := &streamDeliver{target: pid, sender: sender, msg: msg}
	for {
		w := r.writerFor(pid.Address)
		if w == nil {
			slog.Debug("remote stopped: message dropped", "target", pid)
			return
		}
		if w.send(d) {
			return
		}
		r.forget(w) // it closed meanwhile: a new one takes d
	}
}

// Hold keeps the outbound stream to addr alive (keepalives, no idle close)
// until the returned release is called; holds nest (counted).
// meshweaver patch: new (issue 9); a hold outlives the writer it found, so
// a stream redialled after a loss is held too.
func (r *Remote) Hold(addr string) (release func()) {
	r.mu.Lock()
	r.holds[addr]++
	w := r.writers[addr]
	r.mu.Unlock()
	if w != nil {
		w.poke()
	}
	var once sync.Once
	return func() {
		once.Do(func() {
			r.mu.Lock()
			if r.holds[addr]--; r.holds[addr] <= 0 {
				delete(r.holds, addr)
			}
			w := r.writers[addr]
			r.mu.Unlock()
			if w != nil {
				w.poke()
			}
		})
	}
}

// refuse reports one refusal.
func (r *Remote) refuse(rf Refusal) {
	if r.config.onRefuse != nil {
		r.config.onRefuse(rf)
		return
	}
	slog.Debug("remote refused input", "peer", rf.Peer.Addr, "identity", rf.Peer.Identity, "reason", rf.Reason, "err", rf.Err)
}

func (r *Remote) identify(cs *tls.ConnectionState) string {
	if r.config.identify != nil {
		return r.config.identify(cs)
	}
	return DefaultIdentify(cs)
}

// identifyChecked is identify for a connection's peer, refusing (under
// DefaultIdentify) a certificate CheckIdentity refuses; a custom Identify
// is its own judge.
func (r *Remote) identifyChecked(cs *tls.ConnectionState) (string, error) {
	if r.config.identify == nil {
		if err := CheckIdentity(cs); err != nil {
			return "", err
		}
	}
	return r.identify(cs), nil
}

// Address returns the listen address of the remote.
func (r *Remote) Address() string {
	return r.addr
}

func init() {
	RegisterType(&actor.PID{})
}
