package fakeappserver

import (
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"path/filepath"
	"strconv"
	"strings"
	"time"
)

// turn is an active turn. Its remaining notifications are queued as steps
// that run until one blocks: on a server request (waiting) or on HoldTurns
// (held). Answers, turn/steer and turn/interrupt unblock or cancel it.
type turn struct {
	th          *thread
	id          string
	n           int // 1-based count of turns started by this Serve call
	startedAt   int64
	startedAtMs int64
	steps       []func()
	waiting     *pendingRequest
	held        bool
	steered     bool
	retrying    bool // UpstreamRetryMs: held, sending retried errors
	retries     int
	items       []any // completed agent messages, for turn/completed
}

func (t *turn) json(status string, items []any, itemsView string, started, done bool) obj {
	o := obj{
		"id":          t.id,
		"rootTurnId":  t.id,
		"items":       items,
		"itemsView":   itemsView,
		"status":      status,
		"error":       nil,
		"startedAt":   nil,
		"completedAt": nil,
		"durationMs":  nil,
	}
	if started {
		o["startedAt"] = t.startedAt
	}
	if done {
		now := time.Now()
		o["completedAt"] = now.Unix()
		o["durationMs"] = now.UnixMilli() - t.startedAtMs
	}
	return o
}

// pendingRequest is a server request waiting for the client's answer.
type pendingRequest struct {
	id     int64
	method string
	t      *turn
	stale  bool // the turn was interrupted first
	// after runs once the answer came, after serverRequest/resolved.
	after func(result, errObj json.RawMessage)
}

func (s *session) advance(t *turn) {
	for len(t.steps) > 0 && t.waiting == nil && !t.held && s.werr == nil {
		next := t.steps[0]
		t.steps = t.steps[1:]
		next()
	}
}

type turnInput struct {
	ThreadID            string            `json:"threadId"`
	Input               []json.RawMessage `json:"input"`
	ClientUserMessageID *string           `json:"clientUserMessageId"`
	CollaborationMode   json.RawMessage   `json:"collaborationMode"`
	ExpectedTurnID      string            `json:"expectedTurnId"`
}

// userContent turns turn/start input into userMessage content: text gets
// the text_elements the real server adds, the rest passes through.
func userContent(input []json.RawMessage) (content []any, firstText string) {
	content = []any{}
	for _, raw := range input {
		var in obj
		if json.Unmarshal(raw, &in) != nil {
			continue
		}
		if in["type"] == "text" {
			text, _ := in["text"].(string)
			if firstText == "" {
				firstText = text
			}
			if _, ok := in["text_elements"]; !ok {
				in["text_elements"] = []any{}
			}
		}
		content = append(content, in)
	}
	return content, firstText
}

func (s *session) emitUserMessage(t *turn, content []any, clientID *string) {
	ms := nowMs()
	item := obj{
		"type":          "userMessage",
		"id":            newUUIDv7(time.UnixMilli(ms)),
		"clientId":      clientID,
		"content":       content,
		"startedAtMs":   ms,
		"completedAtMs": nil,
	}
	s.notify("item/started", obj{"item": item, "threadId": t.th.id, "turnId": t.id, "startedAtMs": ms})
	done := copyObj(item)
	done["completedAtMs"] = ms
	s.notify("item/completed", obj{"item": done, "threadId": t.th.id, "turnId": t.id, "contentTokenCount": nil, "completedAtMs": ms})
}

func copyObj(o obj) obj {
	c := make(obj, len(o))
	for k, v := range o {
		c[k] = v
	}
	return c
}

func (s *session) setStatus(t *turn, flags ...string) {
	if flags == nil {
		flags = []string{}
	}
	s.notify("thread/status/changed", obj{"threadId": t.th.id, "status": obj{"type": "active", "activeFlags": flags}})
}

