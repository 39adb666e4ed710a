package schema_test

import (
	"bufio"
	"encoding/json"
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"

	"github.com/meshweaver/supervisor/testkit/schema"
)

// The release train: the pinned CLI's bundle against the newest one npm
// serves (scripts/install-codex --newest, or CODEX_BIN_NEWEST). Additions
// pass and are logged; what breaks the daemon's use fails, naming the
// method and the field.

var builds struct {
	sync.Mutex
	m map[string]*schema.Built
}

// build generates and loads bin's bundle once per test process.
func build(t *testing.T, bin string) *schema.Built {
	t.Helper()
	builds.Lock()
	defer builds.Unlock()
	if b := builds.m[bin]; b != nil {
		return b
	}
	b, err := schema.Build(bin)
	if err != nil {
		t.Fatal(err)
	}
	if builds.m == nil {
		builds.m = map[string]*schema.Built{}
	}
	builds.m[bin] = b
	return b
}

func pinned(t *testing.T) *schema.Built {
	t.Helper()
	bin, err := schema.FindCLI()
	if err != nil {
		t.Fatal(err)
	}
	return build(t, bin)
}

// newest skips the test when no newest CLI is installed: the registry was
// out of reach, or nobody ran scripts/install-codex --newest.
func newest(t *testing.T) *schema.Built {
	t.Helper()
	bin, err := schema.FindNewestCLI()
	if err != nil {
		t.Fatal(err)
	}
	if bin == "" {
		t.Skip("no newest codex CLI: run scripts/install-codex --newest, or set CODEX_BIN_NEWEST")
	}
	return build(t, bin)
}

// TestDaemonUsesComplete: every method, notification and server request
// codexproto names has its row in DaemonUses, of the right kind, and
// every row names one of them.
func TestDaemonUsesComplete(t *testing.T) {
	consts := map[string]schema.Kind{} // value → kind
	for name, value := range codexprotoConsts(t) {
		switch {
		case name == "MethodInitialized":
			consts[value] = schema.ClientNotification
		case strings.HasPrefix(name, "Method"):
			consts[value] = schema.ClientRequest
		case strings.HasPrefix(name, "Note"):
			consts[value] = schema.ServerNotification
		case strings.HasPrefix(name, "Req"):
			consts[value] = schema.ServerRequest
		}
	}
	if len(consts) < 30 {
		t.Fatalf("found %d method constants in codexproto: the parse missed them", len(consts))
	}
	rows := map[string]schema.Kind{}
	for _, u := range schema.DaemonUses() {
		rows[u.Method] = u.Kind
		if k, ok := consts[u.Method]; !ok || k != u.Kind {
			t.Errorf("DaemonUses row %s %s: codexproto names no such %s", u.Kind, u.Method, u.Kind)
		}
	}
	for m, k := range consts {
		if rows[m] != k {
			t.Errorf("codexproto's %s %s has no row in DaemonUses", k, m)
		}
	}
}

// codexprotoConsts returns codexproto's string constants and variables,
// name → value, read from its sources.
func codexprotoConsts(t *testing.T) map[string]string {
	t.Helper()
	consts := map[string]string{}
	fset := token.NewFileSet()
	files, err := filepath.Glob("../../codexproto/*.go")
	if err != nil || len(files) == 0 {
		t.Fatalf("codexproto sources: %v (%d files)", err, len(files))
	}
	for _, f := range files {
		if strings.HasSuffix(f, "_test.go") {
			continue
		}
		file, err := parser.ParseFile(fset, f, nil, 0)
		if err != nil {
			t.Fatal(err)
		}
		ast.Inspect(file, func(n ast.Node) bool {
			vs, ok := n.(*ast.ValueSpec)
			if !ok {
				return true
			}
			for i, name := range vs.Names {
				if i >= len(vs.Values) {
					continue
				}
				if lit, ok := vs.Values[i].(*ast.BasicLit); ok && lit.Kind == token.STRING {
					value, _ := strconv.Unquote(lit.Value)
					consts[name.Name] = value
				}
			}
			return true
		})
	}
	return consts
}

// pinProblems are the reviewed mismatches between codexproto's types and
// the pinned schema: the daemon reads (or sends) fields the schema does
// not list. Each is harmless; Compare reports them as Known, not breaks.
var pinProblems = map[string]string{
	"client request thread/read: result.model: gone: the daemon reads it":                       "ThreadResult serves thread/start and thread/resume too; thread/read has no model and the daemon does not read one from it",
	"client request turn/start: params.additionalContext: gone: the daemon sends it":            "experimental API: the generated schema lists only stable fields; TestRealCLI* check the CLI honours it",
	"client request thread/start: params.dynamicTools: gone: the daemon sends it":               "experimental API, as additionalContext: TestDynamicToolServedByAMeshActor checks the CLI honours it",
	"server request item/fileChange/requestApproval: params.command: gone: the daemon reads it": "ApprovalParams serves both approvals; a file change has no command",
	"server request item/fileChange/requestApproval: params.cwd: gone: the daemon reads it":     "likewise, no cwd",
}

// TestDaemonUsesFitPin: codexproto's types fit the pinned schema except
// for the reviewed pinProblems; a new mismatch means a type reads a field
// the CLI never sends, or a row of DaemonUses is wrong.
func TestDaemonUsesFitPin(t *testing.T) {
	b := pinned(t)
	seen := map[string]bool{}
	for _, p := range b.Bundle.Check(schema.DaemonUses()) {
		seen[p.String()] = true
		if why, ok := pinProblems[p.String()]; ok {
			t.Logf("known: %s (%s)", p, why)
			continue
		}
		t.Errorf("codex %s: %s", b.Version, p)
	}
	for p := range pinProblems {
		if !seen[p] {
			t.Errorf("codex %s: %q is no longer a problem: drop it from pinProblems", b.Version, p)
		}
	}
}

