package main

import (
	"bytes"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"math/big"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/meshweaver/supervisor/demomodel"
	"github.com/meshweaver/supervisor/messages"
)

// --- a CA made in the test ---

// tlsCA is a certificate authority made in the test: ECDSA P-256, its
// certificate in a PEM file.
type tlsCA struct {
	cert *x509.Certificate
	key  *ecdsa.PrivateKey
	pem  string // path of the CA certificate
	pool *x509.CertPool
}

// tlsNewCA makes a CA called name, its certificate in dir/<file>.pem.
func tlsNewCA(t *testing.T, dir, file, name string) *tlsCA {
	t.Helper()
	return tlsMakeCA(t, dir, file, name, nil, 0)
}

// tlsMakeCA makes a CA called name, its certificate in dir/<file>.pem:
// self-signed when parent is nil, else an intermediate parent signs;
// pathLen is how many intermediates may stand below it.
func tlsMakeCA(t *testing.T, dir, file, name string, parent *tlsCA, pathLen int) *tlsCA {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber:          tlsSerial(t),
		Subject:               pkix.Name{CommonName: name, Organization: []string{"meshweaver test"}},
		NotBefore:             time.Now().Add(-time.Hour),
		NotAfter:              time.Now().Add(24 * time.Hour),
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageCRLSign,
		BasicConstraintsValid: true,
		IsCA:                  true,
		MaxPathLen:            pathLen,
		MaxPathLenZero:        pathLen == 0,
	}
	signer, signKey := tmpl, key
	if parent != nil {
		signer, signKey = parent.cert, parent.key
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, signer, &key.PublicKey, signKey)
	if err != nil {
		t.Fatal(err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(dir, file+".pem")
	tlsWritePEM(t, path, "CERTIFICATE", der)
	pool := x509.NewCertPool()
	pool.AddCert(cert)
	return &tlsCA{cert: cert, key: key, pem: path, pool: pool}
}

// issue makes a node certificate signed by the CA, for both ends of a
// connection (server and client auth), valid for 127.0.0.1 and localhost;
// it returns the certificate and key files in dir.
func (ca *tlsCA) issue(t *testing.T, dir, name string) (certFile, keyFile string) {
	t.Helper()
	return ca.issueFor(t, dir, name, []net.IP{net.IPv4(127, 0, 0, 1)}, []string{"localhost"})
}

// issueFor is issue with the given subject alternative names.
func (ca *tlsCA) issueFor(t *testing.T, dir, name string, ips []net.IP, dns []string, uris ...*url.URL) (certFile, keyFile string) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: tlsSerial(t),
		Subject:      pkix.Name{CommonName: name},
		NotBefore:    time.Now().Add(-time.Hour),
		NotAfter:     time.Now().Add(24 * time.Hour),
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth},
		IPAddresses:  ips,
		DNSNames:     dns,
		URIs:         uris,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.cert, &key.PublicKey, ca.key)
	if err != nil {
		t.Fatal(err)
	}
	keyDER, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	certFile, keyFile = filepath.Join(dir, name+".crt"), filepath.Join(dir, name+".key")
	tlsWritePEM(t, certFile, "CERTIFICATE", der)
	tlsWritePEM(t, keyFile, "EC PRIVATE KEY", keyDER)
	return certFile, keyFile
}

func tlsSerial(t *testing.T) *big.Int {
	t.Helper()
	n, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 126))
	if err != nil {
		t.Fatal(err)
	}
	return n
}

func tlsWritePEM(t *testing.T, path, typ string, der []byte) {
	t.Helper()
	if err := os.WriteFile(path, pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: der}), 0o600); err != nil {
		t.Fatal(err)
	}
}

// tlsConfig is the daemon's own mutual-TLS configuration for these files.
func tlsConfig(t *testing.T, cert, key, ca string) *tls.Config {
	t.Helper()
	conf, err := (&tlsOptions{cert: cert, key: key, ca: ca}).config()
	if err != nil {
		t.Fatalf("tlsOptions.config: %v", err)
	}
	return conf
}

