package eventmap

import (
	"encoding/json"
	"testing"

	"github.com/meshweaver/supervisor/codexrpc"
)

func TestChildThreads(t *testing.T) {
	var ct ChildThreads
	ct.limit = 2
	note := func(id, parent string) {
		p := `null`
		if parent != "" {
			p = `"` + parent + `"`
		}
		ct.Note(&codexrpc.Notification{Method: "thread/started", Params: json.RawMessage(`{"thread":{"id":"` + id + `","parentThreadId":` + p + `}}`)})
	}
	note("root", "")
	note("kid", "root")
	note("grandkid", "kid")
	if got := ct.Root("grandkid"); got != "root" {
		t.Errorf("root(grandkid) = %q, want root", got)
	}
	if got := ct.Root("stranger"); got != "stranger" {
		t.Errorf("root(stranger) = %q", got)
	}
	note("a", "x")
	if got := ct.Root("kid"); got != "kid" {
		t.Errorf("the oldest child was not forgotten past the limit: root(kid) = %q", got)
	}
	ct.Note(&codexrpc.Notification{Method: "item/started", Params: json.RawMessage(`{"thread":{"id":"b","parentThreadId":"a"}}`)})
	if got := ct.Root("b"); got != "b" {
		t.Errorf("a notification other than thread/started made a child: %q", got)
	}
	// codex 0.169.0: the parent's collab tool call names the children.
	ct = ChildThreads{}
	ct.Note(&codexrpc.Notification{Method: "item/completed", Params: json.RawMessage(
		`{"item":{"type":"collabAgentToolCall","tool":"spawnAgent","senderThreadId":"p","receiverThreadIds":["c1","c2"]},"threadId":"p"}`)})
	ct.Note(&codexrpc.Notification{Method: "item/completed", Params: json.RawMessage(
		`{"item":{"type":"commandExecution","senderThreadId":"p","receiverThreadIds":["x"]},"threadId":"p"}`)})
	if ct.Root("c1") != "p" || ct.Root("c2") != "p" || ct.Root("x") != "x" {
		t.Errorf("from a collab item: c1→%q c2→%q x→%q; want p, p, x", ct.Root("c1"), ct.Root("c2"), ct.Root("x"))
	}
}
