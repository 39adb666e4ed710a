package schema

import (
	"fmt"

	"github.com/meshweaver/supervisor/codexproto"
)

// This file is the one source of truth for what the daemon does with each
// method, notification and item type of the CLI's protocol. The tests
// (decisions_test.go) hold it to the pinned CLI's schema (every name has a
// decision, every decision names something the CLI has), to DaemonUses
// (a name is used exactly when it has a row there), to actors/policy (a
// refused server request is answered "method not found"), and to the
// table in docs/PROTOCOL.md, which RenderDecisions writes from it
// (decisionsdoc.go).

// Decision is what the daemon does with one name of the CLI's protocol.
type Decision string

// The decisions.
const (
	// Used: the daemon calls it (a client request or notification),
	// answers it (a server request) or reads it (a server notification,
	// an item type).
	Used Decision = "used"
	// PassedThrough: it reaches the daemon's callers as it is.
	PassedThrough Decision = "passed through"
	// Refused: the daemon turns it away on purpose: it answers the server
	// request with an error, or it will not call the method, because the
	// method would undo one of its guarantees (every turn is a round's,
	// commands run inside the daemon's sandbox bounds, the daemon owns the
	// app-server's configuration and the user's account).
	Refused Decision = "refused"
	// NotUsed: the daemon neither calls nor reads it: a notification is
	// dropped, an item type shows no event, a method is not called. The
	// reason says why, or which item of which issue takes it up.
	NotUsed Decision = "not used"
)

// Decided is the decision for one name of one family.
type Decided struct {
	Kind     Kind
	Name     string // a method, or an item type for ThreadItem
	Decision Decision
	Reason   string
	// Since and Gone bound the CLI versions the decision is for: from
	// Since, the first that has the name, up to but not including Gone,
	// the first that no longer has it; "" is no bound. They let the table
	// decide the names of a CLI newer than the pin before the pin moves
	// (decisionSpans).
	Since, Gone string
}

// For reports whether d is in force for the CLI of the given version
// ("" or unreadable: every decision is; CheckTable reports bad bounds).
func (d Decided) For(version string) bool {
	v, err := codexproto.ParseVersion(version)
	if err != nil {
		return true
	}
	if since, err := codexproto.ParseVersion(d.Since); err == nil && !v.AtLeast(since) {
		return false
	}
	if gone, err := codexproto.ParseVersion(d.Gone); err == nil && v.AtLeast(gone) {
		return false
	}
	return true
}

func (d Decided) key() string { return string(d.Kind) + " " + d.Name }

// group is one reason for one or more names.
type group struct {
	kind     Kind
	decision Decision
	reason   string
	names    []string
}

// Decisions returns the decision for every name of the pinned CLI's
// protocol (as GenerateExperimental writes it), one per name, and for the
// names of newer CLIs that decisionSpans bounds.
func Decisions() []Decided {
	spans := decisionSpans()
	var out []Decided
	for _, g := range decisionGroups() {
		for _, n := range g.names {
			d := Decided{Kind: g.kind, Name: n, Decision: g.decision, Reason: g.reason}
			if sp, ok := spans[d.key()]; ok {
				d.Since, d.Gone = sp.since, sp.gone
				delete(spans, d.key())
			}
			out = append(out, d)
		}
	}
	for key := range spans { // a bound with no decision: CheckTable says so
		out = append(out, Decided{Name: key, Reason: "bounded in decisionSpans, decided nowhere"})
	}
	return out
}

// span bounds one decision to CLI versions: see Decided.Since and Gone.
type span struct{ since, gone string }

// decisionSpans bounds decisions to CLI versions, by "kind name"; it is
// empty while the pin is the newest release. Taking a new release: a name
// the newest CLI adds gets its decision in decisionGroups and a span from
// the new version (since), so that TestDecisionsCoverPin does not take it
// for stale; a name it drops keeps its decision, with a span up to the new
// version (gone). Once the pin moves, TestDecisionsCoverPin names the
// bounds the pin has passed: drop the since, delete the gone decisions.
func decisionSpans() map[string]span {
	return map[string]span{}
}

