package messages

import (
	"errors"
	"strings"
	"testing"
)

func validRound() StartRound {
	return StartRound{User: "u1", Thread: "t1", Text: "hi"}
}

func TestStartRoundValidate(t *testing.T) {
	turns := func(n int, text string) []Turn {
		h := make([]Turn, n)
		for i := range h {
			h[i] = Turn{Role: RoleUser, Text: text}
		}
		return h
	}
	tests := []struct {
		name    string
		edit    func(*StartRound)
		wantErr string // substring; empty for valid
	}{
		{"minimal", func(*StartRound) {}, ""},
		{"full", func(m *StartRound) { *m = samples()[0].(StartRound) }, ""},
		{"no user", func(m *StartRound) { m.User = "" }, "user is empty"},
		{"long user", func(m *StartRound) { m.User = strings.Repeat("u", MaxUserLen+1) }, "user is 65 bytes, max 64"},
		{"user at bound", func(m *StartRound) { m.User = strings.Repeat("u", MaxUserLen) }, ""},
		{"user with newline", func(m *StartRound) { m.User = "u\n1" }, "user has invalid UTF-8"},
		{"no thread", func(m *StartRound) { m.Thread = "" }, "thread is empty"},
		{"long thread", func(m *StartRound) { m.Thread = strings.Repeat("t", MaxThreadLen+1) }, "thread is 1025 bytes"},
		{"thread at bound", func(m *StartRound) { m.Thread = strings.Repeat("t", MaxThreadLen) }, ""},
		{"thread bad UTF-8", func(m *StartRound) { m.Thread = "t\xff" }, "thread has invalid UTF-8"},
		{"thread with DEL", func(m *StartRound) { m.Thread = "t\x7f" }, "thread has invalid UTF-8"},
		{"thread unicode", func(m *StartRound) { m.Thread = "fil/ünïcødé/🧵" }, ""},
		{"no text", func(m *StartRound) { m.Text = "" }, "text is empty"},
		{"text at bound", func(m *StartRound) { m.Text = strings.Repeat("x", MaxTextLen) }, ""},
		{"long text", func(m *StartRound) { m.Text = strings.Repeat("x", MaxTextLen+1) }, "text is 1048577 bytes, max 1048576"},
		{"text with newlines", func(m *StartRound) { m.Text = "a\nb\tc" }, ""},
		{"long round id", func(m *StartRound) { m.RoundID = strings.Repeat("r", MaxIDLen+1) }, "round_id is 257 bytes"},
		{"long client id", func(m *StartRound) { m.ClientMessageID = strings.Repeat("c", MaxIDLen+1) }, "client_message_id is"},
		{"long model", func(m *StartRound) { m.Model = strings.Repeat("m", MaxIDLen+1) }, "model is"},
		{"effort control", func(m *StartRound) { m.Effort = "hi\x00gh" }, "effort has invalid"},
		{"long instructions", func(m *StartRound) { m.DeveloperInstructions = strings.Repeat("d", MaxTextLen+1) }, "developer_instructions is"},
		{"mcp http", func(m *StartRound) { m.MCPURL = "http://10.0.0.1:8080/mcp" }, ""},
		{"mcp with token", func(m *StartRound) { m.MCPURL, m.MCPToken = "https://h/mcp", "abc.DEF-123_~+/=" }, ""},
		{"mcp relative", func(m *StartRound) { m.MCPURL = "/mcp" }, "mcp_url is not an absolute"},
		{"mcp ftp", func(m *StartRound) { m.MCPURL = "ftp://h/mcp" }, "mcp_url is not an absolute"},
		{"mcp no host", func(m *StartRound) { m.MCPURL = "https:///mcp" }, "mcp_url is not an absolute"},
		{"mcp unparsable", func(m *StartRound) { m.MCPURL = "https://h/\x00?SECRET" }, "mcp_url is not an absolute"},
		{"mcp long", func(m *StartRound) { m.MCPURL = "https://h/" + strings.Repeat("p", MaxURLLen) }, "mcp_url is 2058 bytes"},
		{"token without url", func(m *StartRound) { m.MCPToken = "SECRET" }, "mcp_token is set without mcp_url"},
		{"token with CRLF", func(m *StartRound) { m.MCPURL, m.MCPToken = "https://h", "SECRET\r\nX: y" }, "mcp_token has a character outside"},
		{"token with space", func(m *StartRound) { m.MCPURL, m.MCPToken = "https://h", "Bearer SECRET" }, "mcp_token has a character outside"},
		{"token long", func(m *StartRound) { m.MCPURL, m.MCPToken = "https://h", strings.Repeat("S", MaxSecretLen+1) }, "mcp_token is 4097 bytes"},
		{"history at bound", func(m *StartRound) { m.History = turns(MaxHistoryTurns, "x") }, ""},
		{"history too many", func(m *StartRound) { m.History = turns(MaxHistoryTurns+1, "x") }, "history has 201 turns, max 200"},
		{"history size at bound", func(m *StartRound) { m.History = turns(4, strings.Repeat("x", MaxHistoryLen/4)) }, ""},
		{"history too big", func(m *StartRound) { m.History = turns(5, strings.Repeat("x", MaxHistoryLen/4)) }, "history text is 5242880 bytes"},
		{"history bad role", func(m *StartRound) { m.History = []Turn{{Role: "system", Text: "x"}} }, `history[0].role is not "user" or "assistant"`},
		{"history empty role", func(m *StartRound) { m.History = []Turn{{Role: RoleAssistant}, {}} }, "history[1].role"},
		{"reply to", func(m *StartRound) { m.ReplyTo = &PID{Address: "127.0.0.1:4001", ID: "a/b"} }, ""},
		{"reply to no id", func(m *StartRound) { m.ReplyTo = &PID{Address: "127.0.0.1:4001"} }, "reply_to.id is empty"},
		{"reply to no address", func(m *StartRound) { m.ReplyTo = &PID{ID: "a"} }, "reply_to.address is empty"},
		{"ask", func(m *StartRound) { m.OnRequest, m.AskTimeoutMS = PolicyAsk, MaxAskTimeoutMS }, ""},
		{"unknown policy", func(m *StartRound) { m.OnRequest = "maybe" }, "on_request is not auto, decline or ask"},
		{"ask timeout too long", func(m *StartRound) { m.AskTimeoutMS = MaxAskTimeoutMS + 1 }, "ask_timeout_ms is 600001"},
		{"ask timeout negative", func(m *StartRound) { m.AskTimeoutMS = -1 }, "ask_timeout_ms is -1"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			m := validRound()
			tt.edit(&m)
			checkValidate(t, m.Validate(), tt.wantErr, "start_round.v1")
		})
	}
}

