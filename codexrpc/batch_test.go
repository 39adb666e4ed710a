package codexrpc

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"
)

// batches records what OnNotifications was given, and what a call's
// answer saw before it.
type batches struct {
	mu    sync.Mutex
	sizes []int
	notes []string
	got   chan struct{}
}

func (b *batches) on(ns []*Notification) {
	b.mu.Lock()
	b.sizes = append(b.sizes, len(ns))
	for _, n := range ns {
		var p struct{ N string }
		_ = json.Unmarshal(n.Params, &p)
		b.notes = append(b.notes, p.N)
	}
	b.mu.Unlock()
	b.got <- struct{}{}
}

func (b *batches) seen() (sizes []int, notes []string) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return append([]int(nil), b.sizes...), append([]string(nil), b.notes...)
}

func noteLines(from, n int) string {
	var sb strings.Builder
	for i := from; i < from+n; i++ {
		fmt.Fprintf(&sb, `{"method":"item/agentMessage/delta","params":{"n":"%d"}}`+"\n", i)
	}
	return sb.String()
}

func waitBatches(t *testing.T, b *batches, total int) {
	t.Helper()
	deadline := time.After(10 * time.Second)
	for {
		if _, notes := b.seen(); len(notes) >= total {
			return
		}
		select {
		case <-b.got:
		case <-deadline:
			_, notes := b.seen()
			t.Fatalf("%d notifications handed off, want %d", len(notes), total)
		}
	}
}

// Lines read together go in batches of at most MaxNotificationBatch, in
// wire order; a lone line is handed off without waiting for another.
func TestNotificationBatches(t *testing.T) {
	b := &batches{got: make(chan struct{}, 1000)}
	_, p := newPair(t, Options{OnNotifications: b.on})
	p.send(strings.TrimSuffix(noteLines(0, 200), "\n")) // one write: one read
	waitBatches(t, b, 200)
	sizes, notes := b.seen()
	for i, n := range notes {
		if n != fmt.Sprint(i) {
			t.Fatalf("notification %d is %q: out of order", i, n)
		}
	}
	if len(sizes) >= 200 {
		t.Errorf("200 lines read at once came in %d hand-offs: not batched", len(sizes))
	}
	for _, s := range sizes {
		if s > MaxNotificationBatch {
			t.Errorf("a batch of %d, over %d", s, MaxNotificationBatch)
		}
	}

	p.send(`{"method":"turn/started","params":{"n":"200"}}`) // and nothing after it
	waitBatches(t, b, 201)
}

// An answer that follows notifications on the wire reaches its caller
// after they were handed off.
func TestNotificationBatchBeforeAnswer(t *testing.T) {
	b := &batches{got: make(chan struct{}, 1000)}
	c, p := newPair(t, Options{OnNotifications: b.on})
	ch := goCall(c, context.Background(), "thread/start", nil)
	req := p.recv()
	p.send(noteLines(0, 10) + fmt.Sprintf(`{"id":%v,"result":{}}`, req["id"]))
	select {
	case out := <-ch:
		if out.err != nil {
			t.Fatal(out.err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("no answer")
	}
	if _, notes := b.seen(); len(notes) != 10 {
		t.Errorf("the answer came with %d of the 10 notifications before it handed off", len(notes))
	}
}
