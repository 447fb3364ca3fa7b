package coordlist

import (
	"errors"
	"log/slog"
	"net"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/thawdb/thaw/tier/tierpb"
)

func TestParse(t *testing.T) {
	got, err := Parse(" a:1 ,http://b:2/, a:1,https://c:3")
	if err != nil || !slices.Equal(got, []string{"http://a:1", "http://b:2", "https://c:3"}) {
		t.Fatalf("Parse = %q, %v", got, err)
	}
	for _, bad := range []string{"", "a:1,", ",a:1", "a:1, ,b:2", "http://bad host:1", "ftp://a:1", "http://", "http:///path", "a:1?x=1", "a b:1", "http://a:1/#frag", "http://h:1?", "http://h:1#", "h:1?"} {
		if _, err := Parse(bad); err == nil {
			t.Errorf("Parse(%q) accepted it", bad)
		}
	}
	// User information would be sent as Basic authentication and echoed
	// in errors and logs: refused, without quoting the password.
	for _, bad := range []string{"https://thaw:SECRETPW7f3c@c1.example:9123", "http://u:SECRETPW7f3c@h:1/%zz",
		"http://me@corp.com:12/SECRETPW7f3c@coord:9123", "http://u:p@q/SECRETPW7f3c@coord:9123", "me@corp.com:12/SECRETPW7f3c@coord:9123"} {
		if _, err := Parse(bad); err == nil || strings.Contains(err.Error(), "SECRETPW7f3c") {
			t.Errorf("Parse(%q): %v", bad, err)
		}
	}
	// What the tier's listeners print and users type stays accepted.
	for _, good := range []string{"127.0.0.1:7070", "[::1]:7070", "localhost:7070", "https://tier.example.com", "http://10.0.0.1:7070/"} {
		if _, err := Parse(good); err != nil {
			t.Errorf("Parse(%q): %v", good, err)
		}
	}
}

func TestList(t *testing.T) {
	var mu sync.Mutex
	dialed := map[string]int{}
	l := New([]string{"http://a", "http://b", "http://c"}, func(url string) string {
		mu.Lock()
		defer mu.Unlock()
		dialed[url]++
		return "svc " + url
	})
	a := l.Current()
	if a.URL != "http://a" || a.Svc != "svc http://a" {
		t.Fatalf("current %+v, want a", a)
	}
	// A hint from a names x (not configured): x inherits a's place.
	x := l.At("http://x", a)
	if next := l.Untried(x, []string{"http://a", "http://x"}); next == nil || next.URL != "http://b" {
		t.Fatalf("untried after x (from a): %+v, want b", next)
	}
	l.Reached(x)
	if l.Current() != x {
		t.Fatal("Reached did not remember x")
	}
	// A failed call that began at x moves later calls to the seed after a.
	l.PassOver(x)
	if c := l.Current(); c.URL != "http://b" {
		t.Fatalf("after PassOver(x): %s, want b", c.URL)
	}
	// PassOver of a start the list has moved away from changes nothing.
	b := l.Current()
	l.PassOver(a)
	if l.Current() != b {
		t.Fatal("PassOver of a stale start moved the list")
	}
	// Every seed used: nothing untried.
	if next := l.Untried(b, []string{"http://a", "http://b", "http://c"}); next != nil {
		t.Fatalf("untried with every seed used: %+v", next)
	}
	// Wrap-around from the last seed.
	c := l.At("http://c", b)
	if next := l.Untried(c, []string{"http://c"}); next == nil || next.URL != "http://a" {
		t.Fatalf("untried after c: %+v, want a", next)
	}
	l.MoveTo("http://c", b)
	if l.Current().URL != "http://c" {
		t.Fatalf("MoveTo: %s", l.Current().URL)
	}
	cur := l.Current()
	l.MoveTo("http://c", b) // already there: keeps the same coordinator
	if l.Current() != cur {
		t.Fatal("MoveTo to the current URL replaced it")
	}
	// One configured coordinator: PassOver stays.
	one := New([]string{"http://only"}, func(string) int { return 0 })
	st := one.Current()
	one.PassOver(st)
	if one.Current() != st {
		t.Fatal("PassOver with one seed moved")
	}
}