func (s *session) turnStart(id, params json.RawMessage) {
	var p turnInput
	if !s.decode(id, params, &p, "threadId", "input") {
		return
	}
	if len(p.CollaborationMode) > 0 && string(p.CollaborationMode) != "null" && !s.experiment {
		s.invalid(id, "turn/start.collaborationMode requires experimentalApi capability")
		return
	}
	th := s.threads[p.ThreadID]
	if th == nil {
		s.invalid(id, "thread not found: "+p.ThreadID)
		return
	}
	content, firstText := userContent(p.Input)
	if t := th.turn; t != nil {
		// Like the real server: the running turn absorbs the input.
		s.reply(id, obj{"turn": t.json("inProgress", []any{}, "notLoaded", false, false)})
		s.emitUserMessage(t, content, p.ClientUserMessageID)
		return
	}
	s.turns++
	now := time.Now()
	t := &turn{th: th, id: newUUIDv7(now), n: s.turns, startedAt: now.Unix(), startedAtMs: now.UnixMilli()}
	th.turn = t
	th.updatedAt = now.Unix()
	if th.preview == "" {
		th.preview = firstText
	}
	answer := func() { s.reply(id, obj{"turn": t.json("inProgress", []any{}, "notLoaded", false, false)}) }
	if !s.f.TurnResultLast {
		answer()
	}
	t.steps = append(t.steps, func() {
		s.setStatus(t)
		s.notify("turn/started", obj{"threadId": th.id, "turn": t.json("inProgress", []any{}, "notLoaded", true, false)})
		s.emitUserMessage(t, content, p.ClientUserMessageID)
	})
	for _, spec := range s.f.ServerRequests {
		if spec.OnTurn == 0 || spec.OnTurn == t.n {
			t.steps = append(t.steps, s.serverRequestStep(t, spec))
		}
	}
	for _, method := range s.f.UnknownNotifications {
		t.steps = append(t.steps, func() {
			s.notify(method, obj{"threadId": th.id, "turnId": t.id})
		})
	}
	for _, spec := range s.f.TurnNotifications {
		t.steps = append(t.steps, func() {
			r := strings.NewReplacer("${threadId}", th.id, "${turnId}", t.id)
			s.notify(spec.Method, json.RawMessage(r.Replace(string(spec.Params))))
		})
	}
	if s.f.UpstreamRetryMs > 0 {
		t.steps = append(t.steps, func() { t.held, t.retrying = true, true })
	}
	t.steps = append(t.steps, s.messageSteps(t)...)
	if s.f.TurnResultLast {
		t.steps = append(t.steps, answer)
	}
	t.steps = append(t.steps, func() { s.finish(t, "completed") })
	s.advance(t)
}

// retryTick sends the next retried error of every turn that waits on an
// upstream that never answers (UpstreamRetryMs).
func (s *session) retryTick() {
	for _, th := range s.threads {
		t := th.turn
		if t == nil || !t.retrying {
			continue
		}
		t.retries++
		s.notify("error", obj{
			"error": obj{
				"message":           fmt.Sprintf("Reconnecting... %d/5", (t.retries-1)%5+1),
				"codexErrorInfo":    nil,
				"additionalDetails": "stream disconnected before completion: fake upstream",
			},
			"willRetry": true, "threadId": th.id, "turnId": t.id,
		})
	}
}

// splitWords splits text after each run of spaces, keeping the spaces with
// the word before them, so the deltas concatenate to text.
func splitWords(text string) []string {
	var words []string
	for len(text) > 0 {
		i := strings.IndexByte(text, ' ')
		if i < 0 {
			words = append(words, text)
			break
		}
		j := i
		for j < len(text) && text[j] == ' ' {
			j++
		}
		words = append(words, text[:j])
		text = text[j:]
	}
	return words
}

// deltaParams is a delta's params in the real server's key order.
type deltaParams struct {
	ThreadID string `json:"threadId"`
	TurnID   string `json:"turnId"`
	ItemID   string `json:"itemId"`
	Delta    string `json:"delta"`
}

