package fakeissuer_test

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/meshweaver/supervisor/testkit/fakeissuer"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

const testTimeout = 10 * time.Second

func start(t *testing.T, opts fakeissuer.Options) (*fakeissuer.Issuer, *http.Client) {
	t.Helper()
	iss, err := fakeissuer.Start(opts)
	if err != nil {
		t.Fatal(err)
	}
	tr := &http.Transport{}
	client := &http.Client{Transport: tr, Timeout: testTimeout}
	t.Cleanup(func() {
		tr.CloseIdleConnections()
		iss.Close()
	})
	return iss, client
}

func post(t *testing.T, c *http.Client, u, ctype, body string) (int, map[string]any) {
	t.Helper()
	resp, err := c.Post(u, ctype, strings.NewReader(body))
	if err != nil {
		t.Fatalf("POST %s: %v", u, err)
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	var m map[string]any
	if err := json.Unmarshal(data, &m); err != nil {
		t.Fatalf("POST %s: answer %q is not a JSON object: %v", u, data, err)
	}
	return resp.StatusCode, m
}

func postJSON(t *testing.T, c *http.Client, u string, v any) (int, map[string]any) {
	t.Helper()
	b, _ := json.Marshal(v)
	return post(t, c, u, "application/json", string(b))
}

func postForm(t *testing.T, c *http.Client, u string, f url.Values) (int, map[string]any) {
	t.Helper()
	return post(t, c, u, "application/x-www-form-urlencoded", f.Encode())
}

func str(m map[string]any, k string) string {
	s, _ := m[k].(string)
	return s
}

// userCode asks for a device code the way the CLI does.
func userCode(t *testing.T, iss *fakeissuer.Issuer, c *http.Client) (id, code string) {
	t.Helper()
	st, m := postJSON(t, c, iss.URL+fakeissuer.PathUserCode, map[string]string{"client_id": "app_test"})
	if st != http.StatusOK {
		t.Fatalf("usercode status %d %v", st, m)
	}
	if iv, ok := m["interval"].(string); !ok || iv != "1" {
		t.Errorf("interval = %#v, want the JSON string \"1\"", m["interval"])
	}
	id, code = str(m, "device_auth_id"), str(m, "user_code")
	if id == "" || code == "" {
		t.Fatalf("usercode answer %v", m)
	}
	return id, code
}

func poll(t *testing.T, iss *fakeissuer.Issuer, c *http.Client, id, code string) (int, map[string]any) {
	t.Helper()
	return postJSON(t, c, iss.URL+fakeissuer.PathPoll, map[string]string{"device_auth_id": id, "user_code": code})
}

func TestFullDeviceFlow(t *testing.T) {
	t.Parallel()
	iss, c := start(t, fakeissuer.Options{Email: "alice@example.test", PlanType: "pro", UserID: "user-alice"})
	id, code := userCode(t, iss, c)

	if st, _ := poll(t, iss, c, id, code); st != http.StatusForbidden {
		t.Fatalf("pending poll status %d, want 403", st)
	}
	if n := iss.Approve(); n != 1 {
		t.Fatalf("Approve approved %d codes, want 1", n)
	}
	st, m := poll(t, iss, c, id, code)
	if st != http.StatusOK {
		t.Fatalf("approved poll status %d %v", st, m)
	}
	ac, ch, cv := str(m, "authorization_code"), str(m, "code_challenge"), str(m, "code_verifier")
	if ac == "" || ch == "" || cv == "" {
		t.Fatalf("approved poll answer %v lacks a field", m)
	}
	sum := sha256.Sum256([]byte(cv))
	if want := base64.RawURLEncoding.EncodeToString(sum[:]); ch != want {
		t.Errorf("code_challenge %q is not S256(code_verifier) %q", ch, want)
	}

	form := url.Values{"grant_type": {"authorization_code"}, "client_id": {"app_test"}, "code": {ac},
		"redirect_uri": {iss.CallbackURL()}, "code_verifier": {cv}}
	st, tok := postForm(t, c, iss.URL+fakeissuer.PathOAuthToken, form)
	if st != http.StatusOK {
		t.Fatalf("oauth/token status %d %v", st, tok)
	}
	for _, k := range []string{"id_token", "access_token"} {
		claims, err := fakeissuer.Claims(str(tok, k))
		if err != nil {
			t.Fatalf("%s: %v", k, err)
		}
		if claims["email"] != "alice@example.test" {
			t.Errorf("%s email = %v", k, claims["email"])
		}
		auth, _ := claims[fakeissuer.AuthClaim].(map[string]any)
		if auth["chatgpt_plan_type"] != "pro" || auth["chatgpt_user_id"] != "user-alice" {
			t.Errorf("%s auth claim = %v", k, auth)
		}
		if _, ok := auth["chatgpt_account_id"]; ok {
			t.Errorf("%s carries chatgpt_account_id", k)
		}
		parts := strings.Split(str(tok, k), ".")
		if len(parts) != 3 || parts[2] == "" {
			t.Errorf("%s = %q: want three parts with a non-empty signature", k, str(tok, k))
		}
		hdr, _ := base64.RawURLEncoding.DecodeString(parts[0])
		if !bytes.Contains(hdr, []byte(`"alg":"none"`)) {
			t.Errorf("%s header %s", k, hdr)
		}
	}
	if str(tok, "refresh_token") == "" {
		t.Errorf("no refresh_token: %v", tok)
	}

	// The code is spent.
	if st, _ := postForm(t, c, iss.URL+fakeissuer.PathOAuthToken, form); st != http.StatusBadRequest {
		t.Errorf("reused code: status %d, want 400", st)
	}
	// The refresh token works.
	st, tok2 := postForm(t, c, iss.URL+fakeissuer.PathOAuthToken, url.Values{
		"grant_type": {"refresh_token"}, "refresh_token": {str(tok, "refresh_token")}})
	if st != http.StatusOK || str(tok2, "id_token") == "" {
		t.Errorf("refresh: %d %v", st, tok2)
	}

	codes := iss.Codes()
	if len(codes) != 1 || codes[0].State != fakeissuer.StateExchanged || codes[0].Polls != 2 {
		t.Errorf("codes = %+v", codes)
	}
	if got := len(iss.Issued()); got != 2 {
		t.Errorf("issued %d token sets, want 2", got)
	}
	reqs := iss.Requests()
	kinds := []fakeissuer.Kind{fakeissuer.KindUserCode, fakeissuer.KindPoll, fakeissuer.KindPoll,
		fakeissuer.KindOAuthToken, fakeissuer.KindOAuthToken, fakeissuer.KindOAuthToken}
	if len(reqs) != len(kinds) {
		t.Fatalf("%d requests recorded, want %d", len(reqs), len(kinds))
	}
	for k, r := range reqs {
		if r.Kind != kinds[k] || r.Seq != k+1 {
			t.Errorf("request %d: kind %s seq %d, want %s %d", k, r.Kind, r.Seq, kinds[k], k+1)
		}
	}
	if reqs[0].JSON["client_id"] != "app_test" || reqs[0].UserCode != code || reqs[1].DeviceAuthID != id {
		t.Errorf("recorded fields: %+v / %+v", reqs[0], reqs[1])
	}
	if reqs[3].Form.Get("redirect_uri") != iss.CallbackURL() || reqs[3].Status != http.StatusOK {
		t.Errorf("recorded token request %+v", reqs[3])
	}
}

func TestDeny(t *testing.T) {
	t.Parallel()
	iss, c := start(t, fakeissuer.Options{DenyStatus: http.StatusGone})
	id, code := userCode(t, iss, c)
	id2, code2 := userCode(t, iss, c)
	if !iss.DenyCode(code) {
		t.Fatal("DenyCode found no pending code")
	}
	if iss.DenyCode(code) {
		t.Error("DenyCode denied a code twice")
	}
	if st, _ := poll(t, iss, c, id, code); st != http.StatusGone {
		t.Errorf("denied poll status %d, want 410", st)
	}
	if st, _ := poll(t, iss, c, id2, code2); st != http.StatusForbidden {
		t.Errorf("the other code: status %d, want 403 (pending)", st)
	}
	if !iss.ApproveCode(code2) {
		t.Fatal("ApproveCode found no pending code")
	}
	if st, _ := poll(t, iss, c, id2, code2); st != http.StatusOK {
		t.Errorf("approved poll status %d", st)
	}
	// Codes handed out later start pending.
	if n := iss.Approve(); n != 0 {
		t.Errorf("Approve with nothing pending approved %d", n)
	}
	id3, code3 := userCode(t, iss, c)
	if st, _ := poll(t, iss, c, id3, code3); st != http.StatusForbidden {
		t.Errorf("new code status %d, want 403", st)
	}
}

func TestBadDenyStatus(t *testing.T) {
	t.Parallel()
	for _, s := range []int{200, 403, 404, 42, 1000} {
		if iss, err := fakeissuer.Start(fakeissuer.Options{DenyStatus: s}); err == nil {
			iss.Close()
			t.Errorf("DenyStatus %d accepted", s)
		}
	}
}

func TestBadInput(t *testing.T) {
	t.Parallel()
	iss, c := start(t, fakeissuer.Options{MaxBodyBytes: 1024})
	id, code := userCode(t, iss, c)
	cases := []struct {
		name, method, path, ctype, body string
		want                            int
	}{
		{"unknown path", "POST", "/nope", "application/json", "{}", 404},
		{"verification page", "GET", fakeissuer.PathVerification, "", "", 404},
		{"GET usercode", "GET", fakeissuer.PathUserCode, "", "", 405},
		{"poll not JSON", "POST", fakeissuer.PathPoll, "application/json", "{{{", 400},
		{"poll JSON array", "POST", fakeissuer.PathPoll, "application/json", "[1,2]", 400},
		{"poll wrong types", "POST", fakeissuer.PathPoll, "application/json", `{"device_auth_id":1,"user_code":null}`, 400},
		{"poll unknown code", "POST", fakeissuer.PathPoll, "application/json", `{"device_auth_id":"x","user_code":"y"}`, 400},
		{"poll mismatched code", "POST", fakeissuer.PathPoll, "application/json", `{"device_auth_id":"` + id + `","user_code":"WRONG"}`, 400},
		{"poll empty", "POST", fakeissuer.PathPoll, "", "", 400},
		{"token JSON", "POST", fakeissuer.PathOAuthToken, "application/json", `{"grant_type":"authorization_code"}`, 400},
		{"token bad form", "POST", fakeissuer.PathOAuthToken, "application/x-www-form-urlencoded", "%zz", 400},
		{"token no grant", "POST", fakeissuer.PathOAuthToken, "application/x-www-form-urlencoded", "a=b", 400},
		{"token unknown code", "POST", fakeissuer.PathOAuthToken, "application/x-www-form-urlencoded", "grant_type=authorization_code&code=x", 400},
		{"token unknown refresh", "POST", fakeissuer.PathOAuthToken, "application/x-www-form-urlencoded", "grant_type=refresh_token&refresh_token=x", 401},
		{"huge body", "POST", fakeissuer.PathUserCode, "application/json", strings.Repeat("x", 4096), 413},
		{"revoke", "POST", fakeissuer.PathRevoke, "application/json", `{"token":"t"}`, 200},
	}
	for _, tc := range cases {
		req, err := http.NewRequest(tc.method, iss.URL+tc.path, strings.NewReader(tc.body))
		if err != nil {
			t.Fatal(err)
		}
		if tc.ctype != "" {
			req.Header.Set("Content-Type", tc.ctype)
		}
		resp, err := c.Do(req)
		if err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		data, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != tc.want {
			t.Errorf("%s: status %d, want %d (%s)", tc.name, resp.StatusCode, tc.want, data)
		}
		if !json.Valid(data) {
			t.Errorf("%s: answer %q is not JSON", tc.name, data)
		}
	}
	// A wrong verifier does not spend the code.
	iss.Approve()
	_, m := poll(t, iss, c, id, code)
	f := url.Values{"grant_type": {"authorization_code"}, "code": {str(m, "authorization_code")}, "code_verifier": {"wrong"}}
	if st, _ := postForm(t, c, iss.URL+fakeissuer.PathOAuthToken, f); st != http.StatusBadRequest {
		t.Errorf("wrong verifier: status %d", st)
	}
	f.Set("code_verifier", str(m, "code_verifier"))
	if st, _ := postForm(t, c, iss.URL+fakeissuer.PathOAuthToken, f); st != http.StatusOK {
		t.Errorf("right verifier after a wrong one: status %d", st)
	}
	if n := iss.Count(fakeissuer.KindOther); n != 2 {
		t.Errorf("%d requests of kind other, want 2", n)
	}
}

func TestWait(t *testing.T) {
	t.Parallel()
	iss, c := start(t, fakeissuer.Options{})
	ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
	defer cancel()

	var wg sync.WaitGroup
	errs := make(chan error, 2)
	wg.Add(2)
	go func() { defer wg.Done(); errs <- iss.WaitPolls(ctx, 3) }()
	go func() { defer wg.Done(); errs <- iss.WaitUserCodes(ctx, 1) }()
	id, code := userCode(t, iss, c)
	for range 3 {
		poll(t, iss, c, id, code)
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Error(err)
		}
	}

	// A deadline ends the wait.
	short, cancelShort := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancelShort()
	if err := iss.WaitPolls(short, 100); !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("WaitPolls past its deadline: %v", err)
	}
	// WaitFor sees state changes, not only requests.
	done := make(chan error, 1)
	go func() {
		done <- iss.WaitFor(ctx, func(_ []fakeissuer.Request, codes []fakeissuer.DeviceCode) bool {
			return len(codes) == 1 && codes[0].State == fakeissuer.StateApproved
		})
	}()
	iss.Approve()
	if err := <-done; err != nil {
		t.Error(err)
	}
}

