package schema

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/meshweaver/supervisor/codexproto"
	"github.com/santhosh-tekuri/jsonschema/v6"
	"github.com/santhosh-tekuri/jsonschema/v6/kind"
	"golang.org/x/text/language"
	"golang.org/x/text/message"
)

// PinnedVersion is the codex CLI version whose protocol the project is
// checked against: codexproto.PinnedCLIVersion, from codexproto/cli-version.
var PinnedVersion = codexproto.PinnedCLIVersion

// GenerateTimeout bounds one `generate-json-schema` run. It takes about
// 150 ms on a warm machine.
const GenerateTimeout = 60 * time.Second

// ErrUnknownMethod is wrapped by the error for a line whose method is not in
// the schema union it was checked against.
var ErrUnknownMethod = errors.New("method not in the schema")

// ErrNoResultSchema is wrapped by the error for a response whose method has
// no result schema in the bundle.
var ErrNoResultSchema = errors.New("no result schema for method")

// Generate runs `codexBin app-server generate-json-schema --out dir`: the
// stable methods and fields, which the conformance checks hold the daemon's
// lines to. The CLI gets a throwaway HOME and CODEX_HOME (two empty
// folders) so that neither the user's ~/.codex config nor the helper files
// the CLI creates there leak into the bundle or the home.
func Generate(codexBin, dir string) error {
	return generate(codexBin, dir)
}

// GenerateExperimental is Generate with `--experimental`: the experimental
// methods and fields too. That is the surface the daemon's app-servers
// offer it, since it initializes with capabilities.experimentalApi
// (codexproto.Client.Initialize); [LoadSurface] reads it.
func GenerateExperimental(codexBin, dir string) error {
	return generate(codexBin, dir, "--experimental")
}

func generate(codexBin, dir string, flags ...string) error {
	ctx, cancel := context.WithTimeout(context.Background(), GenerateTimeout)
	defer cancel()
	tmp, err := os.MkdirTemp("", "codex-schema-home-")
	if err != nil {
		return fmt.Errorf("generating schema into %s: %w", dir, err)
	}
	defer os.RemoveAll(tmp)
	home, codexHome := filepath.Join(tmp, "home"), filepath.Join(tmp, "codex")
	for _, d := range []string{home, codexHome} {
		if err := os.Mkdir(d, 0o700); err != nil {
			return fmt.Errorf("generating schema into %s: %w", dir, err)
		}
	}
	args := append([]string{"app-server", "generate-json-schema"}, flags...)
	cmd := exec.CommandContext(ctx, codexBin, append(args, "--out", dir)...)
	cmd.Env = append(os.Environ(), "HOME="+home, "CODEX_HOME="+codexHome)
	cmd.WaitDelay = 5 * time.Second
	var out bytes.Buffer
	cmd.Stdout = &out
	cmd.Stderr = &out
	if err := cmd.Run(); err != nil {
		if ctx.Err() != nil {
			err = fmt.Errorf("%w after %v", ctx.Err(), GenerateTimeout)
		}
		return fmt.Errorf("generating schema with %s into %s: %w: %s", codexBin, dir, err, strings.TrimSpace(out.String()))
	}
	return nil
}

// Kind names the four message families of the protocol, and ThreadItem,
// the item types, which only surfaces and decisions know.
type Kind string

// The message families a Validator knows.
const (
	ClientRequest      Kind = "client request"
	ClientNotification Kind = "client notification"
	ServerRequest      Kind = "server request"
	ServerNotification Kind = "server notification"
	// Result is the `result` of a response; Error.Method names the request.
	Result Kind = "result"
)

// union describes one generated union file.
type union struct {
	kind Kind
	file string
}

var unions = []union{
	{ClientRequest, "ClientRequest.json"},
	{ClientNotification, "ClientNotification.json"},
	{ServerRequest, "ServerRequest.json"},
	{ServerNotification, "ServerNotification.json"},
}

