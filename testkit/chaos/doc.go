// Package chaos is the daemon's chaos suite (see TestChaos and
// docs/RELIABILITY.md). It runs the real supervisor binary, the real codex
// CLI and the mock model, sends many rounds for several users at once over
// hollywood remote, and SIGKILLs codex app-servers (and, once or more, the
// daemon itself) at random moments; then it checks that every round got
// exactly one verdict, that every failure names its cause, that every mesh
// thread still works, that no stored file is damaged and that nothing is
// left running.
//
// The package holds tests only:
//
//	go test -race -count=1 -run TestChaos ./testkit/chaos/ -v
//	go test -race -count=1 -timeout 60m -run TestChaos ./testkit/chaos/ -v -args -chaos.rounds=200 -chaos.kills=40 -chaos.daemon-kills=2
//
// The tests in bugs_test.go are regression tests of the daemon bugs the
// suite found (docs/RELIABILITY.md).
package chaos
