package etcdtest_test

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"go.etcd.io/etcd/client/pkg/v3/transport"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/goleak"
	"go.uber.org/zap"

	"github.com/meshweaver/supervisor/testkit/etcdtest"
)

func TestMain(m *testing.M) {
	etcdtest.Main() // the members are this binary
	goleak.VerifyTestMain(m)
}

// TestStartPlaintext: Start's members serve http, and Leader finds one.
func TestStartPlaintext(t *testing.T) {
	c := etcdtest.Start(t, 1)
	if !strings.HasPrefix(c.Endpoints(), "http://") || c.TLS.Enabled() {
		t.Fatalf("plaintext endpoints %s, TLS %+v", c.Endpoints(), c.TLS)
	}
	if l := c.Leader(); l != 0 {
		t.Fatalf("leader %d, want 0", l)
	}
	cli := client(t, c.Endpoints(), nil)
	if err := put(cli); err != nil {
		t.Fatalf("put in plaintext: %v", err)
	}
}

// TestStartTLS: StartTLS's members serve https client and peer URLs (the
// three elect a leader over the peer port) and take a client certificate
// their CA signed; a certificate of another CA, and no certificate, are
// refused. Leader works over TLS, and a member restarted keeps its TLS.
func TestStartTLS(t *testing.T) {
	dir := t.TempDir()
	caCert, caKey := newCA(t)
	files := etcdtest.TLSFiles{CA: filepath.Join(dir, "ca.pem")}
	writePEM(t, files.CA, "CERTIFICATE", caCert.Raw)
	files.Cert, files.Key = issue(t, dir, "member", caCert, caKey)
	rogueCA, rogueKey := newCA(t)
	rogueCert, rogueKeyFile := issue(t, dir, "rogue", rogueCA, rogueKey)

	c := etcdtest.StartTLS(t, 3, files)
	for _, m := range c.Members {
		if !strings.HasPrefix(m.Client, "https://") || !strings.HasPrefix(m.Peer, "https://") {
			t.Fatalf("member %s: %s, %s; want https", m.Name, m.Client, m.Peer)
		}
	}
	leader := c.Leader()
	if err := put(client(t, c.Endpoints(), clientTLS(t, files.Cert, files.Key, files.CA))); err != nil {
		t.Fatalf("put with the members' certificate: %v", err)
	}
	if err := put(client(t, c.Endpoints(), clientTLS(t, rogueCert, rogueKeyFile, files.CA))); err == nil {
		t.Error("a certificate of another CA wrote to the members")
	}
	if err := put(client(t, c.Endpoints(), clientTLS(t, "", "", files.CA))); err == nil {
		t.Error("a client without a certificate wrote to the members")
	}

	c.Members[leader].Kill()
	c.Members[leader].Restart()
	if !strings.HasPrefix(c.Members[leader].Client, "https://") {
		t.Fatalf("the restarted member serves %s", c.Members[leader].Client)
	}
	c.Leader()
	if err := put(client(t, c.Members[leader].Client, clientTLS(t, files.Cert, files.Key, files.CA))); err != nil {
		t.Fatalf("put through the restarted member: %v", err)
	}
}

func client(t *testing.T, endpoints string, conf *tls.Config) *clientv3.Client {
	t.Helper()
	cli, err := clientv3.New(clientv3.Config{Endpoints: strings.Split(endpoints, ","), TLS: conf, DialTimeout: 2 * time.Second, Logger: zap.NewNop()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cli.Close() })
	return cli
}

func put(cli *clientv3.Client) error {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	_, err := cli.Put(ctx, "/etcdtest/probe", "x")
	return err
}

func clientTLS(t *testing.T, cert, key, ca string) *tls.Config {
	t.Helper()
	conf, err := transport.TLSInfo{CertFile: cert, KeyFile: key, TrustedCAFile: ca}.ClientConfig()
	if err != nil {
		t.Fatal(err)
	}
	return conf
}

func newCA(t *testing.T) (*x509.Certificate, *ecdsa.PrivateKey) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "etcdtest CA"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		KeyUsage: x509.KeyUsageCertSign, BasicConstraintsValid: true, IsCA: true}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatal(err)
	}
	return cert, key
}

// issue makes a certificate for both ends of a connection, valid for
// 127.0.0.1, signed by ca, and returns its certificate and key files.
func issue(t *testing.T, dir, name string, ca *x509.Certificate, caKey *ecdsa.PrivateKey) (string, string) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(2), Subject: pkix.Name{CommonName: name},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		KeyUsage:    x509.KeyUsageDigitalSignature,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth},
		IPAddresses: []net.IP{net.IPv4(127, 0, 0, 1)}}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca, &key.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	keyDER, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	certFile, keyFile := filepath.Join(dir, name+".crt"), filepath.Join(dir, name+".key")
	writePEM(t, certFile, "CERTIFICATE", der)
	writePEM(t, keyFile, "EC PRIVATE KEY", keyDER)
	return certFile, keyFile
}

func writePEM(t *testing.T, path, typ string, der []byte) {
	t.Helper()
	if err := os.WriteFile(path, pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: der}), 0o600); err != nil {
		t.Fatal(err)
	}
}
