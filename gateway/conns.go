package gateway

import (
	"net"
	"net/http"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
)

// The gateway holds at most Config.MaxConns connections, so that one
// caller holding connections that send nothing cannot use up the daemon's
// descriptors (the remote, /healthz and the listener guard need some
// too). Past the bound a new connection closes the oldest silent one (one
// accepted that has not finished a request's headers, or one idle between
// requests): whoever floods with silent connections loses them to the
// next caller, whatever its address, so a local process cannot lock the
// loopback callers out. A connection serving a request (an event stream
// included) is never closed for it; with every held one busy, the new one
// is refused.

// defaultMaxConns is a quarter of the process's descriptor limit, between
// 64 and 16384.
func defaultMaxConns() int {
	var rl syscall.Rlimit
	n := 4096
	if syscall.Getrlimit(syscall.RLIMIT_NOFILE, &rl) == nil && rl.Cur > 0 {
		n = int(min(rl.Cur/4, 16384))
	}
	return max(n, 64)
}

// connTable is the connections held, each silent or busy.
type connTable struct {
	max int

	mu    sync.Mutex
	conns map[net.Conn]*heldConn

	evicted, refused atomic.Uint64
}

type heldConn struct {
	silent bool
	since  time.Time // when it last became silent
}

func newConnTable(max int) *connTable {
	return &connTable{max: max, conns: make(map[net.Conn]*heldConn)}
}

// admit holds c, closing the oldest silent connection first when the
// table is full; false when every held connection is busy.
func (t *connTable) admit(c net.Conn) bool {
	t.mu.Lock()
	var victim net.Conn
	if len(t.conns) >= t.max {
		var oldest time.Time
		for hc, h := range t.conns {
			if h.silent && (victim == nil || h.since.Before(oldest)) {
				victim, oldest = hc, h.since
			}
		}
		if victim == nil {
			t.mu.Unlock()
			t.refused.Add(1)
			return false
		}
		delete(t.conns, victim)
	}
	t.conns[c] = &heldConn{silent: true, since: time.Now()}
	t.mu.Unlock()
	if victim != nil {
		victim.Close()
		t.evicted.Add(1)
	}
	return true
}

// state follows http.Server.ConnState.
func (t *connTable) state(c net.Conn, s http.ConnState) {
	t.mu.Lock()
	defer t.mu.Unlock()
	h := t.conns[c]
	switch s {
	case http.StateActive:
		if h != nil {
			h.silent = false
		}
	case http.StateIdle:
		if h != nil {
			h.silent, h.since = true, time.Now()
		}
	case http.StateHijacked, http.StateClosed:
		delete(t.conns, c)
	}
}

func (t *connTable) held() int {
	t.mu.Lock()
	defer t.mu.Unlock()
	return len(t.conns)
}

// limitListener admits each accepted connection to the table; a refused
// one is closed unread.
type limitListener struct {
	net.Listener
	t *connTable
}

func (l *limitListener) Accept() (net.Conn, error) {
	for {
		c, err := l.Listener.Accept()
		if err != nil {
			return nil, err
		}
		if l.t.admit(c) {
			return c, nil
		}
		c.Close()
	}
}
