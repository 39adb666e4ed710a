package main

import (
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/vmihailenco/msgpack/v5"
	"google.golang.org/protobuf/types/known/anypb"

	"github.com/meshweaver/supervisor/demomodel"
	"github.com/meshweaver/supervisor/messages"
	"github.com/meshweaver/supervisor/store"
	"github.com/meshweaver/supervisor/testkit/fakeappserver"
	"github.com/meshweaver/supervisor/testkit/syncbuf"
)

// secSecrets are the secrets a test plants.
type secSecrets struct {
	token  string // the MCP bearer token of StartRound
	apiKey string // the API key of SetAPIKey
	env    string // a secret in the daemon's own environment
}

// secNew makes fresh secrets. The API key deliberately lacks the "sk-"
// shape the redactor knows by pattern: only the daemon's knowledge of it
// can keep it out.
func secNew(t *testing.T) secSecrets {
	t.Helper()
	r := func(prefix string) string {
		var b [20]byte
		if _, err := rand.Read(b[:]); err != nil {
			t.Fatal(err)
		}
		return prefix + hex.EncodeToString(b[:])
	}
	return secSecrets{token: r("mcptok"), apiKey: r("apikey"), env: r("envsec")}
}

// scan fails the test for every secret found in text, saying where. It
// looks for each secret whole, then for its first 16 characters of
// randomness (a secret cut by a truncation still shows).
func (s secSecrets) scan(t *testing.T, where, text string) {
	t.Helper()
	for _, sec := range []struct{ name, v string }{{"MCP token", s.token}, {"API key", s.apiKey}, {"env secret", s.env}} {
		needle, what := sec.v, sec.name
		i := strings.Index(text, needle)
		if i < 0 {
			needle, what = sec.v[:6+16], sec.name+" (a prefix of it)"
			i = strings.Index(text, needle)
		}
		if i >= 0 {
			lo, hi := max(0, i-200), min(len(text), i+len(needle)+80)
			t.Errorf("the %s leaked into %s: …%s…", what, where, text[lo:hi])
		}
	}
}

// scanReplies scans everything a caller received.
func (s secSecrets) scanReplies(t *testing.T, who string, c *opsCaller) {
	t.Helper()
	for i, m := range c.got {
		text := fmt.Sprintf("%#v", m)
		if err, ok := m.(error); ok {
			text = err.Error()
		} else if b, err := json.Marshal(m); err == nil {
			text += string(b)
		}
		s.scan(t, fmt.Sprintf("%s's reply #%d (%T)", who, i, m), text)
	}
}

// scanFiles scans every file under root but the two meant to hold a
// credential: CODEX_HOME/auth.json and the daemon's meshweaver/openai-api-key.
func (s secSecrets) scanFiles(t *testing.T, root string) {
	t.Helper()
	n := 0
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() || !d.Type().IsRegular() {
			return err
		}
		if d.Name() == "auth.json" && filepath.Base(filepath.Dir(path)) == ".codex" ||
			d.Name() == store.APIKeyFile && filepath.Base(filepath.Dir(path)) == "meshweaver" {
			return nil
		}
		data, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		n++
		s.scan(t, "the file "+path, string(data))
		return nil
	})
	if err != nil {
		t.Errorf("walking %s: %v", root, err)
	}
	if n == 0 {
		t.Errorf("no file under %s to scan", root)
	}
}

// secDeadURL is an MCP URL on a loopback port nothing listens on.
func secDeadURL(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	if err := ln.Close(); err != nil {
		t.Fatal(err)
	}
	return "http://" + addr + "/mcp"
}

// secMode fails unless path exists with exactly mode perm.
func secMode(t *testing.T, path string, perm fs.FileMode) {
	t.Helper()
	fi, err := os.Stat(path)
	if err != nil {
		t.Errorf("%s: %v", path, err)
		return
	}
	if got := fi.Mode().Perm(); got != perm {
		t.Errorf("%s has mode %04o, want %04o", path, got, perm)
	}
}

// secEncodeAs builds an envelope of a known wire name around a msgpack map
// of the wrong shape.
func secEncodeAs(t *testing.T, name string, body map[string]any) *anypb.Any {
	t.Helper()
	b, err := msgpack.Marshal(body)
	if err != nil {
		t.Fatal(err)
	}
	return &anypb.Any{TypeUrl: messages.TypeURLPrefix + name, Value: b}
}