// resultOverrides names the result schema of client requests whose params
// definition does not rename to it (most have no params at all).
var resultOverrides = map[string]string{
	"account/gatewayOAuth/read":                "GatewayOAuthReadResponse",
	"account/gatewayOAuth/login":               "GatewayOAuthLoginResponse",
	"account/gatewayOAuth/cancel":              "GatewayOAuthCancelResponse",
	"config/mcpServer/reload":                  "McpServerRefreshResponse",
	"windowsSandbox/readiness":                 "WindowsSandboxReadinessResponse",
	"account/logout":                           "LogoutAccountResponse",
	"account/securitySetup/read":               "GetAccountSecuritySetupResponse",
	"account/rateLimits/read":                  "GetAccountRateLimitsResponse",
	"account/usage/read":                       "GetAccountTokenUsageResponse",
	"account/workspaceMessages/read":           "GetWorkspaceMessagesResponse",
	"externalAgentConfig/import/readHistories": "ExternalAgentConfigImportHistoriesReadResponse",
	"config/value/write":                       "ConfigWriteResponse",
	"config/batchWrite":                        "ConfigWriteResponse",
	"configRequirements/read":                  "ConfigRequirementsReadResponse",
}

// Validator checks protocol lines against a compiled schema bundle. It is
// safe for concurrent use.
type Validator struct {
	base        string // "file:///abs/dir/", stripped from schema locations
	methods     map[Kind]map[string]*jsonschema.Schema
	emittedAtMs *jsonschema.Schema
	// results holds the result schemas of client requests and of server
	// requests, by request method. They are compiled on first use: there
	// are over a hundred files, and compiling them all up front made Load
	// take about 10 s under -race instead of 1 s.
	results map[Kind]map[string]*lazySchema
	mu      sync.Mutex // serializes compiler use after Load
	c       *jsonschema.Compiler
	added   map[string]bool // files given to c, during Load
}

// lazySchema is a schema file compiled on first use.
type lazySchema struct {
	path string
	once sync.Once
	sch  *jsonschema.Schema
	err  error
}

func (v *Validator) compiled(l *lazySchema) (*jsonschema.Schema, error) {
	l.once.Do(func() {
		v.mu.Lock()
		defer v.mu.Unlock()
		l.sch, l.err = v.c.Compile(l.path)
		if l.err != nil {
			l.err = fmt.Errorf("compiling %s: %w", l.path, l.err)
		}
	})
	return l.sch, l.err
}

// Load compiles the bundle that Generate wrote into dir: the four unions at
// once, the result schemas on first use. It reads every file it needs, so
// dir may be removed when Load returns.
func Load(dir string) (*Validator, error) {
	abs, err := filepath.Abs(dir)
	if err != nil {
		return nil, fmt.Errorf("loading schema from %s: %w", dir, err)
	}
	v := &Validator{
		base:    "file://" + filepath.ToSlash(abs) + "/",
		methods: map[Kind]map[string]*jsonschema.Schema{},
		results: map[Kind]map[string]*lazySchema{ClientRequest: {}, ServerRequest: {}},
		c:       jsonschema.NewCompiler(),
		added:   map[string]bool{},
	}
	c := v.c
	for _, u := range unions {
		path := filepath.Join(abs, u.file)
		doc, err := readJSON(path)
		if err != nil {
			return nil, fmt.Errorf("loading schema: %w", err)
		}
		if err := c.AddResource(path, doc); err != nil {
			return nil, fmt.Errorf("loading schema %s: %w", path, err)
		}
		root, _ := doc.(map[string]any)
		branches, _ := root["oneOf"].([]any)
		if len(branches) == 0 {
			return nil, fmt.Errorf("loading schema %s: root has no oneOf union", path)
		}
		byMethod := map[string]*jsonschema.Schema{}
		for i, b := range branches {
			method, paramsRef := branchMethod(b)
			if method == "" {
				return nil, fmt.Errorf("loading schema %s: oneOf/%d has no method enum", path, i)
			}
			sch, err := c.Compile(path + "#/oneOf/" + strconv.Itoa(i))
			if err != nil {
				return nil, fmt.Errorf("compiling %s#/oneOf/%d (%s): %w", path, i, method, err)
			}
			byMethod[method] = sch
			if u.kind == ClientRequest || u.kind == ServerRequest {
				name := resultName(u.kind, method, paramsRef)
				if name == "" {
					continue
				}
				if path := resultPath(abs, name, u.kind); path != "" && v.results[u.kind][method] == nil {
					// Read now, compile later: dir may be gone by then.
					if err := v.addResource(path); err != nil {
						return nil, err
					}
					v.results[u.kind][method] = &lazySchema{path: path}
				}
			}
		}
		v.methods[u.kind] = byMethod
		if u.kind == ServerNotification {
			if props, _ := root["properties"].(map[string]any); props["emittedAtMs"] != nil {
				if v.emittedAtMs, err = c.Compile(path + "#/properties/emittedAtMs"); err != nil {
					return nil, fmt.Errorf("compiling %s#/properties/emittedAtMs: %w", path, err)
				}
			}
		}
	}
	return v, nil
}