// --- tests ---

// TestTLSMutualAuth: a daemon listening with mutual TLS (CA and node
// certificates made in the test) serves a caller whose certificate the CA
// signed: a real round against the real CLI goes through. Three intruders
// get nothing through: a plaintext caller, a TLS caller that presents no
// client certificate, and one whose certificate comes from another CA that
// even bears the same name. Their rounds never reach the daemon's root (no
// verdict, no log line, no counter, no home, no model request), and each
// sees the daemon as unreachable.
func TestTLSMutualAuth(t *testing.T) {
	dir := t.TempDir()
	ca := tlsNewCA(t, dir, "ca", "meshweaver test CA")
	daemonCert, daemonKey := ca.issue(t, dir, "daemon")
	callerCert, callerKey := ca.issue(t, dir, "caller")
	// Another CA with the very same name: its certificates claim the right
	// issuer, and only the signature tells them apart.
	rogue := tlsNewCA(t, dir, "rogue-ca", "meshweaver test CA")
	rogueCert, rogueKey := rogue.issue(t, dir, "rogue")

	r := opsNewRig(t, tlsConfig(t, daemonCert, daemonKey, ca.pem), nil)

	// The valid caller: its certificate is signed by the CA; a round runs.
	good := opsNewCaller(t, r.addr, tlsConfig(t, callerCert, callerKey, ca.pem))
	r.model.Enqueue(demomodel.Text("Hello", " over", " mutual", " TLS"))
	res := good.round(messages.StartRound{User: "tls-alice", Thread: "tls/thread", Text: "hello"})
	if res.verdict.Status != messages.StatusCompleted || res.text() != "Hello over mutual TLS" {
		t.Fatalf("the valid caller's round: %+v, text %q; want completed", res.verdict, res.text())
	}

	// The round command with the same flags serve takes.
	tlsFlags := []string{"--tls-cert", callerCert, "--tls-key", callerKey, "--tls-ca", ca.pem}
	r.model.Enqueue(demomodel.Text("from", " the", " command"))
	code, stdout, stderr := tlsRunCLI(t, append(append([]string{"round", "--addr", r.addr, "--user", "tls-alice",
		"--thread", "tls/cli", "--timeout", opsRoundWait.String()}, tlsFlags...), "hello from the command")...)
	if code != 0 || strings.TrimSpace(stdout) != "from the command" {
		t.Errorf("supervisor round over mutual TLS: exit %d, stdout %q, stderr %q", code, stdout, stderr)
	}
	// Without the flags the command gets nowhere.
	code, stdout, stderr = tlsRunCLI(t, "round", "--addr", r.addr, "--user", "tls-intruder-cli", "--thread", "t",
		"--timeout", opsWait.String(), "let me in")
	if code != exitNoVerdict || !strings.Contains(stderr, "unreachable") || stdout != "" {
		t.Errorf("supervisor round in plaintext to the TLS daemon: exit %d, stdout %q, stderr %q; want %d, unreachable", code, stdout, stderr, exitNoVerdict)
	}

	rogueKeyPair, err := tls.LoadX509KeyPair(rogueCert, rogueKey)
	if err != nil {
		t.Fatal(err)
	}
	// Intruders listen with a certificate (hollywood's TLS listener needs
	// one); what they present when dialing the daemon is the point.
	intruderConf := func(clientCert *tls.Certificate) *tls.Config {
		return &tls.Config{
			Certificates: []tls.Certificate{rogueKeyPair},
			RootCAs:      ca.pool, // they do trust the daemon's certificate
			ClientCAs:    rogue.pool,
			ClientAuth:   tls.RequireAndVerifyClientCert,
			MinVersion:   tls.VersionTLS13,
			GetClientCertificate: func(*tls.CertificateRequestInfo) (*tls.Certificate, error) {
				return clientCert, nil
			},
		}
	}
	intruders := []struct {
		name string
		conf *tls.Config
	}{
		{"plaintext", nil},
		{"no client certificate", intruderConf(&tls.Certificate{})},
		{"certificate of another CA", intruderConf(&rogueKeyPair)},
	}
	before := len(r.model.Requests())
	for i, in := range intruders {
		t.Run(in.name, func(t *testing.T) {
			user := "tls-intruder-" + string(rune('a'+i))
			c := opsNewCaller(t, r.addr, in.conf)
			id := c.start(messages.StartRound{User: user, Thread: "tls/thread", Text: "let me in"})
			c.send(messages.SetAPIKey{User: user, APIKey: "intruder-key-0123456789"})
			// The link is dropped: the caller learns that the daemon is
			// unreachable, and nothing else arrives.
			unreachable := func(m any) bool { err, ok := m.(error); return ok && errors.Is(err, errUnreachable) }
			c.awaitOther("unreachable", opsWait, unreachable)
			for _, m := range c.got {
				if !unreachable(m) {
					t.Errorf("the intruder received %#v", m)
				}
			}
			if _, err := os.Stat(filepath.Join(r.homes, user)); !errors.Is(err, os.ErrNotExist) {
				t.Errorf("a home for %s exists (stat: %v)", user, err)
			}
			if strings.Contains(r.logs.String(), id) {
				t.Errorf("the daemon logged the intruder's round %s", id)
			}
		})
	}

	// The daemon is still fine, and saw nothing of the intruders.
	r.model.Enqueue(demomodel.Text("still", " here"))
	if res := good.round(messages.StartRound{User: "tls-alice", Thread: "tls/thread", Text: "still there?"}); res.verdict.Status != messages.StatusCompleted || !res.verdict.Resumed {
		t.Errorf("the valid caller's second round: %+v; want completed on the resumed thread", res.verdict)
	}
	if n := len(r.model.Requests()) - before; n != 1 {
		t.Errorf("the model got %d requests after the intruders, want 1 (the valid caller's)", n)
	}
	ents, err := os.ReadDir(r.homes)
	if err != nil {
		t.Fatal(err)
	}
	if len(ents) != 1 || ents[0].Name() != "tls-alice" {
		t.Errorf("homes holds %v, want tls-alice only", ents)
	}
	_, metrics := tlsGather(t, r)
	for _, m := range []struct {
		name, labels string
		want         float64
	}{
		{"supervisor_rounds_total", `status="completed"`, 3},
		{"supervisor_users", "", 1},
	} {
		if v, _ := opsMetric(metrics, m.name, m.labels); v != m.want {
			t.Errorf("%s{%s} = %v, want %v", m.name, m.labels, v, m.want)
		}
	}
	// The intruders are counted as failed handshakes, and only that: every
	// other label set is there from the start, at zero.
	for _, line := range strings.Split(metrics, "\n") {
		if strings.HasPrefix(line, "supervisor_remote_rejected_total{") && !strings.HasPrefix(line, `supervisor_remote_rejected_total{reason="handshake"}`) &&
			!strings.HasSuffix(line, "} 0") {
			t.Errorf("/metrics shows %s: something of the intruders passed the handshake", line)
		}
	}
	for _, m := range []struct{ name, labels string }{
		{"supervisor_rounds_total", `status="rejected"`}, {"supervisor_rounds_total", `status="failed"`},
	} {
		if v, ok := opsMetric(metrics, m.name, m.labels); !ok || v != 0 {
			t.Errorf("/metrics shows %s{%s} = %v (present %v): something of the intruders reached the root", m.name, m.labels, v, ok)
		}
	}
	for _, s := range []string{"rejected a", "tls-intruder", "let me in"} {
		if strings.Contains(r.logs.String(), s) {
			t.Errorf("the daemon's log holds %q", s)
		}
	}
}

