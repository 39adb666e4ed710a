package actors

import (
	"cmp"
	"errors"
	"fmt"
	"log/slog"
	"path/filepath"
	"slices"
	"strconv"
	"time"

	"go.opentelemetry.io/otel/trace"

	"github.com/meshweaver/supervisor/actors/budget"
	"github.com/meshweaver/supervisor/actors/policy"
	"github.com/meshweaver/supervisor/actors/turninput"
	"github.com/meshweaver/supervisor/codexproto"
	"github.com/meshweaver/supervisor/contain"
	"github.com/meshweaver/supervisor/edge"
	"github.com/meshweaver/supervisor/isolate"
	"github.com/meshweaver/supervisor/mcpfront"
	"github.com/meshweaver/supervisor/store"
)

// Config is the actor tree's settings: plain values an operator sets with
// serve's flags. Homes and Workspace are required; a zero field takes the
// default it names. What the tree works with at run time (its log, its
// counters, the cluster, the node's isolation) is in Deps.
type Config struct {
	// Homes is the root of the users' folders; a user's CODEX_HOME is
	// {Homes}/{user}/.codex.
	Homes string
	// Workspace is the shared skills workspace every thread runs in.
	Workspace string
	// CodexBin is the codex executable (resolved with codexproc.ResolveBinary).
	CodexBin string
	// CodexArgs replaces "app-server" (for fakes in tests).
	CodexArgs []string
	// Overrides go to every app-server as "-c key=value".
	Overrides []string
	// CodexEnv adds KEY=VALUE to every app-server's allow-listed environment.
	CodexEnv []string
	// Sandbox and ApprovalPolicy of new and resumed threads (defaults
	// read-only and never).
	Sandbox        string
	ApprovalPolicy string
	// MaxSandbox is the most permissive sandbox a round may ask for
	// (default Sandbox); ApprovalPolicies are the approval policies a round
	// may ask for (default ApprovalPolicy only). A round asking for more is
	// clamped, with a notice.
	MaxSandbox       string
	ApprovalPolicies []string
	// ClientName is sent in initialize; it becomes the originator.
	ClientName string
	// CallTimeout bounds every RPC other than a turn's own run (default 60s).
	CallTimeout time.Duration
	// QueueLimit is how many rounds may wait behind a running one on the
	// same mesh thread before further ones get a busy verdict (default 4).
	QueueLimit int
	// TranscriptTurns and TranscriptBytes bound the transcript that seeds a
	// fresh thread (defaults from store).
	TranscriptTurns int
	TranscriptBytes int
	// LoginGrant is how long a device-code login may wait for approval
	// before it is cancelled (default 15 minutes).
	LoginGrant time.Duration
	// RestartLimit app-server deaths within RestartWindow mark the user
	// unavailable for Cooldown (defaults 5 in 60s, 60s). Restarts in
	// between wait a jittered exponential backoff from RestartBackoff up to
	// RestartBackoffMax (defaults 200ms, 10s).
	RestartLimit      int
	RestartWindow     time.Duration
	Cooldown          time.Duration
	RestartBackoff    time.Duration
	RestartBackoffMax time.Duration
	// IdleTimeout stops a user's app-server that served nothing for that
	// long (default 10 minutes); MaxLive caps the live app-servers of the
	// node, stopping the least recently used idle one (default 64).
	IdleTimeout time.Duration
	MaxLive     int
	// ThreadIdle unloads a codex thread no round used for that long from
	// its app-server (default 5 minutes); until then a round on it with
	// the same settings needs no resume.
	ThreadIdle time.Duration
	// StallTimeout interrupts a turn that made no progress for that long
	// (default 10 minutes).
	StallTimeout time.Duration
	// OutboxBurst is how many events a round sends its caller per
	// OutboxWindow before it coalesces text deltas (defaults 256, 50ms);
	// OutboxLimit bounds what it holds back (default 4096 events).
	OutboxBurst  int
	OutboxWindow time.Duration
	OutboxLimit  int
	// MaxUsers caps the user actors alive on the node (default 10000): a
	// message for a new user past it is refused. UserIdle reaps a user
	// actor with no app-server, no round running or queued and no message
	// for that long (default 10 minutes).
	MaxUsers int
	UserIdle time.Duration
	// StopGrace is each polite step of stopping an app-server (default 2s).
	StopGrace time.Duration
	// Rounds outlive their connection: a round whose callers are all gone
	// goes on for CallerGrace (default 30s) in case one attaches again,
	// then is interrupted; a round's log (at most RoundLogEvents events,
	// default 4096, and RoundLogBytes, default 4 MiB) and verdict are kept
	// RoundRetention after the end (default 10 minutes), for at most
	// KeptRounds finished rounds (default 64) and UserLogBytes (default
	// 32 MiB) per user, the oldest forgotten first.
	CallerGrace    time.Duration
	RoundRetention time.Duration
	RoundLogEvents int
	RoundLogBytes  int
	KeptRounds     int
	UserLogBytes   int
	// Goals lets codex offer the model its goal tools (create_goal,
	// update_goal, get_goal; the CLI's features.goals). Off by default: a
	// goal makes the CLI run turns of its own after its round's verdict,
	// which no caller sees. UnaskedTurns is what the daemon does with a
	// turn the CLI starts that no round asked for: UnaskedInterrupt (the
	// default) or UnaskedAllow; either way it is counted and logged.
	Goals        bool
	UnaskedTurns string
	// MinFreeDisk refuses a round (resource_limit: disk) when the file
	// system of the daemon's records (the homes) has less than that many
	// bytes free, before its agent can fill what the journal, the thread
	// records and the ledger need (0: no floor).
	MinFreeDisk int64
	// ToolTimeout bounds the wait for a dynamic tool's server to answer a
	// call (default 60s); past it the model reads a tool error.
	ToolTimeout time.Duration
	// Member is this daemon's cluster member id ("" outside a cluster). It
	// goes, with the kernel's boot id, into each app-server's pid record,
	// so a member reaping at its start leaves the other members' alone
	// (ReapMemberOrphans).
	Member string
}

