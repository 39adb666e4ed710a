package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/meshweaver/supervisor/codexproto"
	"github.com/meshweaver/supervisor/demomodel"
	"github.com/meshweaver/supervisor/messages"
	"github.com/meshweaver/supervisor/testkit/schema"
)

// cliRun runs the built binary with args (and env added to the test's
// environment) and returns its exit code and output.
func cliRun(t *testing.T, exe string, env []string, args ...string) (int, string, string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), opsRoundWait)
	defer cancel()
	cmd := exec.CommandContext(ctx, exe, args...)
	cmd.Env = append(os.Environ(), env...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	var ee *exec.ExitError
	switch {
	case err == nil:
		return 0, stdout.String(), stderr.String()
	case errors.As(err, &ee):
		return ee.ExitCode(), stdout.String(), stderr.String()
	}
	t.Fatalf("running %v: %v", args, err)
	return 0, "", ""
}

// TestCLICommandLine runs the built binary's command lines that need no
// daemon: stray words and bad values are refused together with exit 2 and
// nothing started; serve --check validates flags, environment and the
// --config file; version; help <command>.
func TestCLICommandLine(t *testing.T) {
	root := t.TempDir()
	exe := opsBuild(t, root)
	workspace := filepath.Join(root, "workspace")
	if err := os.MkdirAll(workspace, 0o700); err != nil {
		t.Fatal(err)
	}
	homes := filepath.Join(root, "homes")
	codex := opsCodexBin(t)

	// A stray word no longer hides the flags after it: every mistake of
	// the line is listed, and nothing is created.
	code, _, stderr := cliRun(t, exe, nil, "serve", "--homes", homes, "stray-word", "--workspace", workspace,
		"--log-level", "loud", "--sandbox", "bogus", "--idle-timeout", "soon", "--codex", codex, "--nope")
	if code != 2 {
		t.Errorf("serve with mistakes: exit %d, want 2; stderr:\n%s", code, stderr)
	}
	for _, want := range []string{`"stray-word"`, `--sandbox "bogus"`, `--idle-timeout "soon": not a valid duration`,
		`--log-level "loud"`, "unknown flag --nope"} {
		if !strings.Contains(stderr, want) {
			t.Errorf("serve's refusal does not mention %s:\n%s", want, stderr)
		}
	}
	if _, err := os.Stat(homes); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("a refused serve created the homes (stat: %v)", err)
	}

	// serve --check: 0 when valid, nothing started; the same mistakes via
	// the environment and a config file, with the file's line numbers.
	listen, metrics := checkAddrs(t)
	valid := []string{"serve", "--check", "--homes", homes, "--workspace", workspace, "--codex", codex,
		"--listen", listen, "--metrics-listen", metrics}
	if os.Geteuid() == 0 {
		// As root the users get uids of their own, and --check follows a
		// round's paths as they would: the test's 0700 folders stop them,
		// named with the fix.
		code, _, stderr := cliRun(t, exe, nil, valid...)
		if code != 2 || !strings.Contains(stderr, workspace+" is out of the users' reach: "+filepath.Dir(root)) || !strings.Contains(stderr, "chmod o+x") {
			t.Errorf("serve --check with the workspace under a 0700 folder: exit %d, stderr %q", code, stderr)
		}
		servable(t, root, workspace)
	}
	if code, stdout, stderr := cliRun(t, exe, nil, valid...); code != 0 || !strings.Contains(stdout, "valid") {
		t.Errorf("serve --check on valid settings: exit %d, stdout %q, stderr %q", code, stdout, stderr)
	}
	if _, err := os.Stat(homes); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("serve --check created the homes (stat: %v)", err)
	}
	conf := filepath.Join(root, "supervisor.conf")
	if err := os.WriteFile(conf, []byte("# settings\nqueue-limit = 8\nmax-live lots\nwhat-is-this 1\nsandbox workspace-write\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	code, _, stderr = cliRun(t, exe, []string{"SUPERVISOR_STALL_TIMEOUT=never"},
		append(valid, "--config", conf)...)
	if code != 2 {
		t.Errorf("serve --check with a bad file and variable: exit %d, want 2", code)
	}
	for _, want := range []string{conf + ":3: max-live \"lots\": not a valid int", conf + `:4: unknown setting "what-is-this"`, "SUPERVISOR_STALL_TIMEOUT"} {
		if !strings.Contains(stderr, want) {
			t.Errorf("serve --check does not report %q:\n%s", want, stderr)
		}
	}

	// version and --version: the module's version, the commit, Go's
	// version and the pinned CLI.
	for _, args := range [][]string{{"version"}, {"--version"}} {
		code, stdout, stderr := cliRun(t, exe, nil, args...)
		if code != 0 || !regexp.MustCompile(`^supervisor \S+ \(commit \S+, go1\.\S+, codex `+regexp.QuoteMeta(codexproto.PinnedCLIVersion)+`\)\n$`).MatchString(stdout) {
			t.Errorf("%v: exit %d, stdout %q, stderr %q", args, code, stdout, stderr)
		}
	}
	code, stdout, _ := cliRun(t, exe, nil, "version", "--json")
	var bi map[string]string
	if err := json.Unmarshal([]byte(stdout), &bi); code != 0 || err != nil || bi["codex"] != codexproto.PinnedCLIVersion ||
		!strings.HasPrefix(bi["goversion"], "go1.") || bi["version"] == "" || bi["commit"] == "" {
		t.Errorf("version --json: exit %d, %q (%v)", code, stdout, err)
	}
	if code, _, stderr := cliRun(t, exe, nil, "version", "extra"); code != 2 || !strings.Contains(stderr, `"extra"`) {
		t.Errorf("version extra: exit %d, stderr %q; want 2 naming the word", code, stderr)
	}

	// help <command> is <command> --help; round's names its exit codes.
	code, stdout, stderr = cliRun(t, exe, nil, "help", "round")
	if help := stdout + stderr; code != 0 || !strings.Contains(help, "-thread") || !strings.Contains(help, "5 unavailable") {
		t.Errorf("help round: exit %d:\n%s", code, help)
	}
	// interrupt takes no words; round refuses an unknown flag after its message.
	if code, _, stderr := cliRun(t, exe, nil, "interrupt", "--user", "u", "--thread", "t", "now"); code != 2 || !strings.Contains(stderr, `"now"`) {
		t.Errorf("interrupt with a word: exit %d, stderr %q", code, stderr)
	}
	if code, _, stderr := cliRun(t, exe, nil, "round", "--user", "u", "--thread", "t", "hello", "--jsn"); code != 2 || !strings.Contains(stderr, "--jsn") {
		t.Errorf("round with a misspelt flag after the message: exit %d, stderr %q", code, stderr)
	}
}

