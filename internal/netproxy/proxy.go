// Package netproxy is a TCP proxy for fault tests: it listens on a
// loopback port and forwards every connection to a target (a PostgreSQL
// server, an object store), and between the two it can add latency or
// partition the network. It owns only the connections it accepted and
// the ones it dialled for them; it never changes what flows, only when
// and whether.
//
// A partition comes in two kinds:
//
//   - Blackhole: connections stay open and nothing flows, as when a
//     network drops every packet; what was sent meanwhile is held (TCP
//     would retransmit it) and delivered after Heal. A connection made
//     during the partition is accepted and held too, and reaches the
//     target after Heal.
//   - Refuse: every connection is reset (both ends) and a new one is
//     reset as soon as it is accepted, as when a host is down. The
//     client sees ECONNRESET, or EOF, rather than ECONNREFUSED: the
//     listener stays, so that the address still works after Heal.
package netproxy

import (
	"context"
	"io"
	"net"
	"sync"
	"time"

	"github.com/cockroachdb/errors"
)

// Mode is what the proxy does with the traffic.
type Mode int

const (
	// Forward passes the traffic on (after the latency).
	Forward Mode = iota
	// Blackhole holds the traffic and the connections.
	Blackhole
	// Refuse resets every connection.
	Refuse
)

func (m Mode) String() string {
	switch m {
	case Forward:
		return "forward"
	case Blackhole:
		return "blackhole"
	case Refuse:
		return "refuse"
	}
	return "unknown"
}

// chunkSize is the most one read takes from a connection: one chunk,
// delayed and held as one.
const chunkSize = 32 << 10

// queued is how many chunks a direction holds before it stops reading,
// so that a slow or partitioned side pushes back on the sender.
const queued = 64

// Proxy forwards the connections accepted on Addr to a target.
type Proxy struct {
	ln net.Listener
	wg sync.WaitGroup // the accept loop and every connection's goroutines

	mu struct {
		sync.Mutex
		target  string
		mode    Mode
		latency time.Duration
		changed chan struct{} // closed and replaced at every change of mode
		links   map[*link]struct{}
		closed  bool
	}
}

// Start listens on a free loopback port and forwards what it accepts to
// target (host:port).
func Start(target string) (*Proxy, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, errors.Wrap(err, "netproxy: listen")
	}
	p := &Proxy{ln: ln}
	p.mu.target = target
	p.mu.changed = make(chan struct{})
	p.mu.links = map[*link]struct{}{}
	p.wg.Add(1)
	go p.accept()
	return p, nil
}

// Addr is the address clients connect to, 127.0.0.1:PORT.
func (p *Proxy) Addr() string { return p.ln.Addr().String() }

// SetLatency delays every chunk read from either side by d before it is
// written to the other: one way's latency, so a round trip takes 2d. The
// chunks of a connection are pipelined, not spaced by d, so throughput is
// kept. A chunk read before the change keeps the delay it had.
func (p *Proxy) SetLatency(d time.Duration) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.mu.latency = d
}

// Partition stops the traffic in the given mode (Blackhole or Refuse)
// until Heal.
func (p *Proxy) Partition(mode Mode) {
	p.setMode(mode)
}

// SetTarget sends the connections accepted from now on to target
// (host:port) and resets those open to the old one, as a failover to a
// new primary behind a fixed address does.
func (p *Proxy) SetTarget(target string) {
	p.change(func() bool {
		p.mu.target = target
		return true
	})
}

// Heal ends a partition: held traffic and connections go on, new
// connections are forwarded again.
func (p *Proxy) Heal() { p.setMode(Forward) }

func (p *Proxy) setMode(mode Mode) {
	p.change(func() bool {
		p.mu.mode = mode
		close(p.mu.changed)
		p.mu.changed = make(chan struct{})
		return mode == Refuse
	})
}

// change applies f under the lock (unless the proxy is closed) and then,
// if f says so, resets every open connection.
func (p *Proxy) change(f func() (reset bool)) {
	p.mu.Lock()
	if p.mu.closed {
		p.mu.Unlock()
		return
	}
	var reset []*link
	if f() {
		for l := range p.mu.links {
			reset = append(reset, l)
		}
	}
	p.mu.Unlock()
	for _, l := range reset {
		l.close(true)
	}
}

// Close stops listening, closes every connection and waits for the
// proxy's goroutines to end.
func (p *Proxy) Close() error {
	p.mu.Lock()
	if p.mu.closed {
		p.mu.Unlock()
		return nil
	}
	p.mu.closed = true
	close(p.mu.changed)
	links := p.mu.links
	p.mu.links = nil
	p.mu.Unlock()
	err := p.ln.Close()
	for l := range links {
		l.close(false)
	}
	p.wg.Wait()
	return errors.Wrap(err, "netproxy: close")
}

