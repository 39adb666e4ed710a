package peeruid

import (
	"errors"
	"fmt"
	"io"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// userUID is a uid of the range the tests refuse, as a user's would be.
const userUID = 210777

func inRange(uid uint32) bool { return uid >= 210000 && uid <= 210999 }

// guarded listens on addr behind the guard; refusals arrive on the
// channel.
func guarded(t *testing.T, addr string, c Config) (*Listener, chan Refusal) {
	t.Helper()
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		t.Skipf("listen %s: %v", addr, err)
	}
	refused := make(chan Refusal, 16)
	c.OnRefuse = func(r Refusal) { refused <- r }
	if c.Refuse == nil {
		c.Refuse = inRange
	}
	l := Wrap(ln, c)
	t.Cleanup(func() { _ = l.Close() })
	return l, refused
}

// accepted accepts on l in the background.
func accepted(l net.Listener) chan net.Conn {
	ch := make(chan net.Conn, 4)
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				close(ch)
				return
			}
			ch <- c
		}
	}()
	return ch
}

func wait[T any](t *testing.T, ch <-chan T, what string) T {
	t.Helper()
	select {
	case v, ok := <-ch:
		if !ok {
			t.Fatalf("%s: channel closed", what)
		}
		return v
	case <-time.After(10 * time.Second):
		t.Fatalf("no %s within 10s", what)
	}
	panic("unreachable")
}

// bashAs runs script in bash as uid (and gid) uid, and returns its output.
func bashAs(t *testing.T, uid uint32, script string) string {
	t.Helper()
	cmd := exec.Command("bash", "-c", script)
	cmd.Dir = "/"
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: uid, Gid: uid}}
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Logf("bash as %d: %v", uid, err)
	}
	return string(out)
}

// TestRefusesUserUID: a connection from a process running as a uid of the
// range is closed before anything is read or written: the server never
// sees it, the client reads nothing (end of file or a reset) and the
// refusal names the uid; a connection from the daemon's own uid, on the
// same listener right after, is handed out. IPv4 and IPv6 loopback.
func TestRefusesUserUID(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("running a child as a user's uid needs root")
	}
	if _, err := exec.LookPath("bash"); err != nil {
		t.Skip("no bash")
	}
	for _, addr := range []string{"127.0.0.1:0", "[::1]:0"} {
		t.Run(addr, func(t *testing.T) {
			l, refused := guarded(t, addr, Config{Name: "test"})
			conns := accepted(l)
			ap := l.Addr().(*net.TCPAddr).AddrPort()
			host := ap.Addr().String()
			// The child writes first, then reads what comes back: a server
			// that got the connection would answer (below, the test's own
			// connection gets "hello" back).
			out := bashAs(t, userUID, fmt.Sprintf(
				`trap '' PIPE; exec 3<>/dev/tcp/%s/%d || exit 9; printf 'GET / HTTP/1.0\r\n\r\n' >&3 2>/dev/null; n=$(timeout 5 cat <&3 2>/dev/null | wc -c); echo "read=$n"`,
				host, ap.Port()))
			if !strings.Contains(out, "read=0") {
				t.Errorf("the user's uid read from the guarded listener: %q", out)
			}
			r := wait(t, refused, "refusal")
			if r.Reason != ReasonUserUID || r.UID != userUID || r.Listener != "test" || !r.Peer.Addr().IsLoopback() {
				t.Errorf("refusal %+v, want user-uid %d on test", r, userUID)
			}
			// The daemon's own uid passes, and is the next connection out.
			c, err := net.Dial("tcp", l.Addr().String())
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			s := wait(t, conns, "the daemon's connection")
			defer s.Close()
			if got, want := s.RemoteAddr().String(), c.LocalAddr().String(); got != want {
				t.Fatalf("accepted %s, want the daemon's own %s (the user's connection was handed out)", got, want)
			}
			if _, err := s.Write([]byte("hello")); err != nil {
				t.Fatal(err)
			}
			buf := make([]byte, 5)
			if _, err := io.ReadFull(c, buf); err != nil || string(buf) != "hello" {
				t.Fatalf("the daemon's connection: %q, %v", buf, err)
			}
			select {
			case r := <-refused:
				t.Errorf("the daemon's connection refused: %+v", r)
			default:
			}
		})
	}
}

// TestUIDOutsideRangePasses: a uid that is not the daemon's but outside
// the range (another account on the host) is not refused by uid.
func TestUIDOutsideRangePasses(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("running a child as another uid needs root")
	}
	l, refused := guarded(t, "127.0.0.1:0", Config{Name: "test"})
	conns := accepted(l)
	ap := l.Addr().(*net.TCPAddr).AddrPort()
	done := make(chan string, 1)
	go func() {
		done <- bashAs(t, 65534, fmt.Sprintf(`exec 3<>/dev/tcp/127.0.0.1/%d && n=$(timeout 5 head -c 2 <&3 | wc -c); echo "read=$n"`, ap.Port()))
	}()
	s := wait(t, conns, "nobody's connection")
	_, _ = s.Write([]byte("ok"))
	_ = s.Close()
	if out := wait(t, done, "the child"); !strings.Contains(out, "read=2") {
		t.Errorf("nobody's child: %q", out)
	}
	select {
	case r := <-refused:
		t.Errorf("refused: %+v", r)
	default:
	}
}