// TestServeSettingsPrecedence: the command line wins over SUPERVISOR_*,
// which wins over the --config file; a repeatable setting may repeat in
// the file.
func TestServeSettingsPrecedence(t *testing.T) {
	dir := t.TempDir()
	conf := filepath.Join(dir, "s.conf")
	text := "homes /from/file\nworkspace " + dir + "\nqueue-limit 9\nidle-timeout=1m\ncodex-override a=1\ncodex-override b=\"2\"\nallow-plaintext\nlog-level \"debug\"\n"
	if err := os.WriteFile(conf, []byte(text), 0o600); err != nil {
		t.Fatal(err)
	}
	env := map[string]string{"SUPERVISOR_HOMES": "/from/env", "SUPERVISOR_QUEUE_LIMIT": "7", "SUPERVISOR_CODEX": opsCodexBin(t)}
	lookup := func(k string) (string, bool) { v, ok := env[k]; return v, ok }
	var stderr bytes.Buffer
	o, err := loadServeOptions([]string{"--config", conf, "--queue-limit", "5", "--listen", "0.0.0.0:4100"}, lookup, &stderr)
	if err != nil {
		t.Fatalf("loadServeOptions: %v\n%s", err, stderr.String())
	}
	if o.homes != "/from/env" || o.queueLimit != 5 || o.idleTimeout != time.Minute || o.workspace != dir ||
		strings.Join(o.overrides, " ") != `a=1 b="2"` || !o.allowPlaintext || o.logLevel != "debug" {
		t.Errorf("settings: homes %q queue %d idle %v workspace %q overrides %q plaintext %v level %q",
			o.homes, o.queueLimit, o.idleTimeout, o.workspace, o.overrides, o.allowPlaintext, o.logLevel)
	}
}

// TestPinnedCLIVersionAgrees: the version `supervisor version` reports is
// the one the schema tests check (scripts/install-codex reads the same
// codexproto/cli-version; codexproto.TestPinSpelledOnce checks the rest).
func TestPinnedCLIVersionAgrees(t *testing.T) {
	if codexproto.PinnedCLIVersion == "" {
		t.Fatal("codexproto.PinnedCLIVersion is empty")
	}
	if schema.PinnedVersion != codexproto.PinnedCLIVersion {
		t.Errorf("schema.PinnedVersion %s, codexproto.PinnedCLIVersion %s", schema.PinnedVersion, codexproto.PinnedCLIVersion)
	}
}

