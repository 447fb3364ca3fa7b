// Package daemontest starts an embedded tier for a test: started, waited
// for until it serves, and closed (its close error reported) when the test
// ends.
package daemontest

import (
	"context"
	"testing"

	"github.com/thawdb/thaw/internal/daemon"
	"github.com/thawdb/thaw/tier/tierclient"
)

// Start starts an embedded tier with cfg (cfg.DataDir must be set, usually
// tb.TempDir()) and waits until it is ready, failing tb otherwise.
func Start(ctx context.Context, tb testing.TB, cfg daemon.EmbeddedConfig) *daemon.Embedded {
	tb.Helper()
	e, err := daemon.StartEmbedded(ctx, cfg)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() {
		if err := e.Close(); err != nil {
			tb.Errorf("close tier: %v", err)
		}
	})
	if err := e.WaitReady(ctx); err != nil {
		tb.Fatal(err)
	}
	return e
}

// StartWithClient is Start plus a tierclient.Client of the tier, closed
// before the tier when the test ends.
func StartWithClient(ctx context.Context, tb testing.TB, cfg daemon.EmbeddedConfig) (*daemon.Embedded, *tierclient.Client) {
	tb.Helper()
	e := Start(ctx, tb, cfg)
	tc, err := tierclient.New(ctx, e.Address())
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(tc.Close)
	return e, tc
}
