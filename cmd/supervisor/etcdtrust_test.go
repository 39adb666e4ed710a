package main

import (
	"bytes"
	"context"
	"crypto/tls"
	"io"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/meshweaver/supervisor/cluster"
)

// TestEtcdTrustsOnlyTheMembersCA: a member under mutual TLS whose etcd
// trusts a CA of the members' own (--etcd-tls-*), not the callers' CA
// that the remote trusts. Alice, a caller that CA signed, is served on
// the remote; with the same certificate etcd's client and peer ports
// refuse her at the handshake, so she can neither read nor write the
// keys saying which member owns a user. The member's etcd certificate
// reads and writes them, the fence helper is handed the etcd files (it
// revokes through etcd for a dead daemon), and the start log has no
// warning that etcd trusts the callers.
func TestEtcdTrustsOnlyTheMembersCA(t *testing.T) {
	dir := t.TempDir()
	callers := tlsNewCA(t, dir, "ca", "meshweaver test CA")
	members := tlsNewCA(t, dir, "etcd-ca", "meshweaver test etcd CA")
	nodeCert, nodeKey := callers.issueURI(t, dir, "m0", "spiffe://mesh/supervisor-m0")
	aliceCert, aliceKey := callers.issueURI(t, dir, "alice", "spiffe://mesh/alice-agent")
	etcdCert, etcdKey := members.issue(t, dir, "m0-etcd")
	authz := filepath.Join(dir, "authz.json")
	if err := os.WriteFile(authz, []byte(memberDialPolicy), 0o600); err != nil {
		t.Fatal(err)
	}
	peer, client := mustFreeAddr(t), mustFreeAddr(t)
	h := hostileStart(t, "--tls-cert", nodeCert, "--tls-key", nodeKey, "--tls-ca", callers.pem, "--authz", authz,
		"--etcd-tls-cert", etcdCert, "--etcd-tls-key", etcdKey, "--etcd-tls-ca", members.pem,
		"--cluster", "c1", "--member", "m0", "--etcd-name", "m0", "--etcd-dir", dir+"/etcd",
		"--etcd-peer-listen", "https://"+peer, "--etcd-client-listen", "https://"+client,
		"--etcd-initial-cluster", "m0=https://"+peer)
	h.srv.waitMsg("supervisor serving")

	// The remote still trusts the callers' CA.
	oc := opsNewCaller(t, h.addr, tlsConfig(t, aliceCert, aliceKey, callers.pem))
	probe(t, oc)

	// get asks etcd's port for path with cert, trusting the members' CA
	// for etcd's own certificate: alice is not refused for want of trust
	// in the server, only for her own certificate.
	get := func(port, path, cert, key string) (int, string, error) {
		t.Helper()
		pair, err := tls.LoadX509KeyPair(cert, key)
		if err != nil {
			t.Fatal(err)
		}
		conf := tlsConfig(t, etcdCert, etcdKey, members.pem)
		conf.Certificates = []tls.Certificate{pair}
		hc := &http.Client{Timeout: opsWait, Transport: &http.Transport{TLSClientConfig: conf}}
		defer hc.CloseIdleConnections()
		resp, err := hc.Get("https://" + port + path)
		if err != nil {
			return 0, "", err
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b), nil
	}
	for _, p := range []struct{ name, port, path string }{{"client", client, "/version"}, {"peer", peer, "/members"}} {
		if code, body, err := get(p.port, p.path, aliceCert, aliceKey); err == nil {
			t.Errorf("etcd's %s port answered alice's certificate: %d %.200s", p.name, code, body)
		} else if !strings.Contains(err.Error(), "remote error: tls:") { // etcd's alert, not our own refusal of its certificate
			t.Errorf("etcd's %s port with alice's certificate: %v, want etcd to refuse it", p.name, err)
		} else {
			t.Logf("etcd's %s port with alice's certificate: %v", p.name, err)
		}
		if code, body, err := get(p.port, p.path, etcdCert, etcdKey); err != nil || code != http.StatusOK {
			t.Errorf("etcd's %s port with the member's certificate: %d %.200s %v", p.name, code, body, err)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), opsWait)
	defer cancel()
	alice, err := cluster.NewClient("https://"+client, cluster.TLSFiles{Cert: aliceCert, Key: aliceKey, CA: members.pem})
	if err != nil {
		t.Fatal(err)
	}
	defer alice.Close()
	short, stop := context.WithTimeout(ctx, 2*time.Second)
	_, err = alice.Put(short, "/meshweaver/c1/owners/alice", "elsewhere")
	stop()
	if err == nil {
		t.Error("alice's certificate wrote an owner key through the etcd client")
	}
	member, err := cluster.NewClient("https://"+client, cluster.TLSFiles{Cert: etcdCert, Key: etcdKey, CA: members.pem})
	if err != nil {
		t.Fatal(err)
	}
	defer member.Close()
	if r, err := member.Get(ctx, "/meshweaver/c1/members/m0"); err != nil || len(r.Kvs) != 1 || string(r.Kvs[0].Value) != h.addr {
		t.Errorf("the member's own record, read with its etcd certificate: %v %v, want %s", r, err, h.addr)
	}
	if r, err := member.Get(ctx, "/meshweaver/c1/owners/alice"); err != nil || len(r.Kvs) != 0 {
		t.Errorf("alice's owner key after her write: %v %v, want none", r, err)
	}

	if args := fenceHelperCmdline(t, h.srv.cmd.Process.Pid); !strings.Contains(args, "--tls-ca\x00"+members.pem+"\x00") ||
		!strings.Contains(args, "--tls-cert\x00"+etcdCert+"\x00") {
		t.Errorf("the fence helper's command line %q: want the etcd files", strings.ReplaceAll(args, "\x00", " "))
	}
	if _, ok := h.srv.find(func(rec map[string]any) bool {
		return strings.HasPrefix(rec["msg"].(string), etcdTrustWarning)
	}); ok {
		t.Error("the start log warns that etcd trusts the callers' CA, which it does not")
	}
	h.alive()
}

