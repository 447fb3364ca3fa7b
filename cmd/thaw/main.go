// Command thaw is the single binary of the thaw system. It only sets up the
// process (signals, exit code) and hands the arguments to internal/cli.
package main

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"syscall"

	"github.com/thawdb/thaw/internal/cli"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	go func() {
		// The first signal cancels ctx for a graceful shutdown; a second one
		// force-exits.
		<-ctx.Done()
		stop()
		forced := make(chan os.Signal, 1)
		signal.Notify(forced, os.Interrupt, syscall.SIGTERM)
		<-forced
		fmt.Fprintln(os.Stderr, "thaw: second signal, exiting now")
		os.Exit(130)
	}()
	os.Exit(cli.Main(ctx, os.Args[1:], os.Stdout, os.Stderr))
}