// TestLookupFailsClosed: a local peer whose owner cannot be told is
// refused: the lookup's error, and a peer that reset its connection
// before the check (its socket is gone: the kernel finds none, or one
// without an owner), each with nothing handed to the server.
func TestLookupFailsClosed(t *testing.T) {
	t.Run("lookup-error", func(t *testing.T) {
		boom := errors.New("boom")
		l, refused := guarded(t, "127.0.0.1:0", Config{Name: "test",
			Lookup: func(netip.AddrPort, netip.AddrPort, time.Duration) (Owner, error) { return Owner{}, boom }})
		conns := accepted(l)
		c, err := net.Dial("tcp", l.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		r := wait(t, refused, "refusal")
		if r.Reason != ReasonUnknown || !errors.Is(r.Err, boom) {
			t.Errorf("refusal %+v, want unknown-owner with the lookup's error", r)
		}
		if n, err := c.Read(make([]byte, 1)); n != 0 || err == nil {
			t.Errorf("read %d, %v from a refused connection", n, err)
		}
		select {
		case s := <-conns:
			t.Errorf("handed out %v", s.RemoteAddr())
		default:
		}
	})
	t.Run("reset-before-check", func(t *testing.T) {
		gone := make(chan struct{})
		l, refused := guarded(t, "127.0.0.1:0", Config{Name: "test",
			Lookup: func(p, q netip.AddrPort, d time.Duration) (Owner, error) {
				<-gone // the client has written and reset its connection
				return Lookup(p, q, d)
			}})
		conns := accepted(l)
		c, err := net.Dial("tcp", l.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		if _, err := c.Write([]byte("payload written before the reset")); err != nil {
			t.Fatal(err)
		}
		_ = c.(*net.TCPConn).SetLinger(0)
		_ = c.Close()
		close(gone)
		r := wait(t, refused, "refusal")
		if r.Reason != ReasonUnknown {
			t.Errorf("refusal %+v, want unknown-owner", r)
		}
		select {
		case s := <-conns:
			t.Errorf("handed out %v", s.RemoteAddr())
		default:
		}
	})
}

// TestSlowLookupDoesNotBlockAccept: while one connection's lookup hangs,
// the next one is checked and handed out.
func TestSlowLookupDoesNotBlockAccept(t *testing.T) {
	release := make(chan struct{})
	var first atomic.Bool
	first.Store(true)
	firstSeen := make(chan struct{}, 1)
	l, _ := guarded(t, "127.0.0.1:0", Config{Name: "test",
		Lookup: func(p, q netip.AddrPort, d time.Duration) (Owner, error) {
			if first.CompareAndSwap(true, false) { // the first connection's
				firstSeen <- struct{}{}
				<-release
			}
			return Lookup(p, q, d)
		}})
	defer close(release)
	conns := accepted(l)
	c1, err := net.Dial("tcp", l.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer c1.Close()
	wait(t, firstSeen, "first lookup")
	c2, err := net.Dial("tcp", l.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer c2.Close()
	s := wait(t, conns, "second connection")
	defer s.Close()
	if s.RemoteAddr().String() != c2.LocalAddr().String() {
		t.Errorf("accepted %v, want the second connection %v", s.RemoteAddr(), c2.LocalAddr())
	}
}

// TestRemotePeerNotLookedUp: a peer that is not on this host is handed
// out without a lookup (its uid is not this kernel's to tell).
func TestRemotePeerNotLookedUp(t *testing.T) {
	l, _ := guarded(t, "127.0.0.1:0", Config{Name: "test",
		Local: func(netip.Addr, netip.Addr) bool { return false },
		Lookup: func(netip.AddrPort, netip.AddrPort, time.Duration) (Owner, error) {
			return Owner{}, errors.New("looked up")
		}})
	conns := accepted(l)
	c, err := net.Dial("tcp", l.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	s := wait(t, conns, "connection")
	_ = s.Close()
}

// TestLookupOwnConnection: the kernel names the test's own uid for its
// own loopback connection, IPv4 and IPv6, and no socket for a 4-tuple
// nobody holds.
func TestLookupOwnConnection(t *testing.T) {
	for _, addr := range []string{"127.0.0.1:0", "[::1]:0"} {
		ln, err := net.Listen("tcp", addr)
		if err != nil {
			t.Logf("%s: %v", addr, err)
			continue
		}
		c, err := net.Dial("tcp", ln.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		s, err := ln.Accept()
		if err != nil {
			t.Fatal(err)
		}
		peer, local, _ := Addrs(s)
		o, err := Lookup(peer, local, time.Second)
		if err != nil || o.UID != uint32(os.Geteuid()) || !o.Live() {
			t.Errorf("%s: %+v, %v; want uid %d, live", addr, o, err, os.Geteuid())
		}
		if _, err := Lookup(netip.AddrPortFrom(peer.Addr(), 1), local, time.Second); !errors.Is(err, ErrNotFound) {
			t.Errorf("%s: a 4-tuple nobody holds: %v, want ErrNotFound", addr, err)
		}
		_ = c.Close()
		_ = s.Close()
		_ = ln.Close()
	}
}

// TestReporterRateLimits: one line per listener and uid per period; every
// refusal counted.
func TestReporterRateLimits(t *testing.T) {
	var lines strings.Builder
	counted := 0
	p := &Reporter{Log: slogTo(&lines), Every: time.Hour, Count: func(string, string) { counted++ }}
	for range 5 {
		p.Report(Refusal{Listener: "gateway", Reason: ReasonUserUID, UID: 1})
		p.Report(Refusal{Listener: "gateway", Reason: ReasonUserUID, UID: 2})
		p.Report(Refusal{Listener: "metrics", Reason: ReasonUserUID, UID: 1})
	}
	if got := strings.Count(lines.String(), "\n"); got != 3 || counted != 15 {
		t.Errorf("%d lines, %d counted; want 3 and 15:\n%s", got, counted, lines.String())
	}
}
