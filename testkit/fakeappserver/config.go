package fakeappserver

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"os/signal"
	"syscall"
	"testing"
)

// EnvVar is the environment variable that carries a Fake's JSON to a
// re-executed test binary; its presence makes TestMain call Main.
const EnvVar = "FAKE_APPSERVER_CONFIG"

// Fake is a scripted stand-in for `codex app-server` 0.169.0. Its zero
// value is a well-behaved server that speaks the recorded shapes; each field
// turns on one behaviour or fault. The JSON names are the keys of the
// FAKE_APPSERVER_CONFIG document read by Main.
//
// A Fake is never modified by Serve, so one value may serve many
// connections, one after another or at once; each Serve call has its own
// state (threads, turns, counters).
type Fake struct {
	// ReplyText is the agent's answer in every turn, streamed as one
	// item/agentMessage/delta per word (trailing space kept with the word).
	// Empty means "Hello from the fake app-server."
	ReplyText string `json:"replyText,omitempty"`
	// CodexHome is what initialize reports and where thread/start writes a
	// rollout file (sessions/YYYY/MM/DD/rollout-<ts>-<id>.jsonl) so that a
	// later fake process can thread/resume the thread. Main defaults it to
	// $CODEX_HOME. Empty means no files and a made-up path in answers. A
	// CodexHome that does not exist makes Serve fail at once with exit code
	// 1 and the real CLI's stderr text, without reading stdin.
	CodexHome string `json:"codexHome,omitempty"`
	// KnownThreads are thread ids that thread/resume and thread/name/set
	// accept as if their rollout existed.
	KnownThreads []string `json:"knownThreads,omitempty"`
	// HoldTurns pauses every turn after its first agent delta. The turn
	// stays active until turn/interrupt (→ turn/completed interrupted) or
	// turn/steer (→ the message restarts with the full reply and the turn
	// completes). Without it a turn runs to completion while turn/start is
	// being handled, so turn/interrupt always finds no active turn.
	HoldTurns bool `json:"holdTurns,omitempty"`
	// TurnResultLast answers turn/start only after the turn's
	// turn/started and item notifications (just before its end), as a CLI
	// that writes them first may: a client must not depend on the answer
	// coming first.
	TurnResultLast bool `json:"turnResultLast,omitempty"`

	// GarbageLines writes a non-JSON (or non-object) line before every
	// message the fake sends. The lines cycle through garbageLines.
	GarbageLines bool `json:"garbageLines,omitempty"`
	// JunkLines writes this many lines of a hostile app-server once, right
	// after it handled the first request of JunkOnMethod (initialize when
	// empty) whose params hold JunkOnText (any, when empty), then serves on: they cycle through junkLines (garbageLines,
	// an answer to an id the client never sent, and a notification whose
	// params are no object: eight of every nine are lines a client must
	// skip).
	JunkLines    int    `json:"junkLines,omitempty"`
	JunkOnMethod string `json:"junkOnMethod,omitempty"`
	JunkOnText   string `json:"junkOnText,omitempty"`
	// HugeLineBytes pads the first item/agentMessage/delta of every turn so
	// that its line is exactly this many bytes, not counting the newline
	// (lines are never shortened). The completed item and turn/completed
	// then carry the padded text too, as with the real server.
	HugeLineBytes int `json:"hugeLineBytes,omitempty"`
	// ExitAfterMessages makes the fake exit when it receives the Nth client
	// line (every non-empty line counts: requests, notifications, responses
	// and garbage). That line is recorded but not acted on, so a request
	// that is the Nth line gets no answer.
	ExitAfterMessages int `json:"exitAfterMessages,omitempty"`
	// ExitOnMethod makes the fake exit when a request or notification with
	// this method arrives, before answering it.
	ExitOnMethod string `json:"exitOnMethod,omitempty"`
	// ExitCode is the status of every exit the fake makes on its own: stdin
	// EOF, SIGTERM/SIGINT (unless ignored), ExitAfterMessages and
	// ExitOnMethod. Zero, like the real server.
	ExitCode int `json:"exitCode,omitempty"`
	// HogOnMethod makes the fake, when a request or notification with this
	// method arrives whose params hold HogOnText (any, when empty), take
	// HogBytes of memory and write to every page of it before it answers:
	// under a memory limit below that, the kernel kills it (an app-server
	// killed for its user's memory).
	HogOnMethod string `json:"hogOnMethod,omitempty"`
	HogOnText   string `json:"hogOnText,omitempty"`
	HogBytes    int    `json:"hogBytes,omitempty"`
	// HangOnMethod requests are never answered (and have no effect). The
	// fake keeps serving everything else.
	HangOnMethod string `json:"hangOnMethod,omitempty"`
	// UpstreamRetryMs makes every turn stand for a model that never
	// answers while the CLI keeps retrying: after its user message the turn
	// streams no item, only an `error` notification with willRetry true
	// ("Reconnecting... n/5", additionalDetails "stream disconnected before
	// completion: fake upstream", n cycling 1..5) every this many
	// milliseconds, until turn/interrupt.
	UpstreamRetryMs int `json:"upstreamRetryMs,omitempty"`
	// StderrLines are written to stderr when Serve starts and again just
	// before it returns, e.g. fake secrets for redaction tests.
	StderrLines []string `json:"stderrLines,omitempty"`
	// OverloadedTimes answers the first N requests of OverloadedMethod (of
	// every method, each counted on its own, if OverloadedMethod is empty)
	// with -32001 "Server overloaded; retry later.", then serves normally.
	// Overload is checked before anything else, initialize included.
	OverloadedTimes  int    `json:"overloadedTimes,omitempty"`
	OverloadedMethod string `json:"overloadedMethod,omitempty"`
	// UnknownNotifications are methods the schema does not know. Each turn
	// sends one notification per entry, {threadId, turnId} as params,
	// between the user message and the agent message.
	UnknownNotifications []string `json:"unknownNotifications,omitempty"`
	// TurnNotifications are sent, in order, during every turn, after the
	// unknown notifications and before the agent message, verbatim except
	// that "${threadId}" and "${turnId}" are replaced: a subagent's items,
	// a rate-limit update.
	TurnNotifications []NotificationSpec `json:"turnNotifications,omitempty"`
	// ServerRequests are sent, in order, during turns, after the user
	// message and before the agent message; each waits for the client's
	// answer before the turn goes on. See ServerRequestSpec.
	ServerRequests []ServerRequestSpec `json:"serverRequests,omitempty"`
	// IgnoreStdinEOF keeps the fake running after stdin closes (it logs
	// "fakeappserver: stdin closed; ignoring EOF" to stderr) until its
	// context ends, i.e. until a signal when run by Main.
	IgnoreStdinEOF bool `json:"ignoreStdinEOF,omitempty"`
	// TermIgnored makes Main ignore SIGTERM (signal.Ignore), so only SIGKILL
	// ends the process. Serve itself does not look at it.
	TermIgnored bool `json:"termIgnored,omitempty"`
	// MCPStartup makes thread/start and thread/resume report the startup of
	// every enabled server in their config overlay's mcp_servers, as the
	// real CLI does: mcpServer/startupStatus/updated "starting" right after
	// the answer, then the final status, "ready" or, with MCPStartup
	// "failed", "failed" with an error naming the server and its URL. Empty
	// sends no startup status.
	MCPStartup string `json:"mcpStartup,omitempty"`
	// MCPStartupOn holds the final startup status back until a request of
	// this method arrives (it is sent before that request is handled), to
	// stand for the real CLI's ~1.3 s to give up on a dead server. Empty
	// sends it right after "starting".
	MCPStartupOn string `json:"mcpStartupOn,omitempty"`
	// ModelPageSize makes model/list answer pages of this many models
	// (nextCursor the next page's offset) when the request sets no limit.
	// Zero answers every model in one page, like the real server.
	ModelPageSize int `json:"modelPageSize,omitempty"`
	// RateLimits is the result account/rateLimits/read answers, as a
	// ChatGPT login's would be. Empty answers what the real server answers
	// without one: -32600 "codex account authentication required to read
	// rate limits".
	RateLimits json.RawMessage `json:"rateLimits,omitempty"`
	// Version is the CLI version initialize's userAgent (and a thread's
	// cliVersion) reports. Empty means the package's Version, the pin.
	Version string `json:"version,omitempty"`
	// RecordPath, if set, gets every line the fake receives appended to it,
	// verbatim, as soon as it is read.
	RecordPath string `json:"recordPath,omitempty"`
}