// plainWord reports a word JSON writes as its bytes between quotes (and
// ids made of the same bytes): printable ASCII but for the quote, the
// backslash and what encoding/json escapes.
func plainWord(w string) bool {
	for i := 0; i < len(w); i++ {
		switch c := w[i]; {
		case c < 0x20 || c >= 0x7f, c == '"', c == '\\', c == '<', c == '>', c == '&':
			return false
		}
	}
	return true
}

// writeDelta writes the line notificationLine would for a delta of a word
// (through notificationLine and writeLine when it or an id is not plain,
// or the session writes garbage lines).
func (s *session) writeDelta(t *turn, itemID, word string, ts int64) {
	if s.werr != nil {
		return
	}
	if s.f.GarbageLines || !plainWord(word) || !plainWord(t.th.id) || !plainWord(t.id) || !plainWord(itemID) {
		s.writeLine(notificationLine("item/agentMessage/delta", deltaParams{ThreadID: t.th.id, TurnID: t.id, ItemID: itemID, Delta: word}, ts))
		return
	}
	w := s.w
	w.WriteString(`{"method":"item/agentMessage/delta","params":{"threadId":"`)
	w.WriteString(t.th.id)
	w.WriteString(`","turnId":"`)
	w.WriteString(t.id)
	w.WriteString(`","itemId":"`)
	w.WriteString(itemID)
	w.WriteString(`","delta":"`)
	w.WriteString(word)
	w.WriteString(`"},"emittedAtMs":`)
	var num [20]byte
	w.Write(strconv.AppendInt(num[:0], ts, 10))
	_, s.werr = w.WriteString("}\n")
}

// messageSteps streams one agentMessage: item/started, one delta per word
// (pausing after the first with HoldTurns), item/completed.
func (s *session) messageSteps(t *turn) []func() {
	const itemID = "msg-1" // the mock model's Responses item id, as recorded
	var text strings.Builder
	var startedAtMs int64
	item := func(done bool) obj {
		o := obj{
			"type":           "agentMessage",
			"moderation":     nil,
			"id":             itemID,
			"text":           text.String(),
			"phase":          nil,
			"memoryCitation": nil,
			"delivery":       nil,
			"questions":      nil,
			"startedAtMs":    startedAtMs,
			"completedAtMs":  nil,
		}
		if done {
			o["completedAtMs"] = nowMs()
		}
		return o
	}
	steps := []func(){func() {
		startedAtMs = nowMs()
		s.notify("item/started", obj{"item": item(false), "threadId": t.th.id, "turnId": t.id, "startedAtMs": startedAtMs})
	}}
	for i, word := range splitWords(s.replyText) {
		steps = append(steps, func() {
			ts := nowMs()
			if s.f.HugeLineBytes == 0 {
				// A flood's common case, without encoding/json: the same bytes.
				text.WriteString(word)
				s.writeDelta(t, itemID, word, ts)
				return
			}
			params := deltaParams{ThreadID: t.th.id, TurnID: t.id, ItemID: itemID, Delta: word}
			line := notificationLine("item/agentMessage/delta", params, ts)
			if pad := s.f.HugeLineBytes - len(line); i == 0 && pad > 0 {
				params.Delta = word + strings.Repeat("x", pad)
				line = notificationLine("item/agentMessage/delta", params, ts)
			}
			text.WriteString(params.Delta)
			s.writeLine(line)
		})
		if i == 0 && s.f.HoldTurns && !t.steered {
			steps = append(steps, func() { t.held = true })
		}
	}
	steps = append(steps, func() {
		done := item(true)
		t.items = append(t.items, done)
		s.notify("item/completed", obj{"item": done, "threadId": t.th.id, "turnId": t.id, "contentTokenCount": nil, "completedAtMs": done["completedAtMs"]})
	})
	return steps
}

