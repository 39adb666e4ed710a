package policy

import (
	"encoding/json"
	"errors"
	"fmt"
	"strings"

	"github.com/meshweaver/supervisor/actors/internal/textcut"
	"github.com/meshweaver/supervisor/codexproto"
	"github.com/meshweaver/supervisor/codexrpc"
	"github.com/meshweaver/supervisor/messages"
)

// Answer is the in-line policy for requests the CLI sends:
// approvals are accepted with auto-approve and declined without; a question
// for the user gets blank answers and is surfaced (question is its text);
// an MCP elicitation is declined; a permissions request gets, with
// auto-approve, what of it b allows (nothing without), and is surfaced;
// anything else is method-not-found, which the CLI treats as declined.
func Answer(r *codexrpc.Request, autoApprove bool, b Bounds) (result any, question string, err error) {
	switch r.Method {
	case codexproto.ReqPermissions:
		ans := permissionsAnswer(r.Params, autoApprove, false, b)
		return ans, permissionsQuestion(r.Params, ans.Permissions), nil
	case codexproto.ReqCommandApproval, codexproto.ReqFileChangeApproval:
		d := codexproto.DecisionDecline
		if autoApprove {
			d = codexproto.DecisionAccept
		}
		return codexproto.ApprovalAnswer{Decision: d}, "", nil
	case codexproto.ReqUserInput:
		var p codexproto.UserInputParams
		_ = json.Unmarshal(r.Params, &p)
		ans := codexproto.UserInputAnswer{Answers: make(map[string]codexproto.UserAnswer, len(p.Questions))}
		var qs []string
		for _, q := range p.Questions {
			ans.Answers[q.ID] = codexproto.UserAnswer{Answers: []string{}}
			text := q.Question
			if len(q.Options) > 0 {
				var opts []string
				for _, o := range q.Options {
					opts = append(opts, o.Label)
				}
				text += " (" + strings.Join(opts, " / ") + ")"
			}
			qs = append(qs, text)
		}
		if len(qs) == 0 {
			return ans, "", nil
		}
		return ans, "Codex asks: " + strings.Join(qs, " "), nil
	case codexproto.ReqElicitation:
		// The CLI asks for MCP tool-call approvals through an elicitation
		// marked in _meta; that is an approval like any other. A real MCP
		// server's elicitation asks the user for data: declined.
		var p struct {
			Meta struct {
				Kind string `json:"codex_approval_kind"`
			} `json:"_meta"`
		}
		_ = json.Unmarshal(r.Params, &p)
		if autoApprove && p.Meta.Kind == "mcp_tool_call" {
			return codexproto.ElicitationAnswer{Action: "accept", Content: json.RawMessage(`{}`)}, "", nil
		}
		return codexproto.ElicitationAnswer{Action: "decline"}, "", nil
	}
	return nil, "", &codexrpc.WireError{Code: codexrpc.CodeMethodNotFound, Message: "method not found: " + r.Method}
}

// Decline is the answer when the policy could not be consulted.
func Decline(method string) (any, error) {
	res, _, err := Answer(&codexrpc.Request{Method: method, Params: json.RawMessage("{}")}, false, Bounds{})
	return res, err
}

// Effective is a round's request policy: the explicit one, or the
// one auto_approve meant before on_request existed.
func Effective(p messages.RequestPolicy, autoApprove bool) messages.RequestPolicy {
	if p != messages.PolicyDefault {
		return p
	}
	if autoApprove {
		return messages.PolicyAuto
	}
	return messages.PolicyDecline
}

