package mcpfront

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/http/httputil"
	"net/netip"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"time"

	"golang.org/x/time/rate"

	"github.com/meshweaver/supervisor/messages"
	"github.com/meshweaver/supervisor/peeruid"
)

// Key names what a front URL stands for: one mesh thread of one user.
type Key struct {
	User   string
	Thread string
}

// Defaults of Options.
const (
	// DefaultMaxBody bounds one request body the front forwards.
	DefaultMaxBody = 16 << 20
	// DefaultHeaderTimeout bounds the wait for an upstream answer's headers
	// (a tool call answered as plain JSON sends them only when it is done).
	DefaultHeaderTimeout = 10 * time.Minute
	// DefaultDialTimeout bounds one connection attempt to an upstream.
	DefaultDialTimeout = 10 * time.Second
)

// PathPrefix starts every front URL's path; the key's id follows it.
const PathPrefix = "/mcp/"

// Options configures a Front. The zero value is usable.
type Options struct {
	// Listen is the address to listen on (default 127.0.0.1:0).
	Listen string
	// MaxBody bounds a request body (DefaultMaxBody when zero); past it the
	// client gets 413.
	MaxBody int64
	// HeaderTimeout bounds the wait for an upstream answer's headers
	// (DefaultHeaderTimeout when zero); past it the client gets 504.
	HeaderTimeout time.Duration
	// DialTimeout bounds a connection attempt (DefaultDialTimeout when zero).
	DialTimeout time.Duration
	// Logger receives forwarding failures, never a token, an upstream
	// URL's path or query, or a raw user id (slog.Default when nil).
	Logger *slog.Logger
	// UserUID, when set, reports whether a uid is one the users' agents
	// run as (the daemon's uid range). A connection whose local peer is
	// such a uid may use only the URLs of the user SetOwner gave that
	// uid: another user's agent that learnt a URL gets 404, as for an
	// unknown one. Nil: no check (every app-server runs as the daemon's
	// uid, which cannot be told apart).
	UserUID func(uid uint32) bool
	// PeerUID finds the uid owning the client end of a connection, given
	// the connection's remote and local addresses (default: the kernel's,
	// peeruid.Lookup, within 250ms).
	PeerUID func(peer, local netip.AddrPort) (uint32, error)
	// Allow names the upstreams (HOST:PORT, as in the round's MCP URL,
	// the port written out) the front may reach although they are on this
	// host, loopback or link-local (dest.go); every other such address is
	// refused at connect time with 403. A proxy on this host must be
	// allowed too.
	Allow []string
	// HostAddrs lists this host's addresses (default: its interfaces').
	HostAddrs func() ([]netip.Addr, error)
	// CheckDestination, when set, replaces the rule of the addresses the
	// front refuses (dest.go): an error wrapping ErrDestination refuses
	// a. Tests whose upstreams are on loopback set one.
	CheckDestination func(a netip.Addr) error
	// Conns, when set, is where the front keeps the local ends of its
	// upstream connections, for the daemon's listeners (Conns.Guard);
	// nil: a set of its own.
	Conns *Conns
}

// Front is the loopback reverse proxy. Its methods are safe for concurrent
// use.
type Front struct {
	opts      Options
	log       *slog.Logger
	base      string // http://127.0.0.1:port
	srv       *http.Server
	transport *http.Transport
	guard     *destGuard
	out       *Conns          // the local ends of its upstream connections
	ctx       context.Context // every request's base; cancelled by Close
	cancel    context.CancelFunc
	served    chan struct{} // closed when Serve has returned
	inflight  sync.WaitGroup

	mu     sync.Mutex
	closed bool // Close began: no request starts any more
	byKey  map[Key]*route
	byID   map[string]*route
	owners map[string]uint32 // user → the uid its app-server runs as (SetOwner)
	warns  *rate.Limiter     // refusal log lines: 10 a minute
}

// connKey is the context key of a connection's connPeer.
type connKey struct{}

// connPeer finds a connection's peer uid once, on its first request (not
// in the accept loop, which ConnContext runs in).
type connPeer struct {
	peer, local netip.AddrPort
	once        sync.Once
	uid         uint32
	err         error
}

// route is one bound key: its id and, once set, where to forward and with
// which token.
type route struct {
	key      Key
	id       string
	upstream *url.URL // nil: not set, or cleared
	token    string
}

