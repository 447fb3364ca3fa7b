// Package coordlist is the list of a tier's configured coordinators and
// the one a client's requests go to, shared by tier/tierclient and
// bulkload/bulkloadclient so that both clients of a tier given the same
// address (the promoter's tier.address: "a:7070,b:7070") find the active
// coordinator alike. The rules: requests go to the coordinator last
// reached; a call may follow NOT_LEADER hints (bounded by MaxRedirects) and
// move on to configured coordinators it has not used (Untried); after a
// call found its coordinator not serving, later calls start at the next
// configured one (PassOver). Route is that pass, for both clients. Safe for
// concurrent use.
package coordlist

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/url"
	"slices"
	"strings"
	"sync"

	"github.com/thawdb/thaw/internal/redact"
	"github.com/thawdb/thaw/tier/tierpb"
)

// MaxRedirects bounds how many NOT_LEADER answers naming another
// coordinator one call (or one attempt) follows: two coordinators that
// keep naming each other end it instead of looping.
const MaxRedirects = 4

// Parse returns the base URLs of a coordinator address: one address
// ("host:port" or an http(s) URL) or a comma-separated list of them.
// Blanks around an address are trimmed and repeated addresses dropped; an
// empty one, or one that is no http(s) URL with a host (a typo that would
// otherwise be retried as an unreachable coordinator until a deadline), is
// an error.
func Parse(addr string) ([]string, error) {
	var seeds []string
	for a := range strings.SplitSeq(addr, ",") {
		a = strings.TrimSpace(a)
		if a == "" {
			return nil, fmt.Errorf("empty coordinator address in %q", addr)
		}
		u := BaseURL(a)
		p, err := url.Parse(u)
		if err == nil && p.User != nil {
			// It would be sent as Basic authentication and echoed in
			// errors and logs: tokens go in THAW_TOKEN.
			return nil, fmt.Errorf("coordinator address %q: user information is not supported (give a token in THAW_TOKEN)", redact.URL(a))
		}
		// (An empty query or fragment too: "h:1?" sent every call to "/"
		// with its procedure in the query.)
		if err != nil || p.Host == "" || (p.Scheme != "http" && p.Scheme != "https") || p.RawQuery != "" || p.ForceQuery || p.Fragment != "" || strings.Contains(u, "#") {
			return nil, fmt.Errorf("coordinator address %q: want HOST:PORT or an http(s) URL", redact.URL(a))
		}
		if !slices.Contains(seeds, u) {
			seeds = append(seeds, u)
		}
	}
	return seeds, nil
}

// BaseURL turns "host:port" into "http://host:port"; a URL (with a scheme)
// is kept, without a trailing slash.
func BaseURL(addr string) string {
	if !strings.Contains(addr, "://") {
		addr = "http://" + addr
	}
	return strings.TrimRight(addr, "/")
}

// Coordinator is one coordinator and the client of its service. Immutable.
type Coordinator[S any] struct {
	URL string
	Svc S
	// seed is the index in the list of URL, or of the configured
	// coordinator whose answer (a NOT_LEADER hint, GetLeader) led to URL.
	seed int
}

// List holds the configured coordinators and the current one.
type List[S any] struct {
	seeds []string
	dial  func(url string) S
	mu    sync.Mutex
	cur   *Coordinator[S]
}

// New returns a list of seeds (from Parse; at least one) whose current
// coordinator is the first; dial makes the service client of a URL.
func New[S any](seeds []string, dial func(url string) S) *List[S] {
	l := &List[S]{seeds: seeds, dial: dial}
	l.cur = l.at(seeds[0], 0)
	return l
}

// Seeds returns the configured base URLs, in order.
func (l *List[S]) Seeds() []string { return slices.Clone(l.seeds) }

func (l *List[S]) at(url string, seed int) *Coordinator[S] {
	if i := slices.Index(l.seeds, url); i >= 0 {
		seed = i
	}
	return &Coordinator[S]{URL: url, Svc: l.dial(url), seed: seed}
}

