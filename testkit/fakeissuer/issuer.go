package fakeissuer

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"mime"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"time"
)

// Paths the fake serves, and the one the CLI reports to the user.
const (
	PathUserCode   = "/api/accounts/deviceauth/usercode"
	PathPoll       = "/api/accounts/deviceauth/token"
	PathOAuthToken = "/oauth/token"
	PathRevoke     = "/oauth/revoke"
	// PathVerification is not served: the CLI builds its verificationUrl
	// as <issuer>/codex/device.
	PathVerification = "/codex/device"
	// PathCallback is the redirect_uri the CLI sends to /oauth/token:
	// <issuer>/deviceauth/callback.
	PathCallback = "/deviceauth/callback"
)

// AuthClaim is the JWT claim that holds the ChatGPT fields.
const AuthClaim = "https://api.openai.com/auth"

// DefaultMaxBodyBytes bounds request bodies when Options.MaxBodyBytes is 0.
const DefaultMaxBodyBytes = 64 << 10

// ErrClosed is returned by the Wait methods once the Issuer is closed.
var ErrClosed = errors.New("fakeissuer: closed")

// Options configures an Issuer. The zero value is usable.
type Options struct {
	// Email, PlanType and UserID go into the tokens' claims (defaults
	// "user@example.test", "plus", "user-fake-0001").
	Email    string
	PlanType string
	UserID   string
	// Interval is the poll interval handed to the CLI, in seconds, as the
	// string the CLI wants (default "1").
	Interval string
	// DenyStatus answers polls of a denied device code (default 400). It
	// must not be 200, 403 or 404, which the CLI reads as approved or
	// pending.
	DenyStatus int
	// TokenTTL sets the tokens' exp claim (default one hour).
	TokenTTL time.Duration
	// MaxBodyBytes caps request bodies (default DefaultMaxBodyBytes);
	// larger ones get 413.
	MaxBodyBytes int64
}

// Kind classifies a recorded request.
type Kind string

// Request kinds.
const (
	KindUserCode   Kind = "usercode"
	KindPoll       Kind = "poll"
	KindOAuthToken Kind = "oauth-token"
	KindRevoke     Kind = "revoke"
	KindOther      Kind = "other"
)

// State is a device code's state.
type State string

// Device code states.
const (
	StatePending   State = "pending"
	StateApproved  State = "approved"
	StateDenied    State = "denied"
	StateExchanged State = "exchanged" // its authorization code was redeemed
)

// Request is one request the Issuer received, with the answer it got.
type Request struct {
	Seq      int
	Received time.Time
	Kind     Kind
	Method   string
	Path     string
	Header   http.Header
	Body     []byte
	// Form is the parsed form body (/oauth/token, /oauth/revoke when
	// form-encoded); JSON holds the top-level string fields of a JSON body.
	Form url.Values
	JSON map[string]string
	// DeviceAuthID and UserCode name the device code the request was
	// about: the one issued (usercode) or polled (poll).
	DeviceAuthID string
	UserCode     string
	// Status is what the fake answered.
	Status int
}

func (r Request) clone() Request {
	r.Header = r.Header.Clone()
	r.Body = append([]byte(nil), r.Body...)
	if r.Form != nil {
		f := make(url.Values, len(r.Form))
		for k, v := range r.Form {
			f[k] = append([]string(nil), v...)
		}
		r.Form = f
	}
	if r.JSON != nil {
		j := make(map[string]string, len(r.JSON))
		for k, v := range r.JSON {
			j[k] = v
		}
		r.JSON = j
	}
	return r
}

// DeviceCode is a device code the Issuer handed out.
type DeviceCode struct {
	DeviceAuthID string
	UserCode     string
	State        State
	Polls        int
	// AuthorizationCode, CodeVerifier and CodeChallenge are set once
	// approved.
	AuthorizationCode string
	CodeVerifier      string
	CodeChallenge     string
}

// Tokens is one answer of /oauth/token.
type Tokens struct {
	IDToken      string `json:"id_token"`
	AccessToken  string `json:"access_token"`
	RefreshToken string `json:"refresh_token"`
}

