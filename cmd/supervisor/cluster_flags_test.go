package main

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestClusterSettings: the cluster flags come from the --config file like
// every other, a single node needs none of them, and every mistake is
// reported at once.
func TestClusterSettings(t *testing.T) {
	dir := t.TempDir()
	noEnv := func(string) (string, bool) { return "", false }
	base := []string{"--homes", dir, "--workspace", dir, "--codex", opsCodexBin(t)}

	o, err := loadServeOptions(base, noEnv, &bytes.Buffer{})
	if err != nil || o.cluster.enabled() || o.cluster.memberOf() != "" {
		t.Fatalf("a single node: %v, cluster %+v", err, o.cluster)
	}

	conf := filepath.Join(dir, "c.conf")
	text := "cluster prod\netcd-name n1\netcd-dir " + dir + "/etcd\netcd-peer-listen http://127.0.0.1:2380\n" +
		"etcd-client-listen http://127.0.0.1:2379\netcd-initial-cluster n1=http://127.0.0.1:2380\nlease-ttl 6s\nfence-margin 2s\nallow-plaintext\n"
	if err := os.WriteFile(conf, []byte(text), 0o600); err != nil {
		t.Fatal(err)
	}
	o, err = loadServeOptions(append(base, "--config", conf), noEnv, &bytes.Buffer{})
	if err != nil {
		t.Fatalf("an embedded member from the config file: %v", err)
	}
	if !o.cluster.enabled() || !o.cluster.embedded() || o.cluster.memberOf() != "n1" || o.cluster.leaseTTL != 6*time.Second {
		t.Fatalf("cluster settings: %+v", o.cluster)
	}

	// An external etcd with a slower election, in a window that holds it.
	if _, err := loadServeOptions(append(append([]string{}, base...), "--cluster", "prod", "--member", "n1", "--etcd-endpoints", "http://x:2379",
		"--lease-ttl", "10s", "--fence-margin", "4s", "--etcd-election-timeout", "2s"), noEnv, &bytes.Buffer{}); err != nil {
		t.Errorf("TTL 10s, margin 4s, election 2s: %v", err)
	}

	for _, tc := range []struct {
		args []string
		want []string
	}{
		{[]string{"--member", "n1"}, []string{"need --cluster"}},
		{[]string{"--cluster", "prod"}, []string{"--member", "--etcd-endpoints or an embedded member"}},
		{[]string{"--cluster", "a/b", "--member", "n 1", "--etcd-endpoints", "http://x:2379", "--lease-ttl", "1500ms", "--fence-margin", "0s"},
			[]string{`--cluster "a/b"`, `--member "n 1"`, "whole seconds", "--fence-margin"}},
		{[]string{"--cluster", "prod", "--etcd-name", "n1"}, []string{"--etcd-name needs --etcd-dir"}},
		// An embedded member in plaintext: its ports are every local
		// process's, the users' agents' included, unless the operator says so.
		{[]string{"--cluster", "prod", "--etcd-name", "n1", "--etcd-dir", "/tmp/x", "--etcd-peer-listen", "http://127.0.0.1:2380",
			"--etcd-client-listen", "http://127.0.0.1:2379", "--etcd-initial-cluster", "n1=http://127.0.0.1:2380"},
			[]string{"an embedded etcd member without TLS serves its client (http://127.0.0.1:2379) and peer (http://127.0.0.1:2380) ports", "--allow-plaintext"}},
		{[]string{"--cluster", "prod", "--member", "n1", "--etcd-endpoints", "http://x:2379", "--lease-ttl", "5s", "--fence-margin", "5s"},
			[]string{"must be positive and below --lease-ttl"}},
		// A window too short to outlast an etcd election: a member's death
		// would fence the survivors.
		{[]string{"--cluster", "prod", "--member", "n1", "--etcd-endpoints", "http://x:2379", "--lease-ttl", "5s", "--fence-margin", "3s"},
			[]string{"fence window", "two etcd election timeouts"}},
		{[]string{"--cluster", "prod", "--member", "n1", "--etcd-endpoints", "http://x:2379", "--lease-ttl", "5s", "--fence-margin", "2s", "--etcd-election-timeout", "2s"},
			[]string{"fence window", "2 × 2s"}},
	} {
		settingsRefused(t, append(append([]string{}, base...), tc.args...), tc.want)
	}
}

// settingsRefused checks that serve's settings args are refused, and
// that what it prints names each of want.
func settingsRefused(t *testing.T, args, want []string) {
	t.Helper()
	var stderr bytes.Buffer
	if _, err := loadServeOptions(args, func(string) (string, bool) { return "", false }, &stderr); err == nil {
		t.Errorf("%q: accepted", args)
		return
	}
	for _, w := range want {
		if !strings.Contains(stderr.String(), w) {
			t.Errorf("%q: stderr lacks %q:\n%s", args, w, stderr.String())
		}
	}
}
