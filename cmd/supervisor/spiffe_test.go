package main

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"io"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/meshweaver/supervisor/third_party/hollywood/remote"
)

// --- certificates shaped like X.509-SVIDs ---

// spiffeRoot is a root CA that may sign intermediates (path length 1).
func spiffeRoot(t *testing.T, dir, file, name string) *tlsCA {
	t.Helper()
	return spiffeCA(t, dir, file, name, nil)
}

// intermediate is a CA signed by ca that signs leaves only.
func (ca *tlsCA) intermediate(t *testing.T, dir, file, name string) *tlsCA {
	t.Helper()
	return spiffeCA(t, dir, file, name, ca)
}

func spiffeCA(t *testing.T, dir, file, name string, parent *tlsCA) *tlsCA {
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
		MaxPathLen:            1,
	}
	signer, signKey := tmpl, key
	if parent != nil {
		tmpl.MaxPathLen, tmpl.MaxPathLenZero = 0, true
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

// svid writes an X.509-SVID for id signed by the intermediate ca: ECDSA
// P-256, the SPIFFE ID as its only SAN, no subject CN, no DNS or IP SAN;
// the certificate file holds the leaf and then the intermediate, as SPIRE
// writes it. It returns the certificate and key files (dir/file.crt, .key).
func (ca *tlsCA) svid(t *testing.T, dir, file, id string) (certFile, keyFile string) {
	t.Helper()
	u, err := url.Parse(id)
	if err != nil {
		t.Fatal(err)
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: tlsSerial(t),
		Subject:      pkix.Name{Organization: []string{"SPIRE"}},
		NotBefore:    time.Now().Add(-time.Hour),
		NotAfter:     time.Now().Add(time.Hour),
		KeyUsage:     x509.KeyUsageDigitalSignature | x509.KeyUsageKeyAgreement,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth},
		URIs:         []*url.URL{u},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.cert, &key.PublicKey, ca.key)
	if err != nil {
		t.Fatal(err)
	}
	keyDER, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	certFile, keyFile = filepath.Join(dir, file+".crt"), filepath.Join(dir, file+".key")
	chain := append(pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}),
		pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: ca.cert.Raw})...)
	writeFileAtomic(t, certFile, chain)
	writeFileAtomic(t, keyFile, pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: keyDER}))
	return certFile, keyFile
}

// writeBundle writes the roots' certificates into one PEM file: a trust
// bundle of several roots.
func writeBundle(t *testing.T, path string, roots ...*tlsCA) {
	t.Helper()
	var b []byte
	for _, r := range roots {
		b = append(b, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: r.cert.Raw})...)
	}
	writeFileAtomic(t, path, b)
}

// writeFileAtomic replaces path as a certificate manager does (a new file
// renamed over the old), so that a reader never sees half of it.
func writeFileAtomic(t *testing.T, path string, b []byte) {
	t.Helper()
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, b, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, path); err != nil {
		t.Fatal(err)
	}
}

// spiffeGateway is an HTTP client of the gateway with an SVID, verifying
// the daemon by its SPIFFE ID against the bundle.
func spiffeGateway(t *testing.T, certFile, keyFile, bundle, serverID string) *http.Client {
	t.Helper()
	conf := tlsConfig(t, certFile, keyFile, bundle)
	conf.InsecureSkipVerify = true // replaced by the identity check
	conf.VerifyConnection = remote.VerifyIdentity(serverID, conf.RootCAs)
	return &http.Client{Transport: &http.Transport{TLSClientConfig: conf}, Timeout: opsRoundWait}
}

