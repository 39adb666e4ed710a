package client_test

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"testing"
	"time"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.uber.org/goleak"

	"github.com/meshweaver/supervisor/actors"
	"github.com/meshweaver/supervisor/client"
	"github.com/meshweaver/supervisor/edge"
	"github.com/meshweaver/supervisor/messages"
	"github.com/meshweaver/supervisor/testkit/fakeappserver"
	"github.com/meshweaver/supervisor/third_party/hollywood/actor"
	"github.com/meshweaver/supervisor/third_party/hollywood/remote"
)

// daemonAddr is the address of the in-process daemon the examples and
// tests call; it runs the fake app-server (fakeReply is every answer).
// Set by TestMain before any test runs.
var daemonAddr string

// daemonSpans records the spans of the test daemon's rounds.
var daemonSpans = tracetest.NewSpanRecorder()

const fakeReply = "Hello from the fake app-server."

func TestMain(m *testing.M) {
	if os.Getenv(fakeappserver.EnvVar) != "" {
		fakeappserver.Main() // never returns
	}
	os.Exit(run(m))
}

func run(m *testing.M) int {
	addr, stop, err := startDaemon(fakeappserver.Config{ReplyText: fakeReply})
	if err != nil {
		fmt.Fprintln(os.Stderr, "starting the test daemon:", err)
		return 1
	}
	daemonAddr = addr
	code := m.Run()
	if err := stop(); err != nil {
		fmt.Fprintln(os.Stderr, "stopping the test daemon:", err)
		code = 1
	}
	if code == 0 {
		if err := goleak.Find(); err != nil {
			fmt.Fprintln(os.Stderr, "goleak:", err)
			code = 1
		}
	}
	return code
}

// startDaemon runs the daemon's actor tree behind its edge gate on a free
// loopback port, as `supervisor serve` does, with the fake app-server for
// codex, configured by fc; stop stops it and removes its folders.
func startDaemon(fc fakeappserver.Config) (addr string, stop func() error, err error) {
	dir, err := os.MkdirTemp("", "client-test-")
	if err != nil {
		return "", nil, err
	}
	l, err := fakeappserver.Relaunch(fc, "")
	if err != nil {
		return "", nil, err
	}
	if addr, err = freeAddr(); err != nil {
		return "", nil, err
	}
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	if os.Getenv("TEST_LOG") != "" {
		log = slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelDebug}))
	}
	var engine *actor.Engine
	root := actor.NewPID(addr, client.RootID)
	gate := edge.New(edge.Config{
		Self: addr, Root: root, Logger: log,
		Reply: func(to *actor.PID, msg any) {
			if env, err := messages.Encode(msg); err == nil && engine != nil {
				engine.Send(to, env)
			}
		},
	})
	rem := remote.New(addr, remote.NewConfig().WithGate(gate.Remote()).WithOnRefuse(gate.OnRefuse))
	engine, err = actor.NewEngine(actor.NewEngineConfig().WithRemote(rem))
	if err != nil {
		return "", nil, err
	}
	workspace := dir + "/workspace"
	if err := os.MkdirAll(workspace, 0o700); err != nil {
		return "", nil, err
	}
	pid, err := actors.SpawnRoot(engine, actors.Config{
		Homes: dir + "/homes", Workspace: workspace,
		CodexBin: l.Path, CodexArgs: l.Args, CodexEnv: l.Env,
		StopGrace: time.Second,
	}, actors.Deps{Logger: log, Hold: rem.Hold,
		TracerProvider: sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(daemonSpans))})
	if err != nil {
		rem.Stop().Wait()
		return "", nil, err
	}
	return addr, func() error {
		defer os.RemoveAll(dir)
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		<-engine.PoisonCtx(ctx, pid).Done()
		rem.Stop().Wait()
		return ctx.Err()
	}, nil
}

func freeAddr() (string, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", err
	}
	defer ln.Close()
	return ln.Addr().String(), nil
}
