package mcpfront

import (
	"bufio"
	"context"
	"errors"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"os"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/meshweaver/supervisor/testkit/syncbuf"
)

// waitTimeout bounds every wait on something the front or an upstream does.
const waitTimeout = 20 * time.Second

// newFront starts a front whose log goes to the returned buffer, closed
// when the test ends.
func newFront(t testing.TB, opts Options) (*Front, *syncbuf.Buffer) {
	t.Helper()
	logs := &syncbuf.Buffer{}
	opts.Logger = slog.New(slog.NewTextHandler(logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	if opts.CheckDestination == nil {
		opts.CheckDestination = anyDestination // the upstreams here are on loopback
	}
	f, err := New(opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := f.Close(); err != nil {
			t.Errorf("close: %v", err)
		}
	})
	return f, logs
}

// anyDestination lets the front reach every address: the tests'
// upstreams are on loopback, which the daemon's front refuses (dest.go,
// whose own tests run with the real rule).
func anyDestination(netip.Addr) error { return nil }

// seen is what an upstream got.
type seen struct {
	method, path, query, auth, session, body string
}

// recorder is an upstream that records each request and answers with the
// request's session header and a JSON body.
func recorder(t testing.TB) (*httptest.Server, func() []seen) {
	t.Helper()
	var mu sync.Mutex
	var got []seen
	s := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		mu.Lock()
		got = append(got, seen{r.Method, r.URL.Path, r.URL.RawQuery, r.Header.Get("Authorization"), r.Header.Get("Mcp-Session-Id"), string(b)})
		mu.Unlock()
		w.Header().Set("Mcp-Session-Id", "sess-from-upstream")
		w.Header().Set("Content-Type", "application/json")
		_, _ = io.WriteString(w, `{"jsonrpc":"2.0","id":1,"result":{}}`)
	}))
	t.Cleanup(s.Close)
	return s, func() []seen {
		mu.Lock()
		defer mu.Unlock()
		return append([]seen(nil), got...)
	}
}

