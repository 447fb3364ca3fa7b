package cli

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"slices"
	"strings"
	"sync"
	"syscall"

	"github.com/thawdb/thaw/internal/flagutil"
)

// ErrUsage marks an error caused by how the command was invoked.
var ErrUsage = flagutil.ErrUsage

// usageError reports a bad invocation; Main exits with status 2 for it.
func usageError(format string, args ...any) error {
	return flagutil.Usagef(format, args...)
}

// command is one subcommand (or a group of them).
type command struct {
	name    string
	summary string
	run     func(ctx context.Context, stdout io.Writer, args []string) error
}

// commands returns the top-level commands, in the order help lists them.
func commands() []command {
	return []command{
		{name: "quickstart", summary: "sample lake + embedded tier + example policy: promote, verify, show timings", run: runQuickstart},
		{name: "version", summary: "print the version and exit", run: runVersion},
		{name: "bench", summary: "run a benchmark harness (bench build, load, write) or write its input (bench parquet)", run: runBench},
		{name: "lake", summary: "read Apache Iceberg tables (tables, describe, partitions, scan, sample)", run: runLake},
		{name: "server", summary: "run the whole tier in one process: embedded etcd, coordinator, tablet servers", run: runServer},
		{name: "coordinator", summary: "run a tier coordinator against an external etcd", run: runCoordinator},
		{name: "tablet", summary: "run a tier tablet server against an external etcd", run: runTablet},
		{name: "servers", summary: "list the tier's live tablet servers with their changelogs", run: runServers},
		{name: "database", summary: "create, drop or list tier databases", run: runDatabase},
		{name: "table", summary: "create, drop, describe or list tier tables", run: runTable},
		{name: "partition", summary: "create, drop or list partitions of a tier table", run: runPartition},
		{name: "put", summary: "upsert JSON rows into a tier table", run: runPut},
		{name: "get", summary: "look up rows of a tier table by primary key", run: runGet},
		{name: "delete", summary: "delete rows of a tier table by primary key", run: runDelete},
		{name: "scan", summary: "print the rows of a tier table or partition", run: runScan},
		{name: "bulkload", summary: "bulk-load transactions step by step (begin, build, commit, abort, list, status)", run: runBulkload},
		{name: "load", summary: "load Parquet files into an empty table or partition in one bulk-load transaction", run: runLoad},
		{name: "promoter", summary: "run the promoter daemon: policies, schedules, ledger, HTTP API", run: runPromoter},
		{name: "plan", summary: "print what the promoter's policies would promote now (changes nothing)", run: runPlan},
		{name: "promote", summary: "ask a running promoter to promote a table or partition now", run: runPromote},
		{name: "status", summary: "show the promoter's promotions, or one with its progress", run: runStatus},
		{name: "cancel", summary: "withdraw requested promotions that wait in a running promoter's queue", run: runCancel},
	}
}

// Main runs the command named by args[0] and returns the process exit code.
func Main(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	out := &output{w: stdout}
	err := dispatch(ctx, "thaw", commands(), args, out)
	if err == nil {
		// A command whose answer could not be written (a full disk, a
		// closed pipe) did not succeed, whether or not it checked.
		if werr := out.failed(); werr != nil {
			err = fmt.Errorf("write output: %w", werr)
		}
	}
	// A command cut short by a signal ends in "context canceled"; say why
	// ("interrupt signal received", the cause signal.NotifyContext gives).
	if err != nil && errors.Is(err, context.Canceled) && ctx.Err() != nil {
		if cause := context.Cause(ctx); cause != nil && !errors.Is(err, cause) && !strings.Contains(err.Error(), cause.Error()) {
			err = fmt.Errorf("%v: %w", cause, err)
		}
	}
	switch {
	case err == nil:
		return 0
	case errors.Is(err, flag.ErrHelp):
		return 0
	case stdoutClosed(err):
		// The reader of the output went away (thaw scan | head): end
		// quietly, with the status of a process SIGPIPE ended.
		return 128 + int(syscall.SIGPIPE)
	case errors.Is(err, ErrUsage):
		printError(stderr, err)
		return 2
	default:
		printError(stderr, err)
		return 1
	}
}

// output is the standard output Main hands the commands: it keeps the
// first write error.
type output struct {
	w  io.Writer
	mu sync.Mutex
	// err is the first write error; guarded by mu.
	err error
}

func (o *output) Write(p []byte) (int, error) {
	n, err := o.w.Write(p)
	if err != nil {
		o.mu.Lock()
		if o.err == nil {
			o.err = err
		}
		o.mu.Unlock()
	}
	return n, err
}

