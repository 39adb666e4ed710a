package main

import (
	"log/slog"
	"os"
	"testing"

	"go.uber.org/goleak"

	"github.com/meshweaver/supervisor/testkit/etcdtest"
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
func TestMain(m *testing.M) {
	etcdtest.Main() // the etcd processes of the external-etcd cluster tests are this binary
	if os.Getenv("TEST_LOG") == "" {
		slog.SetDefault(slog.New(slog.DiscardHandler))
	}
	goleak.VerifyTestMain(m)
}