// addResource hands the compiler a schema file's contents, once per file.
func (v *Validator) addResource(path string) error {
	if v.added[path] {
		return nil
	}
	doc, err := readJSON(path)
	if err != nil {
		return fmt.Errorf("loading schema: %w", err)
	}
	if err := v.c.AddResource(path, doc); err != nil {
		return fmt.Errorf("loading schema %s: %w", path, err)
	}
	v.added[path] = true
	return nil
}

// resultPath finds the result schema file called name where the generator
// puts them: the top level for server requests, v2/ and v1/ for client
// requests. It returns "" when there is none.
func resultPath(dir, name string, k Kind) string {
	subdirs := []string{"v2", "v1", "."}
	if k == ServerRequest {
		subdirs = []string{".", "v2", "v1"}
	}
	for _, sub := range subdirs {
		path := filepath.Join(dir, sub, name+".json")
		if _, err := os.Stat(path); err == nil {
			return path
		}
	}
	return ""
}

// branchMethod returns the method a union branch is keyed by and its params
// $ref, if any.
func branchMethod(b any) (method, paramsRef string) {
	obj, _ := b.(map[string]any)
	props, _ := obj["properties"].(map[string]any)
	m, _ := props["method"].(map[string]any)
	if enum, _ := m["enum"].([]any); len(enum) == 1 {
		method, _ = enum[0].(string)
	} else if c, ok := m["const"].(string); ok {
		method = c
	}
	if p, _ := props["params"].(map[string]any); p != nil {
		paramsRef, _ = p["$ref"].(string)
	}
	return method, paramsRef
}

func readJSON(path string) (any, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	doc, err := jsonschema.UnmarshalJSON(f)
	if err != nil {
		return nil, fmt.Errorf("parsing %s: %w", path, err)
	}
	return doc, nil
}

// Methods returns the sorted methods of one message family.
func (v *Validator) Methods(k Kind) []string {
	var out []string
	for m := range v.methods[k] {
		out = append(out, m)
	}
	sort.Strings(out)
	return out
}

// HasResultSchema reports whether ValidateResult (for a client request
// method) or ValidateServerRequestResponse (for a server request method) can
// check the result of method.
func (v *Validator) HasResultSchema(k Kind, method string) bool {
	return v.results[k][method] != nil
}

// ValidateClientRequest checks one client→server request line,
// {"id","method","params"} with or without "jsonrpc".
func (v *Validator) ValidateClientRequest(line []byte) error {
	return v.validateLine(ClientRequest, line)
}

// ValidateClientNotification checks one client→server notification line
// (in 0.169.0 only "initialized").
func (v *Validator) ValidateClientNotification(line []byte) error {
	return v.validateLine(ClientNotification, line)
}

// ValidateServerNotification checks one server→client notification line.
// The top-level emittedAtMs, if present, is checked against the root-level
// property schema of ServerNotification.json; it is not required.
func (v *Validator) ValidateServerNotification(line []byte) error {
	return v.validateLine(ServerNotification, line)
}

// ValidateServerRequest checks one server→client request line
// ({"method","id","params"}, such as item/commandExecution/requestApproval).
func (v *Validator) ValidateServerRequest(line []byte) error {
	return v.validateLine(ServerRequest, line)
}

// ValidateServerRequestResponse checks the result a client sends back for a
// server request of the given method, for example {"decision":"accept"} for
// item/commandExecution/requestApproval.
func (v *Validator) ValidateServerRequestResponse(method string, result json.RawMessage) error {
	return v.validateResult(ServerRequest, method, result)
}

// ValidateResult checks the result the server sends back for a client
// request of the given method, for example the turn/start result.
func (v *Validator) ValidateResult(method string, result json.RawMessage) error {
	return v.validateResult(ClientRequest, method, result)
}

func (v *Validator) validateResult(k Kind, method string, result json.RawMessage) error {
	l := v.results[k][method]
	if l == nil {
		return &Error{Kind: Result, Method: method, Message: fmt.Sprintf("no result schema for %s %s", k, method), Err: ErrNoResultSchema}
	}
	sch, err := v.compiled(l)
	if err != nil {
		return &Error{Kind: Result, Method: method, Message: err.Error(), Err: err}
	}
	doc, err := jsonschema.UnmarshalJSON(bytes.NewReader(result))
	if err != nil {
		return &Error{Kind: Result, Method: method, Message: "result is not JSON: " + err.Error(), Err: err}
	}
	return v.check(Result, method, sch, doc)
}