// Deps are the tree's runtime dependencies: what it shares with the rest
// of the daemon (its log, its counters, the cluster's placement, the MCP
// front, the node's isolation and limits, the transport's stream holds),
// as opposed to Config's settings, which are plain values. Nil fields are
// the tree on its own: no cluster, no front, no isolation, no limits.
type Deps struct {
	// Logger receives everything (slog.Default when nil).
	Logger *slog.Logger
	// Metrics receives the counters (unregistered ones when nil).
	Metrics *Metrics
	// Isolation separates the users' app-servers (their uids, their
	// sandboxes); nil starts them all as the daemon's user with its view of
	// the files, as the fakes of the tests need. serve always sets it.
	Isolation *isolate.Node
	// Contain, when active, gives each user's app-server, its sandbox and
	// all they start a cgroup of the user's own with the node's limits,
	// and each of the user's processes a cgroup of its own inside it,
	// emptied when the process ends (limits.go). Nil: no limits.
	Contain *contain.Node
	// Disk, when it has a size, puts each user's home on an image of that
	// size before the user's first start; nil or 0: homes are unbounded.
	Disk *contain.Disk
	// MCPFront, when set, is the daemon's loopback MCP front (one per
	// daemon; the daemon closes it after the tree stops): a thread's
	// overlay names its mesh thread's front URL, and each round sets where
	// it forwards and with which bearer token, so that a new token needs
	// no reload. Nil puts the round's MCP URL and token in the overlay.
	MCPFront *mcpfront.Front
	// Placement, when set, makes the daemon one member of a cluster
	// (package cluster): the root asks it where each user's messages go
	// and relays those owned elsewhere (relay.go). Nil: this daemon serves
	// every user.
	Placement Placement
	// Budgets, when set, are the users' token budgets (package budget),
	// read at every check: a reload's Set applies to the live users. Nil:
	// no budget; the usage is counted all the same.
	Budgets *budget.Holder
	// Hold, when set, keeps the remote stream to a caller's address alive
	// while a round replies to it; the round calls release at its verdict.
	Hold func(addr string) (release func())
	// TracerProvider, when set, gets one span tree per round
	// (roundtrace.go). Nil: no spans; a caller's trace context still
	// reaches codex as it came.
	TracerProvider trace.TracerProvider
}