// TestTLSCARollover checks the rotation procedure of docs/OPERATIONS.md:
// --tls-ca is a PEM bundle, so during a rollover every node trusts the old
// and the new CA, and nodes with certificates of either talk to each other.
// A node that still trusts only the old CA cannot verify a daemon already
// on a new certificate: the bundle goes everywhere first.
func TestTLSCARollover(t *testing.T) {
	dir := t.TempDir()
	oldCA := tlsNewCA(t, dir, "old-ca", "meshweaver CA 2025")
	newCA := tlsNewCA(t, dir, "new-ca", "meshweaver CA 2026")
	bundle := filepath.Join(dir, "bundle.pem")
	var both []byte
	for _, f := range []string{oldCA.pem, newCA.pem} {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		both = append(both, b...)
	}
	if err := os.WriteFile(bundle, both, 0o600); err != nil {
		t.Fatal(err)
	}
	daemonCert, daemonKey := newCA.issue(t, dir, "daemon-new")
	oldCert, oldKey := oldCA.issue(t, dir, "caller-old")
	newCert, newKey := newCA.issue(t, dir, "caller-new")

	r := opsNewRig(t, tlsConfig(t, daemonCert, daemonKey, bundle), nil)
	// A request that needs no codex and is answered: a round of an
	// invalid user gets its rejected verdict.
	probe := messages.StartRound{User: "../probe", Thread: "t", Text: "x"}
	for _, c := range []struct {
		name       string
		cert, key  string
		ca         string
		getThrough bool
	}{
		{"old certificate, both CAs", oldCert, oldKey, bundle, true},
		{"new certificate, new CA only", newCert, newKey, newCA.pem, true},
		{"old certificate, old CA only", oldCert, oldKey, oldCA.pem, false},
	} {
		t.Run(c.name, func(t *testing.T) {
			caller := opsNewCaller(t, r.addr, tlsConfig(t, c.cert, c.key, c.ca))
			id := caller.start(probe)
			m := caller.awaitOther("a verdict, or the daemon unreachable,", opsWait, func(m any) bool {
				switch m := m.(type) {
				case messages.RoundFinished:
					return m.RoundID == id
				case error:
					return errors.Is(m, errUnreachable)
				}
				return false
			})
			v, ok := m.(messages.RoundFinished)
			switch {
			case c.getThrough && (!ok || v.Status != messages.StatusRejected):
				t.Errorf("got %#v, want the rejected verdict of the probe", m)
			case !c.getThrough && ok:
				t.Errorf("got %#v, want the daemon unreachable", m)
			}
		})
	}
}

