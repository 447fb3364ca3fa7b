package daemon

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/thawdb/thaw/internal/testlog"
)

// TestPolicyWatch: a running promoter says when its policy files change
// (once per new content, a directory's new file included) and when they
// are back as at start; other files of the directory do not count, and
// files that cannot be read are logged once.
func TestPolicyWatch(t *testing.T) {
	dir := t.TempDir()
	write := func(name, text string) {
		t.Helper()
		if err := os.WriteFile(filepath.Join(dir, name), []byte(text), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	write("a.yaml", "v1")
	write("notes.txt", "not a policy")
	start, err := policyDigest([]string{dir})
	if err != nil {
		t.Fatal(err)
	}
	var logs testlog.Buffer
	w := newPolicyWatch([]string{dir}, "/etc/thaw/promoter.yaml", start, NewLogger(&logs, LogConfig{Level: "info", Format: "text"}))
	lines := func() []string {
		var out []string
		for l := range strings.Lines(logs.String()) {
			out = append(out, strings.TrimSpace(l))
		}
		return out
	}
	step := func(what string, change func(), want ...string) {
		t.Helper()
		before := len(lines())
		change()
		w.check()
		got := lines()[before:]
		if len(got) != len(want) {
			t.Fatalf("%s: logged %q, want %d lines", what, got, len(want))
		}
		for i, l := range got {
			if !strings.Contains(l, want[i]) {
				t.Fatalf("%s: line %q, want %q", what, l, want[i])
			}
		}
	}
	const changed = `level=WARN msg="policy files changed since the promoter started; policies are read at start only: restart the promoter to apply them (thaw promoter --check --config /etc/thaw/promoter.yaml validates them first)"`
	step("nothing changed", func() {})
	step("another file of the directory", func() { write("notes.txt", "still not a policy") })
	step("a policy edited", func() { write("a.yaml", "v2") }, changed)
	step("looked at again", func() {})
	step("a new policy file", func() { write("b.yml", "v1") }, changed)
	step("back as at start", func() {
		if err := os.Remove(filepath.Join(dir, "b.yml")); err != nil {
			t.Fatal(err)
		}
		write("a.yaml", "v1")
	}, `level=INFO msg="policy files are as they were at start again"`)
	step("the policy directory gone", func() {
		if err := os.RemoveAll(dir); err != nil {
			t.Fatal(err)
		}
	}, `level=WARN msg="policy files cannot be read; the promoter goes on with the policies it started with"`)
	step("still missing", func() {})
}
