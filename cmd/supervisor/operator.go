package main

import (
	"bytes"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"reflect"
	"runtime/debug"
	"slices"
	"strings"
	"sync/atomic"
	"time"

	sd "github.com/coreos/go-systemd/v22/daemon"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/meshweaver/supervisor/actors"
	"github.com/meshweaver/supervisor/codexproto"
	"github.com/meshweaver/supervisor/edge"
	"github.com/meshweaver/supervisor/third_party/hollywood/remote"
)

// operatorOptions are serve's settings about running it rather than about
// the daemon itself.
type operatorOptions struct {
	config    string
	check     bool
	demoModel bool

	codexBin string        // resolved while validating
	fs       *flag.FlagSet // the parsed settings, to compare on reload
}

func (p *operatorOptions) register(fs *flag.FlagSet) {
	fs.StringVar(&p.config, "config", "", "settings `FILE`: one \"name value\" a line (# comments); the command line and SUPERVISOR_* win over it; reread on SIGHUP")
	fs.BoolVar(&p.check, "check", false, "validate every setting (flags, environment, --config) and exit: 0 when valid, 2 listing every problem")
	fs.BoolVar(&p.demoModel, "demo-model", false, "run codex against the embedded demo model instead of OpenAI, to try the callers by hand")
	p.fs = fs
}

// --- version ---

// version and commit are set by scripts/release (and the Dockerfile)
// through -ldflags "-X main.version=… -X main.commit=…"; otherwise the
// module version and the VCS revision of the build info are used (go
// build leaves the revision out under -buildvcs=false, as it does without
// the .git folder a container build has).
var version, commit = "", ""

// buildInfo is what `supervisor version` prints.
type buildInfo struct {
	Version   string `json:"version"`
	Commit    string `json:"commit"`
	GoVersion string `json:"goversion"`
	Codex     string `json:"codex"` // the pinned codex CLI version
}

// readBuildInfo reads the binary's build information: the module version
// (set by `go install …@v1.2.3`; "(devel)" in a work tree), the VCS
// revision go build stamps (with "-dirty" for local changes), the Go
// version and the codex CLI version the project pins.
func readBuildInfo() buildInfo {
	bi := buildInfo{Version: "(devel)", Commit: "unknown", Codex: codexproto.PinnedCLIVersion}
	info, ok := debug.ReadBuildInfo()
	if ok {
		bi.GoVersion = info.GoVersion
		if v := info.Main.Version; v != "" {
			bi.Version = v
		}
		dirty := false
		for _, s := range info.Settings {
			switch s.Key {
			case "vcs.revision":
				bi.Commit = s.Value
			case "vcs.modified":
				dirty = s.Value == "true"
			}
		}
		if dirty {
			bi.Commit += "-dirty"
		}
	}
	if version != "" {
		bi.Version = version
	}
	if commit != "" && bi.Commit == "unknown" {
		bi.Commit = commit
	}
	return bi
}

func (b buildInfo) String() string {
	return fmt.Sprintf("supervisor %s (commit %s, %s, codex %s)", b.Version, b.Commit, b.GoVersion, b.Codex)
}

// gauge is supervisor_build_info: 1, labelled with the build.
func (b buildInfo) gauge() prometheus.Collector {
	g := prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "supervisor_build_info", Help: "The supervisor's build: version, VCS commit, Go version and pinned codex CLI version; always 1.",
	}, []string{"version", "commit", "goversion", "codex"})
	g.WithLabelValues(b.Version, b.Commit, b.GoVersion, b.Codex).Set(1)
	return g
}

// --- TLS files reloaded on SIGHUP ---

// tlsFiles are the loaded certificate and CA bundle of the remote link.
type tlsFiles struct {
	cert tls.Certificate
	pool *x509.CertPool
}

// tlsReloader serves the remote's one tls.Config from files it can reload:
// hollywood keeps the *tls.Config it was given for its listener and every
// dial, so the config stays the same object and its callbacks read the
// current files, in both directions. Handshakes already done keep their
// certificates.
type tlsReloader struct {
	cur atomic.Pointer[tlsFiles]
	// admit, when set, refuses at the handshake a peer whose identity no
	// grant of the authorization file names: callers dialling in, and the
	// callers' listeners the daemon dials back.
	admit func(identity string) bool
	// member, when set, says whether an identity holds the cluster grant:
	// a peer dialled at a member's address must (verifyDialledTo).
	member func(identity string) bool
	// members, when set, lists the cluster's live members (id → remote
	// address), read at each dial; cluster.Node.Members, safe from the
	// writers' goroutines.
	members func() map[string]string
	// log, when set, receives the refused dials (sampled).
	log     *slog.Logger
	dialLog *edge.Sampler
}

