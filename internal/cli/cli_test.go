package cli

import (
	"bytes"
	"strings"
	"testing"
)

func run(t *testing.T, args ...string) (code int, stdout, stderr string) {
	t.Helper()
	var out, errOut bytes.Buffer
	code = Main(t.Context(), args, &out, &errOut)
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