func gwModels(t *testing.T, c *http.Client, gw, user string) (int, string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), opsRoundWait)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, "POST", "https://"+gw+"/v1/models", strings.NewReader(`{"user":"`+user+`"}`))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := c.Do(req)
	if err != nil {
		return 0, err.Error()
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// spiffeDaemon is a built daemon on the demo model with SVIDs.
type spiffeDaemon struct {
	srv         *opsServe
	addr, gw    string
	exe, bundle string
	cert, key   string // the daemon's SVID files
	dir         string
	callerEnv   func(certFile, keyFile string) []string
}

const spiffeDaemonID = "spiffe://mesh/supervisor"

// startSpiffeDaemon runs serve with the daemon's SVID, the bundle and an
// authorization file: spiffe://mesh/caller may do everything for alice,
// spiffe://mesh/other only read accounts and models for bob.
func startSpiffeDaemon(t *testing.T, dir, exe, cert, key, bundle string) *spiffeDaemon {
	t.Helper()
	authz := filepath.Join(dir, "authz.json")
	if err := os.WriteFile(authz, []byte(`{"version": 1, "grants": [
		{"identities": ["uri:spiffe://mesh/caller"], "users": ["alice"], "kinds": ["rounds", "control", "account", "login"]},
		{"identities": ["uri:spiffe://mesh/other"], "users": ["bob"], "kinds": ["account"]}]}`), 0o600); err != nil {
		t.Fatal(err)
	}
	addr, err := freeLoopbackAddr()
	if err != nil {
		t.Fatal(err)
	}
	gw, err := freeLoopbackAddr()
	if err != nil {
		t.Fatal(err)
	}
	workspace := filepath.Join(dir, "workspace")
	if err := os.MkdirAll(workspace, 0o700); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { waitNoCodex(t, opsCodexBin(t), dir) })
	srv := opsStartServe(t, exe, "serve", "--demo-model", "--listen", addr, "--homes", filepath.Join(dir, "homes"),
		"--workspace", workspace, "--codex", opsCodexBin(t), "--tls-cert", cert, "--tls-key", key, "--tls-ca", bundle,
		"--authz", authz, "--gateway-listen", gw, "--metrics-listen", "", "--log-format", "json",
		// The test's folders are the test user's (0700): no uid switch.
		"--uid-range", "off")
	srv.waitMsg("gateway serving")
	d := &spiffeDaemon{srv: srv, addr: addr, gw: gw, exe: exe, bundle: bundle, cert: cert, key: key, dir: dir}
	d.callerEnv = func(certFile, keyFile string) []string {
		return []string{"SUPERVISOR_ADDR=" + addr, "SUPERVISOR_TLS_CERT=" + certFile, "SUPERVISOR_TLS_KEY=" + keyFile,
			"SUPERVISOR_TLS_CA=" + bundle, "SUPERVISOR_SERVER_ID=" + spiffeDaemonID}
	}
	return d
}

