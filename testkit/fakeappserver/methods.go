package fakeappserver

import (
	"bytes"
	_ "embed"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"time"
)

// modelList is the real server's model/list result with includeHidden,
// recorded from 0.169.0 (three of its models are hidden).
//
//go:embed model_list.json
var modelList json.RawMessage

// paramless are the implemented methods whose requests carry no params.
var paramless = map[string]bool{"account/logout": true, "account/rateLimits/read": true}

type handler func(s *session, id, params json.RawMessage)

// handlers holds every method the fake implements, besides initialize.
var handlers = map[string]handler{
	"thread/start":            (*session).threadStart,
	"thread/resume":           (*session).threadResume,
	"thread/name/set":         (*session).threadNameSet,
	"thread/read":             (*session).threadRead,
	"thread/loaded/list":      (*session).threadLoadedList,
	"thread/unsubscribe":      (*session).threadUnsubscribe,
	"thread/archive":          (*session).threadArchive,
	"turn/start":              (*session).turnStart,
	"turn/steer":              (*session).turnSteer,
	"turn/interrupt":          (*session).turnInterrupt,
	"model/list":              (*session).modelList,
	"mcpServerStatus/list":    func(s *session, id, _ json.RawMessage) { s.reply(id, obj{"data": []any{}, "nextCursor": nil}) },
	"account/read":            (*session).accountRead,
	"account/rateLimits/read": (*session).rateLimitsRead,
	"account/login/start":     (*session).accountLoginStart,
	"account/login/cancel":    (*session).accountLoginCancel,
	"account/logout":          (*session).accountLogout,
}

func (s *session) request(id json.RawMessage, method string, params json.RawMessage) {
	if method == s.f.HangOnMethod && method != "" {
		return
	}
	if s.f.OverloadedTimes > 0 && (s.f.OverloadedMethod == "" || s.f.OverloadedMethod == method) {
		s.overloads[method]++
		if s.overloads[method] <= s.f.OverloadedTimes {
			s.replyError(id, -32001, "Server overloaded; retry later.")
			return
		}
	}
	if !s.realMethods[method] {
		s.invalid(id, unknownVariant(method))
		return
	}
	if params == nil && !paramless[method] {
		s.invalid(id, "Invalid request: missing field `params`")
		return
	}
	if method == "initialize" {
		s.initialize(id, params)
		return
	}
	if !s.initialized {
		s.invalid(id, "Not initialized")
		return
	}
	h := handlers[method]
	if h == nil {
		s.invalid(id, "fakeappserver: method `"+method+"` is not implemented")
		return
	}
	h(s, id, params)
}

// decode unmarshals params into v, answering the serde-style error the
// real server gives for a missing required field. It reports success.
func (s *session) decode(id, params json.RawMessage, v any, required ...string) bool {
	var fields map[string]json.RawMessage
	if err := json.Unmarshal(params, &fields); err != nil {
		s.invalid(id, "Invalid request: invalid type: expected struct")
		return false
	}
	for _, r := range required {
		if _, ok := fields[r]; !ok {
			s.invalid(id, "Invalid request: missing field `"+r+"`")
			return false
		}
	}
	if err := json.Unmarshal(params, v); err != nil {
		s.invalid(id, "Invalid request: "+err.Error())
		return false
	}
	return true
}

func (s *session) initialize(id, params json.RawMessage) {
	var p struct {
		ClientInfo struct {
			Name    string `json:"name"`
			Version string `json:"version"`
		} `json:"clientInfo"`
		Capabilities struct {
			ExperimentalAPI bool `json:"experimentalApi"`
		} `json:"capabilities"`
	}
	if !s.decode(id, params, &p, "clientInfo") {
		return
	}
	if s.initialized {
		s.invalid(id, "Already initialized")
		return
	}
	s.initialized = true
	s.experiment = p.Capabilities.ExperimentalAPI
	s.clientName, s.clientVer = p.ClientInfo.Name, p.ClientInfo.Version
	s.reply(id, obj{
		"userAgent":      fmt.Sprintf("%s/%s (Debian 12.0.0; x86_64) xterm (%s; %s)", p.ClientInfo.Name, s.version, p.ClientInfo.Name, p.ClientInfo.Version),
		"codexHome":      s.codexHome,
		"platformFamily": "unix",
		"platformOs":     "linux",
	})
}

// thread is one loaded thread.
type thread struct {
	id             string
	cwd            string
	path           string
	name           string
	preview        string
	ephemeral      bool
	approvalPolicy json.RawMessage
	sandbox        obj
	createdAt      int64
	updatedAt      int64
	turn           *turn // the active turn, if any
	total          usage
}

