package main

import (
	"context"
	"crypto/sha256"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net/url"
	"regexp"
	"strings"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/server/v3/embed"

	"github.com/meshweaver/supervisor/actors"
	"github.com/meshweaver/supervisor/cluster"
	"github.com/meshweaver/supervisor/third_party/hollywood/actor"
)

// clusterOptions are serve's cluster settings (docs/DEPLOY.md). Without
// --cluster the daemon serves every user itself and touches no etcd.
type clusterOptions struct {
	name         string
	member       string
	endpoints    string
	etcdName     string
	etcdDir      string
	etcdPeer     string
	etcdClient   string
	etcdInitial  string
	leaseTTL     time.Duration
	fenceMargin  time.Duration
	etcdElection time.Duration
	fenceHelper  bool
	fenceHelperF string // the fence helper's executable (tests; default: this one)
	// etcdTLS is what etcd trusts and what the member shows it: a CA
	// of the members' own keeps the callers' certificates, which the
	// remote's CA signs, away from the ownership keys. Default: --tls-*.
	etcdTLS tlsOptions
	// etcdCASum is the sha256 of etcd's CA file as validate read it: etcd
	// reads its CA once, so a reload that finds it changed asks for a
	// restart.
	etcdCASum [sha256.Size]byte
}

func (o *clusterOptions) register(fs *flag.FlagSet) {
	fs.StringVar(&o.name, "cluster", "", "`NAME` of the cluster this daemon is a member of (empty: a single node, no etcd); every member shares --homes")
	fs.StringVar(&o.member, "member", "", "this member's `ID`, unique in the cluster and the same across restarts (default: --etcd-name)")
	fs.StringVar(&o.endpoints, "etcd-endpoints", "", "etcd client `URLS` (comma-separated); default with an embedded member: its --etcd-client-listen")
	fs.StringVar(&o.etcdName, "etcd-name", "", "run an embedded etcd member of this `NAME` (one of --etcd-initial-cluster)")
	fs.StringVar(&o.etcdDir, "etcd-dir", "", "`DIR` of the embedded etcd member's data: a local disk, never the shared homes")
	fs.StringVar(&o.etcdPeer, "etcd-peer-listen", "", "`URL` the embedded etcd member's peers reach it on (https with --tls-cert)")
	fs.StringVar(&o.etcdClient, "etcd-client-listen", "", "`URL` the embedded etcd member serves clients on (https with --tls-cert)")
	fs.StringVar(&o.etcdInitial, "etcd-initial-cluster", "", "`NAME=URL,...`: every etcd member's peer URL, for the cluster's first start")
	fs.DurationVar(&o.leaseTTL, "lease-ttl", 10*time.Second, "etcd lease of the membership and of every user's ownership (whole seconds): a dead member's users move after about this long")
	fs.DurationVar(&o.fenceMargin, "fence-margin", 4*time.Second, "stop every app-server this long before the lease could expire when it cannot be renewed")
	fs.DurationVar(&o.etcdElection, "etcd-election-timeout", cluster.ElectionTimeout, "the election timeout of the external etcd at --etcd-endpoints (its --election-timeout), checked against --lease-ttl and --fence-margin; an embedded member uses etcd's default, 1s")
	fs.StringVar(&o.etcdTLS.cert, "etcd-tls-cert", "", "PEM certificate `FILE` this member shows etcd (as its client, and as an embedded member's server and peer); default --tls-cert")
	fs.StringVar(&o.etcdTLS.key, "etcd-tls-key", "", "PEM private key `FILE` of --etcd-tls-cert; default --tls-key")
	fs.StringVar(&o.etcdTLS.ca, "etcd-tls-ca", "", "PEM `FILE` of the CA etcd trusts, on both ends: give the members a CA of their own, which signs no caller, so that no caller's certificate can write the keys saying which member owns a user; default --tls-ca")
	fs.BoolVar(&o.fenceHelper, "fence-helper", true, "in a cluster, run the fence helper (supervisor fence) beside the daemon: it kills the member's app-servers if the daemon is paused or hung past --lease-ttl less --fence-margin")
}

func (o *clusterOptions) enabled() bool { return o.name != "" }

