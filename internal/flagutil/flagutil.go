// Package flagutil is the command-line flag handling every thaw command
// shares: --help prints the command's usage line and flags to standard
// output and succeeds; a bad flag is a usage error that prints nothing to
// standard output, where a command's data goes (the flag package alone
// would print the whole usage there on every error).
package flagutil

import (
	"errors"
	"flag"
	"fmt"
	"io"
)

// ErrUsage marks an error caused by how a command was invoked (thaw
// exits with status 2 for it).
var ErrUsage = errors.New("usage")

// Usagef returns an ErrUsage error.
func Usagef(format string, args ...any) error {
	return fmt.Errorf("%w: %s", ErrUsage, fmt.Sprintf(format, args...))
}

// New returns a flag set for the command name ("thaw table create") whose
// usage, printed to stdout by Parse on --help, is "usage: NAME ARGS
// [flags]" (ARGS omitted when argsUsage is empty) and the flags.
func New(name, argsUsage string, stdout io.Writer) *flag.FlagSet {
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	line := name
	if argsUsage != "" {
		line += " " + argsUsage
	}
	fs.Usage = func() {
		fmt.Fprintf(stdout, "usage: %s [flags]\n", line)
		PrintDefaults(fs, stdout)
	}
	return fs
}

// PrintDefaults prints fs's flags to w, as flag.FlagSet.PrintDefaults
// does to the flag set's output.
func PrintDefaults(fs *flag.FlagSet, w io.Writer) {
	out := fs.Output()
	fs.SetOutput(w)
	fs.PrintDefaults()
	fs.SetOutput(out)
}

// Parse parses args into fs. On -h or --help it calls fs.Usage and
// returns flag.ErrHelp; any other flag error it returns as an ErrUsage
// error naming the command, having printed nothing.
func Parse(fs *flag.FlagSet, args []string) error {
	usage, out := fs.Usage, fs.Output()
	if usage == nil {
		usage = func() { fs.PrintDefaults() }
	}
	fs.Usage = func() {}
	fs.SetOutput(io.Discard)
	err := fs.Parse(args)
	fs.Usage = usage
	fs.SetOutput(out)
	switch {
	case err == nil:
		return nil
	case errors.Is(err, flag.ErrHelp):
		usage()
		return err
	default:
		return Usagef("%s: %v (%s --help lists the flags)", fs.Name(), err, fs.Name())
	}
}

// ParseArgs parses args into fs with flags before, between and after the
// positional arguments, which it returns in order. "--" makes the one
// argument after it positional, even if it starts with "-".
func ParseArgs(fs *flag.FlagSet, args []string) ([]string, error) {
	var pos []string
	for {
		if err := Parse(fs, args); err != nil {
			return nil, err
		}
		rest := fs.Args()
		if len(rest) == 0 {
			return pos, nil
		}
		pos = append(pos, rest[0])
		args = rest[1:]
	}
}