// Issue items the reasons refer to (issue 35).
const (
	item2 = "not yet: issue 35 item 2 (goals as a feature of the mesh)"
	item4 = "not yet: issue 35 item 4 (the thread's history)"
	item5 = "not yet: issue 35 item 5 (review mode)"
	item6 = "not yet: issue 35 item 6 (MCP and configuration)"
	item7 = "not yet: issue 35 item 7 maps it for callers"
	// passed is a notification of a round's thread that no event maps:
	// a round that asks for raw events gets it as it came (KindRaw).
	passed = "a raw event (method and params as sent) to rounds that ask for them (StartRound.raw_events); dropped for the others"
	// noThread is a notification of no thread: it reaches no round.
	noThread = "names no thread, so it reaches no round's raw events; dropped today"
)

func decisionGroups() []group {
	return []group{
		// Client requests the daemon calls: one DaemonUses row each.
		{ClientRequest, Used, "the handshake of every app-server, with capabilities.experimentalApi", []string{"initialize"}},
		{ClientRequest, Used, "a round on a mesh thread with no codex thread yet", []string{"thread/start"}},
		{ClientRequest, Used, "a round on a codex thread its app-server has not loaded, or loaded with other settings", []string{"thread/resume"}},
		{ClientRequest, Used, "the fork thread command: the whole thread, the answer without its turns (actors/threadops.go)", []string{"thread/fork"}},
		{ClientRequest, Used, "the archive thread command", []string{"thread/archive"}},
		{ClientRequest, Used, "unloads a thread: an idle one, and one before it is resumed with other settings (actors/appthreads.go)", []string{"thread/unsubscribe"}},
		{ClientRequest, Used, "names a new codex thread after its mesh thread (`mw-<key>`)", []string{"thread/name/set"}},
		{ClientRequest, Used, "the compact thread command; its turn counts as asked for (actors/asked.go)", []string{"thread/compact/start"}},
		{ClientRequest, Used, "typed in codexproto (ThreadListParams) and checked by the schema tests; no actor calls it yet", []string{"thread/list"}},
		{ClientRequest, Used, "the health probe of a live app-server", []string{"thread/loaded/list"}},
		{ClientRequest, Used, "the read thread command: the thread's user and agent messages", []string{"thread/read"}},
		{ClientRequest, Used, "a round's turn", []string{"turn/start"}},
		{ClientRequest, Used, "a caller's steer of a running round", []string{"turn/steer"}},
		{ClientRequest, Used, "a round's cancel or deadline, and every turn no round started (unless --unasked-turns allow)", []string{"turn/interrupt"}},
		{ClientRequest, Used, "the models a caller may ask for (every page)", []string{"model/list"}},
		{ClientRequest, Used, "the account command", []string{"account/read"}},
		{ClientRequest, Used, "the rate limits command", []string{"account/rateLimits/read"}},
		{ClientRequest, Used, "a login through the daemon (actors/login.go)", []string{"account/login/start", "account/login/cancel"}},
		{ClientRequest, Used, "the logout command", []string{"account/logout"}},
		{ClientRequest, Used, "serve --check's probe of the CLI's sandbox (one-shot, no processId)", []string{"command/exec"}},

		// Client requests refused on purpose.
		{ClientRequest, Refused, `goals are off (features.goals=false, "Turns no round started: goals"); ` + item2,
			[]string{"thread/goal/set", "thread/goal/get", "thread/goal/clear"}},
		{ClientRequest, Refused, `part of a feature that runs model requests or turns no round asked for ("Turns no round started")`,
			[]string{"thread/sample", "thread/sample/cancel", "thread/prediction/request", "thread/guardianReview",
				"thread/queue/add", "thread/queue/list", "thread/queue/update", "thread/queue/delete", "thread/queue/reorder", "thread/queue/start"}},
		{ClientRequest, Refused, "writes raw model items into a thread's history: only its rounds change it",
			[]string{"thread/inject_items"}},
		{ClientRequest, Refused, "runs a command on the host unsandboxed, with full access: outside the daemon's sandbox bounds",
			[]string{"thread/shellCommand", "process/spawn", "process/writeStdin", "process/kill", "process/resizePty"}},
		{ClientRequest, Refused, "reads or writes the host's files outside any turn and its sandbox",
			[]string{"fs/readFile", "fs/writeFile", "fs/createDirectory", "fs/getMetadata", "fs/readDirectory", "fs/remove", "fs/copy", "fs/watch", "fs/unwatch"}},
		{ClientRequest, Refused, "sends a thread's commands to another exec server, outside the daemon's sandbox and isolation",
			[]string{"environment/add"}},
		{ClientRequest, Refused, "overrides a guardian's denial: approvals go through the round's request policy",
			[]string{"thread/approveGuardianDeniedAction"}},
		{ClientRequest, Refused, "the daemon owns this setting: the app-server's configuration is its -c overrides and the operator's",
			[]string{"config/value/write", "config/batchWrite", "modelProvider/config/write", "modelProvider/default/set",
				"experimentalFeature/enablement/set", "skills/config/write", "skills/extraRoots/set", "externalAgentConfig/import"}},
		{ClientRequest, Refused, "the daemon owns the thread's settings: it sends them with every turn/start (they stick)",
			[]string{"thread/settings/update", "turn/settings/update"}},
		{ClientRequest, Refused, "changes what the user's codex installs and runs, or shares it: the operator's, not a caller's",
			[]string{"plugin/install", "plugin/uninstall", "plugin/reconcile", "marketplace/add", "marketplace/remove", "marketplace/upgrade",
				"plugin/share/save", "plugin/share/updateTargets", "plugin/share/checkout", "plugin/share/delete"}},
		{ClientRequest, Refused, "remote control would let another client drive the app-server past the daemon",
			[]string{"remoteControl/enable", "remoteControl/disable", "remoteControl/status/read", "remoteControl/pairing/start",
				"remoteControl/pairing/status", "remoteControl/client/list", "remoteControl/client/revoke"}},
		{ClientRequest, Refused, "the user's account changes only through the daemon's login (account/login/start)",
			[]string{"account/bedrock/setup", "account/gcp/setup", "accountSession/switch", "account/gatewayOAuth/login", "account/gatewayOAuth/cancel"}},
		{ClientRequest, Refused, "spends the user's credits: no caller may",
			[]string{"account/rateLimitResetCredit/consume"}},

		// Client requests not used.
		{ClientRequest, NotUsed, item4,
			[]string{"thread/revert", "thread/turns/list", "thread/items/list", "thread/items/read", "thread/unarchive", "thread/delete"}},
		{ClientRequest, NotUsed, item5, []string{"review/start"}},
		{ClientRequest, Used, "passed to authorized callers as it is (CodexRequest: reads as account, the reload as control), the result with the user's secrets redacted",
			[]string{"mcpServerStatus/list", "config/mcpServer/reload", "config/read", "configRequirements/read"}},
		{ClientRequest, NotUsed, "desktop-only UI feature: organizing threads (metadata, attachments, sections, projects, read state, plan mode)",
			[]string{"thread/metadata/update", "thread/attachment/add", "thread/attachment/list", "thread/attachmentOwner/list", "thread/attachment/remove",
				"thread/section/move", "threadSection/list", "threadSection/create", "threadSection/update", "threadSection/delete",
				"project/list", "project/read", "project/create", "project/import", "project/update", "project/move", "project/delete",
				"thread/readState/update", "thread/prepareApprovedPlan"}},
		{ClientRequest, NotUsed, "desktop-only UI feature: search boxes over threads and files",
			[]string{"thread/search", "thread/search/stream", "thread/search/cancel", "thread/search/stream/cancel", "thread/searchOccurrences",
				"fuzzyFileSearch", "fuzzyFileSearch/sessionStart", "fuzzyFileSearch/sessionUpdate", "fuzzyFileSearch/sessionStop"}},
		{ClientRequest, NotUsed, "desktop-only UI feature: voice sessions (realtime audio)",
			[]string{"thread/realtime/start", "thread/realtime/appendAudio", "thread/realtime/appendText", "thread/realtime/appendSpeech",
				"thread/realtime/stop", "thread/realtime/list", "thread/realtime/listVoices", "thread/timeline/list"}},
		{ClientRequest, NotUsed, "desktop-only UI feature: native user verification (a local signing key)",
			[]string{"userVerification/status", "userVerification/enroll", "userVerification/delete", "userVerification/verify", "userVerification/cancel"}},
		{ClientRequest, NotUsed, "desktop-only UI feature: the TUI's /feedback, and a prompt to buy credits",
			[]string{"feedback/upload", "feedback/save", "account/sendAddCreditsNudgeEmail"}},
		{ClientRequest, NotUsed, "desktop-only UI feature: onboarding from another agent (its import is refused)",
			[]string{"externalAgentConfig/detect", "externalAgentConfig/import/readHistories", "externalAgentConfig/import/recordHistory"}},
		{ClientRequest, NotUsed, "the CLI's memory across threads: no caller asks for it yet",
			[]string{"thread/memory/read", "thread/memoryMode/set", "memory/status", "memory/reset", "rollout/compress"}},
		{ClientRequest, NotUsed, "no caller manages a thread's background terminals yet",
			[]string{"thread/backgroundTerminals/clean", "thread/backgroundTerminals/list", "thread/backgroundTerminals/terminate"}},
		{ClientRequest, NotUsed, "a listing or read no caller asks for yet",
			[]string{"server/diagnostics", "skills/list", "hooks/list", "app/read", "app/list", "app/installed",
				"plugin/list", "plugin/search", "plugin/installed", "plugin/read", "plugin/skill/read", "plugin/share/list",
				"modelProvider/list", "modelProvider/capabilities/read", "experimentalFeature/list", "permissionProfile/list",
				"collaborationMode/list",
				"account/securitySetup/read", "account/workspaceMessages/read"}},
		{ClientRequest, NotUsed, "the daemon counts tokens itself (thread/tokenUsage/updated, the token ledger)",
			[]string{"account/usage/read"}},
		{ClientRequest, NotUsed, "other account kinds (model gateways, Bedrock, account sessions) the daemon does not set up",
			[]string{"account/gatewayOAuth/read", "account/bedrock/discover", "account/bedrock/checkGovCloudRequirements", "accountSession/list"}},
		{ClientRequest, NotUsed, "MCP servers are the model's, in a round (their tools, resources and events); an MCP server's OAuth is a browser login",
			[]string{"mcpServer/tool/call", "mcpServer/resource/read", "mcpServer/oauth/login", "mcpServer/event/stream/start", "mcpServer/event/stream/stop"}},
		{ClientRequest, NotUsed, "the daemon's command/exec is one-shot, with no processId to write to",
			[]string{"command/exec/write", "command/exec/terminate", "command/exec/resize"}},
		{ClientRequest, NotUsed, "no remote environments: environment/add is refused",
			[]string{"environment/info", "environment/status"}},
		{ClientRequest, NotUsed, "for helpers that answer approvals out of band; the daemon answers them in band",
			[]string{"thread/increment_elicitation", "thread/decrement_elicitation"}},
		{ClientRequest, NotUsed, "Windows only; the daemon runs on Linux",
			[]string{"windowsSandbox/setupStart", "windowsSandbox/readiness"}},
		{ClientRequest, NotUsed, "test-only: the CLI's check of its experimental gating",
			[]string{"mock/experimentalMethod"}},

		// Client notifications.
		{ClientNotification, Used, "the end of the handshake", []string{"initialized"}},

		// Server requests: actors/policy answers the used ones, and every
		// other one "method not found".
		{ServerRequest, Used, "a command approval: the round's request policy (accept, decline, or ask a caller)",
			[]string{"item/commandExecution/requestApproval"}},
		{ServerRequest, Used, "a patch approval: the round's request policy, as for commands",
			[]string{"item/fileChange/requestApproval"}},
		{ServerRequest, Used, "a question for the user: blank answers in line, or a caller's answers",
			[]string{"item/tool/requestUserInput"}},
		{ServerRequest, Used, "an MCP elicitation: a tool-call approval is an approval, any other is declined or put to a caller",
			[]string{"mcpServer/elicitation/request"}},
		{ServerRequest, Used, "a permissions request (the CLI's request_permissions tool): granted at most what --max-sandbox allows, with auto-approve or a caller's accept under on_request ask; nothing otherwise",
			[]string{"item/permissions/requestApproval"}},
		{ServerRequest, Used, "a call of a round's dynamic tool: sent to the mesh actor that serves it (ToolCallRequest), answered with its ToolCallResult or a tool error (actors/tools.go); a round without tools answers it \"method not found\"",
			[]string{"item/tool/call"}},
		{ServerRequest, Refused, "answered \"method not found\" (actors/policy): sent only after a login with external ChatGPT tokens (chatgptAuthTokens, for OpenAI's internal use); the daemon's logins keep their tokens in CODEX_HOME",
			[]string{"account/chatgptAuthTokens/refresh"}},
		{ServerRequest, Refused, "answered \"method not found\" (actors/policy): sent only to clients that opt in (capabilities.requestAttestation); the daemon does not",
			[]string{"attestation/generate"}},
		{ServerRequest, Refused, "answered \"method not found\" (actors/policy): approvals of the legacy APIs; the daemon's turns (turn/start) ask with `item/*/requestApproval`",
			[]string{"applyPatchApproval", "execCommandApproval"}},

		// Server notifications the daemon reads: one DaemonUses row each.
		{ServerNotification, Used, "a round's error and retry events, its verdict's error class", []string{"error"}},
		{ServerNotification, Used, "finds subagent threads by their parent", []string{"thread/started"}},
		{ServerNotification, Used, "the model a round ran on", []string{"thread/settings/updated"}},
		{ServerNotification, Used, "a round's usage events and the token ledger", []string{"thread/tokenUsage/updated"}},
		{ServerNotification, Used, "a round's turn id; a turn no round started is counted and interrupted", []string{"turn/started"}},
		{ServerNotification, Used, "a round's end and verdict", []string{"turn/completed"}},
		{ServerNotification, Used, "a round's diff events", []string{"turn/diff/updated"}},
		{ServerNotification, Used, "a round's tool calls, results and texts (the thread item table below)", []string{"item/started", "item/completed"}},
		{ServerNotification, Used, "a round's text deltas and answer", []string{"item/agentMessage/delta"}},
		{ServerNotification, Used, "a round's reasoning deltas", []string{"item/reasoning/summaryTextDelta", "item/reasoning/textDelta"}},
		{ServerNotification, Used, "command output deltas, for rounds that ask for them", []string{"item/commandExecution/outputDelta"}},
		{ServerNotification, Used, "a round's reroute event and its verdict's model", []string{"model/rerouted"}},
		{ServerNotification, Used, "a notice when an MCP server fails to start", []string{"mcpServer/startupStatus/updated"}},
		{ServerNotification, Used, "the reset time of an exhausted limit, for a usage-limit verdict", []string{"account/rateLimits/updated"}},
		{ServerNotification, Used, "ends a login through the daemon", []string{"account/login/completed"}},
		{ServerNotification, Used, "typed in codexproto (the method alone); no actor reads it yet", []string{"account/updated", "serverRequest/resolved"}},

		// Server notifications not used.
		{ServerNotification, NotUsed, `goals are off (features.goals=false); ` + item2,
			[]string{"thread/goal/updated", "thread/goal/cleared"}},
		{ServerNotification, PassedThrough, passed + "; " + item7,
			[]string{"turn/plan/updated", "item/plan/delta", "item/mcpToolCall/progress", "item/fileChange/patchUpdated",
				"warning", "guardianWarning",
				"thread/status/changed", "thread/name/updated", "thread/closed", "thread/compacted"}},
		{ServerNotification, NotUsed, noThread + "; " + item7,
			[]string{"deprecationNotice", "configWarning"}},
		{ServerNotification, NotUsed, "follows the daemon's thread/archive, whose answer it reads",
			[]string{"thread/archived"}},
		{ServerNotification, NotUsed, "follows a method the daemon does not call yet; " + item4,
			[]string{"thread/unarchived", "thread/deleted", "thread/reverted"}},
		{ServerNotification, PassedThrough, passed,
			[]string{"hook/started", "hook/completed", "item/autoApprovalReview/started", "item/autoApprovalReview/completed",
				"autoApprovalReview/strictReviewRequired", "item/reasoning/summaryPartAdded", "item/commandExecution/terminalInteraction",
				"thread/environment/connected", "thread/environment/disconnected", "model/verification",
				"modelProvider/authRecoveryStarted", "modelProvider/authRecoveryCompleted", "turn/moderationMetadata",
				"model/safetyBuffering/updated", "thread/readState/changed"}},
		{ServerNotification, NotUsed, noThread,
			[]string{"skills/changed", "app/list/updated", "remoteControl/status/changed", "account/gatewayOAuth/changed"}},
		{ServerNotification, NotUsed, "follows a method the daemon does not call",
			[]string{"process/outputDelta", "process/exited", "thread/search/partial", "fs/changed",
				"fuzzyFileSearch/sessionUpdated", "fuzzyFileSearch/sessionCompleted",
				"thread/realtime/started", "thread/realtime/itemAdded", "thread/realtime/item/started", "thread/realtime/item/transcript/delta",
				"thread/realtime/item/completed", "thread/realtime/transcript/delta", "thread/realtime/transcript/done",
				"thread/realtime/outputAudio/delta", "thread/realtime/sdp", "thread/realtime/error", "thread/realtime/closed",
				"externalAgentConfig/import/progress", "externalAgentConfig/import/completed", "mcpServer/oauthLogin/completed",
				"mcpServer/event/stream/notification", "windowsSandbox/setupCompleted",
				"thread/section/changed", "thread/attachment/updated", "thread/queue/changed", "project/changed",
				"thread/project/updated", "thread/prediction/updated"}},
		{ServerNotification, NotUsed, "sent only for a command/exec that streams; the daemon's does not",
			[]string{"command/exec/outputDelta"}},
		{ServerNotification, NotUsed, "deprecated: the CLI no longer sends it", []string{"item/fileChange/outputDelta"}},
		{ServerNotification, NotUsed, "Windows only; the daemon runs on Linux", []string{"windows/worldWritableWarning"}},

		// Thread item types, in item/started and item/completed (and
		// thread/read's turns).
		{ThreadItem, Used, "a thread's transcript (thread/read)", []string{"userMessage"}},
		{ThreadItem, Used, "a round's text and answer", []string{"agentMessage"}},
		{ThreadItem, Used, "a round's reasoning", []string{"reasoning"}},
		{ThreadItem, Used, "a tool call and its result: `shell`", []string{"commandExecution"}},
		{ThreadItem, Used, "a tool call and its result: `apply_patch`, with its diffs", []string{"fileChange"}},
		{ThreadItem, Used, "a tool call and its result: `mcp__<server>__<tool>`", []string{"mcpToolCall"}},
		{ThreadItem, Used, "a tool call and its result: `web_search`", []string{"webSearch"}},
		{ThreadItem, Used, "a tool call and its result: a round's dynamic tool", []string{"dynamicToolCall"}},
		{ThreadItem, Used, "a subagent's start, activity and end", []string{"collabAgentToolCall", "subAgentActivity"}},
		{ThreadItem, PassedThrough, "its item/started and item/completed as raw events to rounds that ask for them (no event maps them); " + item7,
			[]string{"plan", "contextCompaction", "imageView"}},
		{ThreadItem, PassedThrough, "its item/started and item/completed as raw events to rounds that ask for them; " + item5,
			[]string{"enteredReviewMode", "exitedReviewMode"}},
		{ThreadItem, PassedThrough, "shows no event of its own: its item/started and item/completed as raw events to rounds that ask for them",
			[]string{"hookPrompt", "functionCallOutput", "sleep", "imageGeneration"}},
	}
}

