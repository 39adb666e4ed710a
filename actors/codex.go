package actors

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/anthdm/hollywood/actor"
	"github.com/meshweaver/supervisor/codexrpc"
	"github.com/meshweaver/supervisor/store"
)

// maxEarlyNotes bounds the notifications kept for threads no round has
// subscribed to yet (those that race the subscription, like an MCP server's
// startup status right after thread/start).
const maxEarlyNotes = 256

// codexActor owns one user's `codex app-server` process and its connection.
// It starts the process on first need, hands the ready client to rounds,
// routes notifications by thread id to the subscribed round, and answers
// server requests in-line. A death fails every subscribed round; the next
// acquire starts a fresh process.
type codexActor struct {
	cfg  *Config
	user string
	home string
	log  *slog.Logger

	engine *actor.Engine
	self   *actor.PID

	gen     uint64
	proc    *codexrpc.Process
	client  *codexrpc.Client
	waiters []chan clientReady // acquireClient requesters waiting for the start
	subs    map[string]subscribe
	early   map[string][]*codexrpc.Notification
	nEarly  int
	pinned  *actor.PID // the login actor during a session
	creds   *store.Credentials
	redact  *codexrpc.Redactor

	// Goroutines: start attempts and exit watchers. Processes a start
	// produced are in live until stopped, so Stopped can end even those
	// whose start message never arrived.
	wg   sync.WaitGroup
	mu   sync.Mutex
	live map[*codexrpc.Process]struct{}
	down bool
}

func newCodexActor(cfg *Config, user, home string, creds *store.Credentials) actor.Producer {
	return func() actor.Receiver {
		return &codexActor{
			cfg: cfg, user: user, home: home, creds: creds, redact: &codexrpc.Redactor{},
			log:   cfg.Logger.With("user", userTag(user), "actor", "codex"),
			subs:  make(map[string]subscribe),
			early: make(map[string][]*codexrpc.Notification),
			live:  make(map[*codexrpc.Process]struct{}),
		}
	}
}

func (a *codexActor) Receive(c *actor.Context) {
	switch m := c.Message().(type) {
	case actor.Started:
		a.engine, a.self = c.Engine(), c.PID()
	case actor.Stopped:
		a.shutdown()
	case acquireClient:
		a.acquire(m)
	case codexStarted:
		a.started(m)
	case codexStartFailed:
		if m.gen != a.gen {
			return
		}
		a.log.Warn("codex app-server failed to start", "err", m.err)
		a.answerWaiters(clientReady{err: m.err})
	case codexExited:
		a.exited(m)
	case codexNote:
		if m.gen == a.gen {
			a.route(m.note)
		}
	case codexServerRequest:
		m.reply <- a.answer(m)
	case subscribe:
		a.subs[m.threadID] = m
		for _, n := range a.early[m.threadID] {
			c.Send(m.round, roundNote{note: n})
		}
		a.nEarly -= len(a.early[m.threadID])
		delete(a.early, m.threadID)
	case unpinClient:
		if a.pinned != nil && a.pinned.Equals(m.pin) {
			a.pinned = nil
		}
	case applyAPIKey:
		if a.client != nil {
			client := a.client
			a.wg.Add(1)
			go func() {
				defer a.wg.Done()
				a.writeAPIKey(client, true)
			}()
		}
	case unsubscribe:
		if s, ok := a.subs[m.threadID]; ok && s.round.Equals(m.round) {
			delete(a.subs, m.threadID)
		}
	}
}

func (a *codexActor) acquire(m acquireClient) {
	if m.pin != nil {
		a.pinned = m.pin
	}
	if a.client != nil {
		m.reply <- clientReady{client: a.client, gen: a.gen}
		return
	}
	a.waiters = append(a.waiters, m.reply)
	if len(a.waiters) == 1 {
		a.start()
	}
}

func (a *codexActor) answerWaiters(r clientReady) {
	for _, w := range a.waiters {
		w <- r
	}
	a.waiters = nil
}

