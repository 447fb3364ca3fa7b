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

// stopSignals end a command gracefully: Ctrl-C, a stop, and a hang-up (the
// terminal or ssh session closed), so that a bulk load aborts its
// transaction instead of leaving its target fenced until the deadline. A
// hang-up the process was started to ignore (nohup thaw server &) stays
// ignored: Notify would undo that.
func stopSignals() []os.Signal {
	sigs := []os.Signal{os.Interrupt, syscall.SIGTERM}
	if !signal.Ignored(syscall.SIGHUP) {
		sigs = append(sigs, syscall.SIGHUP)
	}
	return sigs
}

func main() {
	// A closed stdout or stderr pipe (thaw load | head) makes writes fail
	// with EPIPE instead of killing the process mid-transaction; a command
	// whose output is gone ends as cli.Main decides.
	signal.Ignore(syscall.SIGPIPE)
	stopSignals := stopSignals()
	ctx, stop := signal.NotifyContext(context.Background(), stopSignals...)
	go func() {
		// The first signal cancels ctx for a graceful shutdown; a second one
		// force-exits.
		<-ctx.Done()
		stop()
		forced := make(chan os.Signal, 1)
		signal.Notify(forced, stopSignals...)
		<-forced
		fmt.Fprintln(os.Stderr, "thaw: second signal, exiting now")
		os.Exit(130)
	}()
	os.Exit(cli.Main(ctx, os.Args[1:], os.Stdout, os.Stderr))
}
