package main

import (
	"context"
	"crypto/tls"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"syscall"
	"time"

	sd "github.com/coreos/go-systemd/v22/daemon"
	"github.com/oklog/run"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/meshweaver/supervisor/actors"
	"github.com/meshweaver/supervisor/actors/budget"
	"github.com/meshweaver/supervisor/codexproc"
	"github.com/meshweaver/supervisor/codexproto"
	"github.com/meshweaver/supervisor/demomodel"
	"github.com/meshweaver/supervisor/edge"
	"github.com/meshweaver/supervisor/isolate"
	"github.com/meshweaver/supervisor/third_party/hollywood/actor"
	"github.com/meshweaver/supervisor/third_party/hollywood/remote"
)

// serveOptions are the daemon's settings.
type serveOptions struct {
	listen         string
	homes          string
	workspace      string
	codex          string
	overrides      stringList
	codexEnv       stringList
	allowDest      stringList
	goals          bool
	unaskedTurns   string
	sandbox        string
	approval       string
	maxSandbox     string
	approvals      string
	logFormat      string
	logLevel       string
	stopTimeout    time.Duration
	callTimeout    time.Duration
	queueLimit     int
	allowPlaintext bool
	metricsListen  string
	idleTimeout    time.Duration
	maxLive        int
	stallTimeout   time.Duration
	loginGrant     time.Duration
	tls            tlsOptions
	op             operatorOptions
	isolation      isolationOptions
	limits         limitOptions
	budgets        budgetOptions
	cluster        clusterOptions
	callers        callerOptions
	traces         traceOptions

	authz            string
	authzAllowAny    bool
	policy           *edge.Policy // loaded by validate
	peerRate         float64
	peerBurst        int
	maxUsers         int
	userIdle         time.Duration
	handshakeTimeout time.Duration
	dialTimeout      time.Duration
	maxConnsPerIP    int
}