func TestCloseWakesWaiters(t *testing.T) {
	t.Parallel()
	iss, err := fakeissuer.Start(fakeissuer.Options{})
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- iss.WaitPolls(context.Background(), 1) }()
	iss.Close()
	if err := <-done; !errors.Is(err, fakeissuer.ErrClosed) {
		t.Errorf("WaitPolls after Close: %v", err)
	}
	iss.Close() // idempotent
	if err := iss.WaitPolls(context.Background(), 1); !errors.Is(err, fakeissuer.ErrClosed) {
		t.Errorf("WaitPolls on a closed issuer: %v", err)
	}
	// Serving directly after Close answers 503 and records nothing.
	rec := httptest.NewRecorder()
	iss.ServeHTTP(rec, httptest.NewRequest("POST", fakeissuer.PathUserCode, strings.NewReader("{}")))
	if rec.Code != http.StatusServiceUnavailable || len(iss.Requests()) != 0 {
		t.Errorf("after Close: status %d, %d requests", rec.Code, len(iss.Requests()))
	}
}

func TestConcurrentClients(t *testing.T) {
	t.Parallel()
	iss, c := start(t, fakeissuer.Options{})
	var wg sync.WaitGroup
	for range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			b, _ := json.Marshal(map[string]string{"client_id": "x"})
			resp, err := c.Post(iss.URL+fakeissuer.PathUserCode, "application/json", bytes.NewReader(b))
			if err != nil {
				t.Error(err)
				return
			}
			_, _ = io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
		}()
	}
	wg.Wait()
	codes := iss.Codes()
	seen := map[string]bool{}
	for _, dc := range codes {
		if seen[dc.UserCode] || seen[dc.DeviceAuthID] {
			t.Errorf("duplicate code %+v", dc)
		}
		seen[dc.UserCode], seen[dc.DeviceAuthID] = true, true
	}
	if len(codes) != 8 || iss.Approve() != 8 {
		t.Errorf("%d codes", len(codes))
	}
}