func do(t testing.TB, method, url, auth, body string) (*http.Response, string) {
	t.Helper()
	req, err := http.NewRequest(method, url, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	if auth != "" {
		req.Header.Set("Authorization", auth)
	}
	req.Header.Set("Mcp-Session-Id", "sess-from-client")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, url, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp, string(b)
}

func TestForwardsWithTheCurrentToken(t *testing.T) {
	f, logs := newFront(t, Options{})
	up, got := recorder(t)
	key := Key{User: "ann", Thread: "t1"}
	u := f.Bind(key)
	if again := f.Bind(key); again != u {
		t.Fatalf("Bind gave %q then %q, want one URL", u, again)
	}
	if err := f.Set(key, up.URL+"/mesh/mcp?x=1", "tok-one"); err != nil {
		t.Fatal(err)
	}
	resp, body := do(t, http.MethodPost, u, "Bearer forged", `{"jsonrpc":"2.0","id":1,"method":"initialize"}`)
	if resp.StatusCode != 200 || resp.Header.Get("Mcp-Session-Id") != "sess-from-upstream" || !strings.Contains(body, `"result"`) {
		t.Fatalf("got %d %v %q, want the upstream's answer and session header", resp.StatusCode, resp.Header, body)
	}
	// The token changes between two requests: the next one carries it,
	// through the same URL.
	if err := f.Set(key, up.URL+"/mesh/mcp?x=1", "tok-two"); err != nil {
		t.Fatal(err)
	}
	do(t, http.MethodGet, u, "", "")
	do(t, http.MethodDelete, u, "", "")
	if err := f.Set(key, up.URL+"/mesh/mcp", ""); err != nil {
		t.Fatal(err)
	}
	do(t, http.MethodPost, u, "Bearer forged", `{}`)
	want := []seen{
		{http.MethodPost, "/mesh/mcp", "x=1", "Bearer tok-one", "sess-from-client", `{"jsonrpc":"2.0","id":1,"method":"initialize"}`},
		{http.MethodGet, "/mesh/mcp", "x=1", "Bearer tok-two", "sess-from-client", ""},
		{http.MethodDelete, "/mesh/mcp", "x=1", "Bearer tok-two", "sess-from-client", ""},
		{http.MethodPost, "/mesh/mcp", "", "", "sess-from-client", `{}`},
	}
	g := got()
	if len(g) != len(want) {
		t.Fatalf("upstream got %d requests %+v, want %d", len(g), g, len(want))
	}
	for i := range want {
		if g[i] != want[i] {
			t.Errorf("request %d: got %+v, want %+v", i, g[i], want[i])
		}
	}
	if strings.Contains(logs.String(), "tok-") {
		t.Errorf("a token is in the log: %s", logs.String())
	}
}

// Route keeps the key's URL for a new token, and mints a new one for a
// new upstream: the old URL is 404, so what a client still sends through
// it (a session's DELETE) never reaches the new upstream.
func TestRouteNewUpstreamNewURL(t *testing.T) {
	f, _ := newFront(t, Options{})
	up1, got1 := recorder(t)
	up2, got2 := recorder(t)
	key := Key{User: "ann", Thread: "t1"}
	u1, err := f.Route(key, up1.URL+"/mcp", "tok-one")
	if err != nil || u1 != f.Bind(key) {
		t.Fatalf("Route = %q, %v; want the key's URL %q", u1, err, f.Bind(key))
	}
	if again, err := f.Route(key, up1.URL+"/mcp", "tok-two"); err != nil || again != u1 {
		t.Errorf("Route with a new token = %q, %v; want the same URL %q", again, err, u1)
	}
	u2, err := f.Route(key, up2.URL+"/mcp", "tok-two")
	if err != nil || u2 == u1 || u2 != f.Bind(key) {
		t.Fatalf("Route to a new upstream = %q, %v; want a new URL (not %q)", u2, err, u1)
	}
	if resp, _ := do(t, http.MethodDelete, u1, "", ""); resp.StatusCode != http.StatusNotFound {
		t.Errorf("the old URL answered %d, want 404", resp.StatusCode)
	}
	if resp, _ := do(t, http.MethodPost, u2, "", "{}"); resp.StatusCode != 200 {
		t.Errorf("the new URL answered %d, want 200", resp.StatusCode)
	}
	if g1, g2 := got1(), got2(); len(g1) != 0 || len(g2) != 1 || g2[0].auth != "Bearer tok-two" {
		t.Errorf("upstreams got %+v and %+v, want nothing and one request with the token", g1, g2)
	}
	if _, err := f.Route(key, "ftp://x", "t"); err == nil {
		t.Errorf("Route took an ftp upstream")
	}
}

func TestUnknownClearedAndForgottenAre404(t *testing.T) {
	f, _ := newFront(t, Options{})
	up, got := recorder(t)
	key := Key{User: "ann", Thread: "t1"}
	u := f.Bind(key)
	check := func(what, url string) {
		t.Helper()
		if resp, _ := do(t, http.MethodPost, url, "", "{}"); resp.StatusCode != http.StatusNotFound {
			t.Errorf("%s: status %d, want 404", what, resp.StatusCode)
		}
	}
	base := "http://" + f.Addr()
	check("bound, never set", u)
	check("unknown id", base+PathPrefix+"AAAAAAAAAAAAAAAAAAAAAAAAAA")
	check("no id", base+PathPrefix)
	check("root", base+"/")
	check("id with a suffix", u+"/x")
	if err := f.Set(key, up.URL, "tok"); err != nil {
		t.Fatal(err)
	}
	if resp, _ := do(t, http.MethodPost, u, "", "{}"); resp.StatusCode != 200 {
		t.Fatalf("set: status %d, want 200", resp.StatusCode)
	}
	f.Clear(key)
	check("cleared", u)
	if f.Bind(key) != u {
		t.Errorf("a cleared key lost its URL")
	}
	f.Forget(key)
	check("forgotten", u)
	if f.Len() != 0 {
		t.Errorf("Len %d after Forget, want 0", f.Len())
	}
	if again := f.Bind(key); again == u {
		t.Errorf("a forgotten key got its old URL back")
	}
	other := f.Bind(Key{User: "bob", Thread: "t1"})
	if other == u || len(strings.TrimPrefix(other, base+PathPrefix)) < 26 {
		t.Errorf("URL %q: want a fresh, long id", other)
	}
	if n := len(got()); n != 1 {
		t.Errorf("upstream got %d requests, want 1", n)
	}
}

func TestSetRefusesBadInput(t *testing.T) {
	f, _ := newFront(t, Options{})
	key := Key{User: "ann", Thread: "t"}
	for _, tc := range []struct{ url, token string }{
		{"", "t"},
		{"/relative", "t"},
		{"ftp://host/x", "t"},
		{"http://", "t"},
		{"http://h\x7f/x?secret=1", "t"},
		{"http://host/x", "a\r\nX-Evil: 1"},
	} {
		err := f.Set(key, tc.url, tc.token)
		if err == nil {
			t.Errorf("Set(%q, %q) succeeded, want an error", tc.url, tc.token)
			continue
		}
		if strings.Contains(err.Error(), "secret") || strings.Contains(err.Error(), "Evil") {
			t.Errorf("error %q quotes its input", err)
		}
	}
	if resp, _ := do(t, http.MethodPost, f.Bind(key), "", "{}"); resp.StatusCode != http.StatusNotFound {
		t.Errorf("after refused sets: status %d, want 404", resp.StatusCode)
	}
}

func TestMethodsOtherThanMCPsAreRefused(t *testing.T) {
	f, _ := newFront(t, Options{})
	up, got := recorder(t)
	key := Key{User: "ann", Thread: "t"}
	if err := f.Set(key, up.URL, "tok"); err != nil {
		t.Fatal(err)
	}
	for _, m := range []string{http.MethodPut, http.MethodPatch, http.MethodOptions} {
		if resp, _ := do(t, m, f.Bind(key), "", "{}"); resp.StatusCode != http.StatusMethodNotAllowed {
			t.Errorf("%s: status %d, want 405", m, resp.StatusCode)
		}
	}
	if n := len(got()); n != 0 {
		t.Errorf("upstream got %d requests, want none", n)
	}
}

// TestSSEIsStreamed: an SSE answer's first event reaches the client while
// the upstream still holds the rest back.
func TestSSEIsStreamed(t *testing.T) {
	f, _ := newFront(t, Options{})
	release := make(chan struct{})
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/event-stream")
		_, _ = io.WriteString(w, "event: message\ndata: {\"first\":true}\n\n")
		w.(http.Flusher).Flush()
		select {
		case <-release:
		case <-r.Context().Done():
			return
		}
		_, _ = io.WriteString(w, "event: message\ndata: {\"second\":true}\n\n")
	}))
	defer up.Close()
	defer close(release)
	key := Key{User: "ann", Thread: "t"}
	if err := f.Set(key, up.URL, "tok"); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), waitTimeout)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, http.MethodPost, f.Bind(key), strings.NewReader("{}"))
	req.Header.Set("Accept", "text/event-stream")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if ct := resp.Header.Get("Content-Type"); ct != "text/event-stream" {
		t.Fatalf("content type %q", ct)
	}
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		if strings.Contains(sc.Text(), `"first"`) {
			return // got it while the upstream waits: streamed
		}
	}
	t.Fatalf("the first event never came: %v", sc.Err())
}