// secCaptureDefaultLog sends slog's default logger (hollywood logs there)
// to a buffer at debug for the test.
func secCaptureDefaultLog(t *testing.T) *syncbuf.Buffer {
	t.Helper()
	buf := &syncbuf.Buffer{}
	prev := slog.Default()
	slog.SetDefault(slog.New(slog.NewJSONHandler(buf, &slog.HandlerOptions{Level: slog.LevelDebug})))
	t.Cleanup(func() { slog.SetDefault(prev) })
	return buf
}

// TestSecretsNeverLeak plants an MCP bearer token (every round carries it,
// to a dead MCP server), an API key (SetAPIKey) and a secret in the
// daemon's own environment, runs rounds that fail every way it can — model
// 500 and 401, a cut stream, a failed response, codex SIGKILLed mid-round,
// a fake app-server that prints the token and the key on stderr (ERROR
// lines among them) and dies so that the verdict carries its stderr tail,
// invalid and undecodable requests carrying the secrets — and scans every
// log line (the daemon's at debug and hollywood's), every reply, /metrics
// and every file under the homes but the two credential files. It also
// checks the modes of homes and credential files, and that the codex
// child's environment is the allow-list plus --codex-env, without the
// daemon's secret.
func TestSecretsNeverLeak(t *testing.T) {
	sec := secNew(t)
	t.Setenv("SUPERVISOR_TEST_SECRET", sec.env)
	defaultLog := secCaptureDefaultLog(t)
	deadURL := secDeadURL(t)
	const marker = "SUPERVISOR_CODEX_MARKER=codex-env-7c1d"

	// --- the real CLI ---
	r := opsNewRig(t, nil, func(c *daemonSetup) {
		c.CodexEnv = append(c.CodexEnv, marker)
		c.RestartBackoff = time.Millisecond
	})
	c := opsNewCaller(t, r.addr, nil)
	const alice = "sec-alice"
	c.send(messages.SetAPIKey{User: alice, APIKey: sec.apiKey})
	if m := c.awaitOther("APIKeyStored", opsWait, func(m any) bool {
		_, ok := m.(messages.APIKeyStored)
		_, rej := m.(messages.Rejected)
		return ok || rej
	}); m != (messages.APIKeyStored{User: alice}) {
		t.Fatalf("SetAPIKey: %#v, want APIKeyStored", m)
	}
	withMCP := func(thread, text string) messages.StartRound {
		return messages.StartRound{User: alice, Thread: thread, Text: text, MCPURL: deadURL, MCPToken: sec.token, AutoApprove: true}
	}
	for _, f := range []struct {
		name   string
		script demomodel.Script
		want   messages.VerdictStatus
	}{
		{"ok", demomodel.Text("fine"), messages.StatusCompleted},
		{"model 500", demomodel.InternalServerError(), messages.StatusFailed},
		{"model 401", demomodel.Unauthorized(), messages.StatusFailed},
		{"cut stream", demomodel.Text("partial ", "answer").Cut(), messages.StatusFailed},
		{"failed response", demomodel.Failed("server_error", "the model broke"), messages.StatusFailed},
	} {
		r.model.Enqueue(f.script)
		res := c.round(withMCP("sec/"+f.name, "round: "+f.name))
		if res.verdict.Status != f.want {
			t.Errorf("%s: verdict %+v, want %s", f.name, res.verdict, f.want)
		}
	}

	// Mid-round: the child's environment, then its death.
	r.model.Enqueue(demomodel.Respond(demomodel.Message("partial ")).Hang())
	id := c.start(withMCP("sec/killed", "this one dies"))
	c.waitText(id)
	home := r.home(alice)
	proc := opsAppServer(t, r.bin, home)
	procEnv := proc.Environ()
	env := map[string]string{}
	for _, kv := range procEnv {
		k, v, _ := strings.Cut(kv, "=")
		env[k] = v
		if strings.Contains(kv, sec.env) {
			t.Errorf("the codex child's environment holds the daemon's secret: %s", k)
		}
	}
	if env["CODEX_HOME"] != home || env["PATH"] == "" || env["SUPERVISOR_CODEX_MARKER"] != "codex-env-7c1d" {
		t.Errorf("the codex child's environment %q: want CODEX_HOME=%s, PATH and the --codex-env marker", procEnv, home)
	}
	if _, ok := env["SUPERVISOR_TEST_SECRET"]; ok {
		t.Error("SUPERVISOR_TEST_SECRET reached the codex child")
	}
	allowed := []string{"PATH", "HOME", "USER", "LOGNAME", "SHELL", "TMPDIR", "TZ", "LANG", "LANGUAGE", "TERM",
		"CODEX_HOME", "SUPERVISOR_CODEX_MARKER"}
	for k := range env {
		if !slices.Contains(allowed, k) && !strings.HasPrefix(k, "LC_") {
			t.Errorf("the codex child got %s, which is not on the allow-list", k)
		}
	}
	if err := syscall.Kill(-proc.PID, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	if v := c.await(id).verdict; v.Status != messages.StatusFailed || !strings.Contains(v.Error, "SIGKILL") {
		t.Errorf("killed round: %+v, want failed naming the SIGKILL", v)
	}
	r.model.Enqueue(demomodel.Text("back"))
	if v := c.round(withMCP("sec/killed", "after the crash")).verdict; v.Status != messages.StatusCompleted {
		t.Errorf("round after the crash: %+v", v)
	}

	// Refused requests that carry the secrets.
	for _, m := range []messages.StartRound{
		{User: alice, Thread: "sec/bad", Text: "x", MCPURL: "not a url", MCPToken: sec.token},
		{User: alice, Thread: "sec/bad", Text: "x", MCPToken: sec.token},
		{User: alice, Thread: "sec/bad", Text: "x", MCPURL: deadURL, MCPToken: sec.token + " spaced"},
		{User: "../" + alice, Thread: "sec/bad", Text: "x", MCPURL: deadURL, MCPToken: sec.token},
	} {
		if v := c.round(m).verdict; v.Status != messages.StatusRejected {
			t.Errorf("%v: verdict %+v, want rejected", m, v)
		}
	}
	isRejected := func(m any) bool { _, ok := m.(messages.Rejected); return ok }
	for _, m := range []messages.SetAPIKey{
		{User: alice, APIKey: sec.apiKey + " junk"},
		{User: alice, APIKey: sec.apiKey + "\n"},
		{User: "../" + alice, APIKey: sec.apiKey},
	} {
		c.send(m)
		c.awaitOther("Rejected", opsWait, isRejected)
	}
	c.sendRaw(secEncodeAs(t, "start_round.v1", map[string]any{"user": 42, "thread": "t", "text": "x", "mcp_url": deadURL, "mcp_token": sec.token}))
	c.sendRaw(secEncodeAs(t, "set_api_key.v1", map[string]any{"user": 42, "api_key": sec.apiKey}))
	c.sendRaw(&anypb.Any{TypeUrl: messages.TypeURLPrefix + "start_round.v1", Value: []byte("\xc1" + sec.token)})
	for range 3 {
		c.awaitOther("Rejected", opsWait, isRejected)
	}

	// Modes: homes 0700, credential and daemon files 0600.
	secMode(t, r.homes, 0o700)
	userDir := filepath.Dir(home)
	// The daemon's files about the user (stored key, pid record, thread
	// records, journal) are beside the home, none in it.
	for _, d := range []string{userDir, home, filepath.Join(userDir, "meshweaver")} {
		secMode(t, d, 0o700)
	}
	if _, err := os.Lstat(filepath.Join(home, "meshweaver")); err == nil {
		t.Errorf("the daemon keeps files in the home: %s", filepath.Join(home, "meshweaver"))
	}
	secMode(t, filepath.Join(userDir, "meshweaver", store.APIKeyFile), 0o600)
	secMode(t, filepath.Join(home, "auth.json"), 0o600)
	for _, d := range []string{filepath.Join(userDir, "meshweaver")} {
		_ = filepath.WalkDir(d, func(path string, e fs.DirEntry, err error) error {
			switch {
			case err != nil:
				t.Error(err)
			case e.IsDir():
				secMode(t, path, 0o700)
			default:
				secMode(t, path, 0o600)
			}
			return err
		})
	}
	// The credential files hold what they should, and only there.
	if data, err := os.ReadFile(filepath.Join(home, "auth.json")); err != nil || !strings.Contains(string(data), sec.apiKey) {
		t.Errorf("auth.json does not hold the API key (err %v)", err)
	}

	// --- the fake app-server, printing the secrets on stderr and dying ---
	fake := fakeappserver.Fake{
		StderrLines: []string{
			"2026-01-01T00:00:00.000000Z ERROR codex_rmcp_client: connecting to meshweaver failed; Authorization: Bearer " + sec.token,
			"loaded the credentials; api key in use: " + sec.apiKey,
			`mcp config {"http_headers":{"Authorization":"Bearer ` + sec.token + `"},"api_key":"` + sec.apiKey + `"}`,
			"rmcp: header value " + sec.token + " rejected by http://127.0.0.1/mcp",
		},
		ExitOnMethod: "turn/start",
		ExitCode:     3,
	}
	// This test binary as the daemon's "codex" (TestMain runs the fake);
	// its script goes through CodexEnv, as serve's --codex-env: the
	// daemon's own environment never reaches a child.
	launch, err := fakeappserver.Relaunch(fake, "")
	if err != nil {
		t.Fatal(err)
	}
	fr := opsNewRig(t, nil, func(c *daemonSetup) {
		c.CodexBin, c.CodexArgs = launch.Path, launch.Args
		c.CodexEnv = append(c.CodexEnv, launch.Env...)
		c.RestartBackoff = time.Millisecond
	})
	fc := opsNewCaller(t, fr.addr, nil)
	const bob = "sec-bob"
	fc.send(messages.SetAPIKey{User: bob, APIKey: sec.apiKey})
	fc.awaitOther("APIKeyStored", opsWait, func(m any) bool { _, ok := m.(messages.APIKeyStored); return ok })
	for i := range 2 { // the first app-server, then its replacement
		v := fc.round(messages.StartRound{User: bob, Thread: "sec/fake", Text: fmt.Sprint("dies ", i), MCPURL: deadURL, MCPToken: sec.token}).verdict
		if v.Status != messages.StatusFailed || !strings.Contains(v.Error, "stderr tail") || !strings.Contains(v.Error, "exit") {
			t.Errorf("round %d on the dying fake: %+v, want failed with the exit and the stderr tail", i, v)
		}
		if !strings.Contains(v.Error, codexrpcRedacted) {
			t.Errorf("round %d: the verdict's stderr tail shows no redaction: %q", i, v.Error)
		}
	}
	// The CLI's ERROR lines are relayed at warn, the rest at debug.
	var warned, debugged bool
	for _, rec := range opsLogRecords(fr.logs.String()) {
		if rec["msg"] != "codex stderr" {
			continue
		}
		line, _ := rec["line"].(string)
		switch {
		case rec["level"] == "WARN" && strings.Contains(line, " ERROR codex_rmcp_client"):
			warned = true
		case rec["level"] == "DEBUG" && strings.Contains(line, "mcp config"):
			debugged = true
		}
	}
	if !warned || !debugged {
		t.Errorf("relayed stderr: an ERROR line at warn %v, another at debug %v; want both", warned, debugged)
	}

	// --- scan everything ---
	for _, rig := range []*opsRig{r, fr} {
		_, metrics := tlsGather(t, rig)
		sec.scan(t, "/metrics", metrics)
	}
	// Stop the daemons so that every log line is written (app-servers
	// stopping log too), then scan.
	r.stop()
	fr.stop()
	sec.scan(t, "the daemon's log (real CLI)", r.logs.String())
	sec.scan(t, "the daemon's log (fake app-server)", fr.logs.String())
	sec.scan(t, "the default slog (hollywood)", defaultLog.String())
	sec.scanReplies(t, "the caller (real CLI)", c)
	sec.scanReplies(t, "the caller (fake app-server)", fc)
	sec.scanFiles(t, r.root)
	sec.scanFiles(t, fr.root)
}

// codexrpcRedacted is what the redactor puts in place of a secret.
const codexrpcRedacted = "[REDACTED]"

// TestHostileUserIDs: user ids made to escape the homes root — traversal,
// absolute paths, NUL, dot names, very long ones, separators — are refused
// by every message that names a user, and nothing is created anywhere: not
// under the homes, not beside them, not at the absolute path. Thread keys
// are only ever hashed into file names: hostile ones stay inside the
// user's home.
func TestHostileUserIDs(t *testing.T) {
	r := opsNewRig(t, nil, nil)
	c := opsNewCaller(t, r.addr, nil)
	abs := filepath.Join(r.root, "abs-target")
	hostile := []string{
		"../x", "../../x", "x/../../y", abs, "/abs", "a\x00b", strings.Repeat("a", 200), ".", "..",
		"a/b", `a\b`, ".codex", "-rf", "a b", "ü", "", "\n", strings.Repeat("../", 30) + "etc",
	}
	isRejected := func(m any) bool { _, ok := m.(messages.Rejected); return ok }
	for _, user := range hostile {
		res := c.round(messages.StartRound{User: user, Thread: "t", Text: "hi"})
		if res.verdict.Status != messages.StatusRejected || res.verdict.Error == "" || len(res.events) != 0 {
			t.Errorf("round of user %q: %+v with %d events, want rejected", user, res.verdict, len(res.events))
		}
		for _, m := range []any{
			messages.SetAPIKey{User: user, APIKey: "hostile-key-0123456789"},
			messages.StartLogin{User: user},
			messages.CancelLogin{User: user},
			messages.Logout{User: user},
			messages.AccountRequest{User: user},
			messages.ModelsRequest{User: user},
			messages.InterruptRound{User: user, Thread: "t"},
			messages.SteerRound{User: user, Thread: "t", Text: "x"},
		} {
			c.send(m)
			if got := c.awaitOther(fmt.Sprintf("Rejected for %T of %q", m, user), opsWait, isRejected).(messages.Rejected); got.Reason == "" {
				t.Errorf("%T of %q: %+v, want a reason", m, user, got)
			}
		}
	}
	// Nothing was created: no user folder, nothing beside the homes, nothing
	// at the absolute paths.
	if ents, err := os.ReadDir(r.homes); err == nil && len(ents) != 0 || err != nil && !errors.Is(err, os.ErrNotExist) {
		t.Errorf("homes after hostile ids: %v (err %v), want nothing", ents, err)
	}
	ents, err := os.ReadDir(r.root)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range ents {
		if !slices.Contains([]string{"homes", "workspace", "mock-model-catalog.json"}, e.Name()) {
			t.Errorf("a hostile id created %s beside the homes", filepath.Join(r.root, e.Name()))
		}
	}
	for _, p := range []string{abs, "/abs", filepath.Join(filepath.Dir(r.root), "x"), "/etc/.codex"} {
		if _, err := os.Lstat(p); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("%s exists after the hostile ids (lstat: %v)", p, err)
		}
	}
	if ps := codexProcs(r.bin, r.root); len(ps) != 0 {
		t.Errorf("hostile ids started codex: %+v", ps)
	}

	// Hostile thread keys of a valid user: refused when they break the
	// rules, otherwise only hashed.
	for _, key := range []string{"k\x00", strings.Repeat("k", messages.MaxThreadLen+1)} {
		if v := c.round(messages.StartRound{User: "hostile-bob", Thread: key, Text: "x"}).verdict; v.Status != messages.StatusRejected {
			t.Errorf("thread %q: %+v, want rejected", key, v)
		}
	}
	keys := []string{"../../../../escape", "/etc/passwd-escape", strings.Repeat("../", 300) + "escape"}
	for _, key := range keys {
		r.model.Enqueue(demomodel.Text("ok"))
		if v := c.round(messages.StartRound{User: "hostile-bob", Thread: key, Text: "x"}).verdict; v.Status != messages.StatusCompleted {
			t.Errorf("thread %.40q: %+v, want completed", key, v)
		}
	}
	home := r.home("hostile-bob")
	for _, key := range keys {
		if _, err := os.Stat(filepath.Join(filepath.Dir(home), "meshweaver", "threads", store.KeyPrefix(key)+".txt")); err != nil {
			t.Errorf("thread %.40q: no record under its key prefix: %v", key, err)
		}
	}
	// The test's own temporary folders: the root and what is beside it.
	_ = filepath.WalkDir(filepath.Dir(r.root), func(path string, d fs.DirEntry, err error) error {
		if err == nil && strings.Contains(d.Name(), "escape") {
			t.Errorf("a hostile thread key created %s", path)
		}
		return nil
	})
	if _, err := os.Stat("/etc/passwd-escape"); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("/etc/passwd-escape exists (stat: %v)", err)
	}
}