func serveFlags(fs *flag.FlagSet) *serveOptions {
	o := &serveOptions{}
	fs.StringVar(&o.listen, "listen", "127.0.0.1:4100", "`HOST:PORT` of the remote listener other actors reach (the address goes into every PID, so use the one peers dial)")
	fs.StringVar(&o.homes, "homes", "", "`DIR` holding every user's folder; a user's CODEX_HOME is DIR/<user>/.codex (required)")
	fs.StringVar(&o.workspace, "workspace", "", "`DIR`: the shared skills workspace every codex thread runs in (required)")
	fs.StringVar(&o.codex, "codex", "", "codex `PATH` (default: $CODEX_BIN, then codex on PATH; with --demo-model and neither, the project-local install); where the users' uids cannot reach it, it is run from hard links (or a copy) under "+isolate.DefaultCLILinks)
	fs.Var(&o.overrides, "codex-override", "`key=value` passed to every app-server as -c (repeatable)")
	fs.Var(&o.codexEnv, "codex-env", "`KEY=VALUE` added to every app-server's environment (repeatable); nothing else of the daemon's environment reaches it beyond PATH, HOME and locale")
	fs.Var(&o.allowDest, "allow-destination", "`HOST:PORT` of an MCP server on this host, loopback or link-local that rounds' MCP back-connections may reach (repeatable; every other such address is refused: the daemon never connects there on an agent's behalf)")
	fs.BoolVar(&o.goals, "codex-goals", false, "let codex offer the model its goal tools (create_goal and the others): a goal makes the app-server run turns of its own after its round's verdict, which --unasked-turns then decides")
	fs.StringVar(&o.unaskedTurns, "unasked-turns", actors.UnaskedInterrupt, "what to do with a turn an app-server starts that no round asked for (a codex goal continuing): interrupt or allow; either way it is counted and logged")
	fs.StringVar(&o.sandbox, "sandbox", codexproto.SandboxReadOnly, "sandbox of codex threads: read-only, workspace-write or danger-full-access")
	fs.StringVar(&o.approval, "approval-policy", codexproto.ApprovalNever, "approval policy of codex threads: never, on-request or untrusted")
	fs.StringVar(&o.maxSandbox, "max-sandbox", "", "most permissive sandbox a round may ask for (default: --sandbox); a round asking for more is clamped, with a notice")
	fs.StringVar(&o.approvals, "allow-approval-policies", "", "comma-separated approval policies a round may ask for (default: --approval-policy only)")
	fs.StringVar(&o.logFormat, "log-format", "auto", "log format: auto (text on a terminal, else json), text or json")
	fs.StringVar(&o.logLevel, "log-level", "info", "log level: debug, info, warn or error")
	fs.DurationVar(&o.stopTimeout, "stop-timeout", 30*time.Second, "how long SIGTERM waits for rounds and app-servers to stop")
	fs.DurationVar(&o.callTimeout, "call-timeout", 60*time.Second, "deadline of every call to an app-server")
	fs.IntVar(&o.queueLimit, "queue-limit", 4, "rounds that may wait behind a running one on the same mesh thread")
	fs.BoolVar(&o.allowPlaintext, "allow-plaintext", false, "allow plaintext listeners anyone who reaches them may use: the remote or the gateway on a non-loopback address, an embedded etcd member without TLS (each named in a warning at every start)")
	fs.StringVar(&o.metricsListen, "metrics-listen", "127.0.0.1:4101", "`HOST:PORT` serving /metrics, /healthz and /readyz (empty: off)")
	fs.DurationVar(&o.idleTimeout, "idle-timeout", 10*time.Minute, "stop a user's app-server after this long without use")
	fs.IntVar(&o.maxLive, "max-live", 64, "most app-servers alive on this node; past it the least recently used idle one stops")
	fs.DurationVar(&o.stallTimeout, "stall-timeout", 10*time.Minute, "interrupt a turn that made no progress for this long")
	fs.DurationVar(&o.loginGrant, "login-grant", 15*time.Minute, "cancel a device-code login not approved within this long")
	o.tls.register(fs)
	o.callers.register(fs)
	o.op.register(fs)
	o.isolation.register(fs)
	o.limits.register(fs)
	o.budgets.register(fs)
	o.cluster.register(fs)
	o.traces.register(fs)
	fs.StringVar(&o.authz, "authz", "", "authorization `FILE` (JSON) mapping peer certificate identities to the users and message kinds they may send (docs/SECURITY.md); required with mutual TLS")
	fs.BoolVar(&o.authzAllowAny, "authz-allow-any", false, "with mutual TLS and no --authz: let every certificate of the CA act for every user (warned at every start)")
	fs.Float64Var(&o.peerRate, "peer-rate", 20, "messages per second each peer may send (a peer is its identity under TLS, its IP in plaintext)")
	fs.IntVar(&o.peerBurst, "peer-burst", 40, "messages a peer may send at once above --peer-rate")
	fs.IntVar(&o.maxUsers, "max-users", 10000, "most user actors alive on this node; a message for one more is refused")
	fs.DurationVar(&o.userIdle, "user-idle", 10*time.Minute, "forget a user's actors after this long with no app-server, no round and no message")
	fs.DurationVar(&o.handshakeTimeout, "handshake-timeout", 10*time.Second, "an accepted connection must finish TLS and send its first frame within this long")
	fs.DurationVar(&o.dialTimeout, "dial-timeout", 5*time.Second, "each attempt to dial a caller back, TLS handshake included")
	fs.IntVar(&o.maxConnsPerIP, "max-conns-per-ip", 64, "accepted connections per remote IP; more are closed at once")
	return o
}

