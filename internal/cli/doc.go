// Package cli implements thaw's command line: one binary, one subcommand per
// role or tool. cmd/thaw only sets up signals and calls Main.
//
// Every command is a function of (ctx, stdout, args) that returns an error;
// Main prints the error to stderr and turns it into the exit code: 0 on
// success, 2 for usage errors (unknown command, bad flags), 1 otherwise.
// Commands never call os.Exit themselves, so they can be tested in-process.
package cli