// finish ends a turn with status "completed" or "interrupted".
func (s *session) finish(t *turn, status string) {
	th := t.th
	if status == "completed" {
		last := usage{total: 12, input: 10, output: 2}
		th.total = usage{
			total:     th.total.total + last.total,
			input:     th.total.input + last.input,
			cached:    th.total.cached + last.cached,
			output:    th.total.output + last.output,
			reasoning: th.total.reasoning + last.reasoning,
		}
		s.notify("thread/tokenUsage/updated", obj{"threadId": th.id, "turnId": t.id, "tokenUsage": obj{"total": th.total.json(), "last": last.json(), "modelContextWindow": 258400}})
		s.notify("account/rateLimits/updated", obj{"rateLimits": obj{
			"limitId": "codex", "limitName": nil, "normalModelSlug": nil, "primary": nil, "secondary": nil, "credits": nil,
			"individualLimit": nil, "spendControlReached": nil, "planType": nil, "rateLimitReachedType": nil,
		}})
	}
	th.turn = nil
	t.steps, t.held, t.waiting = nil, false, nil
	items, view := []any{}, "notLoaded"
	if status == "completed" {
		items, view = t.items, "summary"
		if items == nil {
			items = []any{}
		}
	}
	s.notify("thread/status/changed", obj{"threadId": th.id, "status": obj{"type": "idle"}})
	s.notify("turn/completed", obj{"threadId": th.id, "turn": t.json(status, items, view, true, true)})
}

func (s *session) turnSteer(id, params json.RawMessage) {
	var p turnInput
	if !s.decode(id, params, &p, "threadId", "expectedTurnId", "input") {
		return
	}
	th := s.threads[p.ThreadID]
	if th == nil {
		s.invalid(id, "thread not found: "+p.ThreadID)
		return
	}
	t := th.turn
	if t == nil {
		s.invalid(id, "no active turn to steer")
		return
	}
	if p.ExpectedTurnID != t.id {
		s.invalid(id, fmt.Sprintf("expected active turn id `%s` but found `%s`", p.ExpectedTurnID, t.id))
		return
	}
	content, _ := userContent(p.Input)
	s.reply(id, obj{"turnId": t.id})
	s.emitUserMessage(t, content, p.ClientUserMessageID)
	if t.held {
		// The in-flight message is dropped and the model answers again.
		t.held, t.steered = false, true
		t.steps = append(s.messageSteps(t), func() { s.finish(t, "completed") })
		s.advance(t)
	}
}

func (s *session) turnInterrupt(id, params json.RawMessage) {
	var p struct {
		ThreadID string `json:"threadId"`
		TurnID   string `json:"turnId"`
	}
	if !s.decode(id, params, &p, "threadId", "turnId") {
		return
	}
	th := s.threads[p.ThreadID]
	if th == nil || th.turn == nil || th.turn.id != p.TurnID {
		s.invalid(id, "no active turn to interrupt")
		return
	}
	t := th.turn
	pend := t.waiting
	s.reply(id, obj{})
	s.finish(t, "interrupted")
	if pend != nil {
		// The real server resolves a pending request after turn/completed
		// and then ignores a late answer.
		pend.stale = true
		s.notify("serverRequest/resolved", obj{"threadId": th.id, "requestId": pend.id})
	}
}

// serverRequestStep sends one server request and blocks the turn on it.
func (s *session) serverRequestStep(t *turn, spec ServerRequestSpec) func() {
	return func() {
		p := &pendingRequest{id: s.nextReqID, method: spec.Method, t: t}
		s.nextReqID++
		var params json.RawMessage
		if len(spec.Params) > 0 {
			r := strings.NewReplacer("${threadId}", t.th.id, "${turnId}", t.id)
			params = json.RawMessage(r.Replace(string(spec.Params)))
		} else {
			params = s.defaultRequest(t, p)
		}
		s.pending[p.id] = p
		t.waiting = p
		s.sendRequest(p.id, spec.Method, params)
	}
}