// TestNewestCompatible compares the pinned CLI's bundle with the newest
// CLI's for what the daemon uses.
func TestNewestCompatible(t *testing.T) {
	nb := newest(t)
	pb := pinned(t)
	t.Logf("pin: codex %s (%s); newest: codex %s (%s)", pb.Version, pb.Bin, nb.Version, nb.Bin)
	r := schema.Compare(pb.Bundle, nb.Bundle, schema.DaemonUses())
	for _, a := range r.Additions {
		t.Logf("added in %s: %s", nb.Version, a)
	}
	for _, a := range r.Removals {
		t.Logf("removed in %s: %s", nb.Version, a)
	}
	for _, p := range r.Known {
		t.Logf("known, as at the pin: %s", p)
	}
	for _, p := range r.Breaks {
		t.Errorf("codex %s breaks the daemon (pin %s): %s", nb.Version, pb.Version, p)
	}
}

// TestNewestValidatesRecordings: the recorded messages of the pinned CLI
// (testdata/*.json here, actors/eventmap's transcripts) still validate
// against the newest CLI's schema.
func TestNewestValidatesRecordings(t *testing.T) {
	nb := newest(t)
	checkRecordings(t, nb.Validator, nb.Version)
}

// TestPinValidatesRecordings is the same against the pin: the check of
// the newest means something only if the pin passes it.
func TestPinValidatesRecordings(t *testing.T) {
	pb := pinned(t)
	checkRecordings(t, pb.Validator, pb.Version)
}

func checkRecordings(t *testing.T, v *schema.Validator, version string) {
	t.Helper()
	n := 0
	check := func(what string, err error) {
		t.Helper()
		n++
		if err != nil {
			t.Errorf("codex %s: %s: %v", version, what, err)
		}
	}
	for name, fn := range map[string]func([]byte) error{
		"client_requests.json": v.ValidateClientRequest,
		"notifications.json":   v.ValidateServerNotification,
		"server_requests.json": v.ValidateServerRequest,
	} {
		for method, ex := range loadExamples(t, name) {
			if method != "does/not/exist" {
				check(name+" "+method, fn(ex.Msg))
			}
		}
	}
	for key, ex := range loadExamples(t, "responses.json") {
		if strings.HasSuffix(key, " (error)") {
			continue
		}
		var resp struct {
			Result json.RawMessage `json:"result"`
		}
		if err := json.Unmarshal(ex.Msg, &resp); err != nil {
			t.Fatal(err)
		}
		check("responses.json "+key, v.ValidateResult(key, resp.Result))
	}
	transcripts, err := filepath.Glob("../../actors/eventmap/testdata/recordings/*.jsonl")
	if err != nil || len(transcripts) == 0 {
		t.Fatalf("no transcripts: %v", err)
	}
	for _, path := range transcripts {
		f, err := os.Open(path)
		if err != nil {
			t.Fatal(err)
		}
		calls := map[string]string{} // client request id → method
		asked := map[string]string{} // server request id → method
		sc := bufio.NewScanner(f)
		sc.Buffer(nil, 16<<20)
		for line := 1; sc.Scan(); line++ {
			var rec struct {
				Dir string          `json:"dir"`
				Msg json.RawMessage `json:"msg"`
			}
			var msg struct {
				ID     json.RawMessage `json:"id"`
				Method string          `json:"method"`
				Result json.RawMessage `json:"result"`
			}
			if json.Unmarshal(sc.Bytes(), &rec) != nil {
				t.Fatalf("%s:%d: not a recorded line", path, line)
			}
			if rec.Dir != "in" && rec.Dir != "out" {
				continue // the recorder's own notes
			}
			if json.Unmarshal(rec.Msg, &msg) != nil {
				t.Fatalf("%s:%d: not a recorded message", path, line)
			}
			where := filepath.Base(path) + ":" + strconv.Itoa(line)
			id := string(msg.ID)
			switch {
			case rec.Dir == "in" && msg.Method != "" && id != "":
				calls[id] = msg.Method
				check(where+" "+msg.Method, v.ValidateClientRequest(rec.Msg))
			case rec.Dir == "in" && msg.Method != "":
				check(where+" "+msg.Method, v.ValidateClientNotification(rec.Msg))
			case rec.Dir == "in" && asked[id] != "" && msg.Result != nil:
				check(where+" answer to "+asked[id], v.ValidateServerRequestResponse(asked[id], msg.Result))
			case rec.Dir == "out" && msg.Method != "" && id != "":
				asked[id] = msg.Method
				check(where+" "+msg.Method, v.ValidateServerRequest(rec.Msg))
			case rec.Dir == "out" && msg.Method != "":
				check(where+" "+msg.Method, v.ValidateServerNotification(rec.Msg))
			case rec.Dir == "out" && calls[id] != "" && msg.Result != nil:
				check(where+" result of "+calls[id], v.ValidateResult(calls[id], msg.Result))
			}
		}
		f.Close()
		if err := sc.Err(); err != nil {
			t.Fatal(err)
		}
	}
	if n < 100 {
		t.Errorf("checked %d messages: the recordings were not read", n)
	}
	t.Logf("codex %s: %d recorded messages checked", version, n)
}
