package gateway

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"net/url"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/meshweaver/supervisor/edge"
	"github.com/meshweaver/supervisor/messages"
	"github.com/meshweaver/supervisor/third_party/hollywood/actor"
)

// The gateway's JSON endpoints are fuzzed one target each (go test
// -fuzz=FuzzRounds …; a plain go test runs the seeds): whatever the body
// (and, for the attach routes, the Last-Event-ID), the handler does not
// panic, answers with a status of the table in docs/REMOTE.md, and an
// error status carries a JSON object with an "error" text.

// statuses are the gateway's answers (docs/REMOTE.md, "HTTP gateway").
var statuses = []int{200, 202, 400, 403, 404, 409, 413, 429, 500, 503, 504}

// fuzzRoot answers every message at once with its last reply, so that no
// stream stays open: a round completes, an attach finds no round, a login
// fails, a call gets its answer or a refusal.
func fuzzRoot(c *actor.Context) {
	reply := func(m any) { c.Engine().Send(c.Sender(), m) }
	switch m := c.Message().(type) {
	case messages.StartRound:
		reply(messages.RoundEvent{RoundID: m.RoundID, Seq: 1, Kind: messages.KindText, Text: "ok"})
		reply(messages.RoundFinished{RoundID: m.RoundID, Thread: m.Thread, Status: messages.StatusCompleted})
	case messages.AttachRound:
		reply(messages.RoundFinished{RoundID: m.RoundID, Status: messages.StatusNotFound, Error: "no such round"})
	case messages.StartLogin:
		reply(messages.LoginFinished{User: m.User, Error: "login is not available here"})
	case messages.InterruptRound:
		reply(messages.RoundControlled{RoundID: m.RoundID, Error: "no running round on that mesh thread"})
	case messages.SteerRound:
		reply(messages.RoundControlled{RoundID: m.RoundID, OK: true})
	case messages.AnswerRequest:
		reply(messages.RoundControlled{RoundID: m.RoundID, Error: "no such round", NotFound: true})
	case messages.SetAPIKey:
		reply(messages.APIKeyStored{User: m.User})
	case messages.Logout:
		reply(messages.Rejected{Type: "logout.v1", Reason: "logging out of codex: closed", Class: messages.RefusalFailed})
	case messages.AccountRequest:
		reply(messages.AccountResponse{User: m.User})
	case messages.ModelsRequest:
		reply(messages.Rejected{Type: "models_request.v1", Reason: "the node is at its cap", Class: messages.RefusalUnavailable})
	case messages.RateLimitsRequest:
		reply(messages.RateLimitsResponse{User: m.User, Error: "codex app-server unavailable"})
	case messages.UsageRequest:
		reply(messages.UsageResponse{User: m.User})
	case messages.WarmUp:
		reply(messages.WarmedUp{User: m.User})
	}
}

// fuzzGateway is a gateway on fuzzRoot, served in-process (no listener).
func fuzzGateway(f *testing.F) http.Handler {
	e, err := actor.NewEngine(actor.NewEngineConfig())
	if err != nil {
		f.Fatal(err)
	}
	root := e.SpawnFunc(fuzzRoot, "root")
	p, err := edge.ParsePolicy([]byte(`{"version":1,"grants":[{"identities":["*"],"users":["a*","ann"],"kinds":["rounds","control","login","account"]}]}`))
	if err != nil {
		f.Fatal(err)
	}
	gate := edge.New(edge.Config{Self: "local", Root: root, Policy: p, PeerRate: 1e9, PeerBurst: 1 << 30})
	gw := New(Config{Engine: e, Root: root, Gate: gate, MaxBody: 64 << 10, CallTimeout: 10 * time.Second, FirstReplyWait: 10 * time.Second})
	f.Cleanup(func() { <-e.Poison(root).Done() })
	return gw.Handler()
}

// fuzzRoute fuzzes one POST route, seeded with real requests.
func fuzzRoute(f *testing.F, path string, seeds ...string) {
	h := fuzzGateway(f)
	for _, s := range seeds {
		f.Add([]byte(s), "")
	}
	f.Add([]byte(`{}`), "")
	f.Add([]byte(`{"user":"ann","user":"bob"}`), "7")
	f.Add([]byte(`{"user":"ann"} {"user":"bob"}`), "")
	f.Add([]byte(`{"user":"ann","reply_to":{"address":"127.0.0.1:1","id":"x"}}`), "")
	f.Add([]byte(`{"user":"\u0000"}`), "18446744073709551615")
	f.Add([]byte(`{"user":1e400}`), "-1")
	f.Add([]byte(`[`), "")
	f.Fuzz(func(t *testing.T, body []byte, lastEventID string) {
		req := httptest.NewRequest(http.MethodPost, path, strings.NewReader(string(body)))
		if lastEventID != "" && validHeader(lastEventID) {
			req.Header.Set("Last-Event-ID", lastEventID)
		}
		check(t, h, req)
	})
}

// validHeader reports whether s can be sent as a header value at all.
func validHeader(s string) bool {
	for _, c := range []byte(s) {
		if c < ' ' && c != '\t' || c == 0x7f {
			return false
		}
	}
	return true
}