// response handles the client's answer to a server request.
func (s *session) response(rawID, result, errObj json.RawMessage) {
	id, err := strconv.ParseInt(string(rawID), 10, 64)
	if err != nil {
		return
	}
	p := s.pending[id]
	if p == nil {
		return
	}
	delete(s.pending, id)
	ans := obj{"requestId": id, "method": p.method, "stale": p.stale}
	if errObj != nil {
		ans["error"] = errObj
	} else {
		ans["result"] = result
	}
	if p.stale {
		s.notify("fake/answer", ans)
		return
	}
	t := p.t
	s.notify("serverRequest/resolved", obj{"threadId": t.th.id, "requestId": id})
	s.notify("fake/answer", ans)
	t.waiting = nil
	if p.after != nil {
		p.after(result, errObj)
	}
	s.advance(t)
}

// decision extracts the decision of an approval answer: "accept",
// "decline", "cancel", or the key of an object decision such as
// "acceptWithExecpolicyAmendment".
func decision(result json.RawMessage) string {
	var r struct {
		Decision json.RawMessage `json:"decision"`
	}
	if json.Unmarshal(result, &r) != nil {
		return ""
	}
	var str string
	if json.Unmarshal(r.Decision, &str) == nil {
		return str
	}
	var o map[string]json.RawMessage
	if json.Unmarshal(r.Decision, &o) == nil {
		for k := range o {
			return k
		}
	}
	return ""
}