// New listens and starts serving. Close stops it.
func New(opts Options) (*Front, error) {
	if opts.Listen == "" {
		opts.Listen = "127.0.0.1:0"
	}
	if opts.MaxBody <= 0 {
		opts.MaxBody = DefaultMaxBody
	}
	if opts.HeaderTimeout <= 0 {
		opts.HeaderTimeout = DefaultHeaderTimeout
	}
	if opts.DialTimeout <= 0 {
		opts.DialTimeout = DefaultDialTimeout
	}
	if opts.Logger == nil {
		opts.Logger = slog.Default()
	}
	if opts.PeerUID == nil {
		opts.PeerUID = func(peer, local netip.AddrPort) (uint32, error) {
			return peeruid.UID(peer, local, 250*time.Millisecond)
		}
	}
	ln, err := net.Listen("tcp", opts.Listen)
	if err != nil {
		return nil, fmt.Errorf("mcpfront: listening on %s: %w", opts.Listen, err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	guard := newDestGuard(opts.Allow, opts.HostAddrs)
	guard.rule = opts.CheckDestination
	if opts.Conns == nil {
		opts.Conns = &Conns{}
	}
	f := &Front{
		guard: guard, out: opts.Conns,
		opts: opts, log: opts.Logger,
		base:   "http://" + ln.Addr().String(),
		ctx:    ctx,
		cancel: cancel,
		served: make(chan struct{}),
		byKey:  map[Key]*route{},
		byID:   map[string]*route{},
		owners: map[string]uint32{},
		warns:  rate.NewLimiter(rate.Every(6*time.Second), 10),
		transport: &http.Transport{
			Proxy: func(r *http.Request) (*url.URL, error) {
				u, err := http.ProxyFromEnvironment(r)
				if u != nil && err == nil { // the proxy connects: its destination is checked here
					if err := guard.checkName(r.Context(), hostPort(r.URL)); err != nil {
						return nil, err
					}
				}
				return u, err
			},
			ForceAttemptHTTP2:     true,
			MaxIdleConns:          64,
			MaxIdleConnsPerHost:   16,
			IdleConnTimeout:       90 * time.Second,
			TLSHandshakeTimeout:   opts.DialTimeout,
			ResponseHeaderTimeout: opts.HeaderTimeout,
		},
	}
	f.transport.DialContext = guard.dialer(opts.DialTimeout, f.out.add)
	f.srv = &http.Server{
		Handler:           http.HandlerFunc(f.serveHTTP),
		ReadHeaderTimeout: 10 * time.Second,
		BaseContext:       func(net.Listener) context.Context { return ctx },
		ConnContext: func(ctx context.Context, c net.Conn) context.Context {
			peer, local, ok := peeruid.Addrs(c)
			if !ok {
				return ctx
			}
			return context.WithValue(ctx, connKey{}, &connPeer{peer: peer, local: local})
		},
		ErrorLog: slog.NewLogLogger(opts.Logger.Handler(), slog.LevelDebug),
	}
	go func() {
		defer close(f.served)
		_ = f.srv.Serve(ln) // ends with ErrServerClosed at Close
	}()
	return f, nil
}

// Addr is the front's listening address (host:port).
func (f *Front) Addr() string { return strings.TrimPrefix(f.base, "http://") }

// Close stops listening, ends every request in flight (their upstream
// requests too) and waits for them.
func (f *Front) Close() error {
	f.mu.Lock()
	f.closed = true
	f.mu.Unlock()
	f.cancel()
	err := f.srv.Close()
	<-f.served
	f.inflight.Wait()
	f.transport.CloseIdleConnections()
	return err
}

// Bind returns the key's URL, minting its id on the first call: the same
// URL for the key until Forget. A bound key without an upstream answers
// 404 until Set.
func (f *Front) Bind(key Key) string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.base + PathPrefix + f.bindLocked(key).id
}

func (f *Front) bindLocked(key Key) *route {
	if r, ok := f.byKey[key]; ok {
		return r
	}
	r := &route{key: key, id: rand.Text()}
	f.byKey[key] = r
	f.byID[r.id] = r
	return r
}

// Set makes the key's URL forward to upstream (an http or https URL) with
// "Authorization: Bearer token" (none when token is empty), binding the
// key if it was not. The next request through the URL uses them; one
// already forwarded keeps what it had.
func (f *Front) Set(key Key, upstream, token string) error {
	u, err := parseUpstream(upstream, token)
	if err != nil {
		return err
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	r := f.bindLocked(key)
	r.upstream, r.token = u, token
	return nil
}

// Route is Set for a thread about to run a round, and returns the key's
// URL: if the key forwards to another upstream already, it is forgotten
// first and gets a new URL, so that what a client still sends through
// the old one (an MCP session's DELETE, with its Mcp-Session-Id) answers
// 404 instead of reaching the new upstream. A new token alone keeps the
// URL.
func (f *Front) Route(key Key, upstream, token string) (string, error) {
	u, err := parseUpstream(upstream, token)
	if err != nil {
		return "", err
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if r, ok := f.byKey[key]; ok && r.upstream != nil && r.upstream.String() != u.String() {
		delete(f.byKey, key)
		delete(f.byID, r.id)
	}
	r := f.bindLocked(key)
	r.upstream, r.token = u, token
	return f.base + PathPrefix + r.id, nil
}

// parseUpstream checks Set's upstream and token.
func parseUpstream(upstream, token string) (*url.URL, error) {
	u, err := url.Parse(upstream)
	if err != nil {
		// The parse error quotes the URL, which may hold a secret.
		return nil, errors.New("mcpfront: the upstream is not a valid URL")
	}
	if (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return nil, errors.New("mcpfront: the upstream must be an absolute http or https URL")
	}
	if strings.ContainsAny(token, "\r\n") {
		return nil, errors.New("mcpfront: the token holds a line break")
	}
	return u, nil
}

// Clear removes the key's upstream and token: its URL answers 404 until
// the next Set. The URL itself stays the key's.
func (f *Front) Clear(key Key) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if r, ok := f.byKey[key]; ok {
		r.upstream, r.token = nil, ""
	}
}

// Forget unbinds the key: its URL answers 404 for good, and a later Bind
// mints a new one. Call it when the thread that was given the URL is
// unloaded.
func (f *Front) Forget(key Key) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if r, ok := f.byKey[key]; ok {
		delete(f.byKey, key)
		delete(f.byID, r.id)
	}
}

// SetOwner records that user's app-server runs as uid: with
// Options.UserUID set, a connection from a uid of the users' range may use
// that user's URLs only if it is this uid.
func (f *Front) SetOwner(user string, uid uint32) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.owners[user] = uid
}