func (o *clusterOptions) embedded() bool { return o.etcdName != "" }

var clusterID = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$`)

func (o *clusterOptions) validate(node tlsOptions, allowPlaintext bool) error {
	if !o.enabled() {
		if o.member != "" || o.endpoints != "" || o.embedded() || o.etcdTLS.enabled() {
			return errors.New("--member, --etcd-endpoints, --etcd-name and --etcd-tls-* need --cluster")
		}
		return nil
	}
	if o.member == "" {
		o.member = o.etcdName
	}
	var errs []error
	if o.etcdTLS.enabled() {
		if o.etcdTLS.cert == "" || o.etcdTLS.key == "" || o.etcdTLS.ca == "" {
			errs = append(errs, errors.New("etcd's mutual TLS needs all of --etcd-tls-cert, --etcd-tls-key and --etcd-tls-ca"))
		} else {
			errs = append(errs, o.checkEtcdFiles(o.etcdTLS, "--etcd-tls-cert", "--etcd-tls-ca")...)
		}
	} else if node.cert != "" && node.key != "" && node.ca != "" {
		errs = append(errs, o.checkEtcdFiles(node, "--tls-cert", "--tls-ca")...)
	}
	tlsOn := o.etcdFiles(node).Enabled()
	for _, u := range strings.Split(o.endpoints, ",") {
		// The etcd client takes TLS or not for every endpoint from the
		// first one's scheme: an http one among https would send the
		// ownership traffic in the clear.
		if err := etcdURL(u, tlsOn); u != "" && err != nil {
			errs = append(errs, fmt.Errorf("--etcd-endpoints: %w", err))
		}
	}
	if !clusterID.MatchString(o.name) {
		errs = append(errs, fmt.Errorf("--cluster %q: letters, digits, '.', '_' and '-', at most 64", o.name))
	}
	if !clusterID.MatchString(o.member) {
		errs = append(errs, fmt.Errorf("--member %q: letters, digits, '.', '_' and '-', at most 64 (required with --cluster)", o.member))
	}
	if o.embedded() {
		if o.etcdDir == "" || o.etcdPeer == "" || o.etcdClient == "" || o.etcdInitial == "" {
			errs = append(errs, errors.New("--etcd-name needs --etcd-dir, --etcd-peer-listen, --etcd-client-listen and --etcd-initial-cluster"))
		}
		for _, u := range []string{o.etcdPeer, o.etcdClient} {
			if err := etcdURL(u, tlsOn); u != "" && err != nil {
				errs = append(errs, err)
			}
		}
		if !tlsOn && !allowPlaintext {
			// etcd opens its own sockets: the listener guard cannot wrap
			// them, and whoever writes its keys moves users between members.
			errs = append(errs, fmt.Errorf("an embedded etcd member without TLS serves its client (%s) and peer (%s) ports to every local process, the users' agents included: use mutual TLS (--etcd-tls-cert, --etcd-tls-key, --etcd-tls-ca, or --tls-*), or accept it with --allow-plaintext", o.etcdClient, o.etcdPeer))
		}
	} else if o.endpoints == "" {
		errs = append(errs, errors.New("--cluster needs --etcd-endpoints or an embedded member (--etcd-name)"))
	}
	if o.leaseTTL < 2*time.Second || o.leaseTTL%time.Second != 0 {
		errs = append(errs, fmt.Errorf("--lease-ttl %v: whole seconds, at least 2s", o.leaseTTL))
	}
	if o.fenceMargin <= 0 || o.fenceMargin >= o.leaseTTL {
		errs = append(errs, fmt.Errorf("--fence-margin %v must be positive and below --lease-ttl %v", o.fenceMargin, o.leaseTTL))
	} else {
		election := o.etcdElection
		if o.embedded() {
			election = cluster.ElectionTimeout
		}
		if election <= 0 {
			errs = append(errs, fmt.Errorf("--etcd-election-timeout %v must be positive", election))
		} else if err := cluster.CheckTimings(o.leaseTTL, o.fenceMargin, election); err != nil {
			// A member's death would fence the survivors (DEPLOY.md).
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// clusterRuntime is a member's cluster machinery, started before the
// daemon and stopped after it.
type clusterRuntime struct {
	node      *cluster.Node
	endpoints []*clientv3.Client
	fences    prometheus.Counter
	// helperRestarts counts the fence helper's restarts (fencehelper.go).
	helperRestarts prometheus.Counter
	client         *clientv3.Client
	etcd           *embed.Etcd
	fence          *fenceHelper
	root           atomic.Pointer[fenceTarget]
	log            *slog.Logger
}

// fenceTarget is where the node's fence goes once the daemon runs.
type fenceTarget struct {
	engine *actor.Engine
	root   *actor.PID
}

// startCluster starts the embedded etcd member (if any), connects, starts
// the out-of-process fence and joins the cluster as the member at addr.
func startCluster(ctx context.Context, o *clusterOptions, tlsFiles cluster.TLSFiles, addr string, stderr io.Writer, log *slog.Logger) (*clusterRuntime, error) {
	rt := &clusterRuntime{log: log, fences: prometheus.NewCounter(prometheus.CounterOpts{
		Name: "supervisor_cluster_fences_total",
		Help: "Times this member fenced itself (stopped every app-server) because its etcd lease could not be renewed in time.",
	}), helperRestarts: prometheus.NewCounter(prometheus.CounterOpts{
		Name: "supervisor_cluster_fence_helper_restarts_total",
		Help: "Times the fence helper was started again because it exited, or stopped reading its input, while the daemon served.",
	})}
	ok := false
	defer func() {
		if !ok {
			rt.close()
		}
	}()
	endpoints := o.endpoints
	if o.embedded() {
		e, err := cluster.StartEmbedded(ctx, cluster.EmbedConfig{
			Name: o.etcdName, Dir: o.etcdDir, Peer: o.etcdPeer, Client: o.etcdClient,
			Initial: o.etcdInitial, Token: o.name, TLS: tlsFiles,
		})
		if err != nil {
			return nil, err
		}
		rt.etcd = e
		if endpoints == "" {
			endpoints = o.etcdClient
		}
		log.Info("embedded etcd member serving", "name", o.etcdName, "client", o.etcdClient, "peer", o.etcdPeer)
	}
	c, err := cluster.NewClient(endpoints, tlsFiles)
	if err != nil {
		return nil, err
	}
	rt.client = c
	// One client per endpoint, the embedded member's own first: renewals
	// move to the next endpoint when one hangs (cluster.Config.Endpoints).
	local := ""
	if o.embedded() {
		local = o.etcdClient
	}
	if rt.endpoints, err = cluster.EndpointClients(endpoints, local, tlsFiles); err != nil {
		return nil, err
	}
	if o.fenceHelper {
		if o.embedded() && endpoints == o.etcdClient {
			// The helper's revocation for a dead daemon would go to the
			// etcd member that died with it.
			log.Warn("--etcd-endpoints names only this member's own etcd: when this daemon dies, its users wait for its lease to expire instead of moving at once; list every member's client URL", "etcd_client", o.etcdClient)
		}
		if rt.fence, err = startFenceHelper(o.fenceHelperF, fenceHelperArgs(o, endpoints, tlsFiles), stderr, log, rt.helperRestarts); err != nil {
			return nil, err
		}
	}
	// Joining waits for etcd's quorum: the other members may start later.
	jctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	rt.node, err = cluster.Join(jctx, cluster.Config{
		Client: c, Endpoints: rt.endpoints, Cluster: o.name, Member: o.member, Addr: addr,
		TTL: o.leaseTTL, Margin: o.fenceMargin, Logger: log,
		OnFence: func() { rt.onFence(o.fenceMargin) },
		OnDeadline: func(at time.Time, lease clientv3.LeaseID) {
			if rt.fence != nil {
				rt.fence.deadline(at, lease)
			}
		},
	})
	if err != nil {
		return nil, err
	}
	ok = true
	return rt, nil
}

// onFence is the node's OnFence: it stops every user actor, their
// app-servers with them, and waits until they are stopped, for the node
// revokes the fenced lease (and other members claim its users) only once
// this returns. A stop that outlasts bound (the fence margin) has the
// fence helper kill what is left, at its next tick, and is waited for
// another bound at most.
func (rt *clusterRuntime) onFence(bound time.Duration) {
	rt.fences.Inc()
	t := rt.root.Load()
	if t == nil {
		return
	}
	done := make(chan struct{})
	t.engine.Send(t.root, actors.Fence{Done: done})
	timer := time.NewTimer(bound)
	defer timer.Stop()
	select {
	case <-done:
		return
	case <-timer.C:
	}
	if rt.fence != nil {
		rt.log.Error("the app-servers did not stop within the fence margin after the fence: the fence helper kills them now", "fence_margin", bound)
		rt.fence.fenceNow()
	} else {
		rt.log.Error("the app-servers did not stop within the fence margin after the fence, and no fence helper runs (--fence-helper=false): waiting for them one more margin", "fence_margin", bound)
	}
	timer.Reset(bound)
	select {
	case <-done:
	case <-timer.C:
		rt.log.Error("the app-servers are still not all stopped two fence margins after the fence: the member revokes its old lease and rejoins anyway", "fence_margin", bound)
	}
}

// serving points the node's fence at the daemon's root (nil: at nothing,
// the daemon is stopping).
func (rt *clusterRuntime) serving(e *actor.Engine, root *actor.PID) {
	if e == nil {
		rt.root.Store(nil)
		return
	}
	rt.root.Store(&fenceTarget{engine: e, root: root})
}

// leave ends the membership after the daemon stopped its app-servers:
// the lease is revoked, so the other members take the users over at once.
func (rt *clusterRuntime) leave() {
	if rt.node != nil {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		if err := rt.node.Leave(ctx); err != nil {
			rt.log.Warn("leaving the cluster (the lease expires instead)", "err", err)
		}
		cancel()
		rt.node = nil
	}
	rt.close()
}

func (rt *clusterRuntime) close() {
	if rt.node != nil {
		rt.node.Close()
	}
	if rt.client != nil {
		rt.client.Close()
	}
	for _, c := range rt.endpoints {
		c.Close()
	}
	if rt.etcd != nil {
		rt.etcd.Close()
	}
	if rt.fence != nil {
		rt.fence.stop()
	}
}

// fenceHelperArgs are the helper's flags for this member: with the etcd
// endpoints and the node's certificate it leaves the cluster for a
// daemon that died (fence.go).
func fenceHelperArgs(o *clusterOptions, endpoints string, tlsFiles cluster.TLSFiles) []string {
	args := []string{"--member", o.member, "--etcd-endpoints", endpoints, "--lease-ttl", o.leaseTTL.String(), "--fence-margin", o.fenceMargin.String()}
	if tlsFiles.Enabled() {
		args = append(args, "--tls-cert", tlsFiles.Cert, "--tls-key", tlsFiles.Key, "--tls-ca", tlsFiles.CA)
	}
	if o.embedded() {
		args = append(args, "--kill-stopped-daemon")
	}
	return args
}

// etcdURL checks an etcd URL's scheme: https under etcd's mutual TLS,
// http without it.
func etcdURL(u string, tlsOn bool) error {
	p, err := url.Parse(u)
	switch {
	case err != nil || p.Host == "":
		return fmt.Errorf("etcd URL %q is not a URL", u)
	case tlsOn && p.Scheme != "https":
		return fmt.Errorf("etcd URL %q: with --etcd-tls-cert or --tls-cert etcd speaks mutual TLS, so https", u)
	case !tlsOn && p.Scheme != "http":
		return fmt.Errorf("etcd URL %q: without TLS, http", u)
	}
	return nil
}

// etcdFiles are the mutual-TLS files of the member's etcd traffic:
// --etcd-tls-* when set, else the node's own (--tls-*).
func (o *clusterOptions) etcdFiles(node tlsOptions) cluster.TLSFiles {
	t := node
	if o.etcdTLS.enabled() {
		t = o.etcdTLS
	}
	if !t.enabled() {
		return cluster.TLSFiles{}
	}
	return cluster.TLSFiles{Cert: t.cert, Key: t.key, CA: t.ca}
}

// memberOf is the member id of a clustered daemon, "" otherwise.
func (o *clusterOptions) memberOf() string {
	if !o.enabled() {
		return ""
	}
	return strings.TrimSpace(o.member)
}
