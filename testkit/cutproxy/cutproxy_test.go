package cutproxy

import (
	"bufio"
	"net"
	"testing"
	"time"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// echo is a line echo server; cleanup closes it.
func echo(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	t.Cleanup(func() { ln.Close(); <-done })
	go func() {
		defer close(done)
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				sc := bufio.NewScanner(c)
				for sc.Scan() {
					if _, err := c.Write(append(sc.Bytes(), '\n')); err != nil {
						return
					}
				}
			}()
		}
	}()
	return ln.Addr().String()
}

func roundTrip(t *testing.T, c net.Conn, r *bufio.Reader, line string, within time.Duration) (string, error) {
	t.Helper()
	if err := c.SetDeadline(time.Now().Add(within)); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Write([]byte(line + "\n")); err != nil {
		return "", err
	}
	got, err := r.ReadString('\n')
	return got, err
}

// TestCut: a cut closes the live connection and refuses new ones; a heal
// serves on the same address again.
func TestCut(t *testing.T) {
	p := Start(t, echo(t))
	c, err := net.Dial("tcp", p.Addr())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	r := bufio.NewReader(c)
	if got, err := roundTrip(t, c, r, "one", 10*time.Second); err != nil || got != "one\n" {
		t.Fatalf("before the cut: %q, %v", got, err)
	}
	p.Cut()
	if got, err := roundTrip(t, c, r, "two", 10*time.Second); err == nil {
		t.Fatalf("a cut connection still answered %q", got)
	}
	if c2, err := net.Dial("tcp", p.Addr()); err == nil {
		c2.Close()
		t.Fatal("a new connection was accepted while cut")
	}
	if err := p.Heal(); err != nil {
		t.Fatal(err)
	}
	c3, err := net.Dial("tcp", p.Addr())
	if err != nil {
		t.Fatal(err)
	}
	defer c3.Close()
	if got, err := roundTrip(t, c3, bufio.NewReader(c3), "three", 10*time.Second); err != nil || got != "three\n" {
		t.Fatalf("after the heal: %q, %v", got, err)
	}
}

// TestBlackhole: a blackhole answers nothing and closes nothing, on a live
// connection and on a new one; after the heal the held bytes arrive.
func TestBlackhole(t *testing.T) {
	p := Start(t, echo(t))
	c, err := net.Dial("tcp", p.Addr())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	r := bufio.NewReader(c)
	if got, err := roundTrip(t, c, r, "one", 10*time.Second); err != nil || got != "one\n" {
		t.Fatalf("before the blackhole: %q, %v", got, err)
	}
	p.Blackhole()
	got, err := roundTrip(t, c, r, "held", 300*time.Millisecond)
	if ne, ok := err.(net.Error); !ok || !ne.Timeout() {
		t.Fatalf("a blackholed connection answered %q, %v; want a timeout", got, err)
	}
	c2, err := net.Dial("tcp", p.Addr())
	if err != nil {
		t.Fatalf("a blackhole refused a connection: %v", err)
	}
	defer c2.Close()
	r2 := bufio.NewReader(c2)
	if got, err := roundTrip(t, c2, r2, "new", 300*time.Millisecond); err == nil {
		t.Fatalf("a new connection through the blackhole answered %q", got)
	}
	if err := p.Heal(); err != nil {
		t.Fatal(err)
	}
	if err := c.SetDeadline(time.Now().Add(10 * time.Second)); err != nil {
		t.Fatal(err)
	}
	if got, err := r.ReadString('\n'); err != nil || got != "held\n" {
		t.Fatalf("the held line after the heal: %q, %v", got, err)
	}
	if err := c2.SetDeadline(time.Now().Add(10 * time.Second)); err != nil {
		t.Fatal(err)
	}
	if got, err := r2.ReadString('\n'); err != nil || got != "new\n" {
		t.Fatalf("the new connection's held line after the heal: %q, %v", got, err)
	}
}