// TestTLSReplyDialFailureKeepsServing: over mutual TLS the daemon dials
// each caller back to deliver its replies. When that dial fails — here a
// caller whose outbound certificate the CA signed (so its requests get
// in) but whose listener presents one of another CA, so the daemon cannot
// verify it; the same happens with a caller that went away (connection
// refused) while replies were still due — the daemon refuses the message
// as from an unverified sender, tells the caller so over the connection
// the message came on (it prints a refusal at once instead of waiting out
// its timeout), and keeps serving everyone else. It runs the built
// binary, because a crash of the daemon would take the test binary with
// it.
func TestTLSReplyDialFailureKeepsServing(t *testing.T) {
	dir := t.TempDir()
	ca := tlsNewCA(t, dir, "ca", "meshweaver test CA")
	daemonCert, daemonKey := ca.issue(t, dir, "daemon")
	goodCert, goodKey := ca.issue(t, dir, "good")
	rogue := tlsNewCA(t, dir, "rogue-ca", "meshweaver test CA")
	rogueCert, rogueKey := rogue.issue(t, t.TempDir(), "good") // the same CN, another CA
	exe := opsBuild(t, dir)

	addr, err := freeLoopbackAddr()
	if err != nil {
		t.Fatal(err)
	}
	workspace := filepath.Join(dir, "workspace")
	if err := os.MkdirAll(workspace, 0o700); err != nil {
		t.Fatal(err)
	}
	srv := opsStartServe(t, exe, "serve", "--listen", addr, "--homes", filepath.Join(dir, "homes"),
		"--workspace", workspace, "--codex", opsCodexBin(t), "--tls-cert", daemonCert, "--tls-key", daemonKey,
		"--tls-ca", ca.pem, "--authz-allow-any", "--metrics-listen", "127.0.0.1:0", "--log-format", "json", "--log-level", "debug")
	metrics := srv.waitMsg("metrics serving")

	goodPair, err := tls.LoadX509KeyPair(goodCert, goodKey)
	if err != nil {
		t.Fatal(err)
	}
	badConf := tlsConfig(t, rogueCert, rogueKey, ca.pem) // the listener: another CA
	badConf.GetClientCertificate = func(*tls.CertificateRequestInfo) (*tls.Certificate, error) { return &goodPair, nil }
	bad := opsNewCaller(t, addr, badConf)
	crashed := func(rec map[string]any) bool { return rec["msg"] == "Actor crashed and restarted" }
	// The sender of each request must be dialled back to prove its
	// identity; the dial fails (the listener's chain does not verify), so
	// the request is refused as from an unverified sender, the refusal
	// comes back over the caller's own connection, and the daemon is up.
	for i := 1; i <= 2; i++ {
		id := bad.start(messages.StartRound{User: "bad", Thread: "t", Text: "x"})
		m := bad.awaitOther("the refusal", opsWait, func(m any) bool {
			v, ok := m.(messages.RoundFinished)
			return ok && v.RoundID == id
		})
		if v := m.(messages.RoundFinished); v.Status != messages.StatusRejected || !strings.Contains(v.Error, "cannot verify the sender") ||
			!strings.Contains(v.Error, "certificate signed by unknown authority") {
			t.Errorf("refused sender #%d: %+v, want rejected, naming the failed verification", i, v)
		}
		opsWaitMetric(t, fmt.Sprintf("http://%s/metrics", metrics["listen"]), "supervisor_remote_rejected_total", `reason="sender"`,
			fmt.Sprintf(">= %d", i), func(v float64) bool { return v >= float64(i) })
		if !srv.running() {
			srv.wait(opsWait)
			t.Fatalf("reply dial failure #%d: the daemon died (%v):\n%s", i, srv.err, srv.crash())
		}
	}
	srv.waitCount("the refused dial back", 1, func(rec map[string]any) bool {
		return rec["msg"] == "refused the certificate of a peer the daemon dialled" && rec["peer"] == "cn:good"
	})
	if rec, found := srv.find(crashed); found {
		stack, _ := rec["stack"].(string)
		t.Errorf("a failed reply dial crashed an actor of the daemon (%d times): %v\n%s", srv.count(crashed), rec["pid"], stack[:min(len(stack), 400)])
	}
	bad.close()

	// Everyone else is still served, and the process is up.
	good := opsNewCaller(t, addr, tlsConfig(t, goodCert, goodKey, ca.pem))
	if v := good.round(messages.StartRound{User: "../probe", Thread: "t", Text: "x"}).verdict; v.Status != messages.StatusRejected {
		t.Errorf("a good caller after the failed dials: %+v, want its rejected verdict", v)
	}
	if !srv.running() {
		t.Fatalf("serve died: %v\n%s", srv.err, srv.crash())
	}
	if code, _ := opsHTTP(t, fmt.Sprintf("http://%s/healthz", metrics["listen"])); code != 200 {
		t.Errorf("/healthz = %d", code)
	}
	if err := syscall.Kill(srv.cmd.Process.Pid, syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if !srv.wait(opsWait) || srv.err != nil {
		t.Errorf("serve after SIGTERM: exited %v, err %v; want exit 0", srv.done, srv.err)
	}
}

// tlsRunCLI runs the command line in-process and returns its exit code and
// output. runCLI silences slog's default logger for callers; it is put
// back.
func tlsRunCLI(t *testing.T, args ...string) (int, string, string) {
	t.Helper()
	prev := slog.Default()
	defer slog.SetDefault(prev)
	var stdout, stderr bytes.Buffer
	code := runCLI(context.Background(), args, strings.NewReader(""), &stdout, &stderr)
	return code, stdout.String(), stderr.String()
}

// tlsGather serves the rig's registry once and returns /metrics.
func tlsGather(t *testing.T, r *opsRig) (int, string) {
	t.Helper()
	ops, err := startOps("127.0.0.1:0", r.reg, r.cfg.Logger)
	if err != nil {
		t.Fatal(err)
	}
	defer ops.stop()
	return opsHTTP(t, "http://"+ops.Addr()+"/metrics")
}

// TestTLSValidateFlags: serve refuses, before starting anything, a
// plaintext listener on a non-loopback address unless --allow-plaintext,
// and TLS flags given only in part or naming unusable files.
func TestTLSValidateFlags(t *testing.T) {
	dir := t.TempDir()
	ca := tlsNewCA(t, dir, "ca", "meshweaver test CA")
	cert, key := ca.issue(t, dir, "node")
	notPEM := filepath.Join(dir, "not.pem")
	if err := os.WriteFile(notPEM, []byte("not a certificate\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	workspace := t.TempDir()
	homes := filepath.Join(t.TempDir(), "homes")
	base := []string{"--homes", homes, "--workspace", workspace}
	authz := filepath.Join(dir, "authz.json")
	if err := os.WriteFile(authz, []byte(`{"version": 1, "grants": [{"identities": ["node"], "users": ["*"], "kinds": ["rounds"]}]}`), 0o600); err != nil {
		t.Fatal(err)
	}
	badAuthz := filepath.Join(dir, "bad-authz.json")
	if err := os.WriteFile(badAuthz, []byte("{\n  \"version\": 1,\n  \"grant\": []\n}\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	tlsFlags := []string{"--tls-cert", cert, "--tls-key", key, "--tls-ca", ca.pem}

	for _, c := range []struct {
		name    string
		args    []string
		wantErr string // "" means valid
	}{
		{"loopback plaintext", []string{"--listen", "127.0.0.1:4100"}, ""},
		{"loopback plaintext, IPv6", []string{"--listen", "[::1]:4100"}, ""},
		{"localhost plaintext", []string{"--listen", "localhost:4100"}, ""},
		{"any address, plaintext", []string{"--listen", "0.0.0.0:4100"}, "needs --allow-plaintext"},
		{"empty host, plaintext", []string{"--listen", ":4100"}, "needs --allow-plaintext"},
		{"LAN address, plaintext", []string{"--listen", "192.0.2.10:4100"}, "needs --allow-plaintext"},
		{"IPv6 any, plaintext", []string{"--listen", "[::]:4100"}, "needs --allow-plaintext"},
		{"host name, plaintext", []string{"--listen", "node1.example:4100"}, "needs --allow-plaintext"},
		{"not host:port", []string{"--listen", "127.0.0.1"}, "needs --allow-plaintext"},
		{"any address, plaintext allowed", []string{"--listen", "0.0.0.0:4100", "--allow-plaintext"}, ""},
		{"any address, mutual TLS, any peer", append([]string{"--listen", "0.0.0.0:4100", "--authz-allow-any"}, tlsFlags...), ""},
		{"any address, mutual TLS, a policy", append([]string{"--listen", "0.0.0.0:4100", "--authz", authz}, tlsFlags...), ""},
		{"mutual TLS without a policy", append([]string{"--listen", "0.0.0.0:4100"}, tlsFlags...), "mutual TLS needs --authz FILE"},
		{"a policy and allow-any", append([]string{"--authz", authz, "--authz-allow-any"}, tlsFlags...), "exclude each other"},
		{"a policy in plaintext", []string{"--authz", authz}, "--authz needs mutual TLS"},
		{"a policy with an unknown field", append([]string{"--authz", badAuthz}, tlsFlags...), `line 3: json: unknown field "grant"`},
		{"a policy file missing", append([]string{"--authz", filepath.Join(dir, "nope.json")}, tlsFlags...), "reading the authorization file"},
		{"no peer rate", []string{"--peer-rate", "0"}, "must be positive"},
		{"no user cap", []string{"--max-users", "0"}, "must be positive"},
		{"goals by override", []string{"--codex-override", "features.goals=true"}, "use --codex-goals"},
		{"goals on", []string{"--codex-goals", "--unasked-turns", "allow"}, ""},
		{"a destination allowed", []string{"--allow-destination", "127.0.0.1:8080", "--allow-destination", "mcp.local:443"}, ""},
		{"a destination without a port", []string{"--allow-destination", "127.0.0.1"}, "is not HOST:PORT"},
		{"a destination as a URL", []string{"--allow-destination", "http://x:1/p"}, "is not HOST:PORT"},
		{"a destination's port", []string{"--allow-destination", "x:99999"}, "the port is not 1-65535"},
		{"a budget negative", []string{"--user-token-budget", "-1"}, "is negative"},
		{"a budget window too short", []string{"--budget-window", "1ms"}, "at least a second"},
		{"unasked turns unknown", []string{"--unasked-turns", "ignore"}, "want interrupt or allow"},
		{"cert only", []string{"--listen", "0.0.0.0:4100", "--tls-cert", cert}, "needs all of --tls-cert, --tls-key and --tls-ca"},
		{"cert and key, no CA", []string{"--tls-cert", cert, "--tls-key", key}, "needs all of --tls-cert, --tls-key and --tls-ca"},
		{"CA only", []string{"--tls-ca", ca.pem}, "needs all of"},
		{"key file missing", []string{"--tls-cert", cert, "--tls-key", filepath.Join(dir, "missing.key"), "--tls-ca", ca.pem}, "loading the TLS key pair"},
		{"CA file without PEM", []string{"--tls-cert", cert, "--tls-key", key, "--tls-ca", notPEM}, "holds no PEM certificate"},
		{"CA file missing", []string{"--tls-cert", cert, "--tls-key", key, "--tls-ca", filepath.Join(dir, "nope.pem")}, "reading the TLS CA"},
	} {
		t.Run(c.name, func(t *testing.T) {
			fs := flag.NewFlagSet("serve", flag.ContinueOnError)
			fs.SetOutput(&bytes.Buffer{})
			o := serveFlags(fs)
			if err := fs.Parse(append(append([]string{}, base...), c.args...)); err != nil {
				t.Fatal(err)
			}
			err := o.validate()
			switch {
			case c.wantErr == "" && err != nil:
				t.Errorf("validate: %v, want no error", err)
			case c.wantErr != "" && (err == nil || !strings.Contains(err.Error(), c.wantErr)):
				t.Errorf("validate: %v, want an error saying %q", err, c.wantErr)
			}
		})
	}

	// Through the command: exit 2 with the reason, and nothing started (no
	// homes folder, no listener to dial).
	code, _, stderr := tlsRunCLI(t, append(append([]string{"serve"}, base...), "--listen", "0.0.0.0:4100", "--metrics-listen", "")...)
	if code != 2 || !strings.Contains(stderr, "--allow-plaintext") {
		t.Errorf("serve on 0.0.0.0 in plaintext: exit %d, stderr %q; want 2 naming --allow-plaintext", code, stderr)
	}
	if _, err := os.Stat(homes); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("a refused serve touched the homes folder (stat: %v)", err)
	}
}