// TestRoundExitCodes: one exit code per verdict status, unknown ones as
// failed; the codes are the ones round's help documents.
func TestRoundExitCodes(t *testing.T) {
	for status, want := range map[messages.VerdictStatus]int{
		messages.StatusCompleted: 0, messages.StatusFailed: 1, messages.StatusInterrupted: 3,
		messages.StatusBusy: 4, messages.StatusUnavailable: 5, messages.StatusRejected: 6, "new-status": 1,
	} {
		if got := roundExit(status); got != want {
			t.Errorf("roundExit(%s) = %d, want %d", status, got, want)
		}
		if want > 0 && status != "new-status" && !strings.Contains(docOf("round").exits, strings.TrimSpace(strings.Join([]string{itoa(want), string(status)}, " "))) {
			t.Errorf("round's help does not document exit %d for %s", want, status)
		}
	}
}

func itoa(n int) string { return string(rune('0' + n)) }

// wireName is a JSON key as the wire spells it.
var wireName = regexp.MustCompile(`^[a-z][a-z0-9_]*$`)

// checkWireNames fails for every key of v, at any depth, that is not a
// wire name (a Go field name such as CallID or InputTokens).
func checkWireNames(t *testing.T, line string, v any) {
	t.Helper()
	switch v := v.(type) {
	case map[string]any:
		for k, x := range v {
			if !wireName.MatchString(k) {
				t.Errorf("JSON key %q is not a wire name, in %s", k, line)
			}
			checkWireNames(t, line, x)
		}
	case []any:
		for _, x := range v {
			checkWireNames(t, line, x)
		}
	}
}