func (d *spiffeDaemon) stop(t *testing.T) {
	t.Helper()
	if err := syscall.Kill(d.srv.cmd.Process.Pid, syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if !d.srv.wait(opsWait) || d.srv.err != nil {
		t.Errorf("serve after SIGTERM: exited %v, err %v; want exit 0", d.srv.done, d.srv.err)
	}
}

// TestSPIFFECertificates: callers and a daemon holding X.509-SVIDs (a URI
// SAN spiffe://mesh/... only, no CN, no DNS or IP SAN, ECDSA P-256, signed
// by an intermediate the certificate file carries), the daemon's --tls-ca a
// bundle of two roots. Each caller gets exactly its grants, over the remote
// (the built CLI: models and a complete round on the demo model, the
// daemon verified by --server-id, the caller verified when dialled back
// by its SPIFFE ID, not its address) and over the gateway; what it is not
// granted is refused, and the CLI prints the refusal at once. A caller
// expecting another server identity refuses the daemon.
func TestSPIFFECertificates(t *testing.T) {
	dir := t.TempDir()
	rootA := spiffeRoot(t, dir, "root-a", "mesh root A")
	rootB := spiffeRoot(t, dir, "root-b", "mesh root B")
	interB := rootB.intermediate(t, dir, "inter-b", "mesh intermediate B")
	bundle := filepath.Join(dir, "bundle.pem")
	writeBundle(t, bundle, rootA, rootB)
	daemonCert, daemonKey := interB.svid(t, dir, "daemon", spiffeDaemonID)
	callerCert, callerKey := interB.svid(t, dir, "caller", "spiffe://mesh/caller")
	otherCert, otherKey := interB.svid(t, dir, "other", "spiffe://mesh/other")
	strangerCert, strangerKey := interB.svid(t, dir, "stranger", "spiffe://mesh/stranger")
	exe := opsBuild(t, dir)
	d := startSpiffeDaemon(t, dir, exe, daemonCert, daemonKey, bundle)

	// The granted caller: models, and a round that completes.
	env := d.callerEnv(callerCert, callerKey)
	if code, out, eo := cliRun(t, exe, env, "models", "--user", "alice"); code != 0 || !strings.Contains(out, "(default)") {
		t.Errorf("models as spiffe://mesh/caller: exit %d\nstdout: %s\nstderr: %s", code, out, eo)
	}
	if code, out, eo := cliRun(t, exe, env, "round", "--user", "alice", "--thread", "t", "--timeout", opsRoundWait.String(), "hello"); code != 0 || out == "" {
		t.Errorf("round as spiffe://mesh/caller: exit %d\nstdout: %s\nstderr: %s", code, out, eo)
	}
	// Not its user: refused, printed at once (well within the timeout).
	start := time.Now()
	code, out, eo := cliRun(t, exe, env, "models", "--user", "bob", "--timeout", opsWait.String())
	if code == 0 || !strings.Contains(eo, `"uri:spiffe://mesh/caller" may not send account for user "bob"`) {
		t.Errorf("models for bob as spiffe://mesh/caller: exit %d\nstdout: %s\nstderr: %s; want the refusal", code, out, eo)
	}
	if took := time.Since(start); took > opsWait/2 {
		t.Errorf("the refusal took %v", took)
	}
	// The other identity: its account grant, not rounds.
	env = d.callerEnv(otherCert, otherKey)
	if code, out, eo := cliRun(t, exe, env, "models", "--user", "bob"); code != 0 || !strings.Contains(out, "(default)") {
		t.Errorf("models as spiffe://mesh/other for bob: exit %d\nstdout: %s\nstderr: %s", code, out, eo)
	}
	if code, _, eo := cliRun(t, exe, env, "round", "--user", "bob", "--thread", "t", "--timeout", opsWait.String(), "hello"); code != exitRejected || !strings.Contains(eo, "may not send rounds") {
		t.Errorf("round as spiffe://mesh/other: exit %d, stderr %s; want rejected (%d)", code, eo, exitRejected)
	}
	// No grant names the stranger: refused at the handshake, and told so.
	env = d.callerEnv(strangerCert, strangerKey)
	if code, _, eo := cliRun(t, exe, env, "models", "--user", "alice", "--timeout", opsWait.String()); code == 0 || !strings.Contains(eo, "bad certificate") {
		t.Errorf("models as spiffe://mesh/stranger: exit %d, stderr %s; want the handshake's refusal", code, eo)
	}
	// A caller that expects another daemon refuses this one.
	env = append(d.callerEnv(callerCert, callerKey), "SUPERVISOR_SERVER_ID=spiffe://mesh/elsewhere")
	if code, _, eo := cliRun(t, exe, env, "models", "--user", "alice", "--timeout", opsWait.String()); code == 0 || !strings.Contains(eo, `not "uri:spiffe://mesh/elsewhere"`) {
		t.Errorf("models expecting spiffe://mesh/elsewhere: exit %d, stderr %s; want the daemon refused", code, eo)
	}

	// The gateway: the same certificates, the same grants.
	gw := spiffeGateway(t, callerCert, callerKey, bundle, spiffeDaemonID)
	if code, body := gwModels(t, gw, d.gw, "alice"); code != 200 || !strings.Contains(body, `"models":[`) {
		t.Errorf("gateway models as spiffe://mesh/caller: %d %s", code, body)
	}
	if code, body := gwModels(t, gw, d.gw, "bob"); code == 200 || !strings.Contains(body, "may not send account") {
		t.Errorf("gateway models for bob as spiffe://mesh/caller: %d %s; want refused", code, body)
	}
	gw.CloseIdleConnections()
	stranger := spiffeGateway(t, strangerCert, strangerKey, bundle, spiffeDaemonID)
	if code, body := gwModels(t, stranger, d.gw, "alice"); code != 0 {
		t.Errorf("gateway as spiffe://mesh/stranger: %d %s; want the handshake refused", code, body)
	}
	// An operator sees why: the refused handshake is in the log with its
	// reason and peer address.
	if _, found := d.srv.find(func(rec map[string]any) bool {
		err, _ := rec["err"].(string)
		return rec["msg"] == "gateway: TLS handshake refused" && strings.Contains(err, "spiffe://mesh/stranger") && rec["peer"] != nil
	}); !found {
		t.Error("the gateway's refused handshake is not in the daemon's log")
	}
	if _, found := d.srv.find(func(rec map[string]any) bool {
		err, _ := rec["err"].(string)
		return rec["reason"] == "handshake" && strings.Contains(err, "spiffe://mesh/stranger")
	}); !found {
		t.Error("the remote's refused handshake is not in the daemon's log")
	}
	d.stop(t)
}
