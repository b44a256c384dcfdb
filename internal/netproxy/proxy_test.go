package netproxy

import (
	"bytes"
	"crypto/rand"
	"errors"
	"io"
	"net"
	"os"
	"sync"
	"testing"
	"time"
)

// echoServer accepts connections and writes back what each sends, until
// the client half-closes; it is closed when the test ends.
func echoServer(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	var mu sync.Mutex
	conns := map[net.Conn]bool{}
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			conns[c] = true
			mu.Unlock()
			wg.Add(1)
			go func() {
				defer wg.Done()
				_, _ = io.Copy(c, c)
				c.Close()
			}()
		}
	}()
	t.Cleanup(func() {
		ln.Close()
		mu.Lock()
		for c := range conns {
			c.Close()
		}
		mu.Unlock()
		wg.Wait()
	})
	return ln.Addr().String()
}

func startProxy(t *testing.T, target string) *Proxy {
	t.Helper()
	p, err := Start(target)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := p.Close(); err != nil {
			t.Error(err)
		}
	})
	return p
}

func dial(t *testing.T, addr string) net.Conn {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// roundTrip writes msg and reads it back within d.
func roundTrip(c net.Conn, msg []byte, d time.Duration) error {
	if err := c.SetDeadline(time.Now().Add(d)); err != nil {
		return err
	}
	if _, err := c.Write(msg); err != nil {
		return err
	}
	got := make([]byte, len(msg))
	if _, err := io.ReadFull(c, got); err != nil {
		return err
	}
	if !bytes.Equal(got, msg) {
		return errors.New("echo differs")
	}
	return c.SetDeadline(time.Time{})
}

// expectNothing asserts that nothing arrives on c for d.
func expectNothing(t *testing.T, c net.Conn, d time.Duration) {
	t.Helper()
	c.SetReadDeadline(time.Now().Add(d))
	n, err := c.Read(make([]byte, 1))
	if n != 0 || !errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("during a blackhole: read %d bytes, %v; want a timeout", n, err)
	}
	c.SetReadDeadline(time.Time{})
}

// expectDead asserts that c is reset or closed within d.
func expectDead(t *testing.T, c net.Conn, d time.Duration) {
	t.Helper()
	c.SetDeadline(time.Now().Add(d))
	_, werr := c.Write([]byte("x"))
	_, rerr := c.Read(make([]byte, 1))
	if errors.Is(rerr, os.ErrDeadlineExceeded) || rerr == nil {
		t.Fatalf("after Refuse: write %v, read %v; want a reset or EOF", werr, rerr)
	}
}

func TestForwardsBothWays(t *testing.T) {
	p := startProxy(t, echoServer(t))
	var wg sync.WaitGroup
	errs := make(chan error, 4)
	for range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			c, err := net.Dial("tcp", p.Addr())
			if err != nil {
				errs <- err
				return
			}
			defer c.Close()
			big := make([]byte, 3<<20) // many chunks, more than a queue holds
			rand.Read(big)
			errs <- roundTrip(c, big, 10*time.Second)
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
}

func TestHalfCloseReachesTheTarget(t *testing.T) {
	p := startProxy(t, echoServer(t))
	c := dial(t, p.Addr())
	if _, err := c.Write([]byte("bye")); err != nil {
		t.Fatal(err)
	}
	c.(*net.TCPConn).CloseWrite()
	c.SetReadDeadline(time.Now().Add(5 * time.Second))
	got, err := io.ReadAll(c) // the echo, then EOF once the server closes
	if err != nil || string(got) != "bye" {
		t.Fatalf("read %q, %v; want the echo and EOF", got, err)
	}
}

func TestLatencyDelaysEachWay(t *testing.T) {
	p := startProxy(t, echoServer(t))
	c := dial(t, p.Addr())
	if err := roundTrip(c, []byte("warm"), 5*time.Second); err != nil {
		t.Fatal(err)
	}
	const d = 60 * time.Millisecond
	p.SetLatency(d)
	start := time.Now()
	if err := roundTrip(c, []byte("slow"), 5*time.Second); err != nil {
		t.Fatal(err)
	}
	if took := time.Since(start); took < 2*d {
		t.Fatalf("round trip took %v with %v each way", took, d)
	}
	// Pipelined: many chunks in flight take about one latency, not one each.
	start = time.Now()
	big := make([]byte, 2<<20)
	if err := roundTrip(c, big, 10*time.Second); err != nil {
		t.Fatal(err)
	}
	if took := time.Since(start); took > 20*d {
		t.Fatalf("%d bytes took %v with %v each way: the chunks are not pipelined", len(big), took, d)
	}
	p.SetLatency(0)
	if err := roundTrip(c, []byte("fast"), 5*time.Second); err != nil {
		t.Fatal(err)
	}
}