// tree is what every actor of the tree holds: the settings, the
// dependencies, and the state the tree itself keeps across its actors.
type tree struct {
	Config
	Deps

	rounds *gate         // rounds admitted and not yet given a verdict
	sample *edge.Sampler // log lines about rejected input: 10 per reason per minute
	hooks
}

// hooks let the tests hear what the hub actors do; nil in the daemon.
type hooks struct {
	// roundPhases hears every phase a round enters, in order, on the
	// round's goroutine.
	roundPhases func(roundID string, p roundPhase)
	// onPhase hears every change of phase of every app-server actor, the
	// refused ones too, on that actor's goroutine.
	onPhase func(phaseChange)
}

// Placement says which cluster member serves a user. cluster.Node
// implements it; every method is safe for concurrent use, Known never
// leaves memory, and Owner is bounded (a local owner answers from memory,
// anything else in at most one etcd round trip under a deadline).
type Placement interface {
	// Owner says where user's messages go: local when this member serves
	// the user now (claiming it if needed), else addr is the remote address
	// of the member to forward to. hops is how often the message was
	// forwarded already. An error means "not now" (fenced, ownership
	// moving): the message is refused as retryable.
	// The root calls it on a goroutine of its own, never in Receive.
	Owner(user string, hops int) (local bool, addr string, err error)
	// Known answers Owner from memory, without a network call (the root
	// calls it in Receive): a user this member owns is local, a fenced
	// member answers the error. known is false when only Owner can tell.
	Known(user string) (local, known bool, err error)
	// Watch returns a channel closed when the member at addr leaves the
	// cluster (dies, is fenced or stops).
	Watch(addr string) <-chan struct{}
	// Release gives up a user whose actors (and app-server) stopped.
	Release(user string)
}