type usage struct{ total, input, cached, output, reasoning int }

func (u usage) json() obj {
	return obj{
		"totalTokens":           u.total,
		"inputTokens":           u.input,
		"cachedInputTokens":     u.cached,
		"cacheWriteInputTokens": 0,
		"outputTokens":          u.output,
		"reasoningOutputTokens": u.reasoning,
	}
}

func sandboxPolicy(mode string) obj {
	switch mode {
	case "workspace-write":
		return obj{"type": "workspaceWrite", "writableRoots": []any{}, "networkAccess": false, "excludeTmpdirEnvVar": false, "excludeSlashTmp": false}
	case "danger-full-access":
		return obj{"type": "dangerFullAccess"}
	default:
		return obj{"type": "readOnly", "networkAccess": false}
	}
}

func (s *session) threadJSON(th *thread) obj {
	status := obj{"type": "idle"}
	if th.turn != nil {
		status = obj{"type": "active", "activeFlags": []any{}}
	}
	var path any
	if th.path != "" {
		path = th.path
	}
	var name any
	if th.name != "" {
		name = th.name
	}
	return obj{
		"id":                   th.id,
		"environments":         []any{obj{"environmentId": "local", "cwd": th.cwd, "runtimeWorkspaceRoots": []any{th.cwd}}},
		"extra":                nil,
		"sessionId":            th.id,
		"forkedFromId":         nil,
		"attachedToThreadId":   nil,
		"parentThreadId":       nil,
		"preview":              th.preview,
		"ephemeral":            th.ephemeral,
		"section":              nil,
		"sectionEnteredAt":     nil,
		"projectId":            nil,
		"historyMode":          "paginated",
		"modelProvider":        "mock",
		"model":                "mock-model",
		"reasoningEffort":      nil,
		"createdAt":            th.createdAt,
		"updatedAt":            th.updatedAt,
		"recencyAt":            th.updatedAt,
		"status":               status,
		"path":                 path,
		"cwd":                  th.cwd,
		"cliVersion":           s.version,
		"originator":           s.clientName,
		"source":               "vscode",
		"canAcceptDirectInput": true,
		"threadSource":         nil,
		"agentNickname":        nil,
		"agentRole":            nil,
		"gitInfo":              nil,
		"name":                 name,
		"daybreakEnabled":      nil,
		"turns":                []any{},
	}
}

// threadResult is the thread/start result; thread/resume adds to it.
func (s *session) threadResult(th *thread) obj {
	return obj{
		"thread":                  s.threadJSON(th),
		"model":                   "mock-model",
		"modelProvider":           "mock",
		"serviceTier":             nil,
		"disabledPluginIds":       []any{},
		"cwd":                     th.cwd,
		"runtimeWorkspaceRoots":   []any{th.cwd},
		"instructionSources":      []any{},
		"approvalPolicy":          th.approvalPolicy,
		"approvalsReviewer":       "user",
		"sandbox":                 th.sandbox,
		"activePermissionProfile": nil,
		"reasoningEffort":         nil,
		"multiAgentMode":          "explicitRequestOnly",
	}
}

// modelList answers model/list as the real server does: hidden models
// only with includeHidden; pages of limit models (ModelPageSize, else all,
// without one) from the offset the cursor names, nextCursor the next
// offset or null.
func (s *session) modelList(id, params json.RawMessage) {
	var p struct {
		Cursor        *string `json:"cursor"`
		Limit         *int    `json:"limit"`
		IncludeHidden *bool   `json:"includeHidden"`
	}
	if !s.decode(id, params, &p) {
		return
	}
	var all struct {
		Data []json.RawMessage `json:"data"`
	}
	if err := json.Unmarshal(modelList, &all); err != nil {
		panic("fakeappserver: model_list.json: " + err.Error()) // a bug in the fake
	}
	var models []json.RawMessage
	for _, m := range all.Data {
		var h struct {
			Hidden bool `json:"hidden"`
		}
		_ = json.Unmarshal(m, &h)
		if !h.Hidden || (p.IncludeHidden != nil && *p.IncludeHidden) {
			models = append(models, m)
		}
	}
	start := 0
	if p.Cursor != nil {
		n, err := strconv.Atoi(*p.Cursor)
		if err != nil || n < 0 {
			s.invalid(id, "invalid cursor: "+*p.Cursor)
			return
		}
		if n > len(models) {
			s.invalid(id, fmt.Sprintf("cursor %d exceeds total models %d", n, len(models)))
			return
		}
		start = n
	}
	size := len(models)
	if s.f.ModelPageSize > 0 {
		size = s.f.ModelPageSize
	}
	if p.Limit != nil {
		size = *p.Limit
	}
	end := min(start+max(size, 0), len(models))
	var next any
	if end < len(models) {
		next = strconv.Itoa(end)
	}
	page := models[start:end]
	if page == nil {
		page = []json.RawMessage{}
	}
	s.reply(id, obj{"data": page, "nextCursor": next})
}

