package cluster

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net/url"
	"slices"
	"strings"
	"time"

	"go.etcd.io/etcd/client/pkg/v3/transport"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/server/v3/embed"
	"go.uber.org/zap"
	"google.golang.org/grpc"
	"google.golang.org/grpc/backoff"
)

// TLSFiles are the node's mutual-TLS files; etcd traffic (client and
// peer) uses the same certificate the hollywood remote does.
type TLSFiles struct {
	Cert, Key, CA string
}

// Enabled reports whether the files are set.
func (f TLSFiles) Enabled() bool { return f.Cert != "" }

// EmbedConfig describes an etcd member run inside the daemon.
type EmbedConfig struct {
	Name    string // the etcd member's name (in InitialCluster)
	Dir     string // its data folder: local disk, never the shared homes volume
	Peer    string // URL the peers reach it on, e.g. http://10.0.0.1:2380
	Client  string // URL the clients reach it on, e.g. http://10.0.0.1:2379
	Initial string // name=peerURL,… of every member of a new cluster
	Token   string // the initial cluster token (the cluster name)
	TLS     TLSFiles
	Logger  *zap.Logger // nil: errors only, to stderr
}

// ElectionTimeout is the embedded member's raft election timeout, etcd's
// default.
const ElectionTimeout = time.Second

// StartEmbedded starts an etcd member in this process and waits until it
// serves (or the member is up in a cluster still without quorum: it then
// serves once enough peers are up, and the caller's first call waits).
// A data folder that exists already rejoins the cluster it records.
func StartEmbedded(ctx context.Context, c EmbedConfig) (*embed.Etcd, error) {
	cfg := embed.NewConfig()
	cfg.Name = c.Name
	cfg.Dir = c.Dir
	peer, err := url.Parse(c.Peer)
	if err != nil {
		return nil, fmt.Errorf("etcd peer URL %q: %w", c.Peer, err)
	}
	client, err := url.Parse(c.Client)
	if err != nil {
		return nil, fmt.Errorf("etcd client URL %q: %w", c.Client, err)
	}
	cfg.ListenPeerUrls, cfg.AdvertisePeerUrls = []url.URL{*peer}, []url.URL{*peer}
	cfg.ListenClientUrls, cfg.AdvertiseClientUrls = []url.URL{*client}, []url.URL{*client}
	cfg.InitialCluster = c.Initial
	cfg.InitialClusterToken = c.Token
	cfg.ClusterState = embed.ClusterStateFlagNew
	// etcd's own timings: a leader heartbeat every 100ms, an election
	// after ElectionTimeout of silence. A daemon dies with its member, so
	// a member's death is an ordinary election, and the survivors' renewals
	// must outlast one inside their fence window (CheckTimings): longer
	// elections (2s, tried before) fenced every survivor of a leader's
	// death at a TTL of 5s.
	cfg.TickMs, cfg.ElectionMs = 100, uint(ElectionTimeout/time.Millisecond)
	cfg.AutoCompactionMode = "periodic"
	cfg.AutoCompactionRetention = "1h"
	if c.TLS.Enabled() {
		info := transport.TLSInfo{CertFile: c.TLS.Cert, KeyFile: c.TLS.Key, TrustedCAFile: c.TLS.CA, ClientCertAuth: true}
		cfg.ClientTLSInfo, cfg.PeerTLSInfo = info, info
	}
	log := c.Logger
	if log == nil {
		zc := zap.NewProductionConfig()
		zc.Level = zap.NewAtomicLevelAt(zap.ErrorLevel)
		zc.OutputPaths, zc.ErrorOutputPaths = []string{"stderr"}, []string{"stderr"}
		if log, err = zc.Build(); err != nil {
			return nil, err
		}
	}
	cfg.ZapLoggerBuilder = embed.NewZapLoggerBuilder(log)
	e, err := embed.StartEtcd(cfg)
	if err != nil {
		return nil, fmt.Errorf("starting the embedded etcd member %q: %w", c.Name, err)
	}
	select {
	case <-e.Server.ReadyNotify():
	case <-e.Server.StopNotify():
		e.Close()
		return nil, fmt.Errorf("the embedded etcd member %q stopped while starting", c.Name)
	case err := <-e.Err():
		e.Close()
		return nil, fmt.Errorf("embedded etcd member %q: %w", c.Name, err)
	case <-ctx.Done():
		e.Close()
		return nil, ctx.Err()
	}
	return e, nil
}

// reconnect is how the clients connect again to an etcd endpoint they
// lost. gRPC's default backs off up to 2 minutes between attempts, so a
// member cut from etcd for a few seconds (and fenced) was still waiting
// out its backoff seconds after the network healed (issue 22: 3 s to
// serve again, measured by TestClusterPartition; 3–7 s seen before). A
// fenced member has nothing better to do than reconnect, and an attempt
// to a few endpoints every quarter second is no load. An attempt keeps
// gRPC's 20 s to connect: with 2 s, TestClaimRace (300 claims at once
// on a fresh embedded etcd, -race) failed its calls in 1 run of 2.
var reconnect = grpc.ConnectParams{
	Backoff:           backoff.Config{BaseDelay: 50 * time.Millisecond, Multiplier: 1.6, Jitter: 0.2, MaxDelay: 250 * time.Millisecond},
	MinConnectTimeout: 20 * time.Second,
}

// NewClient connects to etcd at endpoints (comma-separated URLs), with the
// node's certificate when tlsFiles is set.
func NewClient(endpoints string, tlsFiles TLSFiles) (*clientv3.Client, error) {
	eps := strings.Split(endpoints, ",")
	if endpoints == "" || len(eps) == 0 {
		return nil, errors.New("no etcd endpoints")
	}
	var tc *tls.Config
	if tlsFiles.Enabled() {
		var err error
		tc, err = transport.TLSInfo{CertFile: tlsFiles.Cert, KeyFile: tlsFiles.Key, TrustedCAFile: tlsFiles.CA}.ClientConfig()
		if err != nil {
			return nil, fmt.Errorf("etcd client TLS: %w", err)
		}
	}
	c, err := clientv3.New(clientv3.Config{
		Endpoints: eps, TLS: tc, DialTimeout: 5 * time.Second,
		DialKeepAliveTime: 2 * time.Second, DialKeepAliveTimeout: 2 * time.Second,
		DialOptions: []grpc.DialOption{grpc.WithConnectParams(reconnect)},
		Logger:      zap.NewNop(),
	})
	if err != nil {
		return nil, fmt.Errorf("connecting to etcd %s: %w", endpoints, err)
	}
	return c, nil
}

// EndpointClients connects one client to each endpoint (comma-separated
// URLs), for Config.Endpoints: first the nearest, which an embedded
// member's daemon names with first (its own client URL; "" keeps the
// order).
func EndpointClients(endpoints, first string, tlsFiles TLSFiles) ([]*clientv3.Client, error) {
	eps := strings.Split(endpoints, ",")
	if i := slices.Index(eps, first); i > 0 {
		eps[0], eps[i] = eps[i], eps[0]
	}
	var out []*clientv3.Client
	for _, ep := range eps {
		c, err := NewClient(ep, tlsFiles)
		if err != nil {
			for _, c := range out {
				c.Close()
			}
			return nil, err
		}
		out = append(out, c)
	}
	return out, nil
}
