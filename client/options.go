package client

import (
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"log/slog"
	"os"
)

// Option configures [Dial].
type Option func(*options)

type options struct {
	tls      *tls.Config
	tlsFiles *[3]string
	serverID string
	listen   string
	log      *slog.Logger
	late     func(any)
}

// WithTLS runs the link over mutual TLS with conf, which serves both the
// caller's dials and its listener for the daemon's dial-back: it needs the
// caller's certificate (Certificates), the CA of the daemon (RootCAs) and
// the CA of the daemon's client certificate (ClientCAs, with ClientAuth
// tls.RequireAndVerifyClientCert). [LoadTLSFiles] builds one from files.
func WithTLS(conf *tls.Config) Option {
	return func(o *options) { o.tls = conf }
}

// WithServerID verifies the daemon by the identity its certificate carries
// instead of by the host name of its address: id is a typed identity,
// "uri:spiffe://mesh/supervisor" or "cn:daemon-1" (an untyped one takes
// the kind it spells: with "://" a URI, else a CN), compared with the
// daemon's certificate as the daemon names its peers (its first URI SAN,
// else its CN). The chain is verified against the TLS configuration's
// RootCAs, with the intermediates the daemon sends; the daemon's dials
// back to this client must present the same identity. A daemon with a
// URI-only certificate (a SPIFFE SVID, which names no host) needs it.
// Without it the daemon's certificate must name the host of its address
// (crypto/tls's check). It needs TLS.
func WithServerID(id string) Option {
	return func(o *options) { o.serverID = id }
}

// WithTLSFiles is [WithTLS] with the configuration [LoadTLSFiles] builds
// from the PEM files certFile, keyFile and caFile; [Dial] loads them.
func WithTLSFiles(certFile, keyFile, caFile string) Option {
	return func(o *options) { o.tlsFiles = &[3]string{certFile, keyFile, caFile} }
}

// WithListenAddr sets the HOST:PORT the client listens on for the daemon's
// replies (the daemon dials it back). The default is a free loopback port,
// right when the daemon runs on the same host. The port must be given:
// hollywood puts the address into every sender PID, so ":0" cannot work.
func WithListenAddr(addr string) Option {
	return func(o *options) { o.listen = addr }
}

// WithLogger sets where the client logs what it drops (replies it cannot
// decode or place). The default is slog.Default(). hollywood's own engine
// logs to slog.Default() whatever this says.
func WithLogger(log *slog.Logger) Option {
	return func(o *options) { o.log = log }
}

// WithLateReplies hands fn every reply from the daemon that comes after
// its call or round ended, decoded: a verdict that came after
// [Round.Wait] gave up on its context, or a second verdict for a round
// (which the daemon must never send: a caller that counts these checks
// it). fn may be called from several goroutines at once and must not
// block. Without it such replies are logged at Debug.
func WithLateReplies(fn func(msg any)) Option {
	return func(o *options) { o.late = fn }
}

// LoadTLSFiles is the mutual-TLS configuration of a node holding the PEM
// certificate certFile with its key keyFile, trusting the CA in caFile for
// both directions (TLS 1.3, client certificates required): the shape the
// daemon's own --tls-* flags take.
func LoadTLSFiles(certFile, keyFile, caFile string) (*tls.Config, error) {
	cert, err := tls.LoadX509KeyPair(certFile, keyFile)
	if err != nil {
		return nil, fmt.Errorf("loading the TLS key pair: %w", err)
	}
	pem, err := os.ReadFile(caFile)
	if err != nil {
		return nil, fmt.Errorf("reading the TLS CA: %w", err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(pem) {
		return nil, fmt.Errorf("the TLS CA file %s holds no PEM certificate", caFile)
	}
	return &tls.Config{
		Certificates: []tls.Certificate{cert},
		ClientCAs:    pool,
		RootCAs:      pool,
		ClientAuth:   tls.RequireAndVerifyClientCert,
		MinVersion:   tls.VersionTLS13,
	}, nil
}