func TestHugeBodiesAreRefused(t *testing.T) {
	f, _ := newFront(t, Options{MaxBody: 1024})
	up, got := recorder(t)
	key := Key{User: "ann", Thread: "t"}
	if err := f.Set(key, up.URL, "tok"); err != nil {
		t.Fatal(err)
	}
	big := strings.Repeat("x", 4096)
	if resp, _ := do(t, http.MethodPost, f.Bind(key), "", big); resp.StatusCode != http.StatusRequestEntityTooLarge {
		t.Errorf("declared length: status %d, want 413", resp.StatusCode)
	}
	// No Content-Length (chunked): the cap holds while the body streams.
	req, _ := http.NewRequest(http.MethodPost, f.Bind(key), io.MultiReader(strings.NewReader(big)))
	req.ContentLength = -1
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusRequestEntityTooLarge {
		t.Errorf("chunked: status %d, want 413", resp.StatusCode)
	}
	for _, s := range got() {
		if len(s.body) > 1024 {
			t.Errorf("upstream got a body of %d bytes", len(s.body))
		}
	}
	if resp, _ := do(t, http.MethodPost, f.Bind(key), "", "{}"); resp.StatusCode != 200 {
		t.Errorf("a small body after: status %d, want 200", resp.StatusCode)
	}
}

func TestUpstreamDownIsAClear502(t *testing.T) {
	f, logs := newFront(t, Options{})
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close() // nothing listens there now
	key := Key{User: "user-secret-id", Thread: "t"}
	if err := f.Set(key, "http://"+addr+"/secret-path?k=secret-query", "tok-secret"); err != nil {
		t.Fatal(err)
	}
	resp, body := do(t, http.MethodPost, f.Bind(key), "", "{}")
	if resp.StatusCode != http.StatusBadGateway || !strings.Contains(body, "unreachable") {
		t.Errorf("got %d %q, want 502 naming the unreachable server", resp.StatusCode, body)
	}
	for _, s := range []string{body, logs.String()} {
		if strings.Contains(s, "secret") {
			t.Errorf("the token, the upstream's path or the raw user id leaked: %q", s)
		}
	}
	if !strings.Contains(logs.String(), "forwarding failed") || !strings.Contains(logs.String(), "user="+userTag(key.User)) {
		t.Errorf("no log of the failure naming the user's tag: %s", logs.String())
	}
}