func (o *serveOptions) validate() error {
	var errs []error
	if o.homes == "" {
		errs = append(errs, errors.New("--homes is required"))
	}
	if o.workspace == "" {
		errs = append(errs, errors.New("--workspace is required"))
	} else if fi, err := os.Stat(o.workspace); err != nil || !fi.IsDir() {
		errs = append(errs, fmt.Errorf("--workspace %s is not a directory", o.workspace))
	}
	if !isLoopback(o.listen) && !o.allowPlaintext && !o.tls.enabled() {
		errs = append(errs, fmt.Errorf("--listen %s is not loopback: plaintext there needs --allow-plaintext", o.listen))
	}
	for _, kv := range append(append([]string{}, o.overrides...), o.codexEnv...) {
		if k, _, ok := strings.Cut(kv, "="); !ok || k == "" {
			errs = append(errs, fmt.Errorf("%q is not KEY=VALUE", kv))
		}
	}
	for _, kv := range o.overrides {
		if k, _, _ := strings.Cut(kv, "="); strings.TrimSpace(k) == "features.goals" {
			errs = append(errs, fmt.Errorf("--codex-override %s: the daemon sets features.goals itself; use --codex-goals", kv))
		}
	}
	for _, hp := range o.allowDest {
		if _, port, err := net.SplitHostPort(hp); err != nil || port == "" || strings.ContainsAny(hp, "/?#@") {
			errs = append(errs, fmt.Errorf("--allow-destination %q is not HOST:PORT", hp))
		} else if n, err := strconv.Atoi(port); err != nil || n < 1 || n > 65535 {
			errs = append(errs, fmt.Errorf("--allow-destination %q: the port is not 1-65535", hp))
		}
	}
	switch o.unaskedTurns {
	case actors.UnaskedInterrupt, actors.UnaskedAllow:
	default:
		errs = append(errs, fmt.Errorf("--unasked-turns %q: want %s or %s", o.unaskedTurns, actors.UnaskedInterrupt, actors.UnaskedAllow))
	}
	switch o.sandbox {
	case "read-only", "workspace-write", "danger-full-access":
	default:
		errs = append(errs, fmt.Errorf("--sandbox %q is not a sandbox mode", o.sandbox))
	}
	switch o.approval {
	case "never", "on-request", "untrusted", "on-failure":
	default:
		errs = append(errs, fmt.Errorf("--approval-policy %q is not a policy", o.approval))
	}
	if err := (&actors.Config{Sandbox: o.sandbox, ApprovalPolicy: o.approval, MaxSandbox: o.maxSandbox,
		ApprovalPolicies: splitList(o.approvals)}).CheckBounds(); err != nil {
		errs = append(errs, fmt.Errorf("--max-sandbox or --allow-approval-policies: %w", err))
	}
	if o.stopTimeout <= 0 || o.callTimeout <= 0 || o.queueLimit <= 0 || o.idleTimeout <= 0 ||
		o.maxLive <= 0 || o.stallTimeout <= 0 || o.loginGrant <= 0 {
		errs = append(errs, errors.New("timeouts, --queue-limit and --max-live must be positive"))
	}
	if _, err := o.tls.config(); err != nil {
		errs = append(errs, err)
	}
	errs = append(errs, o.callers.validate(o.tls.enabled(), o.allowPlaintext)...)
	if err := o.isolation.validate(); err != nil {
		errs = append(errs, err)
	}
	if err := o.budgets.validate(); err != nil {
		errs = append(errs, err)
	}
	if err := o.limits.validate(); err != nil {
		errs = append(errs, err)
	}
	if err := o.cluster.validate(o.tls, o.allowPlaintext); err != nil {
		errs = append(errs, err)
	}
	if err := o.traces.validate(); err != nil {
		errs = append(errs, err)
	}
	switch {
	case o.authz != "" && o.authzAllowAny:
		errs = append(errs, errors.New("--authz and --authz-allow-any exclude each other"))
	case o.authz != "" && !o.tls.enabled():
		errs = append(errs, errors.New("--authz needs mutual TLS (--tls-cert, --tls-key, --tls-ca): in plaintext peers have no identity"))
	case o.tls.enabled() && o.authz == "" && !o.authzAllowAny:
		errs = append(errs, errors.New("mutual TLS needs --authz FILE (who may act for which users); --authz-allow-any lets every certificate of the CA act for every user"))
	case o.authz != "":
		p, err := edge.LoadPolicy(o.authz)
		if err != nil {
			errs = append(errs, fmt.Errorf("--authz: %w", err))
		}
		o.policy = p
	}
	if o.peerRate <= 0 || o.peerBurst <= 0 || o.maxUsers <= 0 || o.userIdle <= 0 ||
		o.handshakeTimeout <= 0 || o.dialTimeout <= 0 || o.maxConnsPerIP <= 0 {
		errs = append(errs, errors.New("--peer-rate, --peer-burst, --max-users, --user-idle, --handshake-timeout, --dial-timeout and --max-conns-per-ip must be positive"))
	}
	return errors.Join(errs...)
}