// Issuer is a running fake issuer. Its methods are safe for concurrent use.
type Issuer struct {
	// URL is the issuer's base, "http://127.0.0.1:<port>", for
	// CODEX_APP_SERVER_LOGIN_ISSUER.
	URL string

	opts   Options
	srv    *http.Server
	served chan struct{}

	mu       sync.Mutex
	closed   bool
	handlers sync.WaitGroup // Add only under mu while !closed
	conns    sync.WaitGroup // open connections (ConnState); Close waits for them
	changed  chan struct{}  // closed and replaced on every recorded event
	requests []Request
	codes    []*DeviceCode
	byAuthID map[string]*DeviceCode
	byAuth   map[string]*DeviceCode // authorization code -> device code
	refresh  map[string]bool        // refresh tokens handed out
	issued   []Tokens
	seq      int
}

// Start listens on 127.0.0.1 on a free port and serves until Close.
func Start(opts Options) (*Issuer, error) {
	if opts.Email == "" {
		opts.Email = "user@example.test"
	}
	if opts.PlanType == "" {
		opts.PlanType = "plus"
	}
	if opts.UserID == "" {
		opts.UserID = "user-fake-0001"
	}
	if opts.Interval == "" {
		opts.Interval = "1"
	}
	switch opts.DenyStatus {
	case 0:
		opts.DenyStatus = http.StatusBadRequest
	case http.StatusOK, http.StatusForbidden, http.StatusNotFound:
		return nil, fmt.Errorf("fakeissuer: DenyStatus %d would not end the login", opts.DenyStatus)
	}
	if opts.DenyStatus < 100 || opts.DenyStatus > 999 {
		return nil, fmt.Errorf("fakeissuer: DenyStatus %d is not an HTTP status", opts.DenyStatus)
	}
	if opts.TokenTTL <= 0 {
		opts.TokenTTL = time.Hour
	}
	if opts.MaxBodyBytes <= 0 {
		opts.MaxBodyBytes = DefaultMaxBodyBytes
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, fmt.Errorf("fakeissuer: listening: %w", err)
	}
	i := &Issuer{
		URL:      "http://" + ln.Addr().String(),
		opts:     opts,
		served:   make(chan struct{}),
		changed:  make(chan struct{}),
		byAuthID: make(map[string]*DeviceCode),
		byAuth:   make(map[string]*DeviceCode),
		refresh:  make(map[string]bool),
	}
	i.srv = &http.Server{
		Handler:           http.HandlerFunc(i.ServeHTTP),
		ReadHeaderTimeout: 10 * time.Second,
		// Every connection is counted until its goroutine is done with
		// it: net/http's Close does not wait for them (one that closed
		// after an unread body lingers 500 ms in closeWriteAndWait).
		ConnState: func(_ net.Conn, st http.ConnState) {
			switch st {
			case http.StateNew:
				i.conns.Add(1)
			case http.StateClosed, http.StateHijacked:
				i.conns.Done()
			}
		},
	}
	go func() {
		defer close(i.served)
		_ = i.srv.Serve(ln) // http.ErrServerClosed after Close
	}()
	return i, nil
}

// VerificationURL is the verificationUrl the CLI reports for this issuer.
func (i *Issuer) VerificationURL() string { return i.URL + PathVerification }

// RevokeURL is the URL for CODEX_REVOKE_TOKEN_URL_OVERRIDE.
func (i *Issuer) RevokeURL() string { return i.URL + PathRevoke }

// CallbackURL is the redirect_uri the CLI is expected to send.
func (i *Issuer) CallbackURL() string { return i.URL + PathCallback }

// Close stops the Issuer: it closes the listener and the connections and
// waits for every handler to return. It is idempotent.
func (i *Issuer) Close() {
	i.mu.Lock()
	if !i.closed {
		i.closed = true
		close(i.changed) // wake waiters; they see closed
	}
	i.mu.Unlock()
	_ = i.srv.Close()
	i.handlers.Wait()
	<-i.served
	i.conns.Wait()
}

// Approve approves every device code still pending and returns how many.
// Codes handed out later start pending.
func (i *Issuer) Approve() int { return i.decideAll(StateApproved) }

// Deny denies every device code still pending and returns how many.
func (i *Issuer) Deny() int { return i.decideAll(StateDenied) }

// ApproveCode approves the pending device code with that user code.
func (i *Issuer) ApproveCode(userCode string) bool { return i.decide(userCode, StateApproved) }