func (v *Validator) validateLine(k Kind, line []byte) error {
	doc, err := jsonschema.UnmarshalJSON(bytes.NewReader(line))
	if err != nil {
		return &Error{Kind: k, Message: "line is not JSON: " + err.Error(), Err: err}
	}
	obj, ok := doc.(map[string]any)
	if !ok {
		return &Error{Kind: k, Message: fmt.Sprintf("line is a JSON %T, not an object", doc)}
	}
	method, ok := obj["method"].(string)
	if !ok {
		return &Error{Kind: k, Instance: "/method", Message: "missing or non-string method"}
	}
	sch := v.methods[k][method]
	if sch == nil {
		return &Error{Kind: k, Method: method, Instance: "/method", Message: "not a " + string(k) + " method in the schema", Err: ErrUnknownMethod}
	}
	// Framing that the schema leaves open because its branches allow extra
	// top-level keys: a notification never has an id.
	if _, hasID := obj["id"]; hasID && (k == ClientNotification || k == ServerNotification) {
		return &Error{Kind: k, Method: method, Instance: "/id", Message: "a notification must not have an id"}
	}
	if err := v.check(k, method, sch, doc); err != nil {
		return err
	}
	if ts, ok := obj["emittedAtMs"]; ok && k == ServerNotification && v.emittedAtMs != nil {
		if err := v.check(k, method, v.emittedAtMs, ts); err != nil {
			var e *Error
			if errors.As(err, &e) {
				e.Instance = "/emittedAtMs" + e.Instance
			}
			return err
		}
	}
	return nil
}

func (v *Validator) check(k Kind, method string, sch *jsonschema.Schema, doc any) error {
	err := sch.Validate(doc)
	if err == nil {
		return nil
	}
	var ve *jsonschema.ValidationError
	if !errors.As(err, &ve) {
		return &Error{Kind: k, Method: method, Message: err.Error(), Err: err}
	}
	fails := failures(ve, v.base)
	if len(fails) == 0 {
		return &Error{Kind: k, Method: method, Message: ve.Error(), Err: ve}
	}
	best := pickFailure(fails)
	return &Error{
		Kind:     k,
		Method:   method,
		Instance: jsonPointer(best.instance),
		Schema:   best.schema,
		Message:  best.message,
		More:     len(fails) - 1,
		Err:      ve,
	}
}

var printer = message.NewPrinter(language.English)

// failure is one reportable mistake.
type failure struct {
	instance []string
	schema   string // keyword location relative to the bundle
	message  string
	enum     bool // an enum/const mismatch
}

func newFailure(e *jsonschema.ValidationError, base string) failure {
	schema := strings.TrimPrefix(e.SchemaURL, base)
	if kw := e.ErrorKind.KeywordPath(); len(kw) > 0 {
		if !strings.Contains(schema, "#") {
			schema += "#"
		}
		schema += jsonPointer(kw)
	}
	_, isEnum := e.ErrorKind.(*kind.Enum)
	_, isConst := e.ErrorKind.(*kind.Const)
	return failure{
		instance: e.InstanceLocation,
		schema:   schema,
		message:  e.ErrorKind.LocalizedString(printer),
		enum:     isEnum || isConst,
	}
}

// failures flattens the error tree into the mistakes worth reporting. The
// generated schema is full of tagged unions (`oneOf` branches told apart by
// a one-value enum on "type" or "method"); a branch whose tag does not match
// the value is noise, so it is dropped when another branch's tag matched.
// When no branch's tag matched, the tag itself is the mistake and the
// branches' tags are merged into one "value must be one of" failure.
func failures(e *jsonschema.ValidationError, base string) []failure {
	if len(e.Causes) == 0 {
		return []failure{newFailure(e, base)}
	}
	causes := e.Causes
	switch e.ErrorKind.(type) {
	case *kind.OneOf, *kind.AnyOf:
		var kept []*jsonschema.ValidationError
		var tags []*jsonschema.ValidationError
		for _, c := range causes {
			if tag := findTag(c, len(e.InstanceLocation)+1); tag != nil {
				tags = append(tags, tag)
			} else {
				kept = append(kept, c)
			}
		}
		if len(kept) > 0 {
			causes = kept
		} else if len(tags) > 0 {
			return []failure{mergeTags(e, tags, base)}
		}
	}
	var out []failure
	for _, c := range causes {
		out = append(out, failures(c, base)...)
	}
	return out
}

