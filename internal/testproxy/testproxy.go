// Package testproxy is a TCP proxy for tests: it forwards connections to
// a target until paused; paused, it cuts every connection and refuses new
// ones, as a network partition would. Resumed, it forwards again, so a
// pause and a resume make every client reconnect.
package testproxy

import (
	"net"
	"strings"
	"sync"
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
	t.Cleanup(func() { ln.Close(); p.Pause(true) })
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
		p.mu.Unlock()
		go pipe(c, up)
		go pipe(up, c)
	}
}

func pipe(dst, src net.Conn) {
	buf := make([]byte, 32<<10)
	for {
		n, err := src.Read(buf)
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
		p.mu.conns = nil
	}
}

// Cut makes every client reconnect: it cuts the connections and forwards
// the next ones.
func (p *Proxy) Cut() {
	p.Pause(true)
	p.Pause(false)
}