// start launches a process on a goroutine: exec and initialize take tens of
// milliseconds, and Receive never blocks.
func (a *codexActor) start() {
	a.gen++
	gen := a.gen
	engine, self := a.engine, a.self
	cfg := codexrpc.Config{
		Binary:    a.cfg.CodexBin,
		Args:      a.cfg.CodexArgs,
		Home:      a.home,
		Dir:       a.cfg.Workspace,
		Overrides: a.cfg.Overrides,
		Env:       codexrpc.AllowedEnv(environ(), a.cfg.CodexEnv),
		Logger:    a.log,
		Redactor:  a.redact,
		StopGrace: a.cfg.StopGrace,
		Conn: codexrpc.Options{
			Logger: a.log,
			OnNotification: func(n *codexrpc.Notification) {
				engine.Send(self, codexNote{gen: gen, note: n})
			},
			OnRequest: func(ctx context.Context, r *codexrpc.Request) (any, error) {
				reply := make(chan serverAnswer, 1)
				engine.Send(self, codexServerRequest{gen: gen, req: r, reply: reply})
				t := time.NewTimer(10 * time.Second)
				defer t.Stop()
				select {
				case ans := <-reply:
					return ans.result, ans.err
				case <-ctx.Done():
				case <-t.C:
				}
				// Never leave the CLI waiting: decline what could not be decided.
				return declineAnswer(r.Method)
			},
		},
	}
	a.wg.Add(1)
	go func() {
		defer a.wg.Done()
		p, err := codexrpc.Start(cfg)
		if err != nil {
			engine.Send(self, codexStartFailed{gen: gen, err: err})
			return
		}
		a.mu.Lock()
		if a.down {
			a.mu.Unlock()
			a.stopProc(p)
			return
		}
		a.live[p] = struct{}{}
		a.wg.Add(1)
		a.mu.Unlock()
		go a.watch(gen, p)

		ctx, cancel := context.WithTimeout(context.Background(), a.cfg.CallTimeout)
		defer cancel()
		client := codexrpc.NewClient(p.Conn())
		if _, err := client.Initialize(ctx, codexrpc.ClientInfo{Name: a.cfg.ClientName, Version: Version}); err != nil {
			a.stopProc(p)
			engine.Send(self, codexStartFailed{gen: gen, err: fmt.Errorf("initializing codex: %w", err)})
			return
		}
		a.writeAPIKey(client, false)
		engine.Send(self, codexStarted{gen: gen, proc: p, client: client})
	}()
}

// watch reports the process's end once its output is drained, so the error
// carries the exit status and the stderr tail.
func (a *codexActor) watch(gen uint64, p *codexrpc.Process) {
	defer a.wg.Done()
	<-p.Exited()
	<-p.Conn().Done()
	a.mu.Lock()
	delete(a.live, p)
	a.mu.Unlock()
	a.engine.Send(a.self, codexExited{gen: gen, err: p.Conn().Err()})
}

func (a *codexActor) started(m codexStarted) {
	if m.gen != a.gen {
		a.stopProc(m.proc)
		return
	}
	a.proc, a.client = m.proc, m.client
	a.log.Info("codex app-server ready", "pid", m.proc.PID(), "version", m.client.Version.String())
	a.answerWaiters(clientReady{client: m.client, gen: m.gen})
}

func (a *codexActor) exited(m codexExited) {
	if m.gen != a.gen || a.proc == nil && a.client == nil && len(a.waiters) == 0 {
		return
	}
	err := m.err
	if err == nil {
		err = errors.New("codex app-server ended")
	}
	if !errors.Is(err, codexrpc.ErrClosed) {
		a.log.Warn("codex app-server died", "err", err)
	}
	for _, s := range a.subs {
		a.engine.Send(s.round, codexLost{err: err})
	}
	if a.pinned != nil {
		a.engine.Send(a.pinned, codexLost{err: err})
		a.pinned = nil
	}
	a.subs = make(map[string]subscribe)
	a.early = make(map[string][]*codexrpc.Notification)
	a.nEarly = 0
	a.proc, a.client = nil, nil
	a.answerWaiters(clientReady{err: err})
}