// fenceHelperCmdline is the NUL-separated command line of the fence
// helper the daemon with pid runs.
func fenceHelperCmdline(t *testing.T, pid int) string {
	t.Helper()
	ents, err := os.ReadDir("/proc")
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range ents {
		if _, err := strconv.Atoi(e.Name()); err != nil {
			continue
		}
		b, err := os.ReadFile(filepath.Join("/proc", e.Name(), "cmdline"))
		if err != nil {
			continue
		}
		if bytes.Contains(b, []byte("\x00fence\x00--daemon-pid\x00"+strconv.Itoa(pid)+"\x00")) {
			return string(b)
		}
	}
	t.Fatalf("no fence helper for daemon %d", pid)
	return ""
}

// TestEtcdTrustsCallersWarning: the start warning (serve --check prints
// it too) when etcd trusts a CA that signs callers: no --etcd-tls-* in a
// TLS cluster, the callers' CA under another name, or bundles with a CA
// in common; none for a CA of the members' own or outside a cluster.
func TestEtcdTrustsCallersWarning(t *testing.T) {
	dir := t.TempDir()
	callers := tlsNewCA(t, dir, "ca", "meshweaver test CA")
	members := tlsNewCA(t, dir, "etcd-ca", "meshweaver test etcd CA")
	cert, key := callers.issue(t, dir, "node")
	etcdCert, etcdKey := members.issue(t, dir, "node-etcd")
	copied := filepath.Join(dir, "copy-of-ca.pem")
	b, err := os.ReadFile(callers.pem)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(copied, b, 0o600); err != nil {
		t.Fatal(err)
	}
	// A bundle of etcd's holding the members' CA and the callers'.
	mb, err := os.ReadFile(members.pem)
	if err != nil {
		t.Fatal(err)
	}
	both := filepath.Join(dir, "both.pem")
	if err := os.WriteFile(both, append(append([]byte("# the members' CA, then the callers'\n"), mb...), b...), 0o600); err != nil {
		t.Fatal(err)
	}
	// One root above two intermediates, the callers' and the members'.
	root := tlsNewCA(t, dir, "root", "meshweaver test root")
	callersInt := tlsMakeCA(t, dir, "callers-int", "meshweaver test callers", root, 0)
	membersInt := tlsMakeCA(t, dir, "members-int", "meshweaver test members", root, 0)
	intCert, intKey := callersInt.issue(t, dir, "node-int")
	underRoot := tlsOptions{cert: intCert, key: intKey, ca: callersInt.pem}
	node := tlsOptions{cert: cert, key: key, ca: callers.pem}
	for _, tc := range []struct {
		name    string
		cluster string
		node    tlsOptions
		etcd    tlsOptions
		warn    bool
	}{
		{"one CA for both", "c1", node, tlsOptions{}, true},
		{"the callers' CA copied", "c1", node, tlsOptions{cert: etcdCert, key: etcdKey, ca: copied}, true},
		{"a bundle with the callers' CA in it", "c1", node, tlsOptions{cert: etcdCert, key: etcdKey, ca: both}, true},
		{"the callers' bundle with etcd's CA in it", "c1", tlsOptions{cert: cert, key: key, ca: both}, tlsOptions{cert: etcdCert, key: etcdKey, ca: members.pem}, true},
		{"a CA of the members' own", "c1", node, tlsOptions{cert: etcdCert, key: etcdKey, ca: members.pem}, false},
		{"etcd's root above the callers' intermediate", "c1", underRoot, tlsOptions{cert: etcdCert, key: etcdKey, ca: root.pem}, true},
		{"etcd's own intermediate beside the callers' under one root", "c1", underRoot, tlsOptions{cert: etcdCert, key: etcdKey, ca: membersInt.pem}, false},
		{"no cluster", "", node, tlsOptions{}, false},
		{"plaintext", "c1", tlsOptions{}, tlsOptions{}, false},
	} {
		o := clusterOptions{name: tc.cluster, etcdTLS: tc.etcd}
		if got := o.etcdTrustsCallers(tc.node); (got != "") != tc.warn {
			t.Errorf("%s: warning %q, want one: %v", tc.name, got, tc.warn)
		}
	}
	o := clusterOptions{name: "c1"}
	if w := o.etcdTrustsCallers(node); !strings.Contains(w, "--etcd-tls-ca") {
		t.Errorf("the warning %q does not name the flag that mends it", w)
	}
}

