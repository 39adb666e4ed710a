package main

import (
	"bytes"
	"crypto/sha256"
	"crypto/tls"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"fmt"
	"net"
	"net/url"
	"os"
	"slices"
)

// etcdTrustWarning begins the warning that etcd trusts a CA the remote
// trusts for callers (tests look for it).
const etcdTrustWarning = "etcd trusts a CA that the remote trusts for callers"

// checkEtcdFiles checks that the files etcd gets fit together, as etcd
// will use them: the certificate (flag cert) is a client certificate of
// etcd's CA (flag ca) and, for an embedded member, a server certificate
// for the hosts of its listen URLs, which its peers and its own clients
// verify. A mismatch otherwise shows only at the first connection, as a
// member that cannot join or a fence helper that cannot revoke. It
// records the CA's digest for reloads (etcdCASum). A file that does not
// load is reported for the etcd flags only (the node's own are reported
// with the remote's settings).
func (o *clusterOptions) checkEtcdFiles(t tlsOptions, cert, ca string) []error {
	pair, err := tls.LoadX509KeyPair(t.cert, t.key)
	if err != nil {
		if cert == "--etcd-tls-cert" {
			return []error{fmt.Errorf("--etcd-tls-*: loading the key pair: %w", err)}
		}
		return nil
	}
	caPEM, err := os.ReadFile(t.ca)
	if err != nil {
		if ca == "--etcd-tls-ca" {
			return []error{fmt.Errorf("--etcd-tls-ca: %w", err)}
		}
		return nil
	}
	o.etcdCASum = sha256.Sum256(caPEM)
	roots := x509.NewCertPool()
	if !roots.AppendCertsFromPEM(caPEM) {
		return []error{fmt.Errorf("%s %s holds no PEM certificate", ca, t.ca)}
	}
	leaf, err := x509.ParseCertificate(pair.Certificate[0])
	if err != nil {
		return []error{fmt.Errorf("%s: %w", cert, err)}
	}
	inter := x509.NewCertPool()
	for _, der := range pair.Certificate[1:] {
		if c, err := x509.ParseCertificate(der); err == nil {
			inter.AddCert(c)
		}
	}
	var errs []error
	if _, err := leaf.Verify(x509.VerifyOptions{Roots: roots, Intermediates: inter, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}}); err != nil {
		errs = append(errs, fmt.Errorf("%s %s is not a client certificate of etcd's CA (%s %s): %w", cert, t.cert, ca, t.ca, err))
	}
	if !o.embedded() {
		return errs
	}
	for _, u := range []string{o.etcdClient, o.etcdPeer} {
		p, err := url.Parse(u)
		if err != nil || p.Host == "" {
			continue // reported with the URLs
		}
		host := p.Hostname()
		if ip := net.ParseIP(host); ip != nil && ip.IsUnspecified() {
			continue // every address: the peers dial a named one
		}
		if _, err := leaf.Verify(x509.VerifyOptions{Roots: roots, Intermediates: inter, DNSName: host, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}}); err != nil {
			errs = append(errs, fmt.Errorf("%s %s is not a server certificate of etcd's CA for %s, which the embedded member serves (its peers and clients verify it): %w", cert, t.cert, host, err))
		}
	}
	return errs
}

// etcdTrustsCallers says, for the start log and serve --check, when etcd
// trusts a CA the remote trusts for callers: one of the remote's CAs is
// in etcd's bundle or chains to one of its CAs (an intermediate under
// etcd's root, a cross-signature). Then every caller that CA signed can
// reach etcd's ports, and whoever writes its keys moves users between
// members.
func (o *clusterOptions) etcdTrustsCallers(node tlsOptions) string {
	files := o.etcdFiles(node)
	if !o.enabled() || !files.Enabled() || !node.enabled() {
		return ""
	}
	if files.CA != node.ca && !chainsTo(node.ca, files.CA) {
		return ""
	}
	return etcdTrustWarning + " (--tls-ca): a caller's certificate signed by it can reach etcd and write the keys saying which member owns a user; give the members a CA of their own for etcd (--etcd-tls-cert, --etcd-tls-key, --etcd-tls-ca)"
}

// chainsTo reports whether a certificate of the PEM bundle from is in the
// bundle to, or verifies against it (the rest of from as intermediates).
func chainsTo(from, to string) bool {
	theirs, ours := pemCerts(from), pemCerts(to)
	roots, inter := x509.NewCertPool(), x509.NewCertPool()
	for _, c := range ours {
		roots.AddCert(c)
	}
	for _, c := range theirs {
		inter.AddCert(c)
	}
	for _, c := range theirs {
		if slices.ContainsFunc(ours, func(d *x509.Certificate) bool { return bytes.Equal(c.Raw, d.Raw) }) {
			return true
		}
		if _, err := c.Verify(x509.VerifyOptions{Roots: roots, Intermediates: inter, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageAny}}); err == nil {
			return true
		}
	}
	return false
}

// pemCerts are the certificates of a PEM file (none when unreadable).
func pemCerts(name string) []*x509.Certificate {
	rest, err := os.ReadFile(name)
	if err != nil {
		return nil
	}
	var out []*x509.Certificate
	for {
		var blk *pem.Block
		if blk, rest = pem.Decode(rest); blk == nil {
			return out
		}
		if c, err := x509.ParseCertificate(blk.Bytes); err == nil && blk.Type == "CERTIFICATE" {
			out = append(out, c)
		}
	}
}

// etcdReloadChanged names, for a SIGHUP, what changed in the files etcd
// uses that only a restart applies: etcd (the embedded member, the
// member's clients, the fence helper's flags) read its CA and the files'
// paths at start. A certificate and key renewed at the same paths need
// nothing: etcd reads them at each handshake.
func (o *clusterOptions) etcdReloadChanged(runningNode tlsOptions, next *clusterOptions, nextNode tlsOptions) error {
	if !o.enabled() {
		return nil
	}
	was, now := o.etcdFiles(runningNode), next.etcdFiles(nextNode)
	switch {
	case was != now:
		return errors.New("etcd's TLS files (--etcd-tls-*, or --tls-* without them): another path")
	case was.Enabled() && o.etcdCASum != next.etcdCASum:
		return errors.New("etcd's CA (" + now.CA + "): new contents")
	}
	return nil
}
