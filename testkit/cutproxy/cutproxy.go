// Package cutproxy is a TCP proxy a test puts between a process and a
// server (a daemon and an etcd endpoint) to make network partitions:
//
//   - Cut closes the listener and every live connection: the process sees
//     resets, and refused connections until Heal.
//   - Blackhole stops forwarding without closing anything: bytes already
//     sent, new connections and closes are held, as a link that drops
//     every packet holds them in TCP's retransmissions; the process sees
//     only silence (its timeouts and keepalives must notice).
//   - Heal forwards again (a blackholed connection's held bytes flow on).
//
// A Proxy is one listener on a fixed loopback address, so the process is
// given that address once. Close ends every goroutine it started.
package cutproxy

import (
	"errors"
	"fmt"
	"io"
	"net"
	"sync"
	"testing"
)

// Proxy forwards connections on Addr to a target address.
type Proxy struct {
	addr, target string

	mu     sync.Mutex
	ln     net.Listener          // nil while cut
	open   chan struct{}         // closed while forwarding; a fresh one while blackholed
	conns  map[net.Conn]struct{} // both ends of every live pair
	closed bool
	wg     sync.WaitGroup
	done   chan struct{} // closed by Close
}

// Start listens on a free loopback port and forwards to target. Cleanup
// closes it.
func Start(t testing.TB, target string) *Proxy {
	t.Helper()
	p, err := New(target)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(p.Close)
	return p
}

// New listens on a free loopback port and forwards to target.
func New(target string) (*Proxy, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, fmt.Errorf("cutproxy: listening: %w", err)
	}
	open := make(chan struct{})
	close(open)
	p := &Proxy{addr: ln.Addr().String(), target: target, open: open,
		conns: map[net.Conn]struct{}{}, done: make(chan struct{})}
	p.serve(ln)
	return p, nil
}

// Addr is the proxy's address (host:port), the same across Cut and Heal.
func (p *Proxy) Addr() string { return p.addr }

// serve starts accepting on ln. Called with ln new or under mu.
func (p *Proxy) serve(ln net.Listener) {
	p.ln = ln
	p.wg.Add(1)
	go func() {
		defer p.wg.Done()
		for {
			c, err := ln.Accept()
			if err != nil {
				return // closed by Cut or Close
			}
			p.mu.Lock()
			if p.closed || p.ln != ln {
				p.mu.Unlock()
				c.Close()
				continue
			}
			p.conns[c] = struct{}{}
			p.wg.Add(1)
			p.mu.Unlock()
			go p.pair(c)
		}
	}()
}

// pair forwards one accepted connection: it dials the target only once
// forwarding is open (a blackholed connect is held, not refused).
func (p *Proxy) pair(c net.Conn) {
	defer p.wg.Done()
	defer p.forget(c)
	if !p.wait() {
		return
	}
	u, err := net.Dial("tcp", p.target)
	if err != nil {
		return
	}
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		u.Close()
		return
	}
	p.conns[u] = struct{}{}
	p.mu.Unlock()
	defer p.forget(u)
	var wg sync.WaitGroup
	wg.Go(func() { p.copy(u, c) })
	p.copy(c, u)
	wg.Wait()
}

// copy moves bytes from src to dst, holding them while blackholed; an end
// of src (after any held bytes) ends both ends.
func (p *Proxy) copy(dst, src net.Conn) {
	defer dst.Close()
	defer src.Close()
	buf := make([]byte, 32<<10)
	for {
		n, err := src.Read(buf)
		if !p.wait() {
			return
		}
		if n > 0 {
			if _, werr := dst.Write(buf[:n]); werr != nil {
				return
			}
		}
		if err != nil {
			if !errors.Is(err, io.EOF) {
				return
			}
			if tc, ok := dst.(*net.TCPConn); ok {
				_ = tc.CloseWrite()
			}
			return
		}
	}
}

// wait blocks while the proxy is blackholed; false once it is closed. (A
// cut connection's goroutines find their ends closed after it.)
func (p *Proxy) wait() bool {
	p.mu.Lock()
	open := p.open
	p.mu.Unlock()
	select {
	case <-open:
		return true
	case <-p.done:
		return false
	}
}

func (p *Proxy) forget(c net.Conn) {
	c.Close()
	p.mu.Lock()
	delete(p.conns, c)
	p.mu.Unlock()
}

// Cut closes the listener and every live connection: new connections are
// refused until Heal.
func (p *Proxy) Cut() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.ln != nil {
		p.ln.Close()
		p.ln = nil
	}
	for c := range p.conns {
		c.Close()
	}
}

// Blackhole stops forwarding: nothing is closed, nothing passes.
func (p *Proxy) Blackhole() {
	p.mu.Lock()
	defer p.mu.Unlock()
	select {
	case <-p.open:
		p.open = make(chan struct{})
	default:
	}
}

// Heal forwards again: after a Cut it listens on Addr again; after a
// Blackhole the held bytes and connections flow on.
func (p *Proxy) Heal() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return errors.New("cutproxy: closed")
	}
	select {
	case <-p.open:
	default:
		close(p.open)
	}
	if p.ln == nil {
		ln, err := net.Listen("tcp", p.addr)
		if err != nil {
			return fmt.Errorf("cutproxy: listening on %s again: %w", p.addr, err)
		}
		p.serve(ln)
	}
	return nil
}

// Close ends the proxy, its connections and its goroutines.
func (p *Proxy) Close() {
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		return
	}
	p.closed = true
	close(p.done)
	if p.ln != nil {
		p.ln.Close()
	}
	for c := range p.conns {
		c.Close()
	}
	p.mu.Unlock()
	p.wg.Wait()
}