// TestEtcdTLSSettings: --etcd-tls-* come whole or not at all, only in a
// cluster, and name files that load; given, they are what etcd gets
// (the embedded member's URLs are https with them, even without --tls-*).
func TestEtcdTLSSettings(t *testing.T) {
	dir := t.TempDir()
	members := tlsNewCA(t, dir, "etcd-ca", "meshweaver test etcd CA")
	callers := tlsNewCA(t, dir, "ca", "meshweaver test CA")
	etcdCert, etcdKey := members.issue(t, dir, "node-etcd")
	callersCert, callersKey := callers.issue(t, dir, "node")
	uriCert, uriKey := members.issueURI(t, dir, "node-etcd-uri", "spiffe://mesh/supervisor-n1")
	noSAN, noSANKey := members.issueFor(t, dir, "node-etcd-nosan", nil, nil)
	noEnv := func(string) (string, bool) { return "", false }
	base := []string{"--homes", dir, "--workspace", dir, "--codex", opsCodexBin(t)}
	embedded := []string{"--cluster", "prod", "--etcd-name", "n1", "--etcd-dir", dir + "/etcd", "--etcd-peer-listen", "https://127.0.0.1:2380",
		"--etcd-client-listen", "https://127.0.0.1:2379", "--etcd-initial-cluster", "n1=https://127.0.0.1:2380"}
	for _, tc := range []struct {
		args []string
		want []string
	}{
		{[]string{"--etcd-tls-ca", members.pem}, []string{"need --cluster"}},
		{append([]string{"--etcd-tls-ca", members.pem}, embedded...), []string{"all of --etcd-tls-cert, --etcd-tls-key and --etcd-tls-ca"}},
		{append([]string{"--etcd-tls-cert", etcdCert, "--etcd-tls-key", etcdKey, "--etcd-tls-ca", dir + "/missing.pem"}, embedded...), []string{"--etcd-tls-ca", "missing.pem"}},
		// Files that load but do not fit: each fails only at etcd's first
		// connection otherwise.
		{append([]string{"--etcd-tls-cert", callersCert, "--etcd-tls-key", callersKey, "--etcd-tls-ca", members.pem}, embedded...),
			[]string{"--etcd-tls-cert " + callersCert + " is not a client certificate of etcd's CA"}},
		{append([]string{"--etcd-tls-cert", noSAN, "--etcd-tls-key", noSANKey, "--etcd-tls-ca", members.pem}, embedded...),
			[]string{"is not a server certificate of etcd's CA for 127.0.0.1"}},
		// The etcd client takes TLS from the first endpoint's scheme.
		{[]string{"--cluster", "prod", "--member", "n1", "--etcd-tls-cert", etcdCert, "--etcd-tls-key", etcdKey, "--etcd-tls-ca", members.pem,
			"--etcd-endpoints", "http://10.0.0.1:2379,https://10.0.0.2:2379"}, []string{`--etcd-endpoints: etcd URL "http://10.0.0.1:2379"`, "so https"}},
		{[]string{"--cluster", "prod", "--member", "n1", "--etcd-endpoints", "https://10.0.0.1:2379"}, []string{`--etcd-endpoints: etcd URL "https://10.0.0.1:2379": without TLS, http`}},
	} {
		settingsRefused(t, append(append([]string{}, base...), tc.args...), tc.want)
	}
	// load is an embedded member with etcd's own files cert and key.
	load := func(cert, key string) (*serveOptions, error) {
		args := append([]string{"--etcd-tls-cert", cert, "--etcd-tls-key", key, "--etcd-tls-ca", members.pem, "--allow-plaintext"}, embedded...)
		return loadServeOptions(append(append([]string{}, base...), args...), noEnv, &bytes.Buffer{})
	}
	o, err := load(etcdCert, etcdKey)
	if err != nil {
		t.Fatalf("an embedded member with etcd's own TLS files: %v", err)
	}
	if got, want := o.cluster.etcdFiles(o.tls), (cluster.TLSFiles{Cert: etcdCert, Key: etcdKey, CA: members.pem}); got != want {
		t.Errorf("etcd's files: %+v, want %+v", got, want)
	}
	// A SPIFFE certificate with an IP SAN for the listen host serves.
	if _, err := load(uriCert, uriKey); err != nil {
		t.Errorf("a SPIFFE certificate for 127.0.0.1: %v", err)
	}
}