// TestSlowUpstream: an upstream that never answers gets a 504 after the
// header timeout, without holding up another key's requests, and a
// client that gives up ends the upstream request.
func TestSlowUpstream(t *testing.T) {
	f, _ := newFront(t, Options{HeaderTimeout: 300 * time.Millisecond})
	gone, arrived := make(chan struct{}, 4), make(chan struct{}, 4)
	stuck := make(chan struct{})
	slow := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.ReadAll(r.Body) // then the server notices a closed connection
		arrived <- struct{}{}
		select {
		case <-r.Context().Done():
			gone <- struct{}{}
		case <-stuck:
		}
	}))
	defer slow.Close()
	defer close(stuck)
	fast, _ := recorder(t)
	slowKey, fastKey := Key{User: "ann", Thread: "slow"}, Key{User: "ann", Thread: "fast"}
	if err := f.Set(slowKey, slow.URL, "tok"); err != nil {
		t.Fatal(err)
	}
	if err := f.Set(fastKey, fast.URL, "tok"); err != nil {
		t.Fatal(err)
	}
	done := make(chan int, 1)
	go func() {
		resp, err := http.Post(f.Bind(slowKey), "application/json", strings.NewReader("{}"))
		if err != nil {
			done <- -1
			return
		}
		resp.Body.Close()
		done <- resp.StatusCode
	}()
	if resp, _ := do(t, http.MethodPost, f.Bind(fastKey), "", "{}"); resp.StatusCode != 200 {
		t.Errorf("fast key behind a slow one: status %d", resp.StatusCode)
	}
	select {
	case code := <-done:
		if code != http.StatusGatewayTimeout {
			t.Errorf("slow upstream: status %d, want 504", code)
		}
	case <-time.After(waitTimeout):
		t.Fatal("the slow request never ended")
	}
	select {
	case <-gone:
	case <-time.After(waitTimeout):
		t.Fatal("the upstream request outlived the timeout")
	}

	// A client that gives up: the upstream sees its request end.
	ctx, cancel := context.WithCancel(context.Background())
	req, _ := http.NewRequestWithContext(ctx, http.MethodPost, f.Bind(slowKey), strings.NewReader("{}"))
	errc := make(chan error, 1)
	go func() {
		resp, err := http.DefaultClient.Do(req)
		if err == nil {
			resp.Body.Close()
		}
		errc <- err
	}()
	<-arrived // the first request's: it reached the upstream before it was gone
	select {
	case <-arrived:
	case <-time.After(waitTimeout):
		t.Fatal("the request never reached the upstream")
	}
	cancel()
	if err := <-errc; err == nil {
		t.Errorf("a cancelled request succeeded")
	}
	select {
	case <-gone:
	case <-time.After(waitTimeout):
		t.Fatal("the upstream request outlived its client")
	}
}

// TestCloseEndsStreams: Close returns while an SSE stream is open, ending
// it (goleak checks that nothing is left).
func TestCloseEndsStreams(t *testing.T) {
	logs := &syncbuf.Buffer{}
	f, err := New(Options{Logger: slog.New(slog.NewTextHandler(logs, nil)), CheckDestination: anyDestination})
	if err != nil {
		t.Fatal(err)
	}
	opened := make(chan struct{})
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/event-stream")
		w.WriteHeader(200)
		w.(http.Flusher).Flush()
		close(opened)
		<-r.Context().Done()
	}))
	defer up.Close()
	key := Key{User: "ann", Thread: "t"}
	if err := f.Set(key, up.URL, "tok"); err != nil {
		t.Fatal(err)
	}
	resp, err := http.Get(f.Bind(key))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	<-opened
	closed := make(chan error, 1)
	go func() { closed <- f.Close() }()
	select {
	case <-closed:
	case <-time.After(waitTimeout):
		t.Fatal("Close hung on an open stream")
	}
	if _, err := io.ReadAll(resp.Body); err == nil {
		// An ended stream reads to EOF or fails; either way it ends.
		t.Log("stream ended with EOF")
	}
}

