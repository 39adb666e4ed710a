// Package etcdtest runs an etcd cluster of separate processes for tests,
// as production runs etcd beside the daemons: each member is the test
// binary itself, started again in the member's role (Main), so a test can
// SIGKILL, SIGSTOP and SIGCONT one member as it would a real etcd.
//
// The members run etcd's own defaults for the raft timings (a heartbeat
// every 100 ms, an election after 1 s of silence), the defaults an
// operator's etcd has unless tuned, at nice −10 (ahead).
//
// Start runs them in plaintext; StartTLS under mutual TLS, as production
// runs them: https client and peer URLs, each port asking for a client
// certificate its CA signed.
package etcdtest

import (
	"bufio"
	"context"
	"crypto/tls"
	"encoding/json"
	"fmt"
	"net"
	"net/url"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"go.etcd.io/etcd/client/pkg/v3/transport"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/server/v3/embed"
	"go.uber.org/zap"
	"golang.org/x/sys/unix"
)

// env names the member a process runs as: name,dir,peer,client,initial.
const env = "MESHWEAVER_ETCDTEST_MEMBER"

// envTLS holds a TLS member's files, TLSFiles as JSON (a path may hold a
// comma, env's separator).
const envTLS = "MESHWEAVER_ETCDTEST_TLS"

// TLSFiles are the members' mutual-TLS files (PEM): one certificate and
// key for every member, which serve both ends of a connection (server
// and client auth, valid for 127.0.0.1), and the CA whose signature each
// member's client and peer ports require of a client's certificate. The
// Cluster's own calls (Leader) present the same certificate.
type TLSFiles struct {
	Cert, Key, CA string
}

// Enabled reports whether the files are set.
func (f TLSFiles) Enabled() bool { return f.Cert != "" }

// info is etcd's form of the files, asking for client certificates.
func (f TLSFiles) info() transport.TLSInfo {
	return transport.TLSInfo{CertFile: f.Cert, KeyFile: f.Key, TrustedCAFile: f.CA, ClientCertAuth: true}
}

// ElectionTimeout is the members' raft election timeout.
const ElectionTimeout = time.Second

// Main runs this process as an etcd member when a Cluster started it so,
// and never returns then; otherwise it returns at once. Call it first in
// TestMain.
func Main() {
	spec := os.Getenv(env)
	if spec == "" {
		return
	}
	if err := member(spec); err != nil {
		fmt.Fprintln(os.Stderr, "etcdtest member:", err)
		os.Exit(1)
	}
	os.Exit(0)
}

func member(spec string) error {
	f := strings.SplitN(spec, ",", 5)
	if len(f) != 5 {
		return fmt.Errorf("bad %s %q", env, spec)
	}
	cfg := embed.NewConfig()
	cfg.Name, cfg.Dir = f[0], f[1]
	peer, err := url.Parse(f[2])
	if err != nil {
		return err
	}
	client, err := url.Parse(f[3])
	if err != nil {
		return err
	}
	cfg.ListenPeerUrls, cfg.AdvertisePeerUrls = []url.URL{*peer}, []url.URL{*peer}
	cfg.ListenClientUrls, cfg.AdvertiseClientUrls = []url.URL{*client}, []url.URL{*client}
	cfg.InitialCluster = strings.ReplaceAll(f[4], ";", ",")
	cfg.InitialClusterToken = "etcdtest"
	cfg.TickMs, cfg.ElectionMs = 100, uint(ElectionTimeout/time.Millisecond)
	if raw := os.Getenv(envTLS); raw != "" {
		var files TLSFiles
		if err := json.Unmarshal([]byte(raw), &files); err != nil {
			return fmt.Errorf("bad %s %q: %w", envTLS, raw, err)
		}
		cfg.ClientTLSInfo, cfg.PeerTLSInfo = files.info(), files.info()
	}
	cfg.ZapLoggerBuilder = embed.NewZapLoggerBuilder(zap.NewNop())
	if _, err := os.Stat(filepath.Join(cfg.Dir, "member")); err == nil {
		cfg.ClusterState = embed.ClusterStateFlagExisting
	}
	ahead()
	e, err := embed.StartEtcd(cfg)
	if err != nil {
		return err
	}
	defer e.Close()
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, syscall.SIGTERM, syscall.SIGINT)
	select {
	case <-e.Server.ReadyNotify():
		fmt.Println("ready")
	case err := <-e.Err():
		return err
	case <-sig:
		return nil
	}
	select {
	case err := <-e.Err():
		return err
	case <-sig:
		return nil
	}
}