// TestHostileCrossUserThread: one user's mesh thread key sent as another
// user reaches only the second user's home, process and threads: a separate
// codex thread (neither resumed from nor seeded with the first user's),
// records in each user's own registry, a different app-server with its own
// CODEX_HOME, no share of the first user's credentials; and the second user
// can neither interrupt nor steer the first user's running round.
func TestHostileCrossUserThread(t *testing.T) {
	r := opsNewRig(t, nil, nil)
	c := opsNewCaller(t, r.addr, nil)
	const alice, mallory, key = "cross-alice", "cross-mallory", "mesh/shared-thread-key"
	const aliceKey = "alice-api-key-5e1d0c9b8a7f"

	c.send(messages.SetAPIKey{User: alice, APIKey: aliceKey})
	c.awaitOther("APIKeyStored", opsWait, func(m any) bool { _, ok := m.(messages.APIKeyStored); return ok })
	r.model.Enqueue(demomodel.Text("alice's answer"))
	a := c.round(messages.StartRound{User: alice, Thread: key, Text: "alice's private message"})
	if a.verdict.Status != messages.StatusCompleted || !store.IsUUID(a.verdict.CodexThreadID) {
		t.Fatalf("alice's round: %+v", a.verdict)
	}

	r.model.Enqueue(demomodel.Text("mallory's answer"))
	m := c.round(messages.StartRound{User: mallory, Thread: key, Text: "mallory asks"})
	v := m.verdict
	if v.Status != messages.StatusCompleted || v.CodexThreadID == a.verdict.CodexThreadID || v.Resumed || v.FellBack {
		t.Errorf("mallory's round on alice's key: %+v; want a fresh thread of its own (alice's is %s), neither resumed nor fallen back",
			v, a.verdict.CodexThreadID)
	}
	req := r.model.Requests()[len(r.model.Requests())-1]
	for _, s := range req.UserTexts() {
		if strings.Contains(s, "alice") {
			t.Errorf("mallory's model request holds alice's words: %q", s)
		}
	}

	aliceHome, malloryHome := r.home(alice), r.home(mallory)
	record := func(home string) string {
		data, err := os.ReadFile(filepath.Join(filepath.Dir(home), "meshweaver", "threads", store.KeyPrefix(key)+".txt"))
		if err != nil {
			t.Errorf("thread record in %s: %v", home, err)
		}
		return string(data)
	}
	if rec := record(aliceHome); !strings.Contains(rec, a.verdict.CodexThreadID) || strings.Contains(rec, v.CodexThreadID) {
		t.Errorf("alice's record %q: want alice's thread only", rec)
	}
	if rec := record(malloryHome); !strings.Contains(rec, v.CodexThreadID) || strings.Contains(rec, a.verdict.CodexThreadID) {
		t.Errorf("mallory's record %q: want mallory's thread only", rec)
	}
	_ = filepath.WalkDir(malloryHome, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if strings.Contains(d.Name(), a.verdict.CodexThreadID) {
			t.Errorf("mallory's home holds %s, of alice's thread", path)
		}
		if !d.IsDir() {
			if data, err := os.ReadFile(path); err == nil && (strings.Contains(string(data), "alice's private message") ||
				strings.Contains(string(data), aliceKey)) {
				t.Errorf("mallory's file %s holds alice's words or key", path)
			}
		}
		return nil
	})
	for _, p := range []string{filepath.Join(filepath.Dir(malloryHome), "meshweaver", store.APIKeyFile), filepath.Join(malloryHome, "auth.json")} {
		if _, err := os.Stat(p); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("mallory has a credential %s (stat: %v)", p, err)
		}
	}
	pa, pm := opsAppServer(t, r.bin, aliceHome), opsAppServer(t, r.bin, malloryHome)
	if pa.PID == pm.PID {
		t.Errorf("alice and mallory share the app-server %d", pa.PID)
	}

	// Alice's running round: mallory can neither interrupt nor steer it.
	r.model.Enqueue(demomodel.Respond(demomodel.Message("alice streaming ")).Hang())
	id := c.start(messages.StartRound{User: alice, Thread: key, Text: "alice again"})
	c.waitText(id)
	isControlled := func(m any) bool { _, ok := m.(messages.RoundControlled); return ok }
	for _, msg := range []any{
		messages.InterruptRound{User: mallory, Thread: key, RoundID: id},
		messages.InterruptRound{User: mallory, Thread: key},
		messages.SteerRound{User: mallory, Thread: key, RoundID: id, Text: "mallory steers"},
	} {
		c.send(msg)
		if got := c.awaitOther("RoundControlled", opsWait, isControlled).(messages.RoundControlled); got.OK {
			t.Errorf("%+v was accepted: %+v", msg, got)
		}
	}
	c.send(messages.InterruptRound{User: alice, Thread: key, RoundID: id})
	if got := c.awaitOther("RoundControlled", opsWait, isControlled).(messages.RoundControlled); !got.OK {
		t.Errorf("alice's own interrupt: %+v", got)
	}
	if res := c.await(id); res.verdict.Status != messages.StatusInterrupted || res.verdict.CodexThreadID != a.verdict.CodexThreadID {
		t.Errorf("alice's round: %+v, want interrupted on her own thread", res.verdict)
	}
	for _, u := range r.model.Requests() {
		if slices.ContainsFunc(u.UserTexts(), func(s string) bool { return strings.Contains(s, "mallory steers") }) {
			t.Error("mallory's steer reached the model")
		}
	}
}