func loadTLSFiles(t tlsOptions) (*tlsFiles, error) {
	conf, err := t.config()
	if err != nil {
		return nil, err
	}
	if conf == nil {
		return nil, errors.New("TLS is off")
	}
	return &tlsFiles{cert: conf.Certificates[0], pool: conf.ClientCAs}, nil
}

// newTLSReloader loads t and returns the reloader and the config to give
// the remote.
func newTLSReloader(t tlsOptions) (*tlsReloader, *tls.Config, error) {
	files, err := loadTLSFiles(t)
	if err != nil {
		return nil, nil, err
	}
	r := &tlsReloader{dialLog: edge.NewSampler(10, time.Minute)}
	r.cur.Store(files)
	conf := &tls.Config{
		MinVersion: tls.VersionTLS13,
		ClientAuth: tls.RequireAndVerifyClientCert,
		// As a server: a config per handshake with the current files.
		GetConfigForClient: func(*tls.ClientHelloInfo) (*tls.Config, error) {
			f := r.cur.Load()
			return &tls.Config{
				MinVersion:       tls.VersionTLS13,
				ClientAuth:       tls.RequireAndVerifyClientCert,
				Certificates:     []tls.Certificate{f.cert},
				ClientCAs:        f.pool,
				VerifyConnection: r.verifyPeer,
			}, nil
		},
		GetCertificate: func(*tls.ClientHelloInfo) (*tls.Certificate, error) {
			f := r.cur.Load()
			return &f.cert, nil
		},
		// As a client (the daemon dialling its callers back, or another
		// member): the current certificate, and the peer verified by
		// identity, not host name. A caller's listener is at an address
		// (127.0.0.1:port) its certificate need not name: a SPIFFE SVID
		// names none. crypto/tls's own check (RootCAs and the host name)
		// is off, and verifyDialled verifies the chain against the
		// current bundle and the identity against the policy; the sender
		// binding then requires it to be the very identity the caller's
		// connection presented (remote.bindSender).
		GetClientCertificate: func(*tls.CertificateRequestInfo) (*tls.Certificate, error) {
			f := r.cur.Load()
			return &f.cert, nil
		},
		InsecureSkipVerify: true,
		VerifyConnection:   r.verifyDialled,
	}
	return r, conf, nil
}

// verifyPeer runs after the chain is verified: a certificate that names no
// one identity (two URI SANs), and an identity no grant names, are refused
// before their connection may buffer anything.
func (r *tlsReloader) verifyPeer(cs tls.ConnectionState) error {
	if err := remote.CheckIdentity(&cs); err != nil {
		return err
	}
	if r.admit == nil {
		return nil
	}
	if id := remote.DefaultIdentify(&cs); !r.admit(id) {
		return fmt.Errorf("no grant of the authorization file names identity %.100q", id)
	}
	return nil
}

// verifyDialled verifies a peer the daemon dialled: its chain against the
// current bundle (with the intermediates it sent), as a TLS server, and
// its identity as verifyPeer does. It is the rule for an address that is
// not a member's (verifyDialledTo).
func (r *tlsReloader) verifyDialled(cs tls.ConnectionState) error {
	return r.verifyDialledAt("", false, cs)
}

// verifyDialledTo is the remote's per-dial verification
// (remote.Config.WithDialVerify): a peer dialled at the address of a live
// cluster member, read from the member list at this dial, must hold the
// cluster grant; any other address (a caller's listener) gets
// verifyDialled's rule. Otherwise a caller's identity, listening at a
// member's address (the member's host after it died, a spoofed route),
// would receive the prompts forwarded to that member and the answers
// meant for its relays.
func (r *tlsReloader) verifyDialledTo(addr string) func(tls.ConnectionState) error {
	member := r.isMember(addr)
	return func(cs tls.ConnectionState) error { return r.verifyDialledAt(addr, member, cs) }
}

// dialVerify is verifyDialledTo for the remote's config; nil without TLS.
func (r *tlsReloader) dialVerify() func(addr string) func(tls.ConnectionState) error {
	if r == nil {
		return nil
	}
	return r.verifyDialledTo
}

// isMember reports whether addr is a live member's remote address now.
func (r *tlsReloader) isMember(addr string) bool {
	if r.members == nil {
		return false
	}
	for _, a := range r.members() {
		if a == addr {
			return true
		}
	}
	return false
}