// ahead runs every thread of this process at nice −10 (a thread started
// later inherits its creator's), where the user may lower it (root), as
// production runs etcd on CPUs of its own, or ahead of the work on a
// shared host (docs/DEPLOY.md). Without it the cluster chaos run, three
// daemons, nine callers and their CLIs on two cores at a load of 20,
// starved etcd's leader: no keepalive was answered for 3 s, with every
// etcd member up, and the daemons fenced (issue 22).
func ahead() {
	for range 2 { // a thread started during the first pass is caught by the second
		tasks, err := os.ReadDir("/proc/self/task")
		if err != nil {
			return
		}
		for _, task := range tasks {
			if tid, err := strconv.Atoi(task.Name()); err == nil {
				_ = unix.Setpriority(unix.PRIO_PROCESS, tid, -10)
			}
		}
	}
}

// Cluster is n etcd member processes on loopback.
type Cluster struct {
	Members []*Member
	TLS     TLSFiles // the members' files; unset in plaintext
	t       testing.TB
}

// Member is one etcd process.
type Member struct {
	Name, Dir, Peer, Client string
	cmd                     *exec.Cmd
	done, readyCh           chan struct{}
	initial                 string
	tls                     TLSFiles
	t                       testing.TB
}

// Start runs n members in plaintext and waits until each serves. Cleanup
// ends them.
func Start(t testing.TB, n int) *Cluster {
	t.Helper()
	return start(t, n, TLSFiles{})
}

// StartTLS runs n members under mutual TLS with files (see TLSFiles) and
// waits until each serves: their client and peer URLs are https, and
// both ports refuse a client without a certificate files.CA signed.
// Cleanup ends them.
func StartTLS(t testing.TB, n int, files TLSFiles) *Cluster {
	t.Helper()
	if !files.Enabled() || files.Key == "" || files.CA == "" {
		t.Fatalf("etcdtest.StartTLS: want a certificate, key and CA, got %+v", files)
	}
	return start(t, n, files)
}

func start(t testing.TB, n int, files TLSFiles) *Cluster {
	t.Helper()
	scheme := "http://"
	if files.Enabled() {
		scheme = "https://"
	}
	c := &Cluster{TLS: files, t: t}
	var initial []string
	for i := range n {
		m := &Member{Name: fmt.Sprintf("e%d", i), Dir: filepath.Join(t.TempDir(), "etcd"),
			Peer: scheme + freeAddr(t), Client: scheme + freeAddr(t), tls: files, t: t}
		initial = append(initial, m.Name+"="+m.Peer)
		c.Members = append(c.Members, m)
	}
	for _, m := range c.Members {
		m.initial = strings.Join(initial, ";")
		m.start()
	}
	for _, m := range c.Members {
		m.waitReady()
	}
	return c
}

// Endpoints are the members' client URLs, comma-separated.
func (c *Cluster) Endpoints() string {
	var eps []string
	for _, m := range c.Members {
		eps = append(eps, m.Client)
	}
	return strings.Join(eps, ",")
}