// Coverage is how a table of decisions fits a surface.
type Coverage struct {
	// Undecided are the names the surface has and the table does not,
	// "kind name", in the surface's order.
	Undecided []string
	// Stale are the decisions that name something the surface does not
	// have, "kind name", in the table's order.
	Stale []string
}

// Cover checks the decisions of ds in force for s.Version against s.
func Cover(s *Surface, ds []Decided) Coverage {
	var c Coverage
	decided := map[string]bool{}
	for _, d := range ds {
		if !d.For(s.Version) {
			continue
		}
		decided[d.key()] = true
		if !s.Has(d.Kind, d.Name) {
			c.Stale = append(c.Stale, d.key())
		}
	}
	for _, k := range Families() {
		for _, n := range s.Names[k] {
			if key := string(k) + " " + n; !decided[key] {
				c.Undecided = append(c.Undecided, key)
			}
		}
	}
	return c
}

// CheckTable lists what is wrong with a table of decisions on its own: a
// name decided twice, a decision that is none of the four, a family that
// is none of Families, an empty reason, a bound that is no version or one
// the pin (the given version) has passed: a since at or below it, a gone
// at or below it.
func CheckTable(ds []Decided, pin string) []string {
	pv, pinErr := codexproto.ParseVersion(pin)
	var out []string
	seen := map[string]bool{}
	families := map[Kind]bool{}
	for _, k := range Families() {
		families[k] = true
	}
	for _, d := range ds {
		if d.Kind == "" {
			out = append(out, d.Name+": "+d.Reason)
			continue
		}
		if seen[d.key()] {
			out = append(out, d.key()+": decided twice")
		}
		seen[d.key()] = true
		switch d.Decision {
		case Used, PassedThrough, Refused, NotUsed:
		default:
			out = append(out, d.key()+": unknown decision "+string(d.Decision))
		}
		if !families[d.Kind] {
			out = append(out, d.key()+": unknown family")
		}
		if d.Name == "" || d.Reason == "" {
			out = append(out, d.key()+": empty name or reason")
		}
		for _, b := range []struct{ what, v string }{{"since", d.Since}, {"gone", d.Gone}} {
			if b.v == "" {
				continue
			}
			v, err := codexproto.ParseVersion(b.v)
			switch {
			case err != nil:
				out = append(out, fmt.Sprintf("%s: %s: %v", d.key(), b.what, err))
			case pinErr == nil && pv.AtLeast(v) && b.what == "since":
				out = append(out, fmt.Sprintf("%s: since %s, which the pin %s has reached: drop the bound", d.key(), b.v, pin))
			case pinErr == nil && pv.AtLeast(v):
				out = append(out, fmt.Sprintf("%s: gone in %s, which the pin %s has reached: delete the decision", d.key(), b.v, pin))
			}
		}
	}
	return out
}
