package messages

import "regexp"

// Dynamic tools: a round declares tools its model may call, each served
// by a mesh actor (Server). A call becomes a [ToolCallRequest] to that
// actor; its [ToolCallResult] (authorized as the tools kind for the user)
// answers the model. A call not answered within the deadline, or of a
// tool no actor of the round serves, fails with a tool error the model
// reads.

// DynamicTool is a tool a round offers its model.
type DynamicTool struct {
	// Name is the tool's name as the model calls it: letters, digits, _ and
	// -, at most 64.
	Name        string `msgpack:"name,omitempty"`
	Description string `msgpack:"description,omitempty"`
	// InputSchema is the JSON schema of its arguments, a JSON object as
	// text.
	InputSchema string `msgpack:"input_schema,omitempty"`
	// Server is the mesh actor that serves its calls.
	Server *PID `msgpack:"server,omitempty"`
}

// Bounds of a round's tools.
const (
	MaxTools              = 16
	MaxToolDescriptionLen = 4 << 10
	MaxToolSchemaLen      = 64 << 10
	MaxToolResultLen      = 1 << 20
)

var toolName = regexp.MustCompile(`^[A-Za-z0-9_-]{1,64}$`)

// ToolCallRequest asks a round's tool server to run a call (daemon →
// tool server). Answer it with a ToolCallResult to the daemon (the
// sender) naming User, RoundID and RequestID, before DeadlineUnixMilli.
type ToolCallRequest struct {
	User      string `msgpack:"user,omitempty"`
	RoundID   string `msgpack:"round_id,omitempty"`
	RequestID string `msgpack:"request_id,omitempty"`
	Tool      string `msgpack:"tool,omitempty"`
	// Arguments are the model's arguments, JSON text.
	Arguments         string `msgpack:"arguments,omitempty"`
	DeadlineUnixMilli int64  `msgpack:"deadline_unix_milli,omitempty"`
}

// ToolCallResult answers a ToolCallRequest (tool server → daemon); its
// sender must be granted the tools kind for User. Text is what the model
// reads; Success false makes it a tool error.
type ToolCallResult struct {
	User      string `msgpack:"user,omitempty"`
	RoundID   string `msgpack:"round_id,omitempty"`
	RequestID string `msgpack:"request_id,omitempty"`
	Success   bool   `msgpack:"success,omitempty"`
	Text      string `msgpack:"text,omitempty"`
}

// validateTools checks a round's tools.
func validateTools(c *checker, tools []DynamicTool) {
	if len(tools) > MaxTools {
		c.failf("tools has %d tools, max %d", len(tools), MaxTools)
		return
	}
	seen := map[string]bool{}
	for i, t := range tools {
		if !toolName.MatchString(t.Name) {
			c.failf("tools[%d].name is not 1-64 letters, digits, _ or -", i)
		} else if seen[t.Name] {
			c.failf("tools[%d].name %q is declared twice", i, t.Name)
		}
		seen[t.Name] = true
		c.text("tools.description", t.Description, MaxToolDescriptionLen, false)
		switch {
		case len(t.InputSchema) > MaxToolSchemaLen:
			c.failf("tools[%d].input_schema is %d bytes, max %d", i, len(t.InputSchema), MaxToolSchemaLen)
		case !isJSONObject(t.InputSchema):
			c.failf("tools[%d].input_schema is not a JSON object", i)
		}
		if t.Server == nil || t.Server.Address == "" || t.Server.ID == "" {
			c.failf("tools[%d].server names no actor", i)
		}
	}
}

// Validate checks a ToolCallResult.
func (m ToolCallResult) Validate() error {
	c := checker{name: "tool_call_result.v1"}
	c.user(m.User)
	c.id("round_id", m.RoundID, MaxIDLen, true)
	c.id("request_id", m.RequestID, MaxIDLen, true)
	c.text("text", m.Text, MaxToolResultLen, false)
	return c.err
}
