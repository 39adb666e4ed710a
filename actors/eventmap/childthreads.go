package eventmap

import "github.com/meshweaver/supervisor/codexrpc"

// ChildThreads maps the threads of child agents (codex subagents) to
// their parents, so that a child's requests follow its round's policy.
// codex 0.169.0 starts a child without a thread/started of its own; the
// parent's collabAgentToolCall item names it (senderThreadId the parent,
// receiverThreadIds the children). A thread/started with a
// parentThreadId counts too. A plain value owned by the codex actor; at
// most limit children are remembered, oldest forgotten first.
type ChildThreads struct {
	limit  int
	parent map[string]string
	order  []string
}

// Note learns child threads from a notification (spawnedThreads): the
// parent it names, and its children.
func (t *ChildThreads) Note(n *codexrpc.Notification) (parent string, children []string) {
	parent, children = spawnedThreads(n)
	for _, child := range children {
		t.add(child, parent)
	}
	return parent, children
}

func (t *ChildThreads) add(child, parent string) {
	if child == "" || parent == "" || child == parent {
		return
	}
	if t.parent == nil {
		t.parent = make(map[string]string)
	}
	if t.limit <= 0 {
		t.limit = 4096
	}
	if _, ok := t.parent[child]; !ok {
		if len(t.order) >= t.limit {
			delete(t.parent, t.order[0])
			t.order = t.order[1:]
		}
		t.order = append(t.order, child)
	}
	t.parent[child] = parent
}

// Root is the thread at the top of threadID's parents (threadID itself
// when it is no known child).
func (t *ChildThreads) Root(threadID string) string {
	for range 16 { // a child's child's …; bounded against a cycle
		p, ok := t.parent[threadID]
		if !ok {
			break
		}
		threadID = p
	}
	return threadID
}