// DenyCode denies the pending device code with that user code.
func (i *Issuer) DenyCode(userCode string) bool { return i.decide(userCode, StateDenied) }

func (i *Issuer) decideAll(s State) int {
	i.mu.Lock()
	defer i.mu.Unlock()
	n := 0
	for _, c := range i.codes {
		if c.State == StatePending {
			i.decideLocked(c, s)
			n++
		}
	}
	if n > 0 {
		i.notifyLocked()
	}
	return n
}

func (i *Issuer) decide(userCode string, s State) bool {
	i.mu.Lock()
	defer i.mu.Unlock()
	for _, c := range i.codes {
		if c.UserCode == userCode && c.State == StatePending {
			i.decideLocked(c, s)
			i.notifyLocked()
			return true
		}
	}
	return false
}

func (i *Issuer) decideLocked(c *DeviceCode, s State) {
	c.State = s
	if s != StateApproved {
		return
	}
	c.AuthorizationCode = "authcode-" + randHex(12)
	c.CodeVerifier = randB64(32)
	c.CodeChallenge = challengeOf(c.CodeVerifier)
	i.byAuth[c.AuthorizationCode] = c
}

// Requests returns a copy of every request so far, in order.
func (i *Issuer) Requests() []Request {
	i.mu.Lock()
	defer i.mu.Unlock()
	out := make([]Request, len(i.requests))
	for k, r := range i.requests {
		out[k] = r.clone()
	}
	return out
}

// Count is the number of requests of kind k so far.
func (i *Issuer) Count(k Kind) int {
	i.mu.Lock()
	defer i.mu.Unlock()
	return i.countLocked(k)
}

func (i *Issuer) countLocked(k Kind) int {
	n := 0
	for _, r := range i.requests {
		if r.Kind == k {
			n++
		}
	}
	return n
}

// Codes returns a copy of every device code handed out, in order.
func (i *Issuer) Codes() []DeviceCode {
	i.mu.Lock()
	defer i.mu.Unlock()
	out := make([]DeviceCode, len(i.codes))
	for k, c := range i.codes {
		out[k] = *c
	}
	return out
}

// Issued returns every token set /oauth/token handed out, in order.
func (i *Issuer) Issued() []Tokens {
	i.mu.Lock()
	defer i.mu.Unlock()
	return append([]Tokens(nil), i.issued...)
}

// Wait blocks until at least n requests of kind k have arrived. It fails
// with ctx's error when ctx ends first and with ErrClosed once the Issuer
// is closed.
func (i *Issuer) Wait(ctx context.Context, k Kind, n int) error {
	return i.WaitFor(ctx, func(reqs []Request, _ []DeviceCode) bool {
		got := 0
		for _, r := range reqs {
			if r.Kind == k {
				got++
			}
		}
		return got >= n
	})
}

// WaitPolls blocks until at least n token polls have arrived, in all.
func (i *Issuer) WaitPolls(ctx context.Context, n int) error { return i.Wait(ctx, KindPoll, n) }

// WaitUserCodes blocks until at least n device codes were requested.
func (i *Issuer) WaitUserCodes(ctx context.Context, n int) error {
	return i.Wait(ctx, KindUserCode, n)
}

// WaitFor blocks until cond, called under the Issuer's lock with the
// requests and device codes so far (it must not keep or change them),
// returns true.
func (i *Issuer) WaitFor(ctx context.Context, cond func(reqs []Request, codes []DeviceCode) bool) error {
	for {
		i.mu.Lock()
		codes := make([]DeviceCode, len(i.codes))
		for k, c := range i.codes {
			codes[k] = *c
		}
		ok := cond(i.requests, codes)
		closed, ch, got := i.closed, i.changed, len(i.requests)
		i.mu.Unlock()
		switch {
		case ok:
			return nil
		case closed:
			return fmt.Errorf("fakeissuer: waiting (%d requests so far): %w", got, ErrClosed)
		}
		select {
		case <-ch:
		case <-ctx.Done():
			return fmt.Errorf("fakeissuer: waiting (%d requests so far): %w", got, ctx.Err())
		}
	}
}

func (i *Issuer) notifyLocked() {
	if !i.closed {
		close(i.changed)
		i.changed = make(chan struct{})
	}
}