// state is the mode, and a channel closed when it next changes.
func (p *Proxy) state() (Mode, chan struct{}, bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.mu.mode, p.mu.changed, p.mu.closed
}

// waitForward waits until the proxy forwards (true), or the link or the
// proxy ends, or the mode is Refuse (false).
func (p *Proxy) waitForward(done <-chan struct{}) bool {
	for {
		mode, changed, closed := p.state()
		switch {
		case closed || mode == Refuse:
			return false
		case mode == Forward:
			return true
		}
		select {
		case <-changed:
		case <-done:
			return false
		}
	}
}

func (p *Proxy) accept() {
	defer p.wg.Done()
	for {
		c, err := p.ln.Accept()
		if err != nil {
			return // closed
		}
		l := &link{client: c, done: make(chan struct{})}
		p.mu.Lock()
		if p.mu.closed {
			p.mu.Unlock()
			c.Close()
			return
		}
		p.mu.links[l] = struct{}{}
		p.mu.Unlock()
		p.wg.Add(1)
		go p.serve(l)
	}
}

// serve dials the target for an accepted connection once the proxy
// forwards, and pumps both ways until both are done.
func (p *Proxy) serve(l *link) {
	defer p.wg.Done()
	defer p.forget(l)
	if !p.waitForward(l.done) {
		l.close(true)
		return
	}
	var d net.Dialer
	ctx, cancel := context.WithCancel(context.Background())
	go func() {
		select {
		case <-l.done:
			cancel()
		case <-ctx.Done():
		}
	}()
	p.mu.Lock()
	target := p.mu.target
	p.mu.Unlock()
	server, err := d.DialContext(ctx, "tcp", target)
	cancel()
	if err != nil {
		l.close(true)
		return
	}
	if !l.setServer(server) {
		return
	}
	var pumps sync.WaitGroup
	pumps.Add(2)
	go func() { defer pumps.Done(); p.pump(l, l.client, server) }()
	go func() { defer pumps.Done(); p.pump(l, server, l.client) }()
	pumps.Wait()
	l.close(false)
}

func (p *Proxy) forget(l *link) {
	p.mu.Lock()
	defer p.mu.Unlock()
	delete(p.mu.links, l)
}

// chunk is what one read took, and when it may be written.
type chunk struct {
	b   []byte
	due time.Time
}

// pump copies src to dst in chunks, each delayed by the latency at its
// read and held while the proxy does not forward. At src's end it
// half-closes dst, so that the other direction can finish; at an error
// it ends the link.
func (p *Proxy) pump(l *link, src, dst net.Conn) {
	q := make(chan chunk, queued)
	go func() {
		defer close(q)
		buf := make([]byte, chunkSize)
		for {
			n, err := src.Read(buf)
			if n > 0 {
				p.mu.Lock()
				lat := p.mu.latency
				p.mu.Unlock()
				select {
				case q <- chunk{b: append([]byte(nil), buf[:n]...), due: time.Now().Add(lat)}:
				case <-l.done:
					return
				}
			}
			if err != nil {
				if !errors.Is(err, io.EOF) {
					l.close(false)
				}
				return
			}
		}
	}()
	for c := range q {
		if wait := time.Until(c.due); wait > 0 {
			t := time.NewTimer(wait)
			select {
			case <-t.C:
			case <-l.done:
				t.Stop()
			}
		}
		if !p.waitForward(l.done) {
			l.close(true)
			break
		}
		if _, err := dst.Write(c.b); err != nil {
			l.close(false)
			break
		}
	}
	// Drain what the reader still queues, so that it can see l.done.
	for range q {
	}
	if tc, ok := dst.(*net.TCPConn); ok {
		_ = tc.CloseWrite()
	}
}

// link is one client connection and the connection to the target made
// for it.
type link struct {
	client net.Conn
	done   chan struct{} // closed by close

	mu     sync.Mutex
	server net.Conn // nil until dialled
	closed bool
}

// setServer records the target's connection; false (and it is closed)
// if the link ended while it was dialled.
func (l *link) setServer(c net.Conn) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.closed {
		c.Close()
		return false
	}
	l.server = c
	return true
}

// close ends both connections; with reset, each end sees a reset rather
// than an orderly close.
func (l *link) close(reset bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.closed {
		return
	}
	l.closed = true
	close(l.done)
	for _, c := range []net.Conn{l.client, l.server} {
		if c == nil {
			continue
		}
		if tc, ok := c.(*net.TCPConn); ok && reset {
			_ = tc.SetLinger(0)
		}
		c.Close()
	}
}
