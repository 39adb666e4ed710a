package demomodel

import (
	"strings"
)

// DemoResponder is the default Responder: a deterministic demo model that
// streams a short, friendly reply word by word, echoing the last thing the
// user said. It answers a compaction request with a one-line summary and a
// tool result with a short acknowledgement, so any conversation ends. For a
// typing effect, wrap it: DemoResponder(req).WithDelay(40*time.Millisecond).
func DemoResponder(req *Request) Script {
	return Text(Words(DemoReply(req))...)
}

// DemoReply is the text DemoResponder streams for req.
func DemoReply(req *Request) string {
	if req.IsCompaction() {
		return "Summary (demo model): the user chatted with the demo model, which echoed each message back."
	}
	switch req.LastInputType() {
	case "function_call_output", "custom_tool_call_output":
		return "The tool finished. (I am the demo model, so that is all I can say about it.)"
	}
	said := strings.Join(strings.Fields(req.LastUserText()), " ")
	if said == "" {
		return "Hello! I am the demo model. Send me a message and I will echo it back, one word at a time."
	}
	const maxWords = 60
	if words := strings.Fields(said); len(words) > maxWords {
		said = strings.Join(words[:maxWords], " ") + " …"
	}
	return "Hello! I am the demo model, a stand-in for a real AI, so I can only echo you. You said: “" + said + "”"
}

// ToolThenText is a Responder for one tool round trip: it answers with the
// tool call item, and once a request carries that call's output it answers
// with a message streamed as deltas.
func ToolThenText(call Item, deltas ...string) Responder {
	return func(req *Request) Script {
		if _, ok := req.ToolOutput(call.CallID()); ok {
			return Text(deltas...)
		}
		return Respond(call)
	}
}