// enter registers a running handler, or reports that the Issuer is closed.
func (i *Issuer) enter() bool {
	i.mu.Lock()
	defer i.mu.Unlock()
	if i.closed {
		return false
	}
	i.handlers.Add(1)
	return true
}

// ServeHTTP answers one request. Start serves it on a loopback listener;
// tests may also call it directly.
func (i *Issuer) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if !i.enter() {
		http.Error(w, "fakeissuer: closed", http.StatusServiceUnavailable)
		return
	}
	defer i.handlers.Done()

	req := Request{Received: time.Now(), Method: r.Method, Path: r.URL.Path, Header: r.Header.Clone(), Kind: kindOf(r.URL.Path)}
	var body []byte
	if r.Body != nil {
		b, err := io.ReadAll(http.MaxBytesReader(w, r.Body, i.opts.MaxBodyBytes))
		var tooLarge *http.MaxBytesError
		switch {
		case errors.As(err, &tooLarge):
			req.Status = http.StatusRequestEntityTooLarge
		case err != nil:
			req.Status = http.StatusBadRequest
		}
		body = b
	}
	req.Body = body
	ctype, _, _ := mime.ParseMediaType(r.Header.Get("Content-Type"))
	if ctype == "application/x-www-form-urlencoded" {
		if f, err := url.ParseQuery(string(body)); err == nil {
			req.Form = f
		}
	} else if len(body) > 0 {
		req.JSON = jsonStrings(body)
	}

	var answer any
	switch {
	case req.Status != 0:
		answer = errBody("bad request body")
	case req.Kind == KindOther:
		req.Status, answer = http.StatusNotFound, errBody("not found")
	case r.Method != http.MethodPost:
		req.Status, answer = http.StatusMethodNotAllowed, errBody("method not allowed")
	default:
		i.mu.Lock()
		switch req.Kind {
		case KindUserCode:
			req.Status, answer = i.userCodeLocked(&req)
		case KindPoll:
			req.Status, answer = i.pollLocked(&req)
		case KindOAuthToken:
			req.Status, answer = i.oauthTokenLocked(&req)
		case KindRevoke:
			req.Status, answer = http.StatusOK, struct{}{}
		}
		i.mu.Unlock()
	}
	i.record(req)

	data, err := json.Marshal(answer)
	if err != nil {
		data = []byte(`{}`)
	}
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Content-Length", strconv.Itoa(len(data)))
	w.WriteHeader(req.Status)
	_, _ = w.Write(data)
}

func (i *Issuer) record(req Request) {
	i.mu.Lock()
	defer i.mu.Unlock()
	i.seq++
	req.Seq = i.seq
	i.requests = append(i.requests, req)
	i.notifyLocked()
}

func kindOf(path string) Kind {
	switch path {
	case PathUserCode:
		return KindUserCode
	case PathPoll:
		return KindPoll
	case PathOAuthToken:
		return KindOAuthToken
	case PathRevoke:
		return KindRevoke
	}
	return KindOther
}

func (i *Issuer) userCodeLocked(req *Request) (int, any) {
	n := len(i.codes) + 1
	c := &DeviceCode{
		DeviceAuthID: fmt.Sprintf("deviceauth-%d-%s", n, randHex(6)),
		UserCode:     fmt.Sprintf("FAKE-%04d", n),
		State:        StatePending,
	}
	i.codes = append(i.codes, c)
	i.byAuthID[c.DeviceAuthID] = c
	req.DeviceAuthID, req.UserCode = c.DeviceAuthID, c.UserCode
	return http.StatusOK, map[string]string{
		"device_auth_id": c.DeviceAuthID,
		"user_code":      c.UserCode,
		"interval":       i.opts.Interval,
	}
}

func (i *Issuer) pollLocked(req *Request) (int, any) {
	id, code := req.JSON["device_auth_id"], req.JSON["user_code"]
	req.DeviceAuthID, req.UserCode = id, code
	c := i.byAuthID[id]
	if c == nil || c.UserCode != code {
		return http.StatusBadRequest, errBody("unknown device code")
	}
	c.Polls++
	switch c.State {
	case StatePending:
		return http.StatusForbidden, errBody("authorization_pending")
	case StateDenied:
		return i.opts.DenyStatus, errBody("access_denied")
	case StateExchanged:
		return http.StatusBadRequest, errBody("already used")
	}
	return http.StatusOK, map[string]string{
		"authorization_code": c.AuthorizationCode,
		"code_challenge":     c.CodeChallenge,
		"code_verifier":      c.CodeVerifier,
	}
}