func TestClaimsRejectsGarbage(t *testing.T) {
	t.Parallel()
	for _, tok := range []string{"", "a.b", "a.!!!.c", "a." + base64.RawURLEncoding.EncodeToString([]byte("[1]")) + ".c"} {
		if _, err := fakeissuer.Claims(tok); err == nil {
			t.Errorf("Claims(%q) succeeded", tok)
		}
	}
}

func FuzzServeHTTP(f *testing.F) {
	f.Add("POST", fakeissuer.PathPoll, "application/json", []byte(`{"device_auth_id":"deviceauth-1","user_code":"FAKE-0001"}`), true)
	f.Add("POST", fakeissuer.PathOAuthToken, "application/x-www-form-urlencoded", []byte("grant_type=authorization_code&code=a&code_verifier=b"), true)
	f.Add("POST", fakeissuer.PathUserCode, "application/json", []byte(`{"client_id":1}`), false)
	f.Add("PUT", "/x", "text/plain; charset=\x00", []byte{0xff, 0}, false)
	iss, err := fakeissuer.Start(fakeissuer.Options{MaxBodyBytes: 4096})
	if err != nil {
		f.Fatal(err)
	}
	f.Cleanup(iss.Close)
	f.Fuzz(func(t *testing.T, method, path, ctype string, body []byte, approve bool) {
		if approve {
			iss.Approve()
		}
		req := httptest.NewRequest("POST", "/", bytes.NewReader(body))
		req.Method, req.URL.Path = method, path
		req.Header.Set("Content-Type", ctype)
		rec := httptest.NewRecorder()
		iss.ServeHTTP(rec, req)
		if rec.Code < 200 || rec.Code > 599 || !json.Valid(rec.Body.Bytes()) {
			t.Errorf("status %d body %q", rec.Code, rec.Body.Bytes())
		}
	})
}
