package main

import (
	"crypto/tls"
	"crypto/x509"
	"encoding/pem"
	"net"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/meshweaver/supervisor/codexproto"
	"github.com/meshweaver/supervisor/messages"
)

// notifySocket is a $NOTIFY_SOCKET for a test: the states received, in
// order, on a channel.
func notifySocket(t *testing.T) (string, <-chan string) {
	t.Helper()
	path := filepath.Join(t.TempDir(), "notify")
	conn, err := net.ListenUnixgram("unixgram", &net.UnixAddr{Name: path, Net: "unixgram"})
	if err != nil {
		t.Fatal(err)
	}
	states := make(chan string, 64)
	done := make(chan struct{})
	go func() {
		defer close(done)
		buf := make([]byte, 4096)
		for {
			n, err := conn.Read(buf)
			if err != nil {
				return
			}
			for _, s := range strings.Split(strings.TrimSpace(string(buf[:n])), "\n") {
				states <- s
			}
		}
	}()
	t.Cleanup(func() { conn.Close(); <-done })
	return path, states
}

// waitState waits for the sd_notify state want, failing on any other
// state first, and soon after srv ended (only STOPPING=1 may arrive
// around its end).
func waitState(t *testing.T, srv *opsServe, states <-chan string, want string) {
	t.Helper()
	timer := time.NewTimer(opsWait)
	defer timer.Stop()
	eof := srv.eof
	for {
		select {
		case s := <-states:
			if s == want {
				return
			}
			t.Errorf("sd_notify: got %q while waiting for %q", s, want)
		case <-eof:
			// What it sent before its end may still be on its way to
			// states: a short deadline for that, not the whole wait.
			eof = nil
			timer.Reset(2 * time.Second)
		case <-timer.C:
			t.Fatalf("sd_notify: no %q within %v", want, opsWait)
		}
	}
}

// servedSerial is the serial number of the certificate the daemon presents
// to a new TLS connection.
func servedSerial(t *testing.T, addr string, conf *tls.Config) string {
	t.Helper()
	conn, err := tls.DialWithDialer(&net.Dialer{Timeout: opsWait}, "tcp", addr, conf)
	if err != nil {
		t.Fatalf("dialling the daemon: %v", err)
	}
	defer conn.Close()
	return conn.ConnectionState().PeerCertificates[0].SerialNumber.String()
}

