package actors

import (
	"encoding/json"
	"strings"

	"github.com/meshweaver/supervisor/codexproto"
	"github.com/meshweaver/supervisor/codexrpc"
)

// answerServerRequest is the in-line policy for requests the CLI sends:
// approvals are accepted with auto-approve and declined without; a question
// for the user gets blank answers and is surfaced (question is its text);
// an MCP elicitation is declined; anything else is method-not-found, which
// the CLI treats as declined.
func answerServerRequest(r *codexrpc.Request, autoApprove bool) (result any, question string, err error) {
	switch r.Method {
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

// declineAnswer is the answer when the policy could not be consulted.
func declineAnswer(method string) (any, error) {
	res, _, err := answerServerRequest(&codexrpc.Request{Method: method, Params: json.RawMessage("{}")}, false)
	return res, err
}