// checkValidate compares a Validate error with the wanted substring and
// checks that it wraps ErrInvalid, names the type and leaks no secret.
func checkValidate(t *testing.T, err error, wantErr, name string) {
	t.Helper()
	if wantErr == "" {
		if err != nil {
			t.Fatalf("Validate() = %v, want nil", err)
		}
		return
	}
	if err == nil {
		t.Fatalf("Validate() = nil, want error containing %q", wantErr)
	}
	if !errors.Is(err, ErrInvalid) {
		t.Errorf("Validate() = %v, does not wrap ErrInvalid", err)
	}
	if got := err.Error(); !strings.Contains(got, wantErr) || !strings.HasPrefix(got, name+": ") {
		t.Errorf("Validate() = %q, want %q: … containing %q", got, name, wantErr)
	}
	if strings.Contains(err.Error(), "SECRET") {
		t.Errorf("Validate() = %q leaks a secret", err)
	}
}

func TestOtherValidate(t *testing.T) {
	long := strings.Repeat("x", MaxTextLen+1)
	tests := []struct {
		name    string
		msg     interface{ Validate() error }
		wantErr string
	}{
		{"interrupt_round.v1", InterruptRound{User: "u", Thread: "t"}, ""},
		{"interrupt_round.v1", InterruptRound{User: "u", Thread: "t", RoundID: "r"}, ""},
		{"interrupt_round.v1", InterruptRound{Thread: "t"}, "user is empty"},
		{"interrupt_round.v1", InterruptRound{User: "u"}, "thread is empty"},
		{"interrupt_round.v1", InterruptRound{User: "u", Thread: "t", RoundID: "r\n"}, "round_id has invalid"},
		{"steer_round.v1", SteerRound{User: "u", Thread: "t", Text: "more"}, ""},
		{"steer_round.v1", SteerRound{User: "u", Thread: "t"}, "text is empty"},
		{"steer_round.v1", SteerRound{User: "u", Thread: "t", Text: long}, "text is 1048577 bytes"},
		{"steer_round.v1", SteerRound{User: "u", Thread: "t", Text: "x", ClientMessageID: strings.Repeat("c", MaxIDLen+1)}, "client_message_id is 257"},
		{"start_login.v1", StartLogin{User: "u"}, ""},
		{"start_login.v1", StartLogin{}, "user is empty"},
		{"cancel_login.v1", CancelLogin{User: strings.Repeat("u", 65)}, "user is 65 bytes"},
		{"set_api_key.v1", SetAPIKey{User: "u", APIKey: "sk-proj-abc_DEF-123"}, ""},
		{"set_api_key.v1", SetAPIKey{User: "u"}, "api_key is empty"},
		{"set_api_key.v1", SetAPIKey{APIKey: "sk-SECRET"}, "user is empty"},
		{"set_api_key.v1", SetAPIKey{User: "u", APIKey: "sk-SECRET\n"}, "api_key has a character outside printable ASCII"},
		{"set_api_key.v1", SetAPIKey{User: "u", APIKey: "sk-SECRET\u00e9"}, "api_key has a character outside"},
		{"set_api_key.v1", SetAPIKey{User: "u", APIKey: strings.Repeat("SECRET", 1000)}, "api_key is 6000 bytes, max 4096"},
		{"logout.v1", Logout{User: "u"}, ""},
		{"logout.v1", Logout{}, "user is empty"},
		{"account_request.v1", AccountRequest{User: "u"}, ""},
		{"account_request.v1", AccountRequest{User: "\xff"}, "user has invalid UTF-8"},
		{"models_request.v1", ModelsRequest{User: "u"}, ""},
		{"models_request.v1", ModelsRequest{}, "user is empty"},
		{"rate_limits_request.v1", RateLimitsRequest{User: "u"}, ""},
		{"warm_up.v1", WarmUp{User: "u", Thread: "mesh/t", MCPURL: "https://h/mcp", MCPToken: "t"}, ""},
		{"warm_up.v1", WarmUp{User: "u"}, ""},
		{"warm_up.v1", WarmUp{Thread: "t"}, "warm_up.v1: invalid message: user is empty"},
		{"warm_up.v1", WarmUp{User: "u", MCPToken: "SECRET"}, "mcp_token is set without mcp_url"},
		{"rate_limits_request.v1", RateLimitsRequest{}, "rate_limits_request.v1: invalid message: user is empty"},
		{"attach_round.v1", AttachRound{User: "u", RoundID: "r", AfterSeq: 9}, ""},
		{"attach_round.v1", AttachRound{User: "u"}, "round_id is empty"},
		{"attach_round.v1", AttachRound{User: "u", RoundID: "r", ReplyTo: &PID{Address: "a"}}, "reply_to.id is empty"},
		{"detach_round.v1", DetachRound{User: "u", RoundID: "r"}, ""},
		{"detach_round.v1", DetachRound{User: "u"}, "round_id is empty"},
		{"detach_round.v1", DetachRound{RoundID: "r"}, "user is empty"},
		{"answer_request.v1", AnswerRequest{User: "u", RoundID: "r", RequestID: "q", Decision: DecisionAccept}, ""},
		{"answer_request.v1", AnswerRequest{User: "u", RoundID: "r", RequestID: "q", Answers: map[string][]string{"a": {"b"}}}, ""},
		{"answer_request.v1", AnswerRequest{User: "u", RoundID: "r"}, "request_id is empty"},
		{"answer_request.v1", AnswerRequest{User: "u", RoundID: "r", RequestID: "q", Decision: "yes"}, "decision is not accept"},
		{"answer_request.v1", AnswerRequest{User: "u", RoundID: "r", RequestID: "q", Answers: map[string][]string{"a": {long}}}, "answers text is 1048577 bytes"},
		{"answer_request.v1", AnswerRequest{User: "u", RoundID: "r", RequestID: "q", Answers: map[string][]string{"a\n": nil}}, "answers key has invalid"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			checkValidate(t, tt.msg.Validate(), tt.wantErr, tt.name)
		})
	}
}

// TestCommandsValidate checks that every message a peer sends the daemon
// has a Validate method.
func TestCommandsValidate(t *testing.T) {
	for _, v := range []any{StartRound{}, InterruptRound{}, SteerRound{}, StartLogin{}, CancelLogin{},
		SetAPIKey{}, Logout{}, AccountRequest{}, ModelsRequest{}, RateLimitsRequest{}, AttachRound{}, DetachRound{}, AnswerRequest{}, WarmUp{}} {
		if _, ok := v.(interface{ Validate() error }); !ok {
			t.Errorf("%T has no Validate method", v)
		}
	}
}