func serve(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	o, fs, problems, err := readServeOptions(args, os.LookupEnv, stderr)
	if err != nil {
		return err
	}
	if o.op.check {
		return o.check(ctx, fs, problems, stdout)
	}
	if len(problems) > 0 {
		printUsageErrors(fs, problems)
		return errUsage
	}
	// SIGHUP is caught from here on, so that one sent while the daemon
	// starts does not kill it; it is handled once the daemon serves.
	hup := make(chan os.Signal, 1)
	signal.Notify(hup, syscall.SIGHUP)
	defer signal.Stop(hup)
	log, level, err := newLogger(stderr, o.logFormat, o.logLevel, o.homes)
	if err != nil {
		return err
	}
	slog.SetDefault(log) // hollywood logs through the default logger too
	bi := readBuildInfo()
	var overrides []string
	bin := o.op.codexBin
	if o.op.demoModel { // The embedded demo model, for trying the CLI by hand.
		model, err := demomodel.Start(demomodel.Options{Responder: demoResponder()})
		if err != nil {
			return err
		}
		defer model.Close()
		overrides = demomodel.Overrides(model.URL())
		log.Warn("serving on the embedded DEMO model: no real model answers", "model", model.URL())
	}
	// One daemon per homes: a second one would take the first one's
	// app-servers for orphans. The lock comes before the reaping.
	lock, err := lockMemberHomes(o.homes, o.cluster.memberOf())
	if err != nil {
		return err
	}
	defer lock.release()
	// A daemon killed outright leaves its app-servers behind: end them
	// before any new one starts in the same homes.
	if n := actors.ReapMemberOrphans(o.homes, 2*time.Second, o.cluster.memberOf(), log); n > 0 {
		log.Warn("ended app-servers left by a previous instance", "count", n)
	}
	var tlsConf *tls.Config
	var certs *tlsReloader
	var clusterServing func(*actor.Engine, *actor.PID)
	if o.tls.enabled() {
		if certs, tlsConf, err = newTLSReloader(o.tls); err != nil {
			return err
		}
		if o.policy != nil {
			certs.admit = o.policy.Names
			certs.member = func(id string) bool { return o.policy.Allows(id, "*", edge.KindCluster) }
		}
		certs.log = log
	}
	iso, err := o.isolation.node(o.homes, o.workspace, []string{o.tls.cert, o.tls.key, o.tls.ca, o.authz}, log)
	if err != nil {
		return err
	}
	// The homes opened for the users' uids, then the paths a round needs
	// checked as the rounds will meet them: /readyz follows that check.
	blocked, err := o.isolation.openUp(iso, o.homes, o.workspace, log)
	if err != nil {
		return err
	}
	// Limits before any app-server: a killed instance's user cgroups are
	// emptied, and every start from now on enters its user's.
	cgroups, disk, err := o.limits.open(o.homes, o.cluster.memberOf(), iso.UserNamespaces(), log)
	if err != nil {
		return err
	}
	defer func() { // after the daemon stopped its app-servers
		ctx, cancel := context.WithTimeout(context.Background(), o.stopTimeout)
		defer cancel()
		if err := cgroups.Close(ctx); err != nil {
			log.Warn("removing the users' cgroups", "err", err)
		}
		if err := disk.Close(); err != nil {
			log.Warn("unmounting the users' home images", "err", err)
		}
	}()
	rules, _ := o.budgets.rules() // validated
	floor, _ := o.limits.freeFloor()
	budgets := budget.NewHolder(rules)
	reg := newRegistry()
	reg.MustRegister(bi.gauge())
	metrics := actors.NewMetrics(reg)
	presetRejectReasons(metrics)
	// The users' uids are refused on every listener opened from here on.
	guard := newListenerGuard(iso.UIDs(), reg, log)
	var placement actors.Placement
	if o.cluster.enabled() { // Membership first: the root asks it about every user.
		rt, err := startCluster(ctx, &o.cluster, o.cluster.etcdFiles(o.tls), o.listen, stderr, log)
		if err != nil {
			return err
		}
		defer rt.leave() // after the daemon stopped its app-servers
		reg.MustRegister(rt.fences, rt.helperRestarts)
		defer func() { rt.serving(nil, nil) }()
		placement = rt.node
		clusterServing = rt.serving
		if certs != nil { // before the remote: its dials to members need the cluster grant
			certs.members = rt.node.Members
		}
	}
	// Traces: flushed, and the exporter stopped, after the daemon stopped
	// (the last rounds' spans end with their verdicts).
	traces, err := o.traces.startTracing(ctx, bi.Version, log)
	if err != nil {
		return err
	}
	defer traces.shutdown()
	d, gate, err := startDaemonEdge(o.listen, tlsConf, actors.Config{
		Homes: o.homes, Workspace: o.workspace, CodexBin: bin,
		Overrides: append(overrides, o.overrides...), CodexEnv: o.codexEnv,
		Goals: o.goals, UnaskedTurns: o.unaskedTurns, MinFreeDisk: floor,
		Sandbox: o.sandbox, ApprovalPolicy: o.approval,
		MaxSandbox: o.maxSandbox, ApprovalPolicies: splitList(o.approvals),
		CallTimeout: o.callTimeout, QueueLimit: o.queueLimit,
		IdleTimeout: o.idleTimeout, MaxLive: o.maxLive, StallTimeout: o.stallTimeout,
		LoginGrant: o.loginGrant, MaxUsers: o.maxUsers, UserIdle: o.userIdle,
		Member:      o.cluster.memberOf(),
		CallerGrace: o.callers.callerGrace, RoundRetention: o.callers.roundRetention,
	}, actors.Deps{
		Logger: log, Metrics: metrics, Placement: placement, Isolation: iso, Contain: cgroups, Disk: disk,
		Budgets: budgets, TracerProvider: traces.tracerProvider(),
	}, edgeOptions{
		policy: o.policy, peerRate: o.peerRate, peerBurst: o.peerBurst,
		limits:            remote.Limits{HandshakeTimeout: o.handshakeTimeout, DialTimeout: o.dialTimeout, MaxConnsPerIP: o.maxConnsPerIP},
		listener:          guard.wrap("remote"),
		dialVerify:        certs.dialVerify(),
		userUIDs:          guard.userUIDs(),
		allowDestinations: o.allowDest,
		frontConns:        guard.front,
	})
	if err != nil {
		return err
	}
	if clusterServing != nil {
		clusterServing(d.engine, d.root)
	}
	reg.MustRegister(prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name: "supervisor_remote_peers", Help: "Peers whose rate limiters the edge keeps (bounded; idle ones are dropped first).",
	}, func() float64 { return float64(gate.Peers()) }))
	findCodexCLI(bin).log(log)
	o.warnInsecure(log, guard) // before "supervisor serving", which tests wait on
	log.Info("supervisor serving", "listen", o.listen, "tls", tlsConf != nil, "authz", o.authz, "codex", bin, "homes", o.homes,
		"version", bi.Version, "commit", bi.Commit, "go", bi.GoVersion, "codex_pinned", bi.Codex)

	var g run.Group
	if o.metricsListen != "" { // Metrics and health: first up, last down.
		ln, err := guard.listen("metrics", o.metricsListen)
		if err != nil {
			_ = d.stop(o.stopTimeout)
			return fmt.Errorf("metrics listener: %w", err)
		}
		ops := startOpsOn(ln, reg, log)
		ops.warning, ops.blocked = iso.Warning(), blocked
		ops.ready.Store(true)
		log.Info("metrics serving", "listen", ops.Addr())
		quit := make(chan struct{})
		g.Add(func() error { <-quit; return nil }, func(error) {
			ops.ready.Store(false) // not ready while draining
			close(quit)
		})
		defer ops.stop()
	}
	{ // Signals arrive as the end of ctx.
		ctx, cancel := context.WithCancel(ctx)
		g.Add(func() error { <-ctx.Done(); return nil }, func(error) { cancel() })
	}
	{ // SIGHUP reloads what can change while serving: the TLS files and the log level.
		quit := make(chan struct{})
		g.Add(func() error {
			for {
				select {
				case <-hup:
					reload(args, o, level, certs, log)
					if o2, err := loadServeOptions(args, os.LookupEnv, io.Discard); err == nil {
						o2.limits.reload(cgroups, disk, log)
						o2.budgets.reload(budgets, log)
						d.front.SetAllowed(o2.allowDest)
					}
				case <-quit:
					return nil
				}
			}
		}, func(error) { close(quit) })
	}
	sdNotify(sd.SdNotifyReady)
	if interval := watchdogInterval(log); interval > 0 {
		// systemd's watchdog (WatchdogSec=), fed while the tree's root
		// answers. Before the daemon: the feeding has ended when the stop
		// begins with STOPPING=1 (systemd watches no stopping service).
		ctx, cancel := context.WithCancel(context.Background())
		fed := make(chan struct{})
		g.Add(func() error {
			defer close(fed)
			feedWatchdog(ctx, interval, func(ctx context.Context) error { return actors.Ping(ctx, d.engine, d.root) }, sdNotify, log)
			return nil
		}, func(error) { cancel(); <-fed })
		log.Info("feeding systemd's watchdog", "interval", interval)
	}
	var stopErr error
	{ // The daemon: stopping it drains the tree, then closes the listener.
		stopped := make(chan struct{})
		g.Add(func() error { <-stopped; return nil }, func(error) {
			sdNotify(sd.SdNotifyStopping)
			log.Info("stopping", "timeout", o.stopTimeout)
			stopErr = d.stop(o.stopTimeout)
			close(stopped)
		})
	}
	if err := o.callers.addGateway(&g, d, gate, tlsConf, guard, reg, log); err != nil {
		_ = d.stop(o.stopTimeout)
		return err
	}
	if err := g.Run(); err != nil {
		return err
	}
	// run.Group returns the first actor's result (the signal's); a stop
	// that did not finish in time must still make the exit code non-zero.
	if stopErr != nil {
		return stopErr
	}
	log.Info("stopped")
	return nil
}

