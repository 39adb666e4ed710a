package main

import (
	"strings"
	"testing"
)

// TestCallersNameTheTLSMismatch: a plaintext caller of a daemon serving
// mutual TLS, and a TLS caller of a plaintext daemon, are told which side
// speaks TLS and what to give or drop, by round (exit 7), interrupt and
// models; the unreachable error stays behind it. Before, both got only
// "the daemon is unreachable at …: EOF".
func TestCallersNameTheTLSMismatch(t *testing.T) {
	dir := t.TempDir()
	ca := tlsNewCA(t, dir, "ca", "meshweaver test CA")
	daemonCert, daemonKey := ca.issue(t, dir, "daemon")
	callerCert, callerKey := ca.issue(t, dir, "caller")
	tlsDaemon := opsNewRig(t, tlsConfig(t, daemonCert, daemonKey, ca.pem), nil)
	plainDaemon := opsNewRig(t, nil, nil)
	tlsFlags := []string{"--tls-cert", callerCert, "--tls-key", callerKey, "--tls-ca", ca.pem}

	for _, c := range []struct {
		name, addr string
		flags      []string
		want       []string
	}{
		{"plaintext caller, TLS daemon", tlsDaemon.addr, nil,
			[]string{"the daemon at " + tlsDaemon.addr + " expects TLS: give --tls-cert, --tls-key and --tls-ca"}},
		// The plaintext remote hangs up on a hello, or leaves it
		// unanswered: both are named.
		{"TLS caller, plaintext daemon", plainDaemon.addr, tlsFlags,
			[]string{"the daemon at " + plainDaemon.addr + " does not speak TLS", "drop --tls-*"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			for _, cmd := range [][]string{
				{"round", "--thread", "t", "--timeout", opsWait.String(), "hello"},
				{"interrupt", "--thread", "t", "--timeout", opsWait.String()},
				{"models", "--timeout", opsWait.String()},
			} {
				args := append(append(cmd, "--addr", c.addr, "--user", "mismatch"), c.flags...)
				code, stdout, stderr := tlsRunCLI(t, args...)
				want := 1
				if cmd[0] == "round" {
					want = exitNoVerdict
				}
				if code != want || stdout != "" {
					t.Errorf("%s: exit %d, stdout %q, stderr %q; want %d", cmd[0], code, stdout, stderr, want)
				}
				for _, w := range append(c.want, "unreachable") {
					if !strings.Contains(stderr, w) {
						t.Errorf("%s: stderr %q lacks %q", cmd[0], stderr, w)
					}
				}
			}
		})
	}
	// A caller that matches is told nothing of the kind: the same
	// command reaches each daemon (an unknown user's models is an answer).
	for _, c := range []struct {
		addr  string
		flags []string
	}{{tlsDaemon.addr, tlsFlags}, {plainDaemon.addr, nil}} {
		code, _, stderr := tlsRunCLI(t, append([]string{"interrupt", "--addr", c.addr, "--user", "mismatch", "--thread", "t",
			"--timeout", opsWait.String()}, c.flags...)...)
		if strings.Contains(stderr, "TLS") || strings.Contains(stderr, "unreachable") {
			t.Errorf("interrupt to %s with matching TLS: exit %d, stderr %q", c.addr, code, stderr)
		}
	}
}
