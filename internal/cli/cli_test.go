package cli

import (
	"bytes"
	"context"
	"strings"
	"testing"
	"time"
)

func run(t *testing.T, args ...string) (code int, stdout, stderr string) {
	t.Helper()
	// A deadline, so that a command that never ends fails its test with
	// what it printed instead of hanging the package until go test's
	// timeout.
	ctx, cancel := context.WithTimeout(t.Context(), 3*time.Minute)
	defer cancel()
	var out, errOut bytes.Buffer
	code = Main(ctx, args, &out, &errOut)
	if ctx.Err() != nil {
		t.Fatalf("thaw %s: still running after 3 minutes (exit %d)\nstdout:\n%s\nstderr:\n%s", strings.Join(args, " "), code, out.String(), errOut.String())
	}
	return code, out.String(), errOut.String()
}

func TestVersion(t *testing.T) {
	code, out, errOut := run(t, "version")
	if code != 0 || !strings.HasPrefix(out, "thaw ") || errOut != "" {
		t.Fatalf("version: code=%d stdout=%q stderr=%q", code, out, errOut)
	}
}

func TestUsageErrors(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{nil, "thaw needs a command"},
		{[]string{"frobnicate"}, `unknown command "frobnicate"`},
		{[]string{"version", "extra"}, "unexpected arguments: extra"},
		{[]string{"version", "--nope"}, "flag provided but not defined: -nope"},
		{[]string{"bench"}, "thaw bench needs a command"},
		{[]string{"bench", "nope"}, `unknown command "nope" for thaw bench`},
	} {
		code, _, errOut := run(t, tc.args...)
		if code != 2 || !strings.Contains(errOut, tc.want) {
			t.Errorf("%v: code=%d stderr=%q, want code 2 and %q", tc.args, code, errOut, tc.want)
		}
	}
}

func TestHelpListsCommands(t *testing.T) {
	code, out, _ := run(t, "help")
	if code != 0 {
		t.Fatalf("help exit code %d", code)
	}
	for _, c := range commands() {
		if !strings.Contains(out, c.name) {
			t.Errorf("help output misses %q:\n%s", c.name, out)
		}
	}
}

// TestHelpCommand: "thaw help COMMAND [SUBCOMMAND]" prints that command's
// help, as COMMAND --help does; it printed the command list for any
// COMMAND, an unknown one too.
func TestHelpCommand(t *testing.T) {
	for _, args := range [][]string{{"get"}, {"bulkload", "build"}, {"table", "create"}} {
		code, out, errOut := run(t, append([]string{"help"}, args...)...)
		_, want, _ := run(t, append(args, "--help")...)
		if code != 0 || out != want || !strings.HasPrefix(out, "usage: thaw "+strings.Join(args, " ")) {
			t.Errorf("help %v: exit %d, stdout %q, stderr %q; want %q", args, code, out, errOut, want)
		}
	}
	if code, _, errOut := run(t, "help", "nope"); code != 2 || !strings.Contains(errOut, `unknown command "nope"`) {
		t.Errorf("help nope: exit %d, %q", code, errOut)
	}
}

// A command whose answer cannot be written to standard output (a full
// disk, a closed pipe) does not exit 0, whether or not it checks its
// writes itself (get, database list and table list did not).
func TestFailedStdoutIsAnError(t *testing.T) {
	e, _ := startTestTier(t)
	srv := e.HostPort()
	if code, _, errOut := run(t, "table", "create", "cli.items", "--column", "id BIGINT", "--column", "v STRING", "--primary-key", "id", "--server", srv); code != 0 {
		t.Fatalf("create: %s", errOut)
	}
	if code, _, errOut := run(t, "put", "cli.items", `{"id":1,"v":"x"}`, "--server", srv); code != 0 {
		t.Fatalf("put: %s", errOut)
	}
	for _, args := range [][]string{
		{"get", "cli.items", "1", "--output", "json", "--server", srv},
		{"database", "list", "--server", srv},
		{"table", "list", "--server", srv},
		{"table", "create", "cli.more", "--column", "id BIGINT", "--primary-key", "id", "--server", srv},
		{"scan", "cli.items", "--output", "json", "--server", srv},
	} {
		var errOut bytes.Buffer
		if code := Main(t.Context(), args, failWriter{}, &errOut); code != 1 || !strings.Contains(errOut.String(), "broken pipe") {
			t.Errorf("thaw %s with a failing stdout: exit %d, stderr %q; want 1 and the write error", strings.Join(args, " "), code, errOut.String())
		}
	}
}