func (i *Issuer) oauthTokenLocked(req *Request) (int, any) {
	f := req.Form
	if f == nil {
		return http.StatusBadRequest, oauthErr("invalid_request", "a form body is required")
	}
	switch f.Get("grant_type") {
	case "authorization_code":
		c := i.byAuth[f.Get("code")]
		switch {
		case c == nil || c.State != StateApproved:
			return http.StatusBadRequest, oauthErr("invalid_grant", "unknown or used authorization code")
		case f.Get("code_verifier") != c.CodeVerifier:
			return http.StatusBadRequest, oauthErr("invalid_grant", "code_verifier does not match")
		}
		c.State = StateExchanged
		delete(i.byAuth, c.AuthorizationCode)
	case "refresh_token":
		if !i.refresh[f.Get("refresh_token")] {
			return http.StatusUnauthorized, oauthErr("invalid_grant", "unknown refresh token")
		}
	default:
		return http.StatusBadRequest, oauthErr("unsupported_grant_type", "unsupported grant_type")
	}
	t := i.mintLocked()
	return http.StatusOK, t
}

func (i *Issuer) mintLocked() Tokens {
	now := time.Now()
	claims := map[string]any{
		"iss":   i.URL,
		"sub":   i.opts.UserID,
		"email": i.opts.Email,
		"iat":   now.Unix(),
		"exp":   now.Add(i.opts.TokenTTL).Unix(),
		AuthClaim: map[string]any{
			"chatgpt_plan_type": i.opts.PlanType,
			"chatgpt_user_id":   i.opts.UserID,
		},
	}
	t := Tokens{
		IDToken:      JWT(claims),
		AccessToken:  JWT(claims),
		RefreshToken: "rt-" + randHex(16),
	}
	i.refresh[t.RefreshToken] = true
	i.issued = append(i.issued, t)
	return t
}

// JWT encodes claims as an unsigned JWT: header {"alg":"none","typ":"JWT"},
// the claims, and a dummy non-empty signature part.
func JWT(claims map[string]any) string {
	enc := base64.RawURLEncoding
	payload, err := json.Marshal(claims)
	if err != nil {
		payload = []byte(`{}`)
	}
	return enc.EncodeToString([]byte(`{"alg":"none","typ":"JWT"}`)) + "." +
		enc.EncodeToString(payload) + "." + enc.EncodeToString([]byte("fake-signature"))
}

// Claims decodes a JWT's claims without verifying anything.
func Claims(token string) (map[string]any, error) {
	parts := strings.Split(token, ".")
	if len(parts) != 3 {
		return nil, fmt.Errorf("fakeissuer: a JWT has 3 parts, got %d", len(parts))
	}
	raw, err := base64.RawURLEncoding.DecodeString(strings.TrimRight(parts[1], "="))
	if err != nil {
		return nil, fmt.Errorf("fakeissuer: JWT payload: %w", err)
	}
	var claims map[string]any
	if err := json.Unmarshal(raw, &claims); err != nil {
		return nil, fmt.Errorf("fakeissuer: JWT payload: %w", err)
	}
	return claims, nil
}

// jsonStrings returns the top-level string fields of a JSON object, nil if
// body is not one.
func jsonStrings(body []byte) map[string]string {
	var raw map[string]json.RawMessage
	if json.Unmarshal(body, &raw) != nil {
		return nil
	}
	out := make(map[string]string, len(raw))
	for k, v := range raw {
		var s string
		if json.Unmarshal(v, &s) == nil {
			out[k] = s
		}
	}
	return out
}

func errBody(msg string) map[string]string { return map[string]string{"error": msg} }

func oauthErr(code, desc string) map[string]string {
	return map[string]string{"error": code, "error_description": desc}
}

func challengeOf(verifier string) string {
	sum := sha256.Sum256([]byte(verifier))
	return base64.RawURLEncoding.EncodeToString(sum[:])
}

func randHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

func randB64(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return base64.RawURLEncoding.EncodeToString(b)
}