func (r *tlsReloader) verifyDialledAt(addr string, member bool, cs tls.ConnectionState) error {
	err := remote.VerifyChain(cs.PeerCertificates, r.cur.Load().pool, x509.ExtKeyUsageServerAuth)
	if err == nil {
		err = remote.CheckIdentity(&cs)
	}
	switch {
	case err != nil:
	case member && r.member != nil:
		if id := remote.DefaultIdentify(&cs); !r.member(id) {
			err = fmt.Errorf("%.100s is a cluster member's address, and no grant gives identity %.100q the cluster kind", addr, id)
		}
	default:
		err = r.verifyPeer(cs)
	}
	if err != nil && r.log != nil {
		if ok, skipped := r.dialLog.Take("dial", time.Now()); ok {
			r.log.Warn("refused the certificate of a peer the daemon dialled", "peer", remote.DefaultIdentify(&cs), "addr", addr, "member", member, "err", err, "not_logged", skipped)
		}
	}
	return err
}

// reload loads t's files and uses them for the next handshakes, incoming
// and outgoing.
func (r *tlsReloader) reload(t tlsOptions) error {
	files, err := loadTLSFiles(t)
	if err != nil {
		return err
	}
	r.cur.Store(files)
	return nil
}

// --- SIGHUP ---

// reloadable are the settings SIGHUP applies while serving.
var reloadable = append([]string{"log-level", "tls-cert", "tls-key", "tls-ca", "user-memory-max", "user-pids-max", "user-cpu-max", "user-disk-max", "allow-destination"}, budgetFlags...)

// reload rereads serve's settings (the same command line, the environment
// and the --config file) and applies the reloadable ones: the TLS files
// are loaded again (renewed certificates; a changed path too) and the log
// level is set. Settings that changed but need a restart are named in the
// log and left as they are. Invalid settings change nothing.
func reload(args []string, running *serveOptions, level *slog.LevelVar, certs *tlsReloader, log *slog.Logger) {
	sdNotify(sd.SdNotifyReloading)
	defer sdNotify(sd.SdNotifyReady)
	var problems bytes.Buffer
	o, err := loadServeOptions(args, os.LookupEnv, &problems)
	if err != nil {
		log.Error("reload refused: the settings are not valid; nothing changed", "err", strings.TrimSpace(problems.String()))
		return
	}
	var restart []string
	o.op.fs.VisitAll(func(f *flag.Flag) {
		old := running.op.fs.Lookup(f.Name)
		if old == nil || old.Value.String() == f.Value.String() || slices.Contains(reloadable, f.Name) {
			return
		}
		restart = append(restart, f.Name)
	})
	if running.authz != "" && o.authz == running.authz && !reflect.DeepEqual(running.policy, o.policy) {
		restart = append(restart, "authz (the file's grants)") // the edge's gate holds the policy read at start
	}
	if err := running.cluster.etcdReloadChanged(running.tls, &o.cluster, o.tls); err != nil {
		restart = append(restart, err.Error()) // read by etcd once, at start
	}
	if len(restart) > 0 {
		log.Warn("settings changed that a reload cannot apply; restart the daemon for them", "settings", strings.Join(restart, ","))
	}
	var lv slog.Level
	_ = lv.UnmarshalText([]byte(o.logLevel)) // validated
	level.Set(lv)
	tlsState := "off"
	if certs != nil {
		switch {
		case !o.tls.enabled():
			log.Warn("TLS cannot be turned off by a reload; keeping the loaded files")
			tlsState = "kept"
		default:
			if err := certs.reload(o.tls); err != nil {
				log.Error("reloading the TLS files failed; keeping the loaded ones", "err", err)
				tlsState = "kept"
			} else {
				tlsState = "reloaded"
			}
		}
	} else if o.tls.enabled() {
		log.Warn("TLS cannot be turned on by a reload; restart the daemon for it")
	}
	log.Info("reloaded", "log_level", lv.String(), "tls", tlsState)
}

// presetRejectReasons creates every label set of
// supervisor_remote_rejected_total at zero, from the reasons the edge's
// gate and the transport name, so that alerts see a series before the
// first refusal. (The root's own reasons are preset by actors.NewMetrics.)
func presetRejectReasons(m *actors.Metrics) {
	for _, r := range []string{
		edge.ReasonTarget, edge.ReasonInternal, edge.ReasonNoSender, edge.ReasonUnknown, edge.ReasonMalformed,
		edge.ReasonInvalid, edge.ReasonUnauthorized, edge.ReasonRate,
		remote.RefuseFrame, remote.RefuseType, remote.RefuseSender, remote.RefuseTooLarge, remote.RefuseConnCap,
		remote.RefuseHandshake, remote.RefusePanic,
	} {
		m.RemoteRejected.WithLabelValues(r)
	}
}
