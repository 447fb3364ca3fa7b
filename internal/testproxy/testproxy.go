// Package testproxy is a TCP proxy for tests: it forwards connections to
// a target until paused; paused, it cuts every connection and refuses new
// ones, as a network partition would. Resumed, it forwards again, so a
// pause and a resume make every client reconnect. Freeze makes the
// connections of the moment go silent instead (nothing forwarded, nothing
// closed: a dead host, a dropped NAT entry), which only a keepalive
// notices.
package testproxy

import (
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
)

// Proxy forwards TCP connections from its own address to a target.
type Proxy struct {
	ln     net.Listener
	target string
	mu     struct {
		sync.Mutex
		paused bool
		conns  []net.Conn
		// dead are the frozen connections' flags (one per pair, set by
		// Freeze), frozen their connections, closed when the proxy stops.
		dead   []*atomic.Bool
		frozen []net.Conn
	}
}

// New starts a proxy on a free port of 127.0.0.1 forwarding to target
// ("host:port", or a URL whose scheme is dropped); it stops with t.
func New(t testing.TB, target string) *Proxy {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	if _, rest, ok := strings.Cut(target, "://"); ok {
		target = rest
	}
	p := &Proxy{ln: ln, target: target}
	t.Cleanup(func() {
		ln.Close()
		p.Pause(true)
		p.mu.Lock()
		for _, c := range p.mu.frozen {
			c.Close()
		}
		p.mu.Unlock()
	})
	go p.serve()
	return p
}

// Addr is the proxy's "host:port".
func (p *Proxy) Addr() string { return p.ln.Addr().String() }

func (p *Proxy) serve() {
	for {
		c, err := p.ln.Accept()
		if err != nil {
			return
		}
		p.mu.Lock()
		paused := p.mu.paused
		var up net.Conn
		if !paused {
			up, err = net.Dial("tcp", p.target)
			paused = err != nil
		}
		if paused {
			p.mu.Unlock()
			c.Close()
			continue
		}
		p.mu.conns = append(p.mu.conns, c, up)
		dead := new(atomic.Bool)
		p.mu.dead = append(p.mu.dead, dead)
		p.mu.Unlock()
		go pipe(c, up, dead)
		go pipe(up, c, dead)
	}
}

// pipe copies src to dst until either ends, or, once dead is set, drops
// what it reads (closing nothing: a frozen connection stays open, silent,
// until the proxy stops).
func pipe(dst, src net.Conn, dead *atomic.Bool) {
	buf := make([]byte, 32<<10)
	for {
		n, err := src.Read(buf)
		if dead.Load() {
			if err != nil {
				return
			}
			continue
		}
		if n > 0 {
			if _, werr := dst.Write(buf[:n]); werr != nil {
				break
			}
		}
		if err != nil {
			break
		}
	}
	dst.Close()
	src.Close()
}

// Pause cuts every connection and refuses new ones (paused) or forwards
// again (not paused).
func (p *Proxy) Pause(paused bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.mu.paused = paused
	if paused {
		for _, c := range p.mu.conns {
			c.Close()
		}
		p.mu.conns, p.mu.dead = nil, nil
	}
}

// Freeze silences every connection of the moment: what either side sends
// is read and dropped, and neither is closed, as when a host drops off the
// network without a reset. New connections are forwarded as before.
func (p *Proxy) Freeze() {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, d := range p.mu.dead {
		d.Store(true)
	}
	p.mu.frozen = append(p.mu.frozen, p.mu.conns...)
	p.mu.conns, p.mu.dead = nil, nil
}

// Cut makes every client reconnect: it cuts the connections and forwards
// the next ones.
func (p *Proxy) Cut() {
	p.Pause(true)
	p.Pause(false)
}
