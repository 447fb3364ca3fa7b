package flagutil

import (
	"bytes"
	"errors"
	"flag"
	"slices"
	"strings"
	"testing"
)

func TestParse(t *testing.T) {
	for _, tc := range []struct {
		args    []string
		wantErr error
		wantOut string // what stdout must hold
		errText string
	}{
		{args: []string{"-n", "3"}},
		{args: []string{"--help"}, wantErr: flag.ErrHelp, wantOut: "usage: thaw x ARG [flags]\n  -n int\n    \tcount (default 1)\n"},
		{args: []string{"-h"}, wantErr: flag.ErrHelp, wantOut: "usage: thaw x ARG [flags]\n"},
		{args: []string{"--m"}, wantErr: ErrUsage, errText: "thaw x: flag provided but not defined: -m (thaw x --help lists the flags)"},
		{args: []string{"-n", "many"}, wantErr: ErrUsage, errText: `thaw x: invalid value "many" for flag -n`},
	} {
		var out bytes.Buffer
		fs := New("thaw x", "ARG", &out)
		n := fs.Int("n", 1, "count")
		err := Parse(fs, tc.args)
		if !errors.Is(err, tc.wantErr) || (tc.wantErr == nil) != (err == nil) {
			t.Errorf("%v: error %v, want %v", tc.args, err, tc.wantErr)
		}
		if tc.errText != "" && (err == nil || !strings.Contains(err.Error(), tc.errText)) {
			t.Errorf("%v: error %v, want it to say %q", tc.args, err, tc.errText)
		}
		if !strings.HasPrefix(out.String(), tc.wantOut) || (tc.wantOut == "" && out.Len() > 0) {
			t.Errorf("%v: stdout %q, want %q", tc.args, out.String(), tc.wantOut)
		}
		if tc.wantErr == nil && *n != 3 {
			t.Errorf("%v: -n = %d", tc.args, *n)
		}
		// Parse leaves the flag set as it found it: Usage still prints.
		out.Reset()
		fs.Usage()
		if !strings.HasPrefix(out.String(), "usage: thaw x ARG [flags]\n") {
			t.Errorf("%v: Usage after Parse printed %q", tc.args, out.String())
		}
	}
}

func TestParseArgs(t *testing.T) {
	for _, tc := range []struct {
		args []string
		pos  []string
		n    int
	}{
		{[]string{"a", "-n", "3", "b"}, []string{"a", "b"}, 3},
		{[]string{"-n", "3", "a"}, []string{"a"}, 3},
		{[]string{"a", "b", "--n=4"}, []string{"a", "b"}, 4},
		{[]string{"--", "-n", "-n", "5"}, []string{"-n"}, 5},
		{nil, nil, 1},
	} {
		fs := New("thaw x", "ARG...", &bytes.Buffer{})
		n := fs.Int("n", 1, "count")
		pos, err := ParseArgs(fs, tc.args)
		if err != nil || !slices.Equal(pos, tc.pos) || *n != tc.n {
			t.Errorf("%q: %q -n %d %v, want %q -n %d", tc.args, pos, *n, err, tc.pos, tc.n)
		}
	}
	fs := New("thaw x", "ARG...", &bytes.Buffer{})
	if _, err := ParseArgs(fs, []string{"a", "--nope"}); !errors.Is(err, ErrUsage) {
		t.Errorf("an unknown flag after an argument: %v", err)
	}
}