// TestConcurrentSetsAndRequests: tokens change while requests flow (the
// race detector watches); every request carries one of the tokens set,
// never a mix or none.
func TestConcurrentSetsAndRequests(t *testing.T) {
	f, _ := newFront(t, Options{})
	up, got := recorder(t)
	key := Key{User: "ann", Thread: "t"}
	if err := f.Set(key, up.URL, "tok-0"); err != nil {
		t.Fatal(err)
	}
	u := f.Bind(key)
	stop := make(chan struct{})
	setter := make(chan struct{})
	go func() {
		defer close(setter)
		for i := 1; ; i++ {
			select {
			case <-stop:
				return
			default:
			}
			if err := f.Set(key, up.URL, "tok-"+strconv.Itoa(i%2)); err != nil {
				panic(err) // cannot fail: a valid URL and token
			}
		}
	}()
	var wg sync.WaitGroup
	for range 4 {
		wg.Go(func() {
			for range 25 {
				resp, err := http.Post(u, "application/json", strings.NewReader("{}"))
				if err == nil {
					resp.Body.Close()
				}
			}
		})
	}
	wg.Wait()
	close(stop)
	<-setter
	g := got()
	if len(g) != 100 {
		t.Fatalf("upstream got %d requests, want 100", len(g))
	}
	for _, s := range g {
		if s.auth != "Bearer tok-0" && s.auth != "Bearer tok-1" {
			t.Errorf("a request carried %q", s.auth)
		}
	}
}

// With UserUID set, a connection from a uid of the users' range may use
// only the URLs of the user whose app-server runs as that uid: another
// user's agent holding the URL gets the 404 of an unknown URL, and its
// request never reaches the upstream; a uid outside the range (the
// daemon's) is served; a peer whose owner cannot be told is refused.
func TestOtherUsersUIDRefused(t *testing.T) {
	var mu sync.Mutex
	peer, lookupErr := uint32(0), error(nil)
	as := func(uid uint32, err error) {
		mu.Lock()
		defer mu.Unlock()
		peer, lookupErr = uid, err
	}
	f, logs := newFront(t, Options{
		UserUID: func(uid uint32) bool { return uid >= 200000 && uid < 300000 },
		PeerUID: func(_, _ netip.AddrPort) (uint32, error) {
			mu.Lock()
			defer mu.Unlock()
			return peer, lookupErr
		},
	})
	up, got := recorder(t)
	ann := Key{User: "ann", Thread: "t1"}
	u := f.Bind(ann)
	if err := f.Set(ann, up.URL+"/mcp", "tok-ann"); err != nil {
		t.Fatal(err)
	}
	f.SetOwner("ann", 200001)
	f.SetOwner("bob", 200002)
	for _, tt := range []struct {
		name   string
		uid    uint32
		err    error
		status int
	}{
		{"ann's own agent", 200001, nil, 200},
		{"bob's agent with ann's URL", 200002, nil, 404},
		{"a uid of the range with no user", 200003, nil, 404},
		{"the daemon's uid", 0, nil, 200},
		{"an owner that cannot be told", 0, errors.New("gone"), 404},
	} {
		t.Run(tt.name, func(t *testing.T) {
			as(tt.uid, tt.err)
			http.DefaultClient.CloseIdleConnections() // a new connection: its uid is looked up once
			before := len(got())
			resp, body := do(t, http.MethodPost, u, "", `{}`)
			if resp.StatusCode != tt.status {
				t.Errorf("%d %q, want %d", resp.StatusCode, body, tt.status)
			}
			if reached := len(got()) > before; reached != (tt.status == 200) {
				t.Errorf("reached the upstream: %v, want %v", reached, tt.status == 200)
			}
		})
	}
	if strings.Contains(logs.String(), "tok-ann") || !strings.Contains(logs.String(), "another user's uid") {
		t.Errorf("the log names the token, or not the refusal: %s", logs.String())
	}
}

// The kernel's lookup (the default PeerUID): this test's own uid, taken
// for a user's, is refused on another user's URL and served on its own.
func TestPeerUIDFromTheKernel(t *testing.T) {
	me := uint32(os.Geteuid())
	f, _ := newFront(t, Options{UserUID: func(uid uint32) bool { return uid == me }})
	up, _ := recorder(t)
	ann := Key{User: "ann", Thread: "t1"}
	u := f.Bind(ann)
	if err := f.Set(ann, up.URL+"/mcp", "tok"); err != nil {
		t.Fatal(err)
	}
	f.SetOwner("ann", me+1)
	http.DefaultClient.CloseIdleConnections()
	if resp, body := do(t, http.MethodPost, u, "", `{}`); resp.StatusCode != 404 {
		t.Fatalf("another user's uid: %d %q, want 404", resp.StatusCode, body)
	}
	f.SetOwner("ann", me)
	http.DefaultClient.CloseIdleConnections()
	if resp, body := do(t, http.MethodPost, u, "", `{}`); resp.StatusCode != 200 {
		t.Fatalf("the owner's uid: %d %q, want 200", resp.StatusCode, body)
	}
}
