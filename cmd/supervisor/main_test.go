package main

import (
	"context"
	"log/slog"
	"os"
	"testing"

	"go.uber.org/goleak"

	"github.com/meshweaver/supervisor/testkit/etcdtest"
	"github.com/meshweaver/supervisor/testkit/fakeappserver"
)

// TestMain fails the package if any goroutine outlives the tests. Every
// test stops what it started (the daemon, its remote, the caller's engine
// and remote, the mock model and MCP servers, subprocesses) in its cleanup,
// so no goroutine needs to be ignored: once both remotes of a connection
// are stopped, hollywood's stream writers and drpc's connection goroutines
// end by themselves.
//
// hollywood logs to slog's default logger (a stopped connection is an
// ERROR line there); that noise is dropped unless TEST_LOG is set.
//
// This test binary is also re-executed as the children some tests need,
// before any test runs: etcd members, the scripted fake app-server (the
// daemon's "codex" in the secrets test, configured through --codex-env),
// and the bench's flood app-server (the bench in TestBenchSmall runs its
// own binary, this one, with the hidden command, as the daemon would).
// The daemon binary itself links no fake.
func TestMain(m *testing.M) {
	etcdtest.Main() // the etcd processes of the external-etcd cluster tests are this binary
	if os.Getenv(fakeappserver.EnvVar) != "" {
		fakeappserver.Main() // never returns
	}
	if len(os.Args) > 1 && os.Args[1] == benchFloodCommand {
		os.Exit(runCLI(context.Background(), os.Args[1:], os.Stdin, os.Stdout, os.Stderr))
	}
	if os.Getenv("TEST_LOG") == "" {
		slog.SetDefault(slog.New(slog.DiscardHandler))
	}
	goleak.VerifyTestMain(m)
}
