package cli

import (
	"context"
	"fmt"
	"io"
	"runtime"
	"runtime/debug"
)

// Version is set at link time (-ldflags "-X github.com/thawdb/thaw/internal/cli.Version=v1.2.3").
// When empty, the module version from the build info is used.
var Version = ""

func version() string {
	if Version != "" {
		return Version
	}
	if bi, ok := debug.ReadBuildInfo(); ok && bi.Main.Version != "" {
		return bi.Main.Version
	}
	return "(devel)"
}

func runVersion(_ context.Context, stdout io.Writer, args []string) error {
	fs := newFlagSet("thaw version", stdout)
	if err := parseFlags(fs, args, false); err != nil {
		return err
	}
	_, err := fmt.Fprintf(stdout, "thaw %s %s %s/%s\n", version(), runtime.Version(), runtime.GOOS, runtime.GOARCH)
	return err
}
