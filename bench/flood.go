package bench

import (
	"bufio"
	"bytes"
	"crypto/rand"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"strconv"
	"time"

	"github.com/meshweaver/supervisor/codexproto"
)

// floodDelta is the text of every delta: the turn's message is it
// repeated.
const floodDelta = "w "

// ServeFlood is the app-server of the events row's daemon, on r and w (one
// JSON object per line, as `codex app-server` speaks). It answers the few
// methods a round calls (initialize, thread/start, thread/resume,
// thread/name/set, thread/unsubscribe, thread/loaded/list) in the shapes of
// the real CLI, and turn/start with a turn whose agent message comes as
// `deltas` one-word deltas, as fast as w takes them; any other method gets
// the CLI's -32600 error. It returns nil when r ends, as the CLI exits when
// its stdin closes.
//
// The row measures the daemon's delta path, which carries 400,000 deltas a
// second and more. The real CLI forwards what the model streams at about
// 6,500 a second (20,000 deltas from the demo model, which alone streams
// 55,000 a second, in about 3 s): behind it the row would measure codex.
func ServeFlood(r io.Reader, w io.Writer, deltas int) error {
	f := &flood{w: bufio.NewWriterSize(w, 64<<10), deltas: deltas, loaded: map[string]bool{}}
	br := bufio.NewReaderSize(r, 64<<10)
	for {
		line, err := br.ReadBytes('\n')
		if len(bytes.TrimSpace(line)) > 0 {
			f.handle(line)
			// One write per line handled: a turn's deltas leave together.
			if err := f.w.Flush(); err != nil {
				return fmt.Errorf("flood app-server: writing: %w", err)
			}
		}
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return fmt.Errorf("flood app-server: reading: %w", err)
		}
	}
}

// flood is one ServeFlood's state.
type flood struct {
	w      *bufio.Writer
	deltas int
	loaded map[string]bool // thread ids
}

// floodMessage is a client line: a request, or a notification (no id).
type floodMessage struct {
	ID     json.RawMessage `json:"id"`
	Method string          `json:"method"`
	Params json.RawMessage `json:"params"`
}

func (f *flood) handle(line []byte) {
	var m floodMessage
	if err := json.Unmarshal(line, &m); err != nil || len(m.ID) == 0 || m.Method == "" {
		return // a notification (initialized), an answer, or not JSON: nothing to say
	}
	switch m.Method {
	case codexproto.MethodInitialize:
		var p codexproto.InitializeParams
		_ = json.Unmarshal(m.Params, &p)
		f.reply(m.ID, codexproto.InitializeResult{
			UserAgent:      fmt.Sprintf("%s/%s (bench flood app-server)", p.ClientInfo.Name, codexproto.PinnedCLIVersion),
			CodexHome:      os.Getenv("CODEX_HOME"), // the daemon's; nothing is written there
			PlatformFamily: "unix", PlatformOS: "linux",
		})
	case codexproto.MethodThreadStart, codexproto.MethodThreadResume:
		var p codexproto.ThreadResumeParams // thread/start's params are a subset
		_ = json.Unmarshal(m.Params, &p)
		id := p.ThreadID
		if id == "" {
			id = newUUID()
		}
		f.loaded[id] = true
		th := codexproto.Thread{ID: id, Cwd: p.Cwd}
		f.reply(m.ID, codexproto.ThreadResult{Thread: th, Model: "flood"})
		if m.Method == codexproto.MethodThreadStart {
			f.notify("thread/started", map[string]any{"thread": th})
		}
	case codexproto.MethodThreadNameSet:
		f.reply(m.ID, struct{}{})
	case codexproto.MethodThreadUnsub:
		var p struct {
			ThreadID string `json:"threadId"`
		}
		_ = json.Unmarshal(m.Params, &p)
		delete(f.loaded, p.ThreadID)
		f.reply(m.ID, map[string]any{"status": "unsubscribed"})
	case codexproto.MethodThreadLoadedList:
		ids := []string{}
		for id := range f.loaded {
			ids = append(ids, id)
		}
		f.reply(m.ID, map[string]any{"data": ids, "nextCursor": nil})
	case codexproto.MethodTurnStart:
		var p codexproto.TurnStartParams
		_ = json.Unmarshal(m.Params, &p)
		if !f.loaded[p.ThreadID] {
			f.fail(m.ID, "thread not found: "+p.ThreadID)
			return
		}
		f.turn(m.ID, p.ThreadID)
	default:
		f.fail(m.ID, "bench flood app-server: method `"+m.Method+"` is not implemented")
	}
}

