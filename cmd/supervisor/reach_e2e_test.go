package main

import (
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/meshweaver/supervisor/demomodel"
	"github.com/meshweaver/supervisor/messages"
)

// TestAgentCannotReachListeners: the daemon as root, uid+bwrap (serve's
// defaults there), a round allowed danger-full-access (the network is
// open to its commands), plaintext remote, gateway and metrics listeners
// on loopback. Alice's agent (the real CLI, the mock model scripting its
// shell commands) connects to each and writes a request: each connection
// is closed unread (nothing comes back; the daemon counts a user-uid
// refusal per listener, and the remote's transport never saw a frame);
// the test's own callers, on the daemon's uid, are served by each
// listener in the same run.
func TestAgentCannotReachListeners(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("the uid switch needs root; CI runs as root")
	}
	h := hostileStart(t, "--sandbox", "danger-full-access", "--gateway-listen", "127.0.0.1:0")
	gw := fmt.Sprint(h.srv.waitMsg("gateway serving")["listen"])
	metricsAddr := strings.TrimSuffix(strings.TrimPrefix(h.metricsURL, "http://"), "/metrics")
	// Logged before "supervisor serving", with the listen addresses as given.
	want := "the users' uids (200000-299999) are refused on the daemon's listeners: remote " + h.addr + ", gateway 127.0.0.1:0, metrics 127.0.0.1:0"
	if _, ok := h.srv.find(func(rec map[string]any) bool { return rec["msg"] == want }); !ok {
		t.Errorf("no start-up line %q", want)
	}
	oc := opsNewCaller(t, h.addr, nil)
	probe(t, oc) // the test's caller reaches the remote before

	attempt := func(addr, request string) string {
		host, port, err := net.SplitHostPort(addr)
		if err != nil {
			t.Fatal(err)
		}
		return fmt.Sprintf(`trap '' PIPE; exec 3<>/dev/tcp/%s/%s || { echo connect-failed; exit 3; }; printf '%s' >&3; n=$(timeout 5 cat <&3 | wc -c); echo "read=$n"; [ "$n" -gt 0 ]`,
			host, port, request)
	}
	body := `{"user":"bob"}`
	attempts := []struct{ id, listener, cmd string }{
		{"remote", "remote", attempt(h.addr, `GET / HTTP/1.0\r\n\r\n`)},
		{"gateway", "gateway", attempt(gw, fmt.Sprintf(`POST /v1/account HTTP/1.0\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s`, len(body), body))},
		{"metrics", "metrics", attempt(metricsAddr, `GET /metrics HTTP/1.0\r\n\r\n`)},
	}
	frames := h.value("supervisor_remote_rejected_total", `reason="frame"`)
	var script []demomodel.Script
	for _, a := range attempts {
		script = append(script, demomodel.Respond(demomodel.ExecCommand(a.id, a.cmd)))
	}
	script = append(script, demomodel.Respond(demomodel.ExecCommand("whoami", "id -u")), demomodel.Text("done"))
	seen := len(h.model.Requests())
	h.model.Enqueue(script...)
	r := oc.round(messages.StartRound{User: "alice", Thread: "a/1", Text: "try the daemon's ports"})
	if r.verdict.Status != messages.StatusCompleted {
		t.Fatalf("alice's round: %+v", r.verdict)
	}
	outputs := toolOutputs(t, h.model.Requests()[seen:])
	// The agent ran as a uid of the range: what the guard refuses.
	if m := regexp.MustCompile(`Output:\n(\d+)`).FindStringSubmatch(outputs["whoami"]); m == nil || len(m[1]) != 6 || m[1][0] != '2' {
		t.Errorf("alice's agent's uid: %q, want one of 200000-299999", outputs["whoami"])
	}
	for _, a := range attempts {
		out, ok := outputs[a.id]
		switch {
		case !ok:
			t.Errorf("%s: no output reached the model", a.id)
		case strings.Contains(out, "connect-failed"):
			// Not this test's point (the guard accepts, then closes), but
			// not a reach either.
			t.Logf("%s: connect failed: %q", a.id, out)
		case !strings.Contains(out, "read=0") || strings.Contains(out, "Process exited with code 0"):
			t.Errorf("%s: alice's agent got an answer from the %s listener: %q", a.id, a.listener, out)
		}
		t.Logf("%s: %.200q", a.id, out)
		// The refusal is counted as a user's uid's, per listener.
		opsWaitMetric(t, h.metricsURL, "supervisor_listener_refused_total",
			fmt.Sprintf(`listener=%q,reason="user-uid"`, a.listener), ">= 1", func(v float64) bool { return v >= 1 })
	}
	if got := h.value("supervisor_remote_rejected_total", `reason="frame"`); got != frames {
		t.Errorf("the remote's transport read alice's bytes: frame refusals %v → %v", frames, got)
	}

	// The bystander, on the daemon's uid, through each listener.
	probe(t, oc)
	if code, body := opsHTTP(t, h.metricsURL); code != http.StatusOK || !strings.Contains(body, "supervisor_listener_refused_total") {
		t.Errorf("metrics for the daemon's uid: %d", code)
	}
	resp, err := http.Post("http://"+gw+"/v1/account", "application/json", strings.NewReader(body))
	if err != nil {
		t.Fatalf("gateway for the daemon's uid: %v", err)
	}
	resp.Body.Close()
	if resp.StatusCode == 0 {
		t.Errorf("gateway for the daemon's uid: no status")
	}
	h.alive()
}