// TestEtcdReloadNeedsARestart: etcd reads its CA and its files' paths
// once, so a SIGHUP that finds either changed names it among the
// settings that need a restart; a certificate renewed at the same path
// does not (etcd reads it at each handshake).
func TestEtcdReloadNeedsARestart(t *testing.T) {
	dir := t.TempDir()
	members := tlsNewCA(t, dir, "etcd-ca", "meshweaver test etcd CA")
	other := tlsNewCA(t, dir, "other-ca", "meshweaver test etcd CA 2")
	etcdCert, etcdKey := members.issue(t, dir, "node-etcd")
	conf := filepath.Join(dir, "supervisor.conf")
	write := func(name, text string) {
		t.Helper()
		if err := os.WriteFile(name, []byte(text), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	caFile := filepath.Join(dir, "etcd-trust.pem")
	pemOf := func(name string) string {
		b, err := os.ReadFile(name)
		if err != nil {
			t.Fatal(err)
		}
		return string(b)
	}
	write(caFile, pemOf(members.pem))
	write(conf, "log-level info\n")
	args := []string{"--homes", dir, "--workspace", dir, "--codex", opsCodexBin(t), "--config", conf,
		"--cluster", "prod", "--member", "n1", "--etcd-endpoints", "https://10.0.0.1:2379",
		"--etcd-tls-cert", etcdCert, "--etcd-tls-key", etcdKey, "--etcd-tls-ca", caFile}
	running, err := loadServeOptions(args, func(string) (string, bool) { return "", false }, &bytes.Buffer{})
	if err != nil {
		t.Fatal(err)
	}
	hup := func() string {
		t.Helper()
		var out bytes.Buffer
		var level slog.LevelVar
		reload(args, running, &level, nil, slog.New(slog.NewTextHandler(&out, nil)))
		return out.String()
	}
	const restart = "settings changed that a reload cannot apply"
	if got := hup(); strings.Contains(got, restart) {
		t.Errorf("a reload with nothing changed asks for a restart:\n%s", got)
	}
	// The CA file now holds both CAs (a rotation's first step).
	write(caFile, pemOf(members.pem)+pemOf(other.pem))
	if got := hup(); !strings.Contains(got, restart) || !strings.Contains(got, "etcd's CA ("+caFile+"): new contents") {
		t.Errorf("a reload after etcd's CA changed:\n%s", got)
	}
}

// TestCheckWarnsEtcdTrustsCallers: serve --check prints the warning for
// a member whose etcd trusts the callers' CA, and not for one with an
// etcd CA of its own.
func TestCheckWarnsEtcdTrustsCallers(t *testing.T) {
	root, exe, workspace := checkRig(t)
	callers := tlsNewCA(t, root, "ca", "meshweaver test CA")
	members := tlsNewCA(t, root, "etcd-ca", "meshweaver test etcd CA")
	cert, key := callers.issue(t, root, "node")
	etcdCert, etcdKey := members.issue(t, root, "node-etcd")
	listen, metrics := checkAddrs(t)
	check := []string{"serve", "--check", "--homes", filepath.Join(root, "homes"), "--workspace", workspace, "--codex", opsCodexBin(t),
		"--listen", listen, "--metrics-listen", metrics, "--tls-cert", cert, "--tls-key", key, "--tls-ca", callers.pem, "--authz-allow-any",
		"--cluster", "prod", "--member", "n1", "--etcd-endpoints", "https://127.0.0.1:2379"}
	code, stdout, stderr := cliRun(t, exe, nil, check...)
	if code != 0 || !strings.Contains(stdout, "warning: "+etcdTrustWarning) {
		t.Errorf("serve --check with one CA: exit %d, stdout %q, stderr %q", code, stdout, stderr)
	}
	code, stdout, stderr = cliRun(t, exe, nil, append(check, "--etcd-tls-cert", etcdCert, "--etcd-tls-key", etcdKey, "--etcd-tls-ca", members.pem)...)
	if code != 0 || strings.Contains(stdout, etcdTrustWarning) {
		t.Errorf("serve --check with etcd's own CA: exit %d, stdout %q, stderr %q", code, stdout, stderr)
	}
}