// defaultRequest emits what the real server sends before a known server
// request, sets p.after to what it sends after the answer, and returns the
// request's params.
func (s *session) defaultRequest(t *turn, p *pendingRequest) json.RawMessage {
	th := t.th
	s.calls++
	itemID := fmt.Sprintf("call-%d", s.calls)
	startedAtMs := nowMs()
	base := obj{"threadId": th.id, "turnId": t.id}
	switch p.method {
	case "item/commandExecution/requestApproval":
		const cmd = "touch fake-approved.txt"
		full := "/bin/bash -lc '" + cmd + "'"
		actions := []any{obj{"type": "unknown", "command": cmd}}
		amendment := []any{"touch", "fake-approved.txt"}
		item := obj{
			"type": "commandExecution", "id": itemID, "pluginId": nil, "scriptPath": nil,
			"command": full, "cwd": th.cwd, "processId": nil, "source": "agent", "status": "inProgress",
			"commandActions": actions, "aggregatedOutput": nil, "exitCode": nil, "durationMs": nil,
			"startedAtMs": startedAtMs, "completedAtMs": nil,
		}
		s.setStatus(t, "waitingOnApproval")
		s.notify("item/started", obj{"item": item, "threadId": th.id, "turnId": t.id, "startedAtMs": startedAtMs})
		p.after = func(result, errObj json.RawMessage) {
			s.setStatus(t)
			done := copyObj(item)
			ms := nowMs()
			done["completedAtMs"] = ms
			cancel := false
			switch d := decision(result); {
			case errObj != nil:
				done["status"] = "failed"
			case d == "accept" || d == "acceptForSession" || d == "acceptWithExecpolicyAmendment":
				done["status"], done["processId"], done["source"] = "completed", "4242", "unifiedExecStartup"
				done["aggregatedOutput"], done["exitCode"], done["durationMs"] = "", 0, 1
			case d == "cancel":
				done["status"] = "declined"
				cancel = true
			default:
				done["status"] = "declined"
			}
			s.notify("item/completed", obj{"item": done, "threadId": th.id, "turnId": t.id, "contentTokenCount": nil, "completedAtMs": ms})
			if cancel {
				t.steps = []func(){func() { s.finish(t, "interrupted") }}
			}
		}
		return marshal(obj{
			"kind": "command", "threadId": th.id, "turnId": t.id, "itemId": itemID,
			"startedAtMs": startedAtMs, "environmentId": "local", "command": full, "cwd": th.cwd,
			"commandActions": actions, "proposedExecpolicyAmendment": amendment,
			"availableDecisions": []any{"accept", obj{"acceptWithExecpolicyAmendment": obj{"execpolicy_amendment": amendment}}, "cancel"},
		})
	case "item/fileChange/requestApproval":
		item := obj{
			"type": "fileChange", "id": itemID,
			"changes":     []any{obj{"path": filepath.Join(th.cwd, "fake.txt"), "kind": obj{"type": "add"}, "diff": "fake line\n"}},
			"status":      "inProgress",
			"startedAtMs": startedAtMs, "completedAtMs": nil,
		}
		s.setStatus(t, "waitingOnApproval")
		s.notify("item/started", obj{"item": item, "threadId": th.id, "turnId": t.id, "startedAtMs": startedAtMs})
		p.after = func(result, errObj json.RawMessage) {
			s.setStatus(t)
			done := copyObj(item)
			ms := nowMs()
			done["completedAtMs"] = ms
			cancel := false
			switch d := decision(result); {
			case errObj != nil:
				done["status"] = "failed"
			case d == "accept" || d == "acceptForSession":
				done["status"] = "completed"
			case d == "cancel":
				done["status"] = "declined"
				cancel = true
			default:
				done["status"] = "declined"
			}
			s.notify("item/completed", obj{"item": done, "threadId": th.id, "turnId": t.id, "contentTokenCount": nil, "completedAtMs": ms})
			if cancel {
				t.steps = []func(){func() { s.finish(t, "interrupted") }}
			}
		}
		return marshal(obj{"threadId": th.id, "turnId": t.id, "itemId": itemID, "startedAtMs": startedAtMs, "reason": nil, "grantRoot": nil})
	case "mcpServer/elicitation/request":
		s.setStatus(t, "waitingOnApproval")
		p.after = func(json.RawMessage, json.RawMessage) { s.setStatus(t) }
		return marshal(obj{
			"threadId": th.id, "turnId": t.id, "serverName": "fake-mcp", "mode": "form",
			"_meta": obj{
				"codex_approval_kind": "mcp_tool_call",
				"persist":             []any{"session", "always"},
				"tool_name":           "echo",
				"tool_description":    "Echo back the given text.",
				"tool_params":         obj{"text": "hi there"},
				"tool_params_display": []any{obj{"name": "text", "value": "hi there", "display_name": "text"}},
			},
			"message":         "Allow the fake-mcp MCP server to run tool \"echo\"?",
			"requestedSchema": obj{"type": "object", "properties": obj{}},
		})
	case "item/tool/requestUserInput":
		s.setStatus(t, "waitingOnUserInput")
		p.after = func(json.RawMessage, json.RawMessage) { s.setStatus(t) }
		return marshal(obj{
			"threadId": th.id, "turnId": t.id, "itemId": itemID,
			"questions": []any{obj{
				"id": "db_choice", "header": "Database", "question": "Which database should I use?",
				"isOther": true, "isSecret": false,
				"options": []any{
					obj{"label": "Postgres (Recommended)", "description": "Robust default."},
					obj{"label": "SQLite", "description": "Zero setup."},
				},
			}},
			"isBlocking": true, "autoResolutionMs": nil,
		})
	default:
		return marshal(base)
	}
}

// newUUIDv7 returns a random UUIDv7 for the given time, the kind of id the
// real server gives threads, turns and user messages.
func newUUIDv7(t time.Time) string {
	var b [16]byte
	if _, err := rand.Read(b[:]); err != nil {
		panic(err) // crypto/rand does not fail on Linux
	}
	ms := uint64(t.UnixMilli())
	for i := 0; i < 6; i++ {
		b[i] = byte(ms >> (40 - 8*i))
	}
	b[6] = 0x70 | b[6]&0x0f
	b[8] = 0x80 | b[8]&0x3f
	h := hex.EncodeToString(b[:])
	return h[0:8] + "-" + h[8:12] + "-" + h[12:16] + "-" + h[16:20] + "-" + h[20:32]
}
