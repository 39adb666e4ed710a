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