// Describe is what a caller is shown of a server request under the
// ask policy (RequestID and the deadline are the asker's to fill in); ok
// is false for a method the policy does not put to anyone (answered
// method-not-found in-line).
func Describe(r *codexrpc.Request, b Bounds) (shown messages.ServerRequest, ok bool) {
	switch r.Method {
	case codexproto.ReqPermissions:
		p := permissionsParams(r.Params)
		shown = messages.ServerRequest{Type: messages.RequestPermissions, ItemID: p.ItemID, Cwd: p.Cwd,
			Permissions: shownPermissions(p.Permissions), Grantable: shownPermissions(b.grant(p.Permissions))}
		if p.Reason != nil {
			shown.Reason = textcut.Runes(*p.Reason, 4096)
		}
		return shown, true
	case codexproto.ReqCommandApproval, codexproto.ReqFileChangeApproval:
		var p codexproto.ApprovalParams
		_ = json.Unmarshal(r.Params, &p)
		shown = messages.ServerRequest{Type: messages.RequestFileChangeApproval, ItemID: p.ItemID}
		if r.Method == codexproto.ReqCommandApproval {
			shown.Type, shown.Command, shown.Cwd = messages.RequestCommandApproval, textcut.Runes(p.Command, 4096), p.Cwd
		}
		if p.Reason != nil {
			shown.Reason = textcut.Runes(*p.Reason, 4096)
		}
		return shown, true
	case codexproto.ReqUserInput:
		var p codexproto.UserInputParams
		_ = json.Unmarshal(r.Params, &p)
		shown = messages.ServerRequest{Type: messages.RequestUserInput, ItemID: p.ItemID}
		for _, q := range p.Questions {
			mq := messages.Question{ID: q.ID, Header: q.Header, Question: q.Question}
			for _, o := range q.Options {
				mq.Options = append(mq.Options, o.Label)
			}
			shown.Questions = append(shown.Questions, mq)
		}
		return shown, true
	case codexproto.ReqElicitation:
		var p struct {
			Message string          `json:"message"`
			Schema  json.RawMessage `json:"requestedSchema"`
			Meta    struct {
				Kind string `json:"codex_approval_kind"`
			} `json:"_meta"`
		}
		_ = json.Unmarshal(r.Params, &p)
		shown = messages.ServerRequest{Type: messages.RequestElicitation, Message: textcut.Runes(p.Message, 4096)}
		if p.Meta.Kind == "mcp_tool_call" {
			shown.Type = messages.RequestMCPToolApproval
		} else if len(p.Schema) > 0 && len(p.Schema) <= 64<<10 {
			shown.Schema = string(p.Schema)
		}
		return shown, true
	}
	return shown, false
}

// CallerAnswer turns a caller's AnswerRequest into the answer codex gets
// for r, with the outcome to report; an error says what is wrong with the
// answer (the request stays open).
func CallerAnswer(r *codexrpc.Request, a messages.AnswerRequest, b Bounds) (result any, outcome string, err error) {
	switch r.Method {
	case codexproto.ReqPermissions:
		switch a.Decision {
		case messages.DecisionAccept, messages.DecisionAcceptForSession:
			return permissionsAnswer(r.Params, true, a.Decision == messages.DecisionAcceptForSession, b), "answered: " + a.Decision, nil
		case messages.DecisionDecline, messages.DecisionCancel:
			return permissionsAnswer(r.Params, false, false, b), "answered: " + a.Decision, nil
		}
		return nil, "", errors.New("a permissions request needs a decision: accept, accept_for_session, decline or cancel")
	case codexproto.ReqCommandApproval, codexproto.ReqFileChangeApproval:
		d, ok := map[string]string{
			messages.DecisionAccept: codexproto.DecisionAccept, messages.DecisionAcceptForSession: "acceptForSession",
			messages.DecisionDecline: codexproto.DecisionDecline, messages.DecisionCancel: "cancel",
		}[a.Decision]
		if !ok {
			return nil, "", errors.New("an approval needs a decision: accept, accept_for_session, decline or cancel")
		}
		return codexproto.ApprovalAnswer{Decision: d}, "answered: " + a.Decision, nil
	case codexproto.ReqUserInput:
		var p codexproto.UserInputParams
		_ = json.Unmarshal(r.Params, &p)
		ans := codexproto.UserInputAnswer{Answers: make(map[string]codexproto.UserAnswer, len(p.Questions))}
		for _, q := range p.Questions {
			got := a.Answers[q.ID]
			if got == nil || a.Decision == messages.DecisionDecline || a.Decision == messages.DecisionCancel {
				got = []string{}
			}
			ans.Answers[q.ID] = codexproto.UserAnswer{Answers: got}
		}
		for id := range a.Answers {
			if _, ok := ans.Answers[id]; !ok {
				return nil, "", fmt.Errorf("no question has id %q", textcut.Runes(id, 64))
			}
		}
		outcome = "answered"
		if a.Decision != "" {
			outcome += ": " + a.Decision
		}
		return ans, outcome, nil
	case codexproto.ReqElicitation:
		switch a.Decision {
		case messages.DecisionAccept, messages.DecisionAcceptForSession:
			content := json.RawMessage(`{}`)
			if a.Content != "" {
				var obj map[string]any
				if json.Unmarshal([]byte(a.Content), &obj) != nil || obj == nil {
					return nil, "", errors.New("content is not a JSON object")
				}
				content = json.RawMessage(a.Content)
			}
			return codexproto.ElicitationAnswer{Action: "accept", Content: content}, "answered: " + a.Decision, nil
		case messages.DecisionDecline, messages.DecisionCancel:
			return codexproto.ElicitationAnswer{Action: a.Decision}, "answered: " + a.Decision, nil
		}
		return nil, "", errors.New("an elicitation needs a decision: accept, decline or cancel")
	}
	return nil, "", fmt.Errorf("cannot answer %s", r.Method)
}