// TestCLIRoundThroughBinary runs the built `round` and `interrupt` against
// a daemon on the real CLI: the daemon's address from SUPERVISOR_ADDR,
// flags after the message, "--" before a message that looks like a flag,
// JSON lines under wire names with the round id and time, the "starting
// codex" status of a user's first round, reasoning merged into one line,
// the final status line, and the exit code of each verdict status.
func TestCLIRoundThroughBinary(t *testing.T) {
	e := newEnv(t, func(c *daemonSetup) { c.QueueLimit = 1 })
	exe := opsBuild(t, t.TempDir())
	env := []string{"SUPERVISOR_ADDR=" + e.addr}
	round := func(args ...string) (int, string, string) {
		t.Helper()
		return cliRun(t, exe, env, append([]string{"round", "--timeout", roundTimeout.String()}, args...)...)
	}

	// The user's first round, as JSON, its flags after the message.
	e.model.Enqueue(demomodel.Respond(demomodel.Reasoning("Let ", "me ", "think."), demomodel.Message("Hello", " there")))
	code, stdout, stderr := round("--user", "cli-ann", "--thread", "t1", "hello", "world", "--json", "--round-id", "r-json")
	if code != 0 {
		t.Fatalf("round --json: exit %d; stderr:\n%s", code, stderr)
	}
	if req := e.lastRequest(); req.LastUserText() != "hello world" {
		got := req.LastUserText()
		t.Errorf("the model got %q, want the message without the flags after it", got)
	}
	types := map[string]map[string]any{}
	lines := strings.Split(strings.TrimSpace(stdout), "\n")
	for _, line := range lines {
		var m map[string]any
		if err := json.Unmarshal([]byte(line), &m); err != nil {
			t.Fatalf("not JSON: %q", line)
		}
		checkWireNames(t, line, m)
		typ, _ := m["type"].(string)
		types[typ] = m
		if m["round_id"] != "r-json" {
			t.Errorf("line without the round id: %s", line)
		}
		if ts, _ := m["time"].(string); ts == "" {
			t.Errorf("line without a time: %s", line)
		} else if _, err := time.Parse(time.RFC3339Nano, ts); err != nil {
			t.Errorf("time %q: %v", ts, err)
		}
	}
	if s := types["status"]; s == nil || s["text"] != messages.StatusStartingCodex {
		t.Errorf("no %q status line in the user's first round:\n%s", messages.StatusStartingCodex, stdout)
	}
	if u, _ := types["usage"]["usage"].(map[string]any); u == nil || u["input_tokens"] == nil {
		t.Errorf("usage line without usage.input_tokens:\n%s", stdout)
	}
	if d := lines[len(lines)-1]; !strings.Contains(d, `"type":"done"`) || !strings.Contains(d, `"status":"completed"`) {
		t.Errorf("last line %s, want the completed verdict", d)
	}
	if types["reasoning"] == nil || types["text"] == nil {
		t.Errorf("no reasoning or text line:\n%s", stdout)
	}

	// Resumed, for a person: text on stdout; the reasoning as one line;
	// the final status line with the tokens; no start-up line this time.
	e.model.Enqueue(demomodel.Respond(demomodel.Reasoning("Let ", "me ", "think ", "again."), demomodel.Message("Fine.")))
	code, stdout, stderr = round("--user", "cli-ann", "--thread", "t1", "--", "--not-a-flag")
	if code != 0 || stdout != "Fine.\n" {
		t.Errorf("round in text: exit %d, stdout %q; stderr:\n%s", code, stdout, stderr)
	}
	if req := e.lastRequest(); req.LastUserText() != "--not-a-flag" {
		got := req.LastUserText()
		t.Errorf("the model got %q after --", got)
	}
	if strings.Count(stderr, "thinking:") != 1 || !strings.Contains(stderr, "[thinking: Let me think again.]\n") {
		t.Errorf("reasoning not merged into one line:\n%s", stderr)
	}
	if !regexp.MustCompile(`\[round completed in \d+\.\ds, tokens: \d+ in \(\d+ cached\), \d+ out \(\d+ reasoning\)\]\n$`).MatchString(stderr) {
		t.Errorf("no final status line:\n%s", stderr)
	}
	if strings.Contains(stderr, "starting codex") {
		t.Errorf("a running app-server announced as starting:\n%s", stderr)
	}

	// --auto-approve on a daemon whose approval policy is never: codex
	// asks for nothing, and the caller is told in a line of its output.
	e.model.Enqueue(demomodel.Respond(demomodel.Message("Done.")))
	code, _, stderr = round("--user", "cli-ann", "--thread", "t1", "--auto-approve", "go on")
	if code != 0 || !strings.Contains(stderr, "notice: approval policy never: codex asks for no approval, so auto_approve approves nothing") {
		t.Errorf("round --auto-approve under approval policy never: exit %d; stderr:\n%s", code, stderr)
	}
	if code, _, stderr := round("--user", "cli-ann", "--thread", "t1", "--approval-policy", "sometimes", "x"); code != 2 || !strings.Contains(stderr, "approval") {
		t.Errorf("round --approval-policy sometimes: exit %d, stderr %q; want 2 naming the approval policy", code, stderr)
	}

	// failed → 1, rejected → 6.
	e.model.Enqueue(demomodel.Failed("server_error", "the model broke"))
	if code, _, stderr := round("--user", "cli-ann", "--thread", "t1", "break"); code != exitFailed || !strings.Contains(stderr, "[round failed in ") {
		t.Errorf("a failed round: exit %d, stderr:\n%s", code, stderr)
	}
	if code, _, stderr := round("--user", "../x", "--thread", "t1", "hi"); code != exitRejected || !strings.Contains(stderr, "[round rejected") {
		t.Errorf("a rejected round: exit %d, stderr:\n%s", code, stderr)
	}

	// busy → 4: one round hangs on t2 and one waits behind it (the queue
	// limit is 1), so a third is busy.
	e.model.Enqueue(demomodel.Respond(demomodel.Message("partial ")).Hang(), demomodel.Text("queued ok"))
	hang := e.startRound(messages.StartRound{User: "cli-ann", Thread: "t2", Text: "hang"})
	e.waitEvent(hang, "text", func(ev messages.RoundEvent) bool { return ev.Kind == messages.KindText })
	queued := e.startRound(messages.StartRound{User: "cli-ann", Thread: "t2", Text: "queued"})
	if code, _, stderr := round("--user", "cli-ann", "--thread", "t2", "one more"); code != exitBusy || !strings.Contains(stderr, "[round busy") {
		t.Errorf("a busy round: exit %d, stderr:\n%s", code, stderr)
	}
	// interrupt, the command, ends the hanging round.
	if code, stdout, stderr := cliRun(t, exe, env, "interrupt", "--user", "cli-ann", "--thread", "t2", "--round-id", hang); code != 0 || stdout != "interrupt accepted\n" {
		t.Errorf("interrupt: exit %d, stdout %q, stderr %q", code, stdout, stderr)
	}
	if v := e.await(hang).verdict; v.Status != messages.StatusInterrupted {
		t.Errorf("the interrupted round: %+v", v)
	}
	e.await(queued).mustComplete(t)

	// interrupted → 3: round's own process sees its round interrupted.
	e.model.Enqueue(demomodel.Respond(demomodel.Message("partial ")).Hang())
	n := len(e.model.Requests())
	bg := exec.Command(exe, "round", "--user", "cli-ann", "--thread", "t3", "--round-id", "r-bg", "--timeout", roundTimeout.String(), "wait")
	bg.Env = append(os.Environ(), env...)
	var bgErr bytes.Buffer
	bg.Stderr = &bgErr
	if err := bg.Start(); err != nil {
		t.Fatal(err)
	}
	e.waitModelRequests(n + 1)
	if code, _, stderr := cliRun(t, exe, env, "interrupt", "--user", "cli-ann", "--thread", "t3"); code != 0 {
		t.Errorf("interrupt: exit %d, stderr %q", code, stderr)
	}
	err := bg.Wait()
	var ee *exec.ExitError
	if !errors.As(err, &ee) || ee.ExitCode() != exitInterrupted {
		t.Errorf("an interrupted round: %v, want exit %d; stderr:\n%s", err, exitInterrupted, bgErr.String())
	}
}