// loadServeOptions reads serve's settings from its command line, then the
// environment (SUPERVISOR_<NAME>), then the --config file, each source
// filling only what the ones before left unset, and validates them in one
// pass. Every problem is printed to stderr; the error is then errUsage
// (exit 2). -h gives flag.ErrHelp.
func loadServeOptions(args []string, lookup func(string) (string, bool), stderr io.Writer) (*serveOptions, error) {
	o, fs, problems, err := readServeOptions(args, lookup, stderr)
	if err != nil {
		return nil, err
	}
	if len(problems) > 0 {
		printUsageErrors(fs, problems)
		return nil, errUsage
	}
	return o, nil
}

// readServeOptions is loadServeOptions without the verdict: the settings
// as read and every problem with them, one line each, so that --check can
// go on to what the settings do not show (binds, paths, a round's probe)
// and report all of it at once. err is flag.ErrHelp for -h.
func readServeOptions(args []string, lookup func(string) (string, bool), stderr io.Writer) (*serveOptions, *flag.FlagSet, []string, error) {
	fs := flag.NewFlagSet("serve", flag.ContinueOnError)
	fs.SetOutput(stderr)
	o := serveFlags(fs)
	_, errs, err := readServeSettings(fs, o, args, lookup)
	if err != nil {
		return nil, nil, nil, err
	}
	if err := o.validate(); err != nil {
		errs = append(errs, err)
	}
	if _, _, err := newLogger(io.Discard, o.logFormat, o.logLevel, ""); err != nil {
		errs = append(errs, err)
	}
	if !o.op.demoModel || o.codex != "" {
		bin, err := codexproc.ResolveInstalled(o.codex)
		if err != nil {
			errs = append(errs, err)
		}
		o.op.codexBin = bin
	} else { // the demo model runs on the developer tree's pinned CLI
		bin, err := codexproc.ResolveBinary("")
		if err != nil {
			errs = append(errs, err)
		}
		o.op.codexBin = bin
	}
	var problems []string
	if err := errors.Join(errs...); err != nil {
		problems = strings.Split(err.Error(), "\n")
	}
	return o, fs, problems, nil
}