func TestNotSent(t *testing.T) {
	_, err := net.Dial("tcp", "127.0.0.1:1")
	if err == nil {
		t.Fatal("dial to port 1 succeeded")
	}
	if !NotSent(err) {
		t.Fatalf("NotSent(%v) = false", err)
	}
	if NotSent(errors.New("read: connection reset")) || NotSent(&net.OpError{Op: "read", Err: errors.New("reset")}) {
		t.Fatal("NotSent true for an error after sending")
	}
}

// TestRoute: one pass of a request over three coordinators a, b, c,
// scripted per address: hints are followed up to MaxRedirects, a change
// answered UNAVAILABLE is not sent on but later passes start elsewhere, a
// read moves on past it, and no connection moves on for both.
func TestRoute(t *testing.T) {
	a, b, c := "http://a:1", "http://b:1", "http://c:1"
	unavailable := tierpb.NewError(tierpb.ReasonUnavailable, "cut off from etcd", nil)
	notLeader := func(to string) error {
		return tierpb.NewNotLeaderError("not the leader", tierpb.LeaderHint{ID: "x", Address: to})
	}
	dialErr := &net.OpError{Op: "dial", Err: errors.New("refused")}
	isUnavailable := func(err error) bool { return tierpb.ReasonOf(err) == tierpb.ReasonUnavailable }
	run := func(l *List[string], read bool, answers map[string]error) ([]string, string, error) {
		var sent []string
		co, err := Route(t.Context(), l, read, isUnavailable, slog.New(slog.DiscardHandler), "test", func(co *Coordinator[string]) error {
			sent = append(sent, co.URL)
			return answers[co.URL]
		})
		if co != nil {
			return sent, co.URL, err
		}
		return sent, "", err
	}
	newList := func() *List[string] { return New([]string{a, b, c}, func(u string) string { return u }) }

	// Hints followed; the answering coordinator is remembered.
	l := newList()
	if sent, got, err := run(l, false, map[string]error{a: notLeader(c)}); err != nil || got != c || !slices.Equal(sent, []string{a, c}) {
		t.Fatalf("hint: sent %v, answered %q, %v", sent, got, err)
	}
	if l.Current().URL != c {
		t.Fatalf("current %s after c answered", l.Current().URL)
	}

	// Two coordinators naming each other: bounded.
	l = newList()
	sent, _, err := run(l, false, map[string]error{a: notLeader(b), b: notLeader(a)})
	if err == nil || !strings.Contains(err.Error(), "NOT_LEADER redirects") || len(sent) != MaxRedirects+1 {
		t.Fatalf("ping-pong: sent %v, %v", sent, err)
	}

	// A change answered UNAVAILABLE: not sent on; the next pass starts at b.
	l = newList()
	if sent, _, err := run(l, false, map[string]error{a: unavailable}); !isUnavailable(err) || !slices.Equal(sent, []string{a}) {
		t.Fatalf("change at an unavailable coordinator: sent %v, %v", sent, err)
	}
	if l.Current().URL != b {
		t.Fatalf("current %s after a answered UNAVAILABLE, want b", l.Current().URL)
	}

	// A read moves on past it, and no connection moves both on.
	l = newList()
	if sent, got, err := run(l, true, map[string]error{a: unavailable}); err != nil || got != b || !slices.Equal(sent, []string{a, b}) {
		t.Fatalf("read: sent %v, answered %q, %v", sent, got, err)
	}
	l = newList()
	if sent, got, err := run(l, false, map[string]error{a: dialErr, b: dialErr}); err != nil || got != c || !slices.Equal(sent, []string{a, b, c}) {
		t.Fatalf("no connection: sent %v, answered %q, %v", sent, got, err)
	}

	// Any other error ends the pass where it is, without moving on.
	l = newList()
	other := errors.New("invalid argument")
	if sent, _, err := run(l, true, map[string]error{a: other}); !errors.Is(err, other) || !slices.Equal(sent, []string{a}) || l.Current().URL != a {
		t.Fatalf("other error: sent %v, %v, current %s", sent, err, l.Current().URL)
	}
}
