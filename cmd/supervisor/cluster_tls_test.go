package main

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/meshweaver/supervisor/client"
	"github.com/meshweaver/supervisor/cluster"
	"github.com/meshweaver/supervisor/messages"
	"github.com/meshweaver/supervisor/testkit/etcdtest"
)

// TestClusterExternalEtcdTLS: production's documented topology end to
// end (docs/DEPLOY.md, "TLS."): an external etcd of three processes under
// mutual TLS whose certificates come from a CA of the members' own, and
// two daemons whose remotes trust the callers' CA (SPIFFE identities, the
// members granted the cluster kind) while their etcd clients and fence
// helpers use --etcd-tls-* from the etcd CA. Alice, a caller, is served
// through each daemon (one relays to the owner); etcd refuses her
// certificate and serves the daemons'. Her user's owner is SIGKILLed: its
// fence helper revokes the lease through TLS etcd with the etcd files,
// so the owner key goes well before the lease could expire, and her next
// round resumes the thread on the survivor. The survivor's own user keeps
// its app-server and the survivor never fences.
func TestClusterExternalEtcdTLS(t *testing.T) {
	dir := t.TempDir()
	callers := tlsNewCA(t, dir, "ca", "meshweaver test CA")
	members := tlsNewCA(t, dir, "etcd-ca", "meshweaver test etcd CA")
	etcdCert, etcdKey := members.issue(t, dir, "etcd-server")
	aliceCert, aliceKey := callers.issueURI(t, dir, "alice", "spiffe://mesh/alice-agent")
	authz := filepath.Join(dir, "authz.json")
	if err := os.WriteFile(authz, []byte(memberDialPolicy), 0o600); err != nil {
		t.Fatal(err)
	}
	const n = 2
	var nodeFlags [n][]string
	var etcdFiles [n]cluster.TLSFiles
	for i := range n {
		id := fmt.Sprintf("m%d", i)
		cert, key := callers.issueURI(t, dir, id, "spiffe://mesh/supervisor-"+id)
		ecert, ekey := members.issue(t, dir, id+"-etcd")
		etcdFiles[i] = cluster.TLSFiles{Cert: ecert, Key: ekey, CA: members.pem}
		nodeFlags[i] = []string{"--tls-cert", cert, "--tls-key", key, "--tls-ca", callers.pem, "--authz", authz,
			"--etcd-tls-cert", ecert, "--etcd-tls-key", ekey, "--etcd-tls-ca", members.pem}
	}

	ec := etcdtest.StartTLS(t, 3, etcdtest.TLSFiles{Cert: etcdCert, Key: etcdKey, CA: members.pem})
	for _, m := range ec.Members {
		if !strings.HasPrefix(m.Client, "https://") || !strings.HasPrefix(m.Peer, "https://") {
			t.Fatalf("etcd member %s serves %s and %s, want https", m.Name, m.Client, m.Peer)
		}
	}
	t.Logf("etcd's leader, asked over TLS: e%d", ec.Leader())
	tc := startTestClusterTLS(t, n, ec, nil, &clusterTLS{
		member: func(i int) []string { return nodeFlags[i] },
		etcd:   etcdFiles[0], // a daemon's etcd certificate
		caller: tlsConfig(t, aliceCert, aliceKey, callers.pem),
	}, nil)
	clients := []*client.Client{tc.dial(0), tc.dial(1)}

	// Alice is served through each daemon: the same user, the same thread
	// (the round through the member that does not own it is relayed).
	const user = "ann"
	var thread string
	for i, c := range clients {
		text, v, _ := roundRetrying(t, c, messages.StartRound{User: user, Thread: "t1", Text: fmt.Sprintf("message %d", i)}, time.Minute)
		if v.Status != messages.StatusCompleted || !strings.Contains(text, fmt.Sprintf("message %d", i)) {
			t.Fatalf("alice's round for %s via m%d: %q, %+v", user, i, text, v)
		}
		if thread == "" {
			thread = v.CodexThreadID
		} else if v.CodexThreadID != thread || !v.Resumed {
			t.Fatalf("alice's round via m%d ran on codex thread %s (resumed %v), want %s resumed", i, v.CodexThreadID, v.Resumed, thread)
		}
	}
	owner := tc.ownerOf(user)
	if owner < 0 {
		t.Fatalf("%s has no owner in etcd", user)
	}
	survivor := 1 - owner
	t.Logf("%s is owned by m%d, relayed from m%d", user, owner, survivor)

	// etcd refuses alice's certificate (the callers' CA) at the handshake
	// on every member's client and peer port, and so her write; the
	// daemons' etcd certificate reads the member records.
	for _, m := range ec.Members {
		for _, p := range []struct{ name, url string }{{"client", m.Client + "/version"}, {"peer", m.Peer + "/members"}} {
			if code, err := etcdHTTPS(t, p.url, aliceCert, aliceKey, members.pem); err == nil {
				t.Errorf("etcd %s's %s port answered alice's certificate: %d", m.Name, p.name, code)
			} else if !strings.Contains(err.Error(), "remote error: tls:") { // etcd's alert, not our refusal of its certificate
				t.Errorf("etcd %s's %s port with alice's certificate: %v, want etcd to refuse it", m.Name, p.name, err)
			}
			if code, err := etcdHTTPS(t, p.url, etcdFiles[1].Cert, etcdFiles[1].Key, members.pem); err != nil || code != http.StatusOK {
				t.Errorf("etcd %s's %s port with a daemon's etcd certificate: %d, %v", m.Name, p.name, code, err)
			}
		}
	}
	ctx, cancel := context.WithTimeout(t.Context(), opsWait)
	defer cancel()
	alice, err := cluster.NewClient(ec.Endpoints(), cluster.TLSFiles{Cert: aliceCert, Key: aliceKey, CA: members.pem})
	if err != nil {
		t.Fatal(err)
	}
	defer alice.Close()
	short, stop := context.WithTimeout(ctx, 2*time.Second)
	_, err = alice.Put(short, "/meshweaver/c1/owners/"+user, "elsewhere")
	stop()
	if err == nil {
		t.Errorf("alice's certificate wrote %s's owner key into the external etcd", user)
	} else {
		t.Logf("the external etcd refused alice's certificate: %v", err)
	}
	r, err := tc.etcd.Get(ctx, "/meshweaver/c1/members/", clientv3.WithPrefix())
	if err != nil || len(r.Kvs) != n {
		t.Fatalf("the member records, read with a daemon's etcd certificate: %v, %v; want %d", r, err, n)
	}
	for _, kv := range r.Kvs {
		id := strings.TrimPrefix(string(kv.Key), "/meshweaver/c1/members/")
		if i := slices.IndexFunc(tc.members, func(m *clusterMember) bool { return m.id == id }); i < 0 || string(kv.Value) != tc.members[i].addr {
			t.Errorf("member record %s = %s, want a member's address", kv.Key, kv.Value)
		}
	}
	if o := tc.ownerOf(user); o != owner {
		t.Fatalf("%s's owner is m%d after alice's write, want m%d", user, o, owner)
	}

	// The bystander: a user the survivor owns.
	by, _ := tc.userOwnedBesides(clients[survivor], owner)
	byApp := tc.appServersOf(tc.home(by))
	if len(byApp) != 1 {
		t.Fatalf("the bystander %s has app-servers %v, want one", by, byApp)
	}
	t.Logf("the bystander %s is owned by m%d", by, survivor)

	// SIGKILL of the owner: its fence helper revokes its lease through
	// the TLS etcd, before the lease could have expired (a TTL after the
	// last renewal, which came at most a renewal period before the kill).
	gone := tc.keyGone(survivor, "/meshweaver/c1/owners/"+user)
	killed := time.Now()
	if err := tc.members[owner].srv.cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	tc.members[owner].srv.wait(opsWait)
	every := cluster.NewDeadline(testLeaseTTL, testFenceMargin, time.Time{}).RenewEvery()
	select {
	case at := <-gone:
		if took := at.Sub(killed); took >= testLeaseTTL-every {
			t.Errorf("%s's owner key went %v after the SIGKILL, as the lease expired (TTL %v, renewals every %v): the fence helper did not revoke it through the TLS etcd",
				user, took.Round(time.Millisecond), testLeaseTTL, every)
		} else {
			t.Logf("%s's owner key went %v after the SIGKILL (the fence helper revoked the lease over TLS)", user, took.Round(time.Millisecond))
		}
	case <-time.After(2 * testLeaseTTL):
		t.Fatalf("%s's owner key outlived its lease", user)
	}

	// The next round resumes the thread on the survivor.
	text, v, tries := roundRetrying(t, clients[survivor], messages.StartRound{User: user, Thread: "t1", Text: "after the kill"}, time.Minute)
	if v.Status != messages.StatusCompleted || !v.Resumed || v.CodexThreadID != thread || !strings.Contains(text, "after the kill") {
		t.Fatalf("the round after the owner's SIGKILL: %q, %+v; want completed on the resumed thread %s", text, v, thread)
	}
	if o := tc.ownerOf(user); o != survivor {
		t.Fatalf("%s is owned by %d after m%d died, want the survivor m%d", user, o, owner, survivor)
	}
	t.Logf("%s's thread resumed on m%d %v after the SIGKILL (%d tries)", user, survivor, time.Since(killed).Round(time.Millisecond), tries)

	// The survivor never fenced; the bystander's app-server is the one it
	// had.
	tc.bystandersUntouched(owner, by, byApp)
}

// etcdHTTPS GETs url presenting cert and key, trusting ca for the
// server's certificate, and returns the status.
func etcdHTTPS(t *testing.T, url, cert, key, ca string) (int, error) {
	t.Helper()
	hc := &http.Client{Timeout: opsWait, Transport: &http.Transport{TLSClientConfig: tlsConfig(t, cert, key, ca)}}
	defer hc.CloseIdleConnections()
	resp, err := hc.Get(url)
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	_, _ = io.Copy(io.Discard, resp.Body)
	return resp.StatusCode, nil
}