// Leader is the index of the member that leads, as the live members see
// it, waiting up to 10 s for one: each live member's status names its own
// id and the leader's.
func (c *Cluster) Leader() int {
	c.t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) {
		ids := map[uint64]int{}
		var leader uint64
		for i, m := range c.Members {
			if !m.Running() {
				continue
			}
			if st, err := status(m.Client, c.TLS); err == nil {
				ids[st.Header.MemberId] = i
				if st.Leader != 0 {
					leader = st.Leader
				}
			}
		}
		if i, ok := ids[leader]; ok && leader != 0 {
			return i
		}
		time.Sleep(50 * time.Millisecond) // a poll of etcd's status, not a wait for an outcome
	}
	c.t.Fatal("etcdtest: no leader within 10s")
	return -1
}

// status asks the member at endpoint for its status, presenting the
// members' certificate when files are set.
func status(endpoint string, files TLSFiles) (*clientv3.StatusResponse, error) {
	var tc *tls.Config
	if files.Enabled() {
		var err error
		if tc, err = files.info().ClientConfig(); err != nil {
			return nil, err
		}
	}
	cli, err := clientv3.New(clientv3.Config{Endpoints: []string{endpoint}, TLS: tc, DialTimeout: time.Second, Logger: zap.NewNop()})
	if err != nil {
		return nil, err
	}
	defer cli.Close()
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	return cli.Status(ctx, endpoint)
}

func (m *Member) start() {
	m.t.Helper()
	exe, err := os.Executable()
	if err != nil {
		m.t.Fatal(err)
	}
	m.cmd = exec.Command(exe, "-test.run=^$")
	m.cmd.Env = append(os.Environ(), env+"="+strings.Join([]string{m.Name, m.Dir, m.Peer, m.Client, m.initial}, ","))
	if m.tls.Enabled() {
		files, err := json.Marshal(m.tls)
		if err != nil {
			m.t.Fatal(err)
		}
		m.cmd.Env = append(m.cmd.Env, envTLS+"="+string(files))
	}
	m.cmd.Stderr = os.Stderr
	m.cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	out, err := m.cmd.StdoutPipe()
	if err != nil {
		m.t.Fatal(err)
	}
	if err := m.cmd.Start(); err != nil {
		m.t.Fatal(err)
	}
	ready := make(chan struct{})
	m.done = make(chan struct{})
	go func() {
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			if sc.Text() == "ready" {
				close(ready)
			}
		}
		_ = m.cmd.Wait()
		close(m.done)
	}()
	m.readyCh = ready
	cmd, done := m.cmd, m.done
	m.t.Cleanup(func() {
		_ = cmd.Process.Signal(syscall.SIGCONT)
		_ = cmd.Process.Signal(syscall.SIGKILL)
		<-done
	})
}

func (m *Member) waitReady() {
	m.t.Helper()
	select {
	case <-m.readyCh:
	case <-m.done:
		m.t.Fatalf("etcd member %s exited while starting", m.Name)
	case <-time.After(60 * time.Second):
		m.t.Fatalf("etcd member %s not ready within 60s", m.Name)
	}
}

// Running reports whether the member's process has not exited.
func (m *Member) Running() bool {
	select {
	case <-m.done:
		return false
	default:
		return true
	}
}

// Kill SIGKILLs the member and waits for its exit.
func (m *Member) Kill() {
	_ = m.cmd.Process.Signal(syscall.SIGKILL)
	<-m.done
}

// Stop pauses the member (SIGSTOP); Cont resumes it.
func (m *Member) Stop() { _ = m.cmd.Process.Signal(syscall.SIGSTOP) }

// Cont resumes a paused member.
func (m *Member) Cont() { _ = m.cmd.Process.Signal(syscall.SIGCONT) }

// Restart starts a killed member again on its data and waits until it
// serves.
func (m *Member) Restart() {
	m.t.Helper()
	m.start()
	m.waitReady()
}

// Restart starts the killed members idx again on their data and waits
// until each serves: started together, so members that together make a
// quorum (after its loss) can elect a leader before any of them is ready.
func (c *Cluster) Restart(idx ...int) {
	c.t.Helper()
	for _, i := range idx {
		c.Members[i].start()
	}
	for _, i := range idx {
		c.Members[i].waitReady()
	}
}

func freeAddr(t testing.TB) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().String()
}