// TestAgentCannotReachEtcd: a cluster member under mutual TLS with an
// embedded etcd member, as root with a uid switch; alice's agent
// (danger-full-access) tries etcd's client and peer ports with curl, as
// it would in plaintext, and gets no HTTP answer from either (a client
// certificate of the CA is required, and the node's key is not hers to
// read); it tries the remote and the metrics port too (closed unread by
// the guard). The test, holding the node's certificate, reads etcd's
// /version through the client port in the same run.
func TestAgentCannotReachEtcd(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("the uid switch needs root; CI runs as root")
	}
	dir := t.TempDir()
	ca := tlsNewCA(t, dir, "ca", "meshweaver test CA")
	nodeCert, nodeKey := ca.issue(t, dir, "node")
	callerCert, callerKey := ca.issue(t, dir, "caller")
	peer, err := freeLoopbackAddr()
	if err != nil {
		t.Fatal(err)
	}
	client, err := freeLoopbackAddr()
	if err != nil {
		t.Fatal(err)
	}
	h := hostileStart(t, "--sandbox", "danger-full-access",
		"--tls-cert", nodeCert, "--tls-key", nodeKey, "--tls-ca", ca.pem, "--authz-allow-any",
		"--cluster", "c1", "--etcd-name", "n1", "--etcd-dir", filepath.Join(dir, "etcd"),
		"--etcd-peer-listen", "https://"+peer, "--etcd-client-listen", "https://"+client,
		"--etcd-initial-cluster", "n1=https://"+peer)
	h.srv.waitMsg("supervisor serving")
	oc := opsNewCaller(t, h.addr, tlsConfig(t, callerCert, callerKey, ca.pem))
	metricsAddr := strings.TrimSuffix(strings.TrimPrefix(h.metricsURL, "http://"), "/metrics")

	curl := func(url string) string {
		return fmt.Sprintf(`c=$(curl -sk --max-time 5 -o /dev/null -w '%%{http_code}' %s); echo "code=$c exit=$?"; [ "$c" != 000 ]`, url)
	}
	raw := func(addr string) string {
		host, port, _ := net.SplitHostPort(addr)
		return fmt.Sprintf(`trap '' PIPE; exec 3<>/dev/tcp/%s/%s || { echo connect-failed; exit 3; }; printf 'GET / HTTP/1.0\r\n\r\n' >&3; n=$(timeout 5 cat <&3 | wc -c); echo "read=$n"; [ "$n" -gt 0 ]`, host, port)
	}
	attempts := []struct{ id, cmd, refused string }{
		{"etcd-client", curl("https://" + client + "/version"), "code=000"},
		{"etcd-peer", curl("https://" + peer + "/members"), "code=000"},
		{"etcd-client-kv", curl("-X POST -d '{\"key\":\"Lw==\",\"range_end\":\"AA==\"}' https://" + client + "/v3/kv/range"), "code=000"},
		{"remote", raw(h.addr), "read=0"},
		{"metrics", raw(metricsAddr), "read=0"},
	}
	var script []demomodel.Script
	for _, a := range attempts {
		script = append(script, demomodel.Respond(demomodel.ExecCommand(a.id, a.cmd)))
	}
	script = append(script, demomodel.Respond(demomodel.ExecCommand("whoami", "id -u")), demomodel.Text("done"))
	seen := len(h.model.Requests())
	h.model.Enqueue(script...)
	r := oc.round(messages.StartRound{User: "alice", Thread: "a/1", Text: "try the cluster's ports"})
	if r.verdict.Status != messages.StatusCompleted {
		t.Fatalf("alice's round: %+v", r.verdict)
	}
	outputs := toolOutputs(t, h.model.Requests()[seen:])
	if m := regexp.MustCompile(`Output:\n(\d+)`).FindStringSubmatch(outputs["whoami"]); m == nil || len(m[1]) != 6 || m[1][0] != '2' {
		t.Errorf("alice's agent's uid: %q, want one of 200000-299999", outputs["whoami"])
	}
	for _, a := range attempts {
		out, ok := outputs[a.id]
		switch {
		case !ok:
			t.Errorf("%s: no output reached the model", a.id)
		case strings.Contains(out, "connect-failed"), strings.Contains(out, "exit=7\n"):
			// The port was not even open: not what this test checks.
			t.Errorf("%s: could not connect: %q", a.id, out)
		case !strings.Contains(out, a.refused) || strings.Contains(out, "Process exited with code 0"):
			t.Errorf("%s: alice's agent got an answer: %q", a.id, out)
		}
		t.Logf("%s: %.200q", a.id, out)
	}
	// The same curl with the node's certificate gets an answer: the
	// refusal above is the missing certificate, not the command.
	if out, err := exec.Command("curl", "-sk", "--max-time", "5", "--cert", nodeCert, "--key", nodeKey,
		"-o", "/dev/null", "-w", "%{http_code}", "https://"+client+"/version").Output(); err != nil || string(out) != "200" {
		t.Errorf("curl with the node's certificate: %q %v", out, err)
	}

	// The test, with the node's certificate, is served by etcd.
	tc := tlsConfig(t, nodeCert, nodeKey, ca.pem)
	hc := &http.Client{Transport: &http.Transport{TLSClientConfig: tc}}
	defer hc.CloseIdleConnections()
	resp, err := hc.Get("https://" + client + "/version")
	if err != nil {
		t.Fatalf("etcd with the node's certificate: %v", err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK || !strings.Contains(string(b), "etcdserver") {
		t.Errorf("etcd with the node's certificate: %d %s", resp.StatusCode, b)
	}
	probe(t, oc)
	h.alive()
}
