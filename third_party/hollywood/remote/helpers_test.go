package remote

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"math/big"
	"net"
	"net/url"
	"os"
	"runtime"
	"sync"
	"testing"
	"time"

	"github.com/meshweaver/supervisor/third_party/hollywood/actor"
	"go.uber.org/goleak"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/wrapperspb"
	"storj.io/drpc/drpcconn"
	"storj.io/drpc/drpcmanager"
	"storj.io/drpc/drpcwire"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// freeAddr is a loopback address nothing listens on (yet).
func freeAddr(t testing.TB) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	return addr
}

// refusals collects the refusals of one remote.
type refusals struct {
	ch chan Refusal
}

func newRefusals() *refusals { return &refusals{ch: make(chan Refusal, 1024)} }

func (r *refusals) add(rf Refusal) {
	select {
	case r.ch <- rf:
	default:
	}
}

// wait returns the next refusal, failing after a deadline.
func (r *refusals) wait(t testing.TB) Refusal {
	t.Helper()
	select {
	case rf := <-r.ch:
		return rf
	case <-time.After(10 * time.Second):
		t.Fatal("no refusal within 10s")
		return Refusal{}
	}
}

func (r *refusals) none(t testing.TB) {
	t.Helper()
	select {
	case rf := <-r.ch:
		t.Fatalf("unexpected refusal %s: %v", rf.Reason, rf.Err)
	default:
	}
}

// node is an engine behind a remote, with a "sink" actor that forwards
// every proto it receives (and its sender) to got, and an "echo" actor that
// answers each *wrapperspb.StringValue to its sender.
type node struct {
	e    *actor.Engine
	r    *Remote
	addr string
	sink *actor.PID
	echo *actor.PID
	got  chan received
	ref  *refusals
}

type received struct {
	msg    proto.Message
	sender *actor.PID
}

func newNode(t testing.TB, cfg Config) *node {
	t.Helper()
	n := &node{addr: freeAddr(t), got: make(chan received, 1024), ref: newRefusals()}
	if cfg.onRefuse == nil {
		cfg = cfg.WithOnRefuse(n.ref.add)
	}
	n.r = New(n.addr, cfg)
	e, err := actor.NewEngine(actor.NewEngineConfig().WithRemote(n.r))
	if err != nil {
		t.Fatal(err)
	}
	n.e = e
	n.sink = e.SpawnFunc(func(c *actor.Context) {
		if m, ok := c.Message().(proto.Message); ok {
			n.got <- received{m, c.Sender()}
		}
	}, "sink", actor.WithID("sink"))
	n.echo = e.SpawnFunc(func(c *actor.Context) {
		if m, ok := c.Message().(*wrapperspb.StringValue); ok && c.Sender() != nil {
			c.Engine().SendWithSender(c.Sender(), m, c.PID())
		}
	}, "echo", actor.WithID("echo"))
	t.Cleanup(func() {
		<-e.Poison(n.sink).Done()
		<-e.Poison(n.echo).Done()
		n.r.Stop().Wait()
	})
	return n
}

// recv returns the next message the sink got, failing after a deadline.
func (n *node) recv(t testing.TB) received {
	t.Helper()
	select {
	case r := <-n.got:
		return r
	case <-time.After(10 * time.Second):
		t.Fatal("nothing received within 10s")
		return received{}
	}
}

// rawClient is a hand-driven connection to a remote: it sends whatever
// envelope the test builds.
type rawClient struct {
	conn   *drpcconn.Conn
	stream DRPCRemote_ReceiveStream
}

func dialRaw(t testing.TB, addr string, tlsConf *tls.Config) *rawClient {
	t.Helper()
	var c net.Conn
	var err error
	if tlsConf != nil {
		c, err = tls.Dial("tcp", addr, tlsConf)
	} else {
		c, err = net.Dial("tcp", addr)
	}
	if err != nil {
		t.Fatal(err)
	}
	conn := drpcconn.NewWithOptions(c, drpcconn.Options{Manager: drpcmanager.Options{
		Reader: drpcwire.ReaderOptions{MaximumBufferSize: 64 << 20}}})
	stream, err := NewDRPCRemoteClient(conn).Receive(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return &rawClient{conn: conn, stream: stream}
}

func (c *rawClient) send(t testing.TB, env *Envelope) {
	t.Helper()
	if err := c.stream.Send(env); err != nil {
		t.Fatal(err)
	}
}

// closed waits for the connection to be closed by the other side.
func (c *rawClient) closed(t testing.TB) {
	t.Helper()
	select {
	case <-c.conn.Closed():
	case <-time.After(10 * time.Second):
		t.Fatal("connection still open after 10s")
	}
}

// one is an envelope of one message.
func one(target, sender *actor.PID, msg proto.Message) *Envelope {
	b, err := proto.Marshal(msg)
	if err != nil {
		panic(err)
	}
	env := &Envelope{
		TypeNames: []string{string(proto.MessageName(msg))},
		Targets:   []*actor.PID{target},
		Messages:  []*Message{{Data: b}},
	}
	if sender != nil {
		env.Senders = []*actor.PID{sender}
	}
	return env
}

// pki is a throwaway CA and its leaf certificates (URI SAN identities:
// config's identity, and more URI SANs after it when given).
type pki struct {
	ca    *x509.Certificate
	key   *ecdsa.PrivateKey
	pool  *x509.CertPool
	mu    sync.Mutex
	count int64
}

func newPKI(t testing.TB) *pki {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber:          big.NewInt(1),
		Subject:               pkix.Name{CommonName: "test ca"},
		NotBefore:             time.Now().Add(-time.Hour),
		NotAfter:              time.Now().Add(time.Hour),
		IsCA:                  true,
		BasicConstraintsValid: true,
		KeyUsage:              x509.KeyUsageCertSign,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	ca, _ := x509.ParseCertificate(der)
	pool := x509.NewCertPool()
	pool.AddCert(ca)
	return &pki{ca: ca, key: key, pool: pool, count: 1}
}

// config is a mutual-TLS config whose certificate names identity.
func (p *pki) config(t testing.TB, identity string, more ...string) *tls.Config {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	var uris []*url.URL
	for _, id := range append([]string{identity}, more...) {
		u, _ := url.Parse(id)
		uris = append(uris, u)
	}
	p.mu.Lock()
	p.count++
	serial := p.count
	p.mu.Unlock()
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(serial),
		Subject:      pkix.Name{CommonName: "cn-" + identity},
		NotBefore:    time.Now().Add(-time.Hour),
		NotAfter:     time.Now().Add(time.Hour),
		URIs:         uris,
		IPAddresses:  []net.IP{net.IPv4(127, 0, 0, 1)},
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, p.ca, &key.PublicKey, p.key)
	if err != nil {
		t.Fatal(err)
	}
	return &tls.Config{
		Certificates: []tls.Certificate{{Certificate: [][]byte{der}, PrivateKey: key}},
		RootCAs:      p.pool,
		ClientCAs:    p.pool,
		ClientAuth:   tls.RequireAndVerifyClientCert,
		MinVersion:   tls.VersionTLS13,
	}
}

// settle polls f until it holds or the deadline passes; for counts (fds,
// goroutines) that have no event to wait on.
func settle(t testing.TB, d time.Duration, f func() bool) bool {
	t.Helper()
	deadline := time.Now().Add(d)
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	for !f() {
		if time.Now().After(deadline) {
			return false
		}
		<-tick.C
	}
	return true
}

func numFDs() int {
	ents, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		return -1
	}
	return len(ents)
}

func numGoroutines() int { return runtime.NumGoroutine() }