// TestDemoShowsTheProduct runs `supervisor demo` on the real CLI: the
// start-up line, a reasoning summary, a shell command run in the sandbox
// with its output, an approval asked and answered (the command then
// writes its file), and a resumed round that quotes the earlier ones.
func TestDemoShowsTheProduct(t *testing.T) {
	dir := t.TempDir()
	t.Cleanup(func() { waitNoCodex(t, opsCodexBin(t), dir) })
	start := time.Now()
	code, stdout, stderr := tlsRunCLI(t, "demo", "--dir", dir)
	if code != 0 {
		t.Fatalf("demo: exit %d\nstdout:\n%s\nstderr:\n%s", code, stdout, stderr)
	}
	t.Logf("the demo took %v", time.Since(start).Round(time.Millisecond))
	for _, want := range []string{
		"[starting codex…]",
		"[thinking: The user wants to know what the workspace holds.",
		"[shell $ ", "ls -l", "SKILLS.md", // the command and its output
		"codex> The workspace holds SKILLS.md.",
		"approval asked for command", "approved (auto_approve)]",
		"Before this message you said, in order: “Hello! What is in the workspace?”, then “Please save a note for me.”",
		"[on the resumed codex thread]",
		"[round completed in ",
	} {
		if !strings.Contains(stdout, want) {
			t.Errorf("the demo's output lacks %q:\n%s", want, stdout)
		}
	}
	if b, err := os.ReadFile(filepath.Join(dir, "workspace", demomodel.ShowcaseNote)); err != nil || strings.TrimSpace(string(b)) != "hello from the demo" {
		t.Errorf("the approved command did not write its note: %q, %v", b, err)
	}
}

// TestServeDemoModel runs `serve --demo-model` (codex found on the
// developer tree, no --codex) and the built `round` against it: the demo
// model lists the workspace through a real sandboxed command.
func TestServeDemoModel(t *testing.T) {
	root := t.TempDir()
	exe := opsBuild(t, root)
	workspace := filepath.Join(root, "workspace")
	if err := os.MkdirAll(workspace, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(workspace, "hand-made.txt"), []byte("x\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	addr, err := freeLoopbackAddr()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { waitNoCodex(t, opsCodexBin(t), root) })
	srv := opsStartServe(t, exe, "serve", "--demo-model", "--listen", addr, "--homes", filepath.Join(root, "homes"),
		"--workspace", workspace, "--metrics-listen", "127.0.0.1:0", "--log-format", "json",
		// The test's folders are the test user's (0700): no uid switch.
		"--uid-range", "off")
	metrics := srv.waitMsg("metrics serving")
	_, body := opsHTTP(t, fmt.Sprintf("http://%s/metrics", metrics["listen"]))
	buildInfo := regexp.MustCompile(`(?m)^supervisor_build_info\{codex="` + regexp.QuoteMeta(codexproto.PinnedCLIVersion) + `",commit="[^"]+",goversion="go1\.[^"]+",version="[^"]+"\} 1$`)
	if !buildInfo.MatchString(body) {
		t.Errorf("/metrics lacks supervisor_build_info = 1 with the build's labels")
	}
	code, stdout, stderr := cliRun(t, exe, []string{"SUPERVISOR_ADDR=" + addr}, "round", "--user", "me", "--thread", "t",
		"--timeout", opsRoundWait.String(), "what is in the workspace?")
	if code != 0 || !strings.Contains(stdout, "The workspace holds hand-made.txt.") || !strings.Contains(stderr, "ls -l") {
		t.Errorf("a round on the demo model: exit %d\nstdout:\n%s\nstderr:\n%s", code, stdout, stderr)
	}
	if err := srv.cmd.Process.Signal(os.Interrupt); err != nil {
		t.Fatal(err)
	}
	if !srv.wait(opsWait) || srv.err != nil {
		t.Errorf("serve --demo-model after SIGINT: exited %v, err %v", srv.done, srv.err)
	}
}
