package schema_test

import (
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"

	"github.com/meshweaver/supervisor/testkit/schema"
)

// example is one entry of testdata/*.json: the first recorded message of
// each kind, copied from the real codex 0.169.0 transcripts.
type example struct {
	File string          `json:"file"`
	Msg  json.RawMessage `json:"msg"`
}

func loadExamples(t *testing.T, name string) map[string]example {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("testdata", name))
	if err != nil {
		t.Fatal(err)
	}
	var m map[string]example
	if err := json.Unmarshal(b, &m); err != nil {
		t.Fatalf("parsing %s: %v", name, err)
	}
	if len(m) == 0 {
		t.Fatalf("%s holds no examples", name)
	}
	return m
}

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}

func TestRecordedClientRequests(t *testing.T) {
	v := schema.ForTest(t)
	examples := loadExamples(t, "client_requests.json")
	for _, method := range sortedKeys(examples) {
		t.Run(method, func(t *testing.T) {
			err := v.ValidateClientRequest(examples[method].Msg)
			if method == "does/not/exist" {
				if !errors.Is(err, schema.ErrUnknownMethod) {
					t.Fatalf("got %v, want an error wrapping ErrUnknownMethod", err)
				}
				if !strings.Contains(err.Error(), "does/not/exist") {
					t.Errorf("error %q does not name the method", err)
				}
				return
			}
			if err != nil {
				t.Errorf("recorded request does not validate: %v", err)
			}
		})
	}
}

func TestRecordedNotifications(t *testing.T) {
	v := schema.ForTest(t)
	examples := loadExamples(t, "notifications.json")
	for _, method := range sortedKeys(examples) {
		t.Run(method, func(t *testing.T) {
			line := examples[method].Msg
			if !strings.Contains(string(line), `"emittedAtMs"`) {
				t.Fatalf("recorded notification lacks emittedAtMs: %s", line)
			}
			if err := v.ValidateServerNotification(line); err != nil {
				t.Errorf("recorded notification does not validate: %v", err)
			}
		})
	}
}

func TestRecordedServerRequests(t *testing.T) {
	v := schema.ForTest(t)
	examples := loadExamples(t, "server_requests.json")
	for _, method := range sortedKeys(examples) {
		t.Run(method, func(t *testing.T) {
			if err := v.ValidateServerRequest(examples[method].Msg); err != nil {
				t.Errorf("recorded server request does not validate: %v", err)
			}
		})
	}
}

func TestRecordedResults(t *testing.T) {
	v := schema.ForTest(t)
	examples := loadExamples(t, "responses.json")
	for _, key := range sortedKeys(examples) {
		if strings.HasSuffix(key, " (error)") {
			continue
		}
		t.Run(key, func(t *testing.T) {
			var resp struct {
				Result json.RawMessage `json:"result"`
			}
			if err := json.Unmarshal(examples[key].Msg, &resp); err != nil || resp.Result == nil {
				t.Fatalf("example has no result: %v", err)
			}
			if err := v.ValidateResult(key, resp.Result); err != nil {
				t.Errorf("recorded result does not validate: %v", err)
			}
		})
	}
}

// TestRecordedServerRequestAnswers checks the answers the probe client sent
// to the real server (all accepted by it) and a few it would reject.
func TestRecordedServerRequestAnswers(t *testing.T) {
	v := schema.ForTest(t)
	tests := []struct {
		method, result string
		ok             bool
	}{
		{"item/commandExecution/requestApproval", `{"decision":"accept"}`, true},
		{"item/commandExecution/requestApproval", `{"decision":"decline"}`, true},
		{"item/commandExecution/requestApproval", `{"decision":"cancel"}`, true},
		{"item/commandExecution/requestApproval", `{"decision":{"acceptWithExecpolicyAmendment":{"execpolicy_amendment":["touch","x"]}}}`, true},
		{"item/commandExecution/requestApproval", `{"decision":"maybe"}`, false},
		{"item/commandExecution/requestApproval", `{}`, false},
		{"item/fileChange/requestApproval", `{"decision":"accept"}`, true},
		{"item/fileChange/requestApproval", `{"decision":"decline"}`, true},
		{"mcpServer/elicitation/request", `{"action":"accept","content":{"color":"blue"},"_meta":null}`, true},
		{"mcpServer/elicitation/request", `{"action":"decline","content":null,"_meta":null}`, true},
		{"mcpServer/elicitation/request", `{"action":"cancel","content":null,"_meta":null}`, true},
		{"mcpServer/elicitation/request", `{"action":"shrug"}`, false},
		{"item/tool/requestUserInput", `{"answers":{"db_choice":{"answers":["SQLite"]}}}`, true},
		{"item/tool/requestUserInput", `{"answers":{"db_choice":"SQLite"}}`, false},
	}
	for _, tt := range tests {
		t.Run(tt.method+" "+tt.result, func(t *testing.T) {
			err := v.ValidateServerRequestResponse(tt.method, json.RawMessage(tt.result))
			if got := err == nil; got != tt.ok {
				t.Fatalf("valid = %v (%v), want %v", got, err, tt.ok)
			}
			if err != nil && !strings.Contains(err.Error(), tt.method) {
				t.Errorf("error %q does not name the method", err)
			}
		})
	}
	err := v.ValidateServerRequestResponse("no/such/request", json.RawMessage(`{}`))
	if !errors.Is(err, schema.ErrNoResultSchema) {
		t.Errorf("unknown server request: got %v, want ErrNoResultSchema", err)
	}
}

