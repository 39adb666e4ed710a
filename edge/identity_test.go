package edge

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"math/big"
	"net/url"
	"testing"
	"time"

	"github.com/meshweaver/supervisor/third_party/hollywood/remote"
)

// leafCert makes a certificate with the given subject CN and SANs (parsed
// back, as a handshake hands it over).
func leafCert(t *testing.T, cn string, uris []string, dns []string) *x509.Certificate {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: cn}, DNSNames: dns,
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour)}
	for _, u := range uris {
		p, err := url.Parse(u)
		if err != nil {
			t.Fatal(err)
		}
		tmpl.URIs = append(tmpl.URIs, p)
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	c, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// TestIdentityMatrix: a certificate's identity is its first URI SAN or,
// without one, its CN, and the kind is part of it. An authorization file
// written before identities were typed keeps its meaning (a pattern with
// "://" names URIs, any other a CN), and a CN that spells a URI is refused
// every URI grant: a CA that lets a requester choose its CN no longer hands
// out the gateway's identity.
func TestIdentityMatrix(t *testing.T) {
	p := mustPolicy(t, `{"version": 1, "grants": [
		{"identities": ["spiffe://mesh/chat-gateway"], "users": ["*"], "kinds": ["rounds"]},
		{"identities": ["alice-app"], "users": ["alice"], "kinds": ["rounds"]},
		{"identities": ["cn:bob-app"], "users": ["bob"], "kinds": ["rounds"]},
		{"identities": ["uri:spiffe://mesh/ops/*"], "users": ["*"], "kinds": ["control"]}]}`)
	for _, tc := range []struct {
		name     string
		cn       string
		uris     []string
		dns      []string
		identity string
		allowed  []string // user/kind pairs granted
		refused  []string
	}{
		{"URI only (SPIFFE, no CN)", "", []string{"spiffe://mesh/chat-gateway"}, nil,
			"uri:spiffe://mesh/chat-gateway", []string{"carol/rounds"}, []string{"carol/control"}},
		{"CN only", "alice-app", nil, nil,
			"cn:alice-app", []string{"alice/rounds"}, []string{"carol/rounds", "bob/rounds"}},
		{"URI and CN: the URI", "alice-app", []string{"spiffe://mesh/other"}, nil,
			"uri:spiffe://mesh/other", nil, []string{"alice/rounds", "carol/rounds"}},
		{"a CN spelling a URI", "spiffe://mesh/chat-gateway", nil, nil,
			"cn:spiffe://mesh/chat-gateway", nil, []string{"carol/rounds", "alice/rounds"}},
		{"several URI SANs: the first", "", []string{"spiffe://mesh/other", "spiffe://mesh/chat-gateway"}, nil,
			"uri:spiffe://mesh/other", nil, []string{"carol/rounds"}},
		{"DNS SAN only: no identity", "", nil, []string{"chat-gateway.mesh"},
			"", nil, []string{"carol/rounds", "alice/rounds"}},
		{"a URI SAN spelling a CN", "", []string{"cn:bob-app"}, nil,
			"uri:cn:bob-app", nil, []string{"bob/rounds"}},
		{"CN granted with its kind", "bob-app", nil, nil,
			"cn:bob-app", []string{"bob/rounds"}, []string{"alice/rounds"}},
		{"a typed URI pattern", "", []string{"spiffe://mesh/ops/oncall"}, nil,
			"uri:spiffe://mesh/ops/oncall", []string{"carol/control"}, []string{"carol/rounds"}},
	} {
		cs := &tls.ConnectionState{PeerCertificates: []*x509.Certificate{leafCert(t, tc.cn, tc.uris, tc.dns)}}
		id := remote.DefaultIdentify(cs)
		if id != tc.identity {
			t.Errorf("%s: identity %q, want %q", tc.name, id, tc.identity)
			continue
		}
		check := func(pairs []string, want bool) {
			for _, pair := range pairs {
				var user, kind string
				for i := range pair {
					if pair[i] == '/' {
						user, kind = pair[:i], pair[i+1:]
					}
				}
				if got := p.Allows(id, user, Kind(kind)); got != want {
					t.Errorf("%s: Allows(%q, %s, %s) = %v, want %v", tc.name, id, user, kind, got, want)
				}
			}
		}
		check(tc.allowed, true)
		check(tc.refused, false)
		if got := p.Names(id); got != (len(tc.allowed) > 0) {
			t.Errorf("%s: Names(%q) = %v, want %v", tc.name, id, got, len(tc.allowed) > 0)
		}
	}
}