type threadStartParams struct {
	Cwd            string          `json:"cwd"`
	ApprovalPolicy json.RawMessage `json:"approvalPolicy"`
	Sandbox        string          `json:"sandbox"`
	Ephemeral      bool            `json:"ephemeral"`
	Config         mcpOverlay      `json:"config"`
}

// mcpOverlay is the part of a thread's config overlay MCPStartup reads.
type mcpOverlay struct {
	MCPServers map[string]struct {
		URL     string `json:"url"`
		Enabled *bool  `json:"enabled"`
	} `json:"mcp_servers"`
}

// mcpStartup reports the startup of the overlay's enabled MCP servers
// (MCPStartup), in name order.
func (s *session) mcpStartup(threadID string, o mcpOverlay) {
	if s.f.MCPStartup == "" {
		return
	}
	names := make([]string, 0, len(o.MCPServers))
	for name, srv := range o.MCPServers {
		if srv.Enabled == nil || *srv.Enabled {
			names = append(names, name)
		}
	}
	sort.Strings(names)
	for _, name := range names {
		s.notify("mcpServer/startupStatus/updated", obj{"threadId": threadID, "name": name, "status": "starting", "error": nil, "failureReason": nil})
		final := obj{"threadId": threadID, "name": name, "status": "ready", "error": nil, "failureReason": nil}
		if s.f.MCPStartup == "failed" {
			final["status"] = "failed"
			final["error"] = "MCP client for `" + name + "` failed to start: MCP startup failed: handshaking with MCP server failed: error sending request for url (" + o.MCPServers[name].URL + ")"
		}
		if s.f.MCPStartupOn != "" {
			s.mcpHeld = append(s.mcpHeld, final)
			continue
		}
		s.notify("mcpServer/startupStatus/updated", final)
	}
}

func (s *session) newThread(id string, p threadStartParams) *thread {
	now := time.Now()
	cwd := p.Cwd
	if cwd == "" || !filepath.IsAbs(cwd) {
		wd, _ := os.Getwd()
		cwd = filepath.Join(wd, cwd)
	}
	ap := p.ApprovalPolicy
	if len(ap) == 0 || string(ap) == "null" {
		ap = json.RawMessage(`"on-request"`)
	}
	return &thread{
		id:             id,
		cwd:            cwd,
		ephemeral:      p.Ephemeral,
		approvalPolicy: ap,
		sandbox:        sandboxPolicy(p.Sandbox),
		createdAt:      now.Unix(),
		updatedAt:      now.Unix(),
	}
}

func (s *session) threadStart(id, params json.RawMessage) {
	var p threadStartParams
	if !s.decode(id, params, &p) {
		return
	}
	now := time.Now()
	th := s.newThread(newUUIDv7(now), p)
	if !th.ephemeral {
		th.path = s.rolloutPath(th.id, now)
		if s.f.CodexHome != "" {
			if err := s.writeRollout(th); err != nil {
				fmt.Fprintf(s.stderr, "ERROR fakeappserver: writing rollout: %v\n", err)
			}
		}
	}
	s.threads[th.id] = th
	s.reply(id, s.threadResult(th))
	s.notify("thread/started", obj{"thread": s.threadJSON(th)})
	s.mcpStartup(th.id, p.Config)
}

func (s *session) rolloutPath(id string, t time.Time) string {
	return filepath.Join(s.codexHome, "sessions", t.Format("2006/01/02"),
		"rollout-"+t.Format("2006-01-02T15-04-05")+"-"+id+".jsonl")
}

// rolloutMeta is the one line the fake writes into a rollout file.
type rolloutMeta struct {
	Type    string `json:"type"`
	Payload struct {
		ID             string          `json:"id"`
		Cwd            string          `json:"cwd"`
		ApprovalPolicy json.RawMessage `json:"approvalPolicy"`
		Sandbox        obj             `json:"sandbox"`
		CreatedAt      int64           `json:"createdAt"`
	} `json:"payload"`
}