// findTag returns an enum/const failure in the subtree of a union branch
// that sits on a direct property of the value the union describes.
func findTag(e *jsonschema.ValidationError, depth int) *jsonschema.ValidationError {
	if len(e.Causes) == 0 {
		switch e.ErrorKind.(type) {
		case *kind.Enum, *kind.Const:
			if len(e.InstanceLocation) == depth {
				return e
			}
		}
		return nil
	}
	for _, c := range e.Causes {
		if tag := findTag(c, depth); tag != nil {
			return tag
		}
	}
	return nil
}

func mergeTags(union *jsonschema.ValidationError, tags []*jsonschema.ValidationError, base string) failure {
	at := tags[0].InstanceLocation
	var got any
	var want []string
	seen := map[string]bool{}
	for _, t := range tags {
		if jsonPointer(t.InstanceLocation) != jsonPointer(at) {
			continue
		}
		var vals []any
		switch k := t.ErrorKind.(type) {
		case *kind.Enum:
			got, vals = k.Got, k.Want
		case *kind.Const:
			got, vals = k.Got, []any{k.Want}
		}
		for _, v := range vals {
			s := fmt.Sprintf("%q", fmt.Sprint(v))
			if !seen[s] {
				seen[s] = true
				want = append(want, s)
			}
		}
	}
	f := newFailure(union, base)
	f.instance = at
	f.message = fmt.Sprintf("%q matches no branch, want one of %s", fmt.Sprint(got), strings.Join(want, ", "))
	f.enum = true
	return f
}

// pickFailure chooses the failure most likely to be the real mistake: any
// failure beats an enum/const mismatch, then the deepest instance location
// wins, then the first.
func pickFailure(fails []failure) failure {
	score := func(f failure) int {
		s := len(f.instance)
		if !f.enum {
			s += 1000
		}
		return s
	}
	best := fails[0]
	for _, f := range fails[1:] {
		if score(f) > score(best) {
			best = f
		}
	}
	return best
}

func jsonPointer(tokens []string) string {
	var sb strings.Builder
	for _, t := range tokens {
		sb.WriteByte('/')
		t = strings.ReplaceAll(t, "~", "~0")
		sb.WriteString(strings.ReplaceAll(t, "/", "~1"))
	}
	return sb.String()
}

// Error is a conformance failure.
type Error struct {
	Kind   Kind
	Method string // the message's method, or the request's for a Result
	// Instance is the JSON pointer to the failing value inside the line (or
	// result), e.g. "/params".
	Instance string
	// Schema is the failing keyword, relative to the bundle directory, e.g.
	// "ClientRequest.json#/definitions/TurnStartParams/required".
	Schema  string
	Message string
	// More counts the other failures reported by the schema library; they
	// are in Err.
	More int
	Err  error // *jsonschema.ValidationError, ErrUnknownMethod, ... or nil
}

func (e *Error) Error() string {
	var sb strings.Builder
	sb.WriteString("schema: ")
	if e.Method != "" {
		sb.WriteString(e.Method)
		sb.WriteByte(' ')
	}
	sb.WriteString(string(e.Kind))
	if e.Instance != "" {
		fmt.Fprintf(&sb, " at %q", e.Instance)
	}
	sb.WriteString(": ")
	sb.WriteString(e.Message)
	if e.Schema != "" {
		fmt.Fprintf(&sb, " [%s]", e.Schema)
	}
	if e.More > 0 {
		fmt.Fprintf(&sb, " (and %d more)", e.More)
	}
	return sb.String()
}

func (e *Error) Unwrap() error { return e.Err }

// resultName is the name of the result schema of a request's method,
// found by renaming its params definition (XParams → XResponse) or, for
// a client request whose name does not follow that, in resultOverrides;
// "" when there is none.
func resultName(kind Kind, method, paramsRef string) string {
	if kind == ClientRequest {
		if name := resultOverrides[method]; name != "" {
			return name
		}
	}
	if paramsRef == "" {
		return ""
	}
	return strings.TrimSuffix(paramsRef[strings.LastIndex(paramsRef, "/")+1:], "Params") + "Response"
}
