package messages

import "slices"

// CodexRequest calls one of the user's app-server's methods that the
// daemon passes to authorized callers as they are (the CLI's MCP status
// and reload, its configuration and requirements): Method is one of
// CodexReads (authorized as account) or CodexControls (as control); Params
// a JSON object as text ("" for none). The reply is a [CodexResponse];
// use Engine.Request.
type CodexRequest struct {
	User   string `msgpack:"user,omitempty"`
	Method string `msgpack:"method,omitempty"`
	Params string `msgpack:"params,omitempty"`
}

// CodexResponse answers a [CodexRequest]: Result is the CLI's result as
// JSON text, with every secret the daemon knows of the user's (the API
// key, the rounds' MCP tokens) redacted; Error says why there is none.
type CodexResponse struct {
	User   string `msgpack:"user,omitempty"`
	Method string `msgpack:"method,omitempty"`
	Result string `msgpack:"result,omitempty"`
	Error  string `msgpack:"error,omitempty"`
}

// The methods a CodexRequest may call: reads, and the one that changes
// something (the MCP servers reloaded from the configuration).
var (
	CodexReads    = []string{"mcpServerStatus/list", "config/read", "configRequirements/read"}
	CodexControls = []string{"config/mcpServer/reload"}
)

// MaxCodexResult bounds a CodexResponse's result.
const MaxCodexResult = 1 << 20

// Validate checks a CodexRequest.
func (m CodexRequest) Validate() error {
	c := checker{name: "codex_request.v1"}
	c.user(m.User)
	if !slices.Contains(CodexReads, m.Method) && !slices.Contains(CodexControls, m.Method) {
		c.failf("method %q is not one the daemon passes on (%v, %v)", m.Method, CodexReads, CodexControls)
	}
	switch {
	case len(m.Params) > MaxToolSchemaLen:
		c.failf("params is %d bytes, max %d", len(m.Params), MaxToolSchemaLen)
	case m.Params != "" && !isJSONObject(m.Params):
		c.failf("params is not a JSON object")
	}
	return c.err
}