// TestSIGHUPReload runs the built binary with mutual TLS, an authorization
// file, a --config file and $NOTIFY_SOCKET: it says READY=1; a SIGHUP after
// the node certificate was renewed on disk makes new connections get the
// new certificate (both ways: the daemon's answer needs its dial back to
// the caller), applies the file's new log level, names a changed setting
// and the changed grants, which need a restart, and
// says RELOADING=1 then READY=1; the process keeps serving and SIGTERM
// still stops it cleanly, with STOPPING=1.
func TestSIGHUPReload(t *testing.T) {
	dir := t.TempDir()
	ca := tlsNewCA(t, dir, "ca", "meshweaver test CA")
	cert, key := ca.issue(t, dir, "daemon")
	callerCert, callerKey := ca.issue(t, dir, "caller")
	exe := opsBuild(t, dir)
	addr, err := freeLoopbackAddr()
	if err != nil {
		t.Fatal(err)
	}
	workspace := filepath.Join(dir, "workspace")
	if err := os.MkdirAll(workspace, 0o700); err != nil {
		t.Fatal(err)
	}
	conf := filepath.Join(dir, "supervisor.conf")
	writeConf := func(text string) {
		if err := os.WriteFile(conf, []byte(text), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	writeConf("log-level info\nqueue-limit 4\n")
	authz := filepath.Join(dir, "authz.json")
	writeAuthz := func(kinds string) {
		grants := `{"version": 1, "grants": [{"identities": ["caller"], "users": ["*"], "kinds": [` + kinds + `]}]}`
		if err := os.WriteFile(authz, []byte(grants), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	writeAuthz(`"rounds"`)
	sock, states := notifySocket(t)
	t.Setenv("NOTIFY_SOCKET", sock)
	srv := opsStartServe(t, exe, "serve", "--listen", addr, "--homes", filepath.Join(dir, "homes"),
		"--workspace", workspace, "--codex", opsCodexBin(t), "--tls-cert", cert, "--tls-key", key,
		"--tls-ca", ca.pem, "--authz", authz, "--metrics-listen", "", "--log-format", "json", "--config", conf)
	waitState(t, srv, states, "READY=1")
	start := srv.waitMsg("supervisor serving")
	if start["version"] == nil || start["codex_pinned"] != codexproto.PinnedCLIVersion {
		t.Errorf("the start-up line lacks the version: %v", start)
	}

	client := tlsConfig(t, callerCert, callerKey, ca.pem)
	before := servedSerial(t, addr, client)
	probe := func(what string) {
		t.Helper()
		c := opsNewCaller(t, addr, client)
		defer c.close()
		if v := c.round(messages.StartRound{User: "../probe", Thread: "t", Text: "x"}).verdict; v.Status != messages.StatusRejected {
			t.Errorf("%s: %+v, want the rejected verdict back over TLS", what, v)
		}
	}
	probe("before the reload")
	if srv.count(func(rec map[string]any) bool { return rec["level"] == "DEBUG" }) != 0 {
		t.Fatal("debug lines at log level info")
	}

	cert2, _ := ca.issue(t, dir, "daemon") // renewed in place: same files, new serial
	if cert2 != cert {
		t.Fatalf("renewed into %s, not %s", cert2, cert)
	}
	writeConf("log-level debug\nqueue-limit 9\n")
	writeAuthz(`"rounds", "control"`)
	if err := syscall.Kill(srv.cmd.Process.Pid, syscall.SIGHUP); err != nil {
		t.Fatal(err)
	}
	waitState(t, srv, states, "RELOADING=1")
	waitState(t, srv, states, "READY=1")
	rec := srv.waitMsg("reloaded")
	if rec["tls"] != "reloaded" || rec["log_level"] != "DEBUG" {
		t.Errorf("reload line %v, want tls reloaded and level DEBUG", rec)
	}
	restart, found := srv.find(func(rec map[string]any) bool { return rec["settings"] != nil })
	if !found || restart["settings"] != "queue-limit,authz (the file's grants)" {
		t.Errorf("the setting a reload cannot apply was not named: %v", restart)
	}
	if after := servedSerial(t, addr, client); after == before {
		t.Errorf("after SIGHUP the daemon still presents serial %s", before)
	}
	probe("after the reload")
	// The built caller takes the daemon's address and its TLS files from
	// the environment: its (rejected) round gets its verdict over TLS.
	callerEnv := []string{"SUPERVISOR_ADDR=" + addr, "SUPERVISOR_TLS_CERT=" + callerCert,
		"SUPERVISOR_TLS_KEY=" + callerKey, "SUPERVISOR_TLS_CA=" + ca.pem}
	if code, _, stderr := cliRun(t, exe, callerEnv, "round", "--user", "../probe", "--thread", "t", "--timeout", opsWait.String(), "x"); code != exitRejected {
		t.Errorf("round with SUPERVISOR_ADDR and SUPERVISOR_TLS_*: exit %d, want %d (rejected); stderr:\n%s", code, exitRejected, stderr)
	}
	if !srv.running() {
		t.Fatalf("SIGHUP ended the daemon: %v", srv.err)
	}
	if srv.count(func(rec map[string]any) bool { return rec["level"] == "DEBUG" }) == 0 {
		t.Error("no debug line after the reload to log level debug")
	}

	if err := syscall.Kill(srv.cmd.Process.Pid, syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	waitState(t, srv, states, "STOPPING=1")
	if !srv.wait(opsWait) || srv.err != nil {
		t.Errorf("serve after SIGTERM: exited %v, err %v; want exit 0", srv.done, srv.err)
	}
}

// TestTLSReloaderCAChange: a reloaded CA bundle reaches both directions
// at once: incoming handshakes (ClientCAs) and the daemon's own dials,
// which verify the peer's chain against the current bundle (no "CA kept
// until restart"). A bundle without PEM changes nothing.
func TestTLSReloaderCAChange(t *testing.T) {
	dir := t.TempDir()
	ca := tlsNewCA(t, dir, "ca", "first CA")
	cert, key := ca.issue(t, dir, "node")
	opts := tlsOptions{cert: cert, key: key, ca: ca.pem}
	r, conf, err := newTLSReloader(opts)
	if err != nil {
		t.Fatal(err)
	}
	other := tlsNewCA(t, t.TempDir(), "ca", "second CA")
	oldPeer, _ := ca.issue(t, dir, "peer-old")
	newPeer, _ := other.issue(t, dir, "peer-new")
	dialled := func(certFile string) error {
		return conf.VerifyConnection(tls.ConnectionState{PeerCertificates: []*x509.Certificate{parseCertFile(t, certFile)}})
	}
	if err := dialled(oldPeer); err != nil {
		t.Errorf("a dialled peer of the loaded CA: %v", err)
	}
	if err := dialled(newPeer); err == nil {
		t.Error("a dialled peer of a CA not yet loaded was accepted")
	}
	if err := os.WriteFile(ca.pem, mustRead(t, other.pem), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := r.reload(opts); err != nil {
		t.Fatalf("reload of a changed CA: %v", err)
	}
	server, err := conf.GetConfigForClient(nil)
	if err != nil {
		t.Fatal(err)
	}
	if !server.ClientCAs.Equal(other.pool) {
		t.Error("incoming handshakes do not trust the new CA")
	}
	if err := dialled(newPeer); err != nil {
		t.Errorf("after the reload, a dialled peer of the new CA: %v", err)
	}
	if err := dialled(oldPeer); err == nil {
		t.Error("after the reload, a dialled peer of the removed CA was accepted")
	}
	if err := os.WriteFile(ca.pem, []byte("garbage"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := r.reload(opts); err == nil {
		t.Error("a CA file without PEM was accepted")
	}
	if server, _ := conf.GetConfigForClient(nil); !server.ClientCAs.Equal(other.pool) {
		t.Error("a failed reload changed the trusted CA")
	}
}

// parseCertFile is the first certificate of a PEM file.
func parseCertFile(t *testing.T, path string) *x509.Certificate {
	t.Helper()
	block, _ := pem.Decode(mustRead(t, path))
	if block == nil {
		t.Fatalf("%s holds no PEM", path)
	}
	c, err := x509.ParseCertificate(block.Bytes)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func mustRead(t *testing.T, path string) []byte {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return b
}