// Config is Fake under the name it has where it travels as configuration
// (Env, Command, Relaunch).
type Config = Fake

// ServerRequestSpec is one server→client request sent during a turn.
//
// With Params empty the fake sends the recorded shape of the four known
// requests for the current thread and turn, with the same surrounding
// notifications as the real server:
//
//   - item/commandExecution/requestApproval: status waitingOnApproval, a
//     commandExecution item/started, the request; after the answer the item
//     completes as completed (accept), declined (decline; cancel, which
//     also ends the turn as interrupted) or failed (an error answer).
//   - item/fileChange/requestApproval: the same with a fileChange item.
//   - mcpServer/elicitation/request: an MCP tool-call approval form.
//   - item/tool/requestUserInput: status waitingOnUserInput, one question.
//
// Any other method gets {threadId, turnId}. Params, when given, are sent
// verbatim except that the strings "${threadId}" and "${turnId}" are
// replaced, and no item notifications surround them.
//
// Every answer is followed by serverRequest/resolved {threadId, requestId}
// and then by the fake-only notification
// `fake/answer {requestId, method, result | error, stale}`, which echoes what
// the client answered so tests can assert it. stale is true when the turn
// was interrupted before the answer came (the real server then ignores it).
type ServerRequestSpec struct {
	Method string          `json:"method"`
	Params json.RawMessage `json:"params,omitempty"`
	// OnTurn limits the request to the Nth turn started in this process
	// (1-based); zero sends it in every turn.
	OnTurn int `json:"onTurn,omitempty"`
}