// turn answers turn/start and streams the whole turn: started, one agent
// message of f.deltas deltas, completed.
func (f *flood) turn(id json.RawMessage, thread string) {
	turnID, itemID := newUUID(), "msg-1"
	turn := func(status string) map[string]any {
		return map[string]any{"id": turnID, "items": []any{}, "status": status, "error": nil}
	}
	item := func(text string) map[string]any {
		return map[string]any{"type": "agentMessage", "id": itemID, "text": text, "phase": nil}
	}
	f.reply(id, map[string]any{"turn": turn(codexproto.TurnInProgress)})
	f.notify(codexproto.NoteTurnStarted, map[string]any{"threadId": thread, "turn": turn(codexproto.TurnInProgress)})
	f.notify(codexproto.NoteItemStarted, map[string]any{"threadId": thread, "turnId": turnID, "item": item("")})
	// Every delta line is the same but for its time: written without
	// encoding/json when the thread id needs no escaping (ours are hex and
	// dashes, the word is plain ASCII).
	head := `{"method":"` + codexproto.NoteAgentMessageDelta + `","params":{"threadId":"` + thread +
		`","turnId":"` + turnID + `","itemId":"` + itemID + `","delta":"` + floodDelta + `"},"emittedAtMs":`
	if !plain(thread) {
		head = ""
	}
	var num [20]byte
	for range f.deltas {
		ts := time.Now().UnixMilli()
		if head == "" {
			f.notify(codexproto.NoteAgentMessageDelta, map[string]any{"threadId": thread, "turnId": turnID, "itemId": itemID, "delta": floodDelta})
			continue
		}
		f.w.WriteString(head)
		f.w.Write(strconv.AppendInt(num[:0], ts, 10))
		f.w.WriteString("}\n")
	}
	text := bytes.Repeat([]byte(floodDelta), f.deltas)
	f.notify(codexproto.NoteItemCompleted, map[string]any{"threadId": thread, "turnId": turnID, "item": item(string(text))})
	f.notify(codexproto.NoteTurnCompleted, map[string]any{"threadId": thread, "turn": turn(codexproto.TurnCompleted)})
}

// plain reports whether s needs no JSON escaping between quotes (a resumed
// thread's id is the client's).
func plain(s string) bool {
	for i := 0; i < len(s); i++ {
		if c := s[i]; c < 0x20 || c >= 0x7f || c == '"' || c == '\\' {
			return false
		}
	}
	return true
}

func (f *flood) reply(id json.RawMessage, result any) {
	f.line(map[string]any{"id": id, "result": result})
}

// fail answers with the error the real server gives nearly everything.
func (f *flood) fail(id json.RawMessage, message string) {
	f.line(map[string]any{"id": id, "error": map[string]any{"code": -32600, "message": message}})
}

func (f *flood) notify(method string, params any) {
	f.line(map[string]any{"method": method, "params": params, "emittedAtMs": time.Now().UnixMilli()})
}

func (f *flood) line(v any) {
	b, err := json.Marshal(v)
	if err != nil {
		panic(fmt.Sprintf("flood app-server: encoding %T: %v", v, err)) // plain data: a bug
	}
	f.w.Write(b)
	f.w.WriteByte('\n')
}

// newUUID is a random (version 4) UUID, the shape of the CLI's ids.
func newUUID() string {
	var b [16]byte
	_, _ = rand.Read(b[:])
	b[6] = b[6]&0x0f | 0x40
	b[8] = b[8]&0x3f | 0x80
	return fmt.Sprintf("%x-%x-%x-%x-%x", b[0:4], b[4:6], b[6:8], b[8:10], b[10:16])
}