// readServeSettings sets serve's flags (fs, registered by serveFlags into
// o) from args, then the environment, then o's --config file, each source
// filling only what the ones before left unset. It returns where each set
// flag came from ("flag", the variable's name, "file PATH"; a flag not in
// the map has its default) and every mistake; err is flag.ErrHelp for -h.
func readServeSettings(fs *flag.FlagSet, o *serveOptions, args []string, lookup func(string) (string, bool)) (map[string]string, []error, error) {
	_, parseErrs, err := scanArgs(fs, args, noArgs)
	if err != nil {
		return nil, nil, err
	}
	var errs []error
	for _, e := range parseErrs {
		errs = append(errs, errors.New(e))
	}
	src := map[string]string{}
	mark := func(source func(name string) string) {
		fs.Visit(func(f *flag.Flag) {
			if _, ok := src[f.Name]; !ok {
				src[f.Name] = source(f.Name)
			}
		})
	}
	mark(func(string) string { return "flag" })
	if err := flagsFromEnv(fs, lookup); err != nil {
		errs = append(errs, err)
	}
	mark(envKey)
	if o.op.config != "" {
		set := map[string]bool{}
		fs.Visit(func(f *flag.Flag) { set[f.Name] = true })
		if err := configFromFile(fs, o.op.config, set); err != nil {
			errs = append(errs, err)
		}
		mark(func(string) string { return "file " + o.op.config })
	}
	return src, errs, nil
}

