// Package cli implements thaw's command line: one binary, one subcommand per
// role or tool. cmd/thaw only sets up signals and calls Main.
//
// Every command is a function of (ctx, stdout, args) that returns an error;
// Main prints the error to stderr and turns it into the exit code: 0 on
// success, 2 for usage errors (unknown command, bad flags), 1 otherwise,
// and 141 (as if SIGPIPE ended it) when the reader of standard output went
// away. A command whose output could not be written is not a success even
// if it did not check its writes: Main's stdout keeps the first write error
// (except for output that is only progress, such as thaw load's: a closed
// one does not fail a load that committed).
// Commands never call os.Exit themselves, so they can be tested in-process.
//
// docs/cli.md is every command's --help on one page. TestCLIReference
// fails when it differs from the binary (regenerate it with
// go test ./internal/cli -run TestCLIReference -update), and
// TestDocsNameRealFlags fails when the README, docs/ or a package's doc.go
// names a flag after "thaw COMMAND" that the command does not define.
package cli
