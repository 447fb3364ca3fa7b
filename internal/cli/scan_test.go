package cli

import (
	"context"
	"errors"
	"net"
	"strings"
	"testing"
	"time"
)

// TestProgressDeadline: a context that keeps progressing lives past its
// timeout; one that stops is cancelled with errNoProgress about d after
// the last progress (checked every d/4); stop cancels it with no such
// cause. Margins are wide: a loaded CI machine may pause goroutines.
func TestProgressDeadline(t *testing.T) {
	const d = 500 * time.Millisecond
	ctx, progress, stop := progressDeadline(t.Context(), d)
	start := time.Now()
	for time.Since(start) < 3*d {
		progress.Add(1)
		time.Sleep(d / 20)
	}
	if err := ctx.Err(); err != nil {
		t.Fatalf("cancelled while progressing: %v (%v)", err, context.Cause(ctx))
	}
	stalled := time.Now()
	<-ctx.Done()
	if took := time.Since(stalled); took < d/2 || took > 4*d {
		t.Errorf("cancelled %v after progress stopped, want about %v", took, d)
	}
	if cause := context.Cause(ctx); !errors.Is(cause, errNoProgress) || !strings.Contains(cause.Error(), "500ms (--timeout)") {
		t.Errorf("cause %v, want errNoProgress naming the timeout", cause)
	}
	stop()

	ctx, _, stop = progressDeadline(t.Context(), time.Hour)
	stop()
	stop()
	if err := ctx.Err(); !errors.Is(err, context.Canceled) || errors.Is(context.Cause(ctx), errNoProgress) {
		t.Errorf("after stop: %v, cause %v", err, context.Cause(ctx))
	}
}

// TestScanGivesUpWhenNothingArrives: a scan against a server that accepts
// connections and never answers fails after --timeout, naming it.
func TestScanGivesUpWhenNothingArrives(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	go func() {
		var held []net.Conn
		defer func() {
			for _, c := range held {
				_ = c.Close()
			}
		}()
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			held = append(held, c)
		}
	}()
	start := time.Now()
	code, _, errOut := run(t, "scan", "shop.orders", "--server", ln.Addr().String(), "--timeout", "200ms")
	if code != 1 || !strings.Contains(errOut, "nothing arrived for 200ms (--timeout)") {
		t.Fatalf("code %d, stderr %q; want 1 and the timeout named", code, errOut)
	}
	if took := time.Since(start); took > 5*time.Second {
		t.Errorf("gave up after %v", took)
	}
}