// route hands a notification to the round subscribed to its thread.
// Notifications of no thread, or of a thread nobody runs, are kept a little
// while in case the subscription is on its way, then dropped.
func (a *codexActor) route(n *codexrpc.Notification) {
	var head struct {
		ThreadID string `json:"threadId"`
	}
	if json.Unmarshal(n.Params, &head) != nil {
		return
	}
	if head.ThreadID == "" {
		if strings.HasPrefix(n.Method, "account/") && a.pinned != nil {
			a.engine.Send(a.pinned, accountNote{note: n})
		}
		return
	}
	if s, ok := a.subs[head.ThreadID]; ok {
		a.engine.Send(s.round, roundNote{note: n})
		return
	}
	if a.nEarly >= maxEarlyNotes {
		a.early = make(map[string][]*codexrpc.Notification)
		a.nEarly = 0
	}
	a.early[head.ThreadID] = append(a.early[head.ThreadID], n)
	a.nEarly++
}

// answer decides a server request in-line: nothing ever waits on a human.
func (a *codexActor) answer(m codexServerRequest) serverAnswer {
	var head struct {
		ThreadID string `json:"threadId"`
	}
	_ = json.Unmarshal(m.req.Params, &head)
	s, ok := a.subs[head.ThreadID]
	res, question, err := answerServerRequest(m.req, ok && s.autoApprove)
	if question != "" && ok {
		a.engine.Send(s.round, questionAsked{text: question})
	}
	return serverAnswer{result: res, err: err}
}

func (a *codexActor) stopProc(p *codexrpc.Process) {
	ctx, cancel := context.WithTimeout(context.Background(), 4*a.cfg.StopGrace)
	defer cancel()
	if err := p.Stop(ctx); err != nil {
		a.log.Warn("stopping codex app-server", "pid", p.PID(), "err", err)
	}
}

// writeAPIKey writes the user's stored API key into the home through the
// app-server, when there is one and (unless always) the home holds no
// login yet: on a first start, and whenever the home was recreated. It runs
// on a goroutine of the actor's.
func (a *codexActor) writeAPIKey(client *codexrpc.Client, always bool) {
	key, ok, err := a.creds.APIKey()
	if err != nil {
		a.log.Error("reading the stored API key", "err", err)
		return
	}
	if !ok {
		return
	}
	if !always {
		if _, err := os.Stat(filepath.Join(a.home, "auth.json")); err == nil {
			return
		}
	}
	a.redact.Add(key)
	ctx, cancel := context.WithTimeout(context.Background(), a.cfg.CallTimeout)
	defer cancel()
	if _, err := client.LoginStart(ctx, codexrpc.LoginStartParams{Type: codexrpc.LoginAPIKey, APIKey: key}); err != nil {
		a.log.Error("writing the API key into the home", "err", a.redact.Redact(err.Error()))
		return
	}
	a.log.Info("API key written into the home")
}

// shutdown is the destructor: it stops every process this actor started
// and joins every goroutine it owns.
func (a *codexActor) shutdown() {
	a.mu.Lock()
	a.down = true
	a.mu.Unlock()
	if a.proc != nil {
		a.stopProc(a.proc)
	}
	a.mu.Lock()
	var rest []*codexrpc.Process
	for p := range a.live {
		rest = append(rest, p)
	}
	a.mu.Unlock()
	for _, p := range rest {
		a.stopProc(p)
	}
	// A start still in flight sees down and stops what it made.
	a.wg.Wait()
	a.answerWaiters(clientReady{err: codexrpc.ErrClosed})
	a.proc, a.client = nil, nil
}