// At returns the coordinator at url, named by an answer of from.
func (l *List[S]) At(url string, from *Coordinator[S]) *Coordinator[S] {
	return l.at(url, from.seed)
}

// Current returns the coordinator calls go to.
func (l *List[S]) Current() *Coordinator[S] {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.cur
}

// Reached remembers co, which just answered a call that started at another
// coordinator.
func (l *List[S]) Reached(co *Coordinator[S]) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.cur = co
}

// MoveTo sends later calls to url (named by an answer of from).
func (l *List[S]) MoveTo(url string, from *Coordinator[S]) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.cur.URL != url {
		l.cur = l.at(url, from.seed)
	}
}

// PassOver sends later calls to the configured coordinator after the one
// start (where a failed call began) is or came from, unless another call
// has moved the list away from start meanwhile.
func (l *List[S]) PassOver(start *Coordinator[S]) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.cur != start {
		return
	}
	next := (start.seed + 1) % len(l.seeds)
	if l.seeds[next] != start.URL {
		l.cur = l.at(l.seeds[next], next)
	}
}

// Untried returns the first configured coordinator after co's that is not
// among used (the URLs a call went to), or nil.
func (l *List[S]) Untried(co *Coordinator[S], used []string) *Coordinator[S] {
	for i := 1; i <= len(l.seeds); i++ {
		k := (co.seed + i) % len(l.seeds)
		if !slices.Contains(used, l.seeds[k]) {
			return l.at(l.seeds[k], k)
		}
	}
	return nil
}

// NotSent reports whether err says a request never left the client: no
// connection to the coordinator could be made.
func NotSent(err error) bool {
	var op *net.OpError
	return errors.As(err, &op) && op.Op == "dial"
}

// Route makes one pass of a request over l without waiting: send goes to
// the current coordinator; a NOT_LEADER answer naming another coordinator
// is followed (at most MaxRedirects times, then the pass ends with an
// error saying so); no connection made (NotSent), and for a read also an
// unavailable answer, moves on to a configured coordinator this pass has
// not used. Changes are never sent twice after an answer: the coordinator
// may have acted. A coordinator that answered is remembered; after a pass
// that ended on NOT_LEADER or an unavailable answer (unavailable(err), a
// coordinator's own UNAVAILABLE included: one cut off from etcd answers
// so to everything) later passes start at the next configured one. It
// returns the coordinator that answered, or the last error (wrapped with
// the addresses used when there were several). name prefixes log lines.
func Route[S any](ctx context.Context, l *List[S], read bool, unavailable func(error) bool, log *slog.Logger, name string,
	send func(co *Coordinator[S]) error,
) (*Coordinator[S], error) {
	start := l.Current()
	co := start
	used := []string{co.URL} // every address this pass went to, in order
	redirects := 0
	for {
		err := send(co)
		if err == nil {
			if co != start {
				l.Reached(co)
			}
			return co, nil
		}
		if ctx.Err() != nil {
			return nil, err
		}
		var next *Coordinator[S]
		hint, notLeader := tierpb.IsNotLeader(err)
		unavail := notLeader || unavailable(err)
		switch {
		case notLeader && hint.Address != "" && BaseURL(hint.Address) != co.URL:
			if redirects == MaxRedirects {
				l.PassOver(start)
				return nil, fmt.Errorf("%d NOT_LEADER redirects (%s -> %s) did not reach the active coordinator: %w",
					redirects, strings.Join(used, " -> "), BaseURL(hint.Address), err)
			}
			redirects++
			next = l.At(BaseURL(hint.Address), co)
			log.Debug(name+": following NOT_LEADER", "from", co.URL, "to", next.URL, "leader_id", hint.ID)
		case NotSent(err) || (read && unavail):
			if next = l.Untried(co, used); next != nil {
				log.Debug(name+": trying the next coordinator", "from", co.URL, "to", next.URL, "err", err)
			}
		}
		if next == nil {
			if unavail {
				l.PassOver(start)
			}
			if len(used) > 1 {
				err = fmt.Errorf("via %s: %w", strings.Join(used, " -> "), err)
			}
			return nil, err
		}
		co = next
		used = append(used, co.URL)
	}
}