func (o *output) failed() error {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.err
}

// unchecked returns w with Main's check of its writes off, for output
// that is only progress and notes (thaw load's, a daemon's "serving on"
// line): a closed output must not fail a command once its work is done.
func unchecked(w io.Writer) io.Writer {
	if o, ok := w.(*output); ok {
		return o.w
	}
	return w
}

// isTerminal reports whether w is a terminal (a character device).
func isTerminal(w io.Writer) bool {
	if o, ok := w.(*output); ok {
		w = o.w
	}
	f, ok := w.(*os.File)
	if !ok {
		return false
	}
	st, err := f.Stat()
	return err == nil && st.Mode()&os.ModeCharDevice != 0
}

// stdoutClosed reports whether err is a write to a standard output whose
// pipe was closed (main ignores SIGPIPE, so such a write fails with EPIPE
// rather than killing the process), not a broken network connection.
func stdoutClosed(err error) bool {
	var pe *os.PathError
	return errors.As(err, &pe) && pe.Path == "/dev/stdout" && errors.Is(pe.Err, syscall.EPIPE)
}

// printError writes err to stderr after "thaw: ", each error of an
// errorList on a line of its own.
func printError(stderr io.Writer, err error) {
	list, ok := err.(errorList)
	if !ok {
		list = errorList{err}
	}
	for _, err := range list {
		fmt.Fprintf(stderr, "thaw: %v\n", err)
	}
}

// errorList holds the errors of a command that acts on several items one
// by one (thaw cancel ID...): Main prints each as an error of its own.
// Build it with joinErrors.
type errorList []error

func (l errorList) Error() string   { return errors.Join(l...).Error() }
func (l errorList) Unwrap() []error { return l }

// joinErrors returns nil without errors, the error itself with one, and
// an errorList of them otherwise.
func joinErrors(errs []error) error {
	switch len(errs) {
	case 0:
		return nil
	case 1:
		return errs[0]
	}
	return errorList(errs)
}

// prefixErrors is fmt.Errorf(prefix+": %w", err), applied to each error of
// an errorList, so that each keeps its line.
func prefixErrors(prefix string, err error) error {
	if list, ok := err.(errorList); ok {
		out := make(errorList, len(list))
		for i, e := range list {
			out[i] = fmt.Errorf("%s: %w", prefix, e)
		}
		return out
	}
	return fmt.Errorf("%s: %w", prefix, err)
}

// dispatch finds the named subcommand among cmds and runs it.
func dispatch(ctx context.Context, prefix string, cmds []command, args []string, stdout io.Writer) error {
	if len(args) > 1 && args[0] == "help" {
		// "help COMMAND [SUBCOMMAND]": that command's help.
		return dispatch(ctx, prefix, cmds, append(slices.Clone(args[1:]), "--help"), stdout)
	}
	if len(args) == 0 || args[0] == "help" || args[0] == "-h" || args[0] == "--help" {
		printCommands(stdout, prefix, cmds)
		if len(args) == 0 {
			return usageError("%s needs a command", prefix)
		}
		return nil
	}
	i := slices.IndexFunc(cmds, func(c command) bool { return c.name == args[0] })
	if i < 0 {
		return usageError("unknown command %q for %s (see %s help)", args[0], prefix, prefix)
	}
	return cmds[i].run(ctx, stdout, args[1:])
}

func printCommands(w io.Writer, prefix string, cmds []command) {
	fmt.Fprintf(w, "usage: %s <command> [flags]   (%s help <command>: its flags)\n\ncommands:\n", prefix, prefix)
	width := 0
	for _, c := range cmds {
		width = max(width, len(c.name))
	}
	for _, c := range cmds {
		fmt.Fprintf(w, "  %-*s  %s\n", width, c.name, c.summary)
	}
}

// newFlagSet returns a flag set that reports errors instead of exiting and
// prints its usage to stdout only when asked for help (parseFlags).
func newFlagSet(name string, stdout io.Writer) *flag.FlagSet {
	return flagutil.New(name, "", stdout)
}

// parseFlags parses args into fs, turning flag errors into usage errors and
// refusing positional arguments unless allowArgs.
func parseFlags(fs *flag.FlagSet, args []string, allowArgs bool) error {
	if err := flagutil.Parse(fs, args); err != nil {
		return err
	}
	if !allowArgs && fs.NArg() > 0 {
		return usageError("%s: unexpected arguments: %s", fs.Name(), strings.Join(fs.Args(), " "))
	}
	return nil
}