// check serves req and asserts the answer's shape.
func check(t *testing.T, h http.Handler, req *http.Request) {
	t.Helper()
	ctx, cancel := context.WithTimeout(req.Context(), 30*time.Second)
	defer cancel()
	req = req.WithContext(ctx)
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, req) // a panic fails the fuzz run
	if !slices.Contains(statuses, rec.Code) {
		t.Fatalf("status %d is not in the table; body %q", rec.Code, rec.Body)
	}
	ct := rec.Header().Get("Content-Type")
	if rec.Code >= 400 {
		var p struct {
			Error *string `json:"error"`
		}
		if ct != "application/json" || json.Unmarshal(rec.Body.Bytes(), &p) != nil || p.Error == nil || *p.Error == "" {
			t.Fatalf("status %d with %q %q: want a JSON object with an error", rec.Code, ct, rec.Body)
		}
		return
	}
	if ct != "application/json" && ct != "text/event-stream" {
		t.Fatalf("status %d with Content-Type %q", rec.Code, ct)
	}
}

func FuzzRounds(f *testing.F) {
	fuzzRoute(f, "/v1/rounds",
		`{"user":"ann","thread":"mesh/42","text":"Hello","client_message_id":"m-1"}`,
		`{"user":"ann","thread":"t","text":"x","round_id":"r-1","history":[{"role":"user","text":"a"},{"role":"assistant","text":"b"}],"on_request":"deny","sandbox":"read-only"}`,
		`{"user":"ann","thread":"t","text":"x","additional_context":[{"kind":"text","text":"k"}],"output_schema":{"type":"object"}}`,
		`{"user":"ann","thread":"t","text":"x","mcp_url":"https://mesh.example/mcp","mcp_token":"tok"}`)
}

func FuzzAttach(f *testing.F) {
	fuzzRoute(f, "/v1/attach", `{"user":"ann","round_id":"r-1","after_seq":1}`, `{"user":"ann","round_id":"gw-X"}`)
}

// FuzzAttachGet fuzzes the EventSource route: the round id in the path,
// the user and after_seq in the query, Last-Event-ID.
func FuzzAttachGet(f *testing.F) {
	h := fuzzGateway(f)
	f.Add("r-1", "ann", "2", "")
	f.Add("gw-X", "ann", "", "7")
	f.Add("r", "../x", "-1", "18446744073709551615")
	f.Add("r%2F..", "", "18446744073709551616", "1e3")
	f.Fuzz(func(t *testing.T, round, user, after, lastEventID string) {
		q := url.Values{"user": {user}, "after_seq": {after}}
		req := httptest.NewRequest(http.MethodGet, "/v1/rounds/"+url.PathEscape(round)+"/events?"+q.Encode(), nil)
		if validHeader(lastEventID) {
			req.Header.Set("Last-Event-ID", lastEventID)
		}
		check(t, h, req)
	})
}

func FuzzLogin(f *testing.F) { fuzzRoute(f, "/v1/login", `{"user":"ann"}`) }

func FuzzLoginCancel(f *testing.F) {
	fuzzRoute(f, "/v1/login/cancel", `{"user":"ann"}`, `{"user":"ann","login_id":"l-1"}`)
}

func FuzzInterrupt(f *testing.F) {
	fuzzRoute(f, "/v1/interrupt", `{"user":"ann","thread":"mesh/42","round_id":"gw-1"}`, `{"user":"ann","thread":"mesh/42"}`)
}

func FuzzSteer(f *testing.F) {
	fuzzRoute(f, "/v1/steer", `{"user":"ann","thread":"mesh/42","round_id":"gw-1","text":"also this"}`)
}

func FuzzAnswer(f *testing.F) {
	fuzzRoute(f, "/v1/answer",
		`{"user":"ann","round_id":"gw-1","request_id":"q1","decision":"accept"}`,
		`{"user":"ann","round_id":"gw-1","request_id":"q2","answers":{"color":["blue"]}}`,
		`{"user":"ann","round_id":"gw-1","request_id":"q3","content":"{\"ok\":true}"}`)
}

func FuzzAPIKey(f *testing.F) { fuzzRoute(f, "/v1/api_key", `{"user":"ann","api_key":"sk-test-1"}`) }

func FuzzLogout(f *testing.F) { fuzzRoute(f, "/v1/logout", `{"user":"ann"}`) }

func FuzzAccount(f *testing.F) {
	fuzzRoute(f, "/v1/account", `{"user":"ann"}`, `{"user":"ann","refresh_token":true}`)
}

func FuzzModels(f *testing.F) { fuzzRoute(f, "/v1/models", `{"user":"ann"}`) }

func FuzzRateLimits(f *testing.F) { fuzzRoute(f, "/v1/rate_limits", `{"user":"ann"}`) }

func FuzzUsage(f *testing.F) { fuzzRoute(f, "/v1/usage", `{"user":"ann"}`) }

func FuzzWarmUp(f *testing.F) {
	fuzzRoute(f, "/v1/warm_up", `{"user":"ann","thread":"mesh/42","mcp_url":"https://mesh.example/mcp","mcp_token":"tok"}`)
}