func TestBlackholeHoldsTrafficUntilHeal(t *testing.T) {
	p := startProxy(t, echoServer(t))
	old := dial(t, p.Addr())
	if err := roundTrip(old, []byte("before"), 5*time.Second); err != nil {
		t.Fatal(err)
	}
	p.Partition(Blackhole)
	if _, err := old.Write([]byte("held")); err != nil {
		t.Fatal(err)
	}
	expectNothing(t, old, 150*time.Millisecond)
	// A new connection is accepted and held as well.
	fresh := dial(t, p.Addr())
	if _, err := fresh.Write([]byte("new")); err != nil {
		t.Fatal(err)
	}
	expectNothing(t, fresh, 50*time.Millisecond)

	p.Heal()
	for _, tc := range []struct {
		c    net.Conn
		want string
	}{{old, "held"}, {fresh, "new"}} {
		tc.c.SetReadDeadline(time.Now().Add(5 * time.Second))
		got := make([]byte, len(tc.want))
		if _, err := io.ReadFull(tc.c, got); err != nil || string(got) != tc.want {
			t.Fatalf("after Heal: read %q, %v; want %q", got, err, tc.want)
		}
	}
}

func TestRefuseResetsAndHealForwardsAgain(t *testing.T) {
	p := startProxy(t, echoServer(t))
	old := dial(t, p.Addr())
	if err := roundTrip(old, []byte("before"), 5*time.Second); err != nil {
		t.Fatal(err)
	}
	p.Partition(Refuse)
	expectDead(t, old, 5*time.Second)
	// A new connection is reset at once: at connect, or at its first read.
	if c, err := net.Dial("tcp", p.Addr()); err == nil {
		expectDead(t, c, 5*time.Second)
		c.Close()
	}

	p.Heal()
	if err := roundTrip(dial(t, p.Addr()), []byte("after"), 5*time.Second); err != nil {
		t.Fatalf("after Heal: %v", err)
	}
}

// greeter accepts connections and writes name to each, then holds it
// open until the test ends.
func greeter(t *testing.T, name string) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var conns []net.Conn
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			conns = append(conns, c)
			mu.Unlock()
			_, _ = c.Write([]byte(name))
		}
	}()
	t.Cleanup(func() {
		ln.Close()
		mu.Lock()
		defer mu.Unlock()
		for _, c := range conns {
			c.Close()
		}
	})
	return ln.Addr().String()
}

func greeting(t *testing.T, c net.Conn) string {
	t.Helper()
	buf := make([]byte, 16)
	_ = c.SetReadDeadline(time.Now().Add(5 * time.Second))
	n, err := c.Read(buf)
	if err != nil {
		t.Fatalf("read the greeting: %v", err)
	}
	return string(buf[:n])
}

func TestSetTargetResetsAndRedirects(t *testing.T) {
	p := startProxy(t, greeter(t, "first"))
	old := dial(t, p.Addr())
	if got := greeting(t, old); got != "first" {
		t.Fatalf("greeted by %q", got)
	}
	p.SetTarget(greeter(t, "second"))
	expectDead(t, old, 5*time.Second)
	if got := greeting(t, dial(t, p.Addr())); got != "second" {
		t.Fatalf("after SetTarget, greeted by %q", got)
	}
}

func TestCloseEndsEveryConnection(t *testing.T) {
	p, err := Start(echoServer(t))
	if err != nil {
		t.Fatal(err)
	}
	c := dial(t, p.Addr())
	if err := roundTrip(c, []byte("x"), 5*time.Second); err != nil {
		t.Fatal(err)
	}
	p.Partition(Blackhole)
	held := dial(t, p.Addr())
	if err := p.Close(); err != nil { // returns once its goroutines have ended
		t.Fatal(err)
	}
	expectDead(t, c, 5*time.Second)
	expectDead(t, held, 5*time.Second)
	if _, err := net.Dial("tcp", p.Addr()); err == nil {
		t.Fatal("dial after Close succeeded")
	}
}
