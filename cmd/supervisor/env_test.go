package main

import (
	"flag"
	"strings"
	"testing"
	"time"
)

func TestServeSettingsFromEnvironment(t *testing.T) {
	fs := flag.NewFlagSet("serve", flag.ContinueOnError)
	o := serveFlags(fs)
	if err := fs.Parse([]string{"--homes", "/from/flag"}); err != nil {
		t.Fatal(err)
	}
	env := map[string]string{
		"SUPERVISOR_HOMES":           "/from/env", // the flag wins
		"SUPERVISOR_WORKSPACE":       "/ws",
		"SUPERVISOR_IDLE_TIMEOUT":    "90s",
		"SUPERVISOR_CODEX_ENV":       "A=1,B=2",
		"SUPERVISOR_ALLOW_PLAINTEXT": "true",
		// The edge's settings come from the environment too.
		"SUPERVISOR_AUTHZ":             "/etc/authz.json",
		"SUPERVISOR_PEER_RATE":         "2.5",
		"SUPERVISOR_MAX_USERS":         "7",
		"SUPERVISOR_USER_IDLE":         "3m",
		"SUPERVISOR_HANDSHAKE_TIMEOUT": "4s",
		"SUPERVISOR_MAX_CONNS_PER_IP":  "9",
	}
	lookup := func(k string) (string, bool) { v, ok := env[k]; return v, ok }
	if err := flagsFromEnv(fs, lookup); err != nil {
		t.Fatal(err)
	}
	if o.homes != "/from/flag" || o.workspace != "/ws" || o.idleTimeout != 90*time.Second ||
		strings.Join(o.codexEnv, " ") != "A=1 B=2" || !o.allowPlaintext {
		t.Errorf("settings = homes %q workspace %q idle %v codex-env %v plaintext %v",
			o.homes, o.workspace, o.idleTimeout, o.codexEnv, o.allowPlaintext)
	}
	if o.authz != "/etc/authz.json" || o.peerRate != 2.5 || o.maxUsers != 7 || o.userIdle != 3*time.Minute ||
		o.handshakeTimeout != 4*time.Second || o.maxConnsPerIP != 9 {
		t.Errorf("edge settings = authz %q peer-rate %v max-users %d user-idle %v handshake %v conns/IP %d",
			o.authz, o.peerRate, o.maxUsers, o.userIdle, o.handshakeTimeout, o.maxConnsPerIP)
	}

	fs = flag.NewFlagSet("serve", flag.ContinueOnError)
	serveFlags(fs)
	_ = fs.Parse(nil)
	err := flagsFromEnv(fs, func(k string) (string, bool) {
		if k == "SUPERVISOR_MAX_LIVE" {
			return "many", true
		}
		return "", false
	})
	if err == nil || !strings.Contains(err.Error(), "SUPERVISOR_MAX_LIVE") {
		t.Errorf("a bad value: err = %v, want it named", err)
	}
}