func (s *session) writeRollout(th *thread) error {
	if err := os.MkdirAll(filepath.Dir(th.path), 0o755); err != nil {
		return err
	}
	var m rolloutMeta
	m.Type = "session_meta"
	m.Payload.ID, m.Payload.Cwd, m.Payload.ApprovalPolicy, m.Payload.Sandbox, m.Payload.CreatedAt =
		th.id, th.cwd, th.approvalPolicy, th.sandbox, th.createdAt
	return os.WriteFile(th.path, append(marshal(m), '\n'), 0o644)
}

// findThread returns a loaded thread, or loads one that thread/resume
// could find: a KnownThreads id or a rollout file under CodexHome.
func (s *session) findThread(id string) *thread {
	if th := s.threads[id]; th != nil {
		return th
	}
	if s.f.CodexHome != "" {
		matches, _ := filepath.Glob(filepath.Join(s.f.CodexHome, "sessions", "*", "*", "*", "rollout-*-"+id+".jsonl"))
		for _, path := range matches {
			b, err := os.ReadFile(path)
			if err != nil {
				continue
			}
			var m rolloutMeta
			first, _, _ := bytes.Cut(b, []byte("\n"))
			if json.Unmarshal(first, &m) != nil || m.Payload.ID != id {
				continue
			}
			th := s.newThread(id, threadStartParams{Cwd: m.Payload.Cwd, ApprovalPolicy: m.Payload.ApprovalPolicy})
			th.sandbox, th.path, th.createdAt = m.Payload.Sandbox, path, m.Payload.CreatedAt
			if th.sandbox == nil {
				th.sandbox = sandboxPolicy("")
			}
			return th
		}
	}
	if s.known[id] {
		th := s.newThread(id, threadStartParams{})
		th.path = s.rolloutPath(id, time.Now())
		return th
	}
	return nil
}

// sessionIDError returns the real server's complaint about a thread id
// that is not a UUID, or "" when it parses.
func sessionIDError(id string) string {
	const prefix = "urn:uuid:"
	in := strings.TrimPrefix(id, prefix)
	offset := len(id) - len(in)
	for i, c := range in {
		if !strings.ContainsRune("0123456789abcdefABCDEF-", c) {
			return fmt.Sprintf("invalid session id: invalid character: expected an optional prefix of `urn:uuid:` followed by [0-9a-fA-F-], found `%c` at %d", c, offset+i+1)
		}
	}
	if !strings.Contains(in, "-") {
		if len(in) != 32 {
			return fmt.Sprintf("invalid session id: invalid length: expected length 32 for simple format, found %d", len(in))
		}
		return ""
	}
	groups := strings.Split(in, "-")
	if len(groups) != 5 {
		return fmt.Sprintf("invalid session id: invalid group count: expected 5, found %d", len(groups))
	}
	for i, want := range []int{8, 4, 4, 4, 12} {
		if len(groups[i]) != want {
			return fmt.Sprintf("invalid session id: invalid group length in group %d: expected %d, found %d", i, want, len(groups[i]))
		}
	}
	return ""
}

type threadIDParams struct {
	ThreadID string `json:"threadId"`
}

func (s *session) threadResume(id, params json.RawMessage) {
	var p struct {
		ThreadID string     `json:"threadId"`
		Config   mcpOverlay `json:"config"`
	}
	if !s.decode(id, params, &p, "threadId") {
		return
	}
	if msg := sessionIDError(p.ThreadID); msg != "" {
		s.invalid(id, msg)
		return
	}
	th := s.findThread(p.ThreadID)
	if th == nil {
		s.invalid(id, "no rollout found for thread id "+p.ThreadID)
		return
	}
	s.threads[th.id] = th
	res := s.threadResult(th)
	res["collaborationMode"] = obj{"mode": "default", "settings": obj{"model": "mock-model", "reasoning_effort": nil, "developer_instructions": nil}}
	res["initialTurnsPage"] = nil
	res["turnsBackwardsCursor"] = nil
	res["itemsBackwardsCursor"] = nil
	s.reply(id, res)
	if th.turn == nil {
		s.notify("thread/status/changed", obj{"threadId": th.id, "status": obj{"type": "idle"}})
	}
	s.mcpStartup(th.id, p.Config)
}