// warnInsecure logs, at every start, each setting that lets callers act
// for users without proof of who they are, and which listeners the users'
// own agents can reach (reach).
func (o *serveOptions) warnInsecure(log *slog.Logger, guard *listenerGuard) {
	kept, open := o.reach(guard)
	for _, s := range kept {
		log.Info(s)
	}
	for _, s := range open {
		log.Warn(s)
	}
	switch {
	case o.tls.enabled() && o.authzAllowAny:
		log.Warn("--authz-allow-any: every certificate of the CA may act for every user")
	case !o.tls.enabled() && !isLoopback(o.listen):
		log.Warn("plaintext remote on a non-loopback address (--allow-plaintext): callers are unauthenticated and anyone who reaches the port may act for every user", "listen", o.listen)
	case !o.tls.enabled():
		log.Warn("plaintext remote on loopback: callers are unauthenticated; every local process may act for every user (development only)", "listen", o.listen)
	}
	if s := o.cluster.etcdTrustsCallers(o.tls); s != "" {
		log.Warn(s)
	}
	if gw := o.callers.gatewayListen; gw != "" && !o.tls.enabled() {
		if isLoopback(gw) {
			log.Warn("plaintext gateway on loopback: callers are unauthenticated; every local process may act for every user (development only)", "listen", gw)
		} else {
			log.Warn("plaintext gateway on a non-loopback address (--allow-plaintext): callers are unauthenticated and anyone who reaches the port may act for every user", "listen", gw)
		}
	}
}

// flagsFromEnv sets every flag not given on the command line from
// SUPERVISOR_<NAME> when that is set; repeatable flags split it on commas.
func flagsFromEnv(fs *flag.FlagSet, lookup func(string) (string, bool)) error {
	given := make(map[string]bool)
	fs.Visit(func(f *flag.Flag) { given[f.Name] = true })
	var errs []error
	fs.VisitAll(func(f *flag.Flag) {
		if given[f.Name] {
			return
		}
		key := envKey(f.Name)
		v, ok := lookup(key)
		if !ok {
			return
		}
		values := []string{v}
		if _, repeatable := f.Value.(*stringList); repeatable {
			values = strings.Split(v, ",")
		}
		for _, one := range values {
			if err := fs.Set(f.Name, one); err != nil {
				errs = append(errs, fmt.Errorf("%s: %w", key, err))
			}
		}
	})
	return errors.Join(errs...)
}

// envKey is the variable that sets flag name: SUPERVISOR_<NAME>.
func envKey(name string) string {
	return "SUPERVISOR_" + strings.ToUpper(strings.ReplaceAll(name, "-", "_"))
}

// splitList splits a comma-separated flag, dropping empty entries.
func splitList(s string) []string {
	var out []string
	for _, f := range strings.Split(s, ",") {
		if f = strings.TrimSpace(f); f != "" {
			out = append(out, f)
		}
	}
	return out
}