// NotificationSpec is a notification a turn sends (TurnNotifications).
type NotificationSpec struct {
	Method string          `json:"method"`
	Params json.RawMessage `json:"params,omitempty"`
}

// ExitError is how Serve reports an exit that a knob asked for.
type ExitError struct {
	Code   int
	Reason string
}

func (e *ExitError) Error() string {
	return fmt.Sprintf("fakeappserver: exit %d: %s", e.Code, e.Reason)
}

// Env returns the "FAKE_APPSERVER_CONFIG=<json>" assignment for cfg.
func Env(cfg Config) string {
	b, err := json.Marshal(cfg)
	if err != nil {
		panic(fmt.Sprintf("fakeappserver: marshaling config: %v", err)) // cannot happen: plain data
	}
	return EnvVar + "=" + string(b)
}

// Launch is what a process launcher needs to start the fake: the running
// test binary, the real CLI's arguments, and extra environment.
type Launch struct {
	Path string
	Args []string // {"app-server"}
	Env  []string // EnvVar=..., and CODEX_HOME=... when given
}

// Relaunch describes a re-execution of the current test binary as the fake.
// The binary's TestMain must start with
//
//	if os.Getenv(fakeappserver.EnvVar) != "" {
//		fakeappserver.Main()
//	}
//
// Relaunch fails when called inside a fake process, which means that hook is
// missing (and the re-executed binary is running tests instead).
func Relaunch(cfg Config, codexHome string) (Launch, error) {
	if os.Getenv(EnvVar) != "" {
		return Launch{}, errors.New("fakeappserver: " + EnvVar + " is set in a process running tests: TestMain must call fakeappserver.Main when it is set")
	}
	exe, err := os.Executable()
	if err != nil {
		return Launch{}, fmt.Errorf("fakeappserver: finding the test binary: %w", err)
	}
	l := Launch{Path: exe, Args: []string{"app-server"}, Env: []string{Env(cfg)}}
	if codexHome != "" {
		l.Env = append(l.Env, "CODEX_HOME="+codexHome)
	}
	return l, nil
}

// Command returns an unstarted command that runs the fake as a child
// process (see Relaunch for the TestMain hook). The child inherits the
// environment plus the Launch env. If the test starts it, a cleanup kills
// it; the test still owns Wait.
func Command(tb testing.TB, cfg Config, codexHome string) *exec.Cmd {
	tb.Helper()
	l, err := Relaunch(cfg, codexHome)
	if err != nil {
		tb.Fatal(err)
	}
	cmd := exec.Command(l.Path, l.Args...)
	cmd.Env = append(os.Environ(), l.Env...)
	tb.Cleanup(func() {
		if cmd.Process != nil {
			_ = cmd.Process.Kill() // harmless if it already exited
		}
	})
	return cmd
}

// Main runs the fake configured by FAKE_APPSERVER_CONFIG on stdin, stdout
// and stderr, and exits: with ExitCode when stdin closes, on SIGTERM or
// SIGINT (SIGTERM is ignored with TermIgnored), or when a knob says so; with
// 2 when the configuration does not parse; with 1 on I/O failure. It never
// returns.
func Main() {
	os.Exit(run(os.Getenv(EnvVar), os.Stdin, os.Stdout, os.Stderr))
}

func run(config string, stdin io.Reader, stdout, stderr io.Writer) int {
	var f Fake
	dec := json.NewDecoder(bytes.NewReader([]byte(config)))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&f); err != nil {
		fmt.Fprintf(stderr, "fakeappserver: parsing %s: %v\n", EnvVar, err)
		return 2
	}
	if f.CodexHome == "" {
		f.CodexHome = os.Getenv("CODEX_HOME")
	}
	sigs := []os.Signal{os.Interrupt}
	if f.TermIgnored {
		signal.Ignore(syscall.SIGTERM)
	} else {
		sigs = append(sigs, syscall.SIGTERM)
	}
	ctx, stop := signal.NotifyContext(context.Background(), sigs...)
	defer stop()
	// Hide stdin's Close from Serve: closing fd 0 would not unblock a
	// pending read anyway, and the process exit ends that read.
	err := f.Serve(ctx, struct{ io.Reader }{stdin}, stdout, stderr)
	var exit *ExitError
	switch {
	case err == nil:
		return f.ExitCode
	case errors.As(err, &exit):
		return exit.Code
	case ctx.Err() != nil:
		fmt.Fprintf(stderr, "fakeappserver: got a signal, exiting\n")
		return f.ExitCode
	default:
		fmt.Fprintf(stderr, "fakeappserver: %v\n", err)
		return 1
	}
}