func (s *session) threadNameSet(id, params json.RawMessage) {
	var p struct {
		ThreadID string `json:"threadId"`
		Name     string `json:"name"`
	}
	if !s.decode(id, params, &p, "threadId", "name") {
		return
	}
	th := s.findThread(p.ThreadID)
	if th == nil {
		s.invalid(id, "no rollout found for thread id "+p.ThreadID)
		return
	}
	th.name = p.Name
	s.reply(id, obj{})
	s.notify("thread/name/updated", obj{"threadId": th.id, "threadName": p.Name})
}

func (s *session) threadRead(id, params json.RawMessage) {
	var p threadIDParams
	if !s.decode(id, params, &p, "threadId") {
		return
	}
	th := s.threads[p.ThreadID]
	if th == nil {
		s.invalid(id, "thread not loaded: "+p.ThreadID)
		return
	}
	s.reply(id, obj{"thread": s.threadJSON(th)})
}

func (s *session) threadLoadedList(id, _ json.RawMessage) {
	ids := []any{}
	for tid := range s.threads {
		ids = append(ids, tid)
	}
	s.reply(id, obj{"data": ids, "nextCursor": nil})
}

func (s *session) threadUnsubscribe(id, params json.RawMessage) {
	var p threadIDParams
	if !s.decode(id, params, &p, "threadId") {
		return
	}
	s.reply(id, obj{"status": "unsubscribed"})
}

func (s *session) threadArchive(id, params json.RawMessage) {
	var p threadIDParams
	if !s.decode(id, params, &p, "threadId") {
		return
	}
	if s.findThread(p.ThreadID) == nil {
		s.invalid(id, "no rollout found for thread id "+p.ThreadID)
		return
	}
	s.reply(id, obj{})
	s.notify("thread/archived", obj{"threadId": p.ThreadID})
}

// rateLimitsRead answers RateLimits, or, like the real server without a
// ChatGPT login, the authentication error.
func (s *session) rateLimitsRead(id, _ json.RawMessage) {
	if len(s.f.RateLimits) == 0 {
		s.invalid(id, "codex account authentication required to read rate limits")
		return
	}
	s.reply(id, s.f.RateLimits)
}

func (s *session) accountRead(id, _ json.RawMessage) {
	s.reply(id, obj{"account": nil, "userId": nil, "requiresOpenaiAuth": false, "workspaceRouting": nil})
}

func (s *session) accountLoginStart(id, params json.RawMessage) {
	var p struct {
		Type   string `json:"type"`
		APIKey string `json:"apiKey"`
	}
	if !s.decode(id, params, &p, "type") {
		return
	}
	switch p.Type {
	case "apiKey":
		if p.APIKey == "" {
			s.invalid(id, "Invalid request: missing field `apiKey`")
			return
		}
		s.reply(id, obj{"type": "apiKey"})
		s.notify("account/login/completed", obj{"loginId": nil, "success": true, "error": nil})
		s.notify("account/updated", obj{"authMode": "apikey", "planType": nil})
	case "chatgptDeviceCode":
		loginID := newUUIDv7(time.Now())
		s.logins[loginID] = true
		s.reply(id, obj{"type": "chatgptDeviceCode", "loginId": loginID, "verificationUrl": "https://auth.openai.com/codex/device", "userCode": "FAKE-1234"})
	case "chatgpt":
		loginID := newUUIDv7(time.Now())
		s.logins[loginID] = true
		s.reply(id, obj{"type": "chatgpt", "loginId": loginID, "authUrl": "https://auth.openai.com/oauth/authorize?client_id=fake&redirect_uri=http%3A%2F%2F127.0.0.1%3A1455%2Fauth%2Fcallback&state=" + loginID})
	default:
		s.invalid(id, "Invalid request: unknown variant `"+p.Type+"`, expected one of `apiKey`, `chatgpt`, `chatgptDeviceCode`, `chatgptAuthTokens`, `amazonBedrock`")
	}
}

func (s *session) accountLoginCancel(id, params json.RawMessage) {
	var p struct {
		LoginID string `json:"loginId"`
	}
	if !s.decode(id, params, &p, "loginId") {
		return
	}
	if !s.logins[p.LoginID] {
		s.reply(id, obj{"status": "notFound"})
		return
	}
	delete(s.logins, p.LoginID)
	s.reply(id, obj{"status": "canceled"})
	s.notify("account/login/completed", obj{"loginId": p.LoginID, "success": false, "error": "Login was not completed"})
}

func (s *session) accountLogout(id, _ json.RawMessage) {
	s.reply(id, obj{})
	s.notify("account/updated", obj{"authMode": nil, "planType": nil})
}