func (c *Config) setDefaults() error {
	if c.Homes == "" {
		return errors.New("config: no homes root")
	}
	if c.Workspace == "" {
		return errors.New("config: no workspace")
	}
	var err error
	if c.Homes, err = filepath.Abs(c.Homes); err != nil {
		return err
	}
	if c.Workspace, err = filepath.Abs(c.Workspace); err != nil {
		return err
	}
	if c.Sandbox == "" {
		c.Sandbox = codexproto.SandboxReadOnly
	}
	if c.ApprovalPolicy == "" {
		c.ApprovalPolicy = codexproto.ApprovalNever
	}
	if err := c.CheckBounds(); err != nil {
		return fmt.Errorf("config: %w", err)
	}
	switch c.UnaskedTurns {
	case "":
		c.UnaskedTurns = UnaskedInterrupt
	case UnaskedInterrupt, UnaskedAllow:
	default:
		return fmt.Errorf("config: unasked turns %q: want %s or %s", c.UnaskedTurns, UnaskedInterrupt, UnaskedAllow)
	}
	if c.ToolTimeout <= 0 {
		c.ToolTimeout = 60 * time.Second
	}
	if c.ClientName == "" {
		c.ClientName = "meshweaver-supervisor"
	}
	if c.CallTimeout <= 0 {
		c.CallTimeout = 60 * time.Second
	}
	if c.QueueLimit <= 0 {
		c.QueueLimit = 4
	}
	if c.TranscriptTurns <= 0 {
		c.TranscriptTurns = store.DefaultTranscriptTurns
	}
	if c.TranscriptBytes <= 0 {
		c.TranscriptBytes = store.DefaultTranscriptBytes
	}
	if c.LoginGrant <= 0 {
		c.LoginGrant = 15 * time.Minute
	}
	if c.RestartLimit <= 0 {
		c.RestartLimit = 5
	}
	if c.RestartWindow <= 0 {
		c.RestartWindow = time.Minute
	}
	if c.Cooldown <= 0 {
		c.Cooldown = time.Minute
	}
	if c.RestartBackoff <= 0 {
		c.RestartBackoff = 200 * time.Millisecond
	}
	if c.RestartBackoffMax <= 0 {
		c.RestartBackoffMax = 10 * time.Second
	}
	if c.IdleTimeout <= 0 {
		c.IdleTimeout = 10 * time.Minute
	}
	if c.ThreadIdle <= 0 {
		c.ThreadIdle = 5 * time.Minute
	}
	if c.MaxLive <= 0 {
		c.MaxLive = 64
	}
	if c.StallTimeout <= 0 {
		c.StallTimeout = 10 * time.Minute
	}
	if c.OutboxBurst <= 0 {
		c.OutboxBurst = 256
	}
	if c.OutboxWindow <= 0 {
		c.OutboxWindow = 50 * time.Millisecond
	}
	if c.OutboxLimit <= 0 {
		c.OutboxLimit = 4096
	}
	if c.MaxUsers <= 0 {
		c.MaxUsers = 10000
	}
	if c.UserIdle <= 0 {
		c.UserIdle = 10 * time.Minute
	}
	if c.StopGrace <= 0 {
		c.StopGrace = 2 * time.Second
	}
	if c.CallerGrace <= 0 {
		c.CallerGrace = 30 * time.Second
	}
	if c.RoundRetention <= 0 {
		c.RoundRetention = 10 * time.Minute
	}
	if c.RoundLogEvents <= 0 {
		c.RoundLogEvents = 4096
	}
	if c.RoundLogBytes <= 0 {
		c.RoundLogBytes = 4 << 20
	}
	if c.KeptRounds <= 0 {
		c.KeptRounds = 64
	}
	if c.UserLogBytes <= 0 {
		c.UserLogBytes = 32 << 20
	}
	return nil
}

// newTree checks cfg, fills in its defaults and deps' (slog.Default,
// unregistered counters), and makes the tree's own state.
func newTree(cfg Config, deps Deps) (*tree, error) {
	if err := cfg.setDefaults(); err != nil {
		return nil, err
	}
	if deps.Logger == nil {
		deps.Logger = slog.Default()
	}
	if deps.Metrics == nil {
		deps.Metrics = NewMetrics(nil)
	}
	return &tree{Config: cfg, Deps: deps, rounds: &gate{}, sample: edge.NewSampler(10, time.Minute)}, nil
}

// grantBounds bound what a permissions request of codex may be granted:
// never more than --max-sandbox (actors/policy).
func (c *Config) grantBounds() policy.Bounds {
	return policy.Bounds{MaxSandbox: cmp.Or(c.MaxSandbox, c.Sandbox), Workspace: c.Workspace}
}

// codexOverrides are the "-c" settings of every app-server: the
// operator's, then the daemon's own, which win (a later -c of a key
// replaces an earlier one).
func (c *Config) codexOverrides() []string {
	return append(slices.Clip(c.Overrides), "features.goals="+strconv.FormatBool(c.Goals))
}

// CheckBounds checks the operator's bounds on rounds' sandbox and approval
// policy: known modes, the defaults within them.
func (c *Config) CheckBounds() error {
	return turninput.Bounds{Sandbox: c.Sandbox, Approval: c.ApprovalPolicy,
		MaxSandbox: c.MaxSandbox, Approvals: c.ApprovalPolicies}.Check()
}