func TestBrokenTurnStart(t *testing.T) {
	v := schema.ForTest(t)
	line := []byte(`{"id":3,"method":"turn/start","params":{"input":[{"type":"text","text":"hi"}]}}`)
	err := v.ValidateClientRequest(line)
	if err == nil {
		t.Fatal("turn/start without threadId validated")
	}
	var e *schema.Error
	if !errors.As(err, &e) {
		t.Fatalf("got %T (%v), want *schema.Error", err, err)
	}
	if e.Method != "turn/start" || e.Instance != "/params" || !strings.Contains(e.Message, "threadId") ||
		!strings.HasPrefix(e.Schema, "ClientRequest.json#/") || !strings.HasSuffix(e.Schema, "/required") {
		t.Errorf("got %+v, want method turn/start, instance /params, a message naming threadId and a ClientRequest.json .../required schema path", *e)
	}
	t.Logf("error text: %v", err)
	for _, want := range []string{"turn/start", "/params", "threadId", "TurnStartParams"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not mention %q", err, want)
		}
	}
}

func TestLineFraming(t *testing.T) {
	v := schema.ForTest(t)
	tests := []struct {
		name string
		fn   func([]byte) error
		line string
		ok   bool
		want string // substring of the error
	}{
		{"request with jsonrpc", v.ValidateClientRequest, `{"jsonrpc":"2.0","id":"str-id-1","method":"model/list","params":{}}`, true, ""},
		{"request with string id", v.ValidateClientRequest, `{"id":"a","method":"thread/loaded/list","params":{}}`, true, ""},
		{"request missing params", v.ValidateClientRequest, `{"id":77,"method":"model/list"}`, false, "params"},
		{"param-less request", v.ValidateClientRequest, `{"id":20,"method":"account/logout"}`, true, ""},
		{"request without id", v.ValidateClientRequest, `{"method":"model/list","params":{}}`, false, "id"},
		{"bad id type", v.ValidateClientRequest, `{"id":{"x":1},"method":"model/list","params":{}}`, false, "/id"},
		{"not JSON", v.ValidateClientRequest, `{"id":1,`, false, "not JSON"},
		{"array", v.ValidateClientRequest, `[1]`, false, "not an object"},
		{"no method", v.ValidateClientRequest, `{"id":1}`, false, "method"},
		{"initialized", v.ValidateClientNotification, `{"method":"initialized"}`, true, ""},
		{"client notification unknown", v.ValidateClientNotification, `{"method":"exit"}`, false, "exit"},
		{"notification without emittedAtMs", v.ValidateServerNotification, `{"method":"thread/goal/cleared","params":{"threadId":"t"}}`, true, ""},
		{"emittedAtMs not a number", v.ValidateServerNotification, `{"method":"thread/goal/cleared","params":{"threadId":"t"},"emittedAtMs":"now"}`, false, "/emittedAtMs"},
		{"notification with id", v.ValidateServerNotification, `{"id":1,"method":"thread/goal/cleared","params":{"threadId":"t"}}`, false, "must not have an id"},
		{"unknown notification", v.ValidateServerNotification, `{"method":"fake/answer","params":{},"emittedAtMs":1}`, false, "fake/answer"},
		{"server request without id", v.ValidateServerRequest, `{"method":"item/fileChange/requestApproval","params":{"threadId":"t","turnId":"u","itemId":"i","startedAtMs":1}}`, false, "id"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := tt.fn([]byte(tt.line))
			if got := err == nil; got != tt.ok {
				t.Fatalf("valid = %v (%v), want %v", got, err, tt.ok)
			}
			if err != nil && !strings.Contains(err.Error(), tt.want) {
				t.Errorf("error %q does not contain %q", err, tt.want)
			}
		})
	}
}

// noResultSchema are the request methods whose result schema the CLI
// does not generate at all (not a gap of resultOverrides).
var noResultSchema = map[string]string{
	"modelProvider/default/set": "0.171.0 generates ModelProviderDefaultSetParams and no response",
}

// TestResultSchemasResolve checks that every request method of the pinned
// CLI maps to a result schema, and that each of them compiles after
// ForTest has removed the bundle directory (they compile lazily from
// memory), but for the reviewed noResultSchema. On another CLI (CODEX_BIN
// set to a newer one) only the methods the daemon uses must have one: a
// new method without one is an addition, logged.
func TestResultSchemasResolve(t *testing.T) {
	v := schema.ForTest(t)
	atPin := schema.ForTestVersion(t) == schema.PinnedVersion
	used := map[string]bool{}
	for _, u := range schema.DaemonUses() {
		used[string(u.Kind)+" "+u.Method] = len(u.Reads) > 0 || u.Kind == schema.ServerRequest
	}
	for _, k := range []schema.Kind{schema.ClientRequest, schema.ServerRequest} {
		methods := v.Methods(k)
		if len(methods) == 0 {
			t.Fatalf("no %s methods", k)
		}
		for _, m := range methods {
			if !v.HasResultSchema(k, m) {
				if why, ok := noResultSchema[m]; ok && !used[string(k)+" "+m] {
					t.Logf("%s %s has no result schema: %s", k, m, why)
				} else if atPin || used[string(k)+" "+m] {
					t.Errorf("%s %s has no result schema", k, m)
				} else {
					t.Logf("%s %s has no result schema (the daemon does not use it)", k, m)
				}
				continue
			}
			validate := v.ValidateResult
			if k == schema.ServerRequest {
				validate = v.ValidateServerRequestResponse
			}
			// {} may or may not be a valid result; either way the schema
			// must have compiled, so a failure must point into it.
			var e *schema.Error
			if err := validate(m, json.RawMessage(`{}`)); errors.As(err, &e) && e.Schema == "" {
				t.Errorf("%s %s: %v", k, m, err)
			}
		}
	}
}