// allowed reports whether req's connection may use key's URL: always
// without Options.UserUID; else unless its peer is a uid of the users'
// range that is not key's user's (or its owner cannot be told).
func (f *Front) allowed(req *http.Request, key Key) bool {
	if f.opts.UserUID == nil {
		return true
	}
	cp, _ := req.Context().Value(connKey{}).(*connPeer)
	if cp == nil {
		return false
	}
	cp.once.Do(func() {
		cp.uid, cp.err = f.opts.PeerUID(cp.peer, cp.local)
	})
	if cp.err != nil {
		return false
	}
	if !f.opts.UserUID(cp.uid) {
		return true // the daemon's own uid, root, an account outside the range
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	owner, ok := f.owners[key.User]
	return ok && owner == cp.uid
}

// Len is the number of bound keys.
func (f *Front) Len() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return len(f.byKey)
}

// lookup returns the route of a request path and a copy of its target, or
// false.
func (f *Front) lookup(path string) (Key, url.URL, string, bool) {
	id, ok := strings.CutPrefix(path, PathPrefix)
	if !ok || id == "" || strings.Contains(id, "/") {
		return Key{}, url.URL{}, "", false
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	r, ok := f.byID[id]
	if !ok || r.upstream == nil {
		return Key{}, url.URL{}, "", false
	}
	return r.key, *r.upstream, r.token, true
}

func (f *Front) serveHTTP(w http.ResponseWriter, req *http.Request) {
	// Counted under the lock that Close takes before it waits, so that no
	// request starts while Close waits.
	f.mu.Lock()
	if f.closed {
		f.mu.Unlock()
		http.Error(w, "mcpfront: closing", http.StatusServiceUnavailable)
		return
	}
	f.inflight.Add(1)
	f.mu.Unlock()
	defer f.inflight.Done()
	key, target, token, ok := f.lookup(req.URL.Path)
	if ok && !f.allowed(req, key) {
		// Another user's agent with this user's URL: answered as an
		// unknown URL, so that it learns nothing.
		ok = false
		if f.warns.Allow() {
			f.log.Warn("mcp front: a URL used from another user's uid (or one whose owner cannot be told), refused", "user", userTag(key.User))
		}
	}
	if !ok {
		http.Error(w, "mcpfront: no such MCP endpoint", http.StatusNotFound)
		return
	}
	switch req.Method {
	case http.MethodPost, http.MethodGet, http.MethodDelete:
	default:
		w.Header().Set("Allow", "GET, POST, DELETE")
		http.Error(w, "mcpfront: method not allowed", http.StatusMethodNotAllowed)
		return
	}
	if req.ContentLength > f.opts.MaxBody {
		http.Error(w, "mcpfront: request body too large", http.StatusRequestEntityTooLarge)
		return
	}
	req.Body = http.MaxBytesReader(w, req.Body, f.opts.MaxBody)
	p := &httputil.ReverseProxy{
		Rewrite: func(pr *httputil.ProxyRequest) {
			u := target
			pr.Out.URL = &u
			pr.Out.Host = ""
			pr.Out.Header.Del("Authorization")
			if token != "" {
				pr.Out.Header.Set("Authorization", "Bearer "+token)
			}
		},
		Transport:     f.transport,
		FlushInterval: -1, // SSE answers go out as they come
		ErrorHandler: func(w http.ResponseWriter, r *http.Request, err error) {
			f.fail(w, r, key, target.Host, err)
		},
	}
	p.ServeHTTP(w, req)
}

// fail answers a request the front could not forward, and logs why with
// the user, the upstream's host and the cause, never the token nor the
// upstream's path or query.
func (f *Front) fail(w http.ResponseWriter, r *http.Request, key Key, host string, err error) {
	var tooLarge *http.MaxBytesError
	var ne net.Error
	status, msg := http.StatusBadGateway, "mcpfront: the MCP server is unreachable"
	switch {
	case errors.As(err, &tooLarge):
		status, msg = http.StatusRequestEntityTooLarge, "mcpfront: request body too large"
	case r.Context().Err() != nil:
		// The client went away (or the front is closing): nobody reads
		// the answer.
		f.log.Debug("mcp front: request ended by its client", "user", userTag(key.User))
		w.WriteHeader(http.StatusBadGateway)
		return
	case errors.Is(err, ErrDestination):
		status, msg = http.StatusForbidden, "mcpfront: the MCP server's address is refused: it is on this host, loopback or link-local; the operator may allow it with --allow-destination HOST:PORT"
	case errors.As(err, &ne) && ne.Timeout():
		status, msg = http.StatusGatewayTimeout, "mcpfront: the MCP server did not answer in time"
	}
	var ue *url.Error
	if errors.As(err, &ue) {
		err = ue.Err // its message quotes the URL
	}
	f.log.Warn("mcp front: forwarding failed", "user", userTag(key.User), "upstream", host, "status", status, "err", err)
	http.Error(w, msg+" ("+strconv.Itoa(status)+")", status)
}

// SetAllowed replaces Options.Allow (a reload): connections made from now
// on are checked against the new names.
func (f *Front) SetAllowed(allow []string) { f.guard.setAllowed(allow) }

// Outgoing reports whether ap is the local end of one of the front's
// upstream connections: the daemon's listeners refuse those, so that an
// allowed destination that leads back to the daemon does not make the
// front a deputy either.
func (f *Front) Outgoing(ap netip.AddrPort) bool { return f.out.Has(ap) }

// hostPort is u's host and port, the scheme's default port written out.
func hostPort(u *url.URL) string {
	if p := u.Port(); p != "" {
		return net.JoinHostPort(u.Hostname(), p)
	}
	if u.Scheme == "https" {
		return net.JoinHostPort(u.Hostname(), "443")
	}
	return net.JoinHostPort(u.Hostname(), "80")
}

// userTag names a user in logs as the daemon's actors do
// (messages.UserTag), never by the raw id.
func userTag(user string) string { return messages.UserTag(user) }
