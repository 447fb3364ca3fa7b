package benchwrite

import (
	"bytes"
	"regexp"
	"strings"
	"testing"
)

// TestSmoke runs the harness with a tiny input against an embedded tier:
// it must write, verify and end with the result line. Nothing is asserted
// about speed.
func TestSmoke(t *testing.T) {
	var out bytes.Buffer
	err := Run(t.Context(), &out, []string{
		"--rows", "5000", "--buckets", "3", "--batch", "300", "--data-dir", t.TempDir(), "--verify-sample", "200",
	})
	t.Log("\n" + out.String())
	if err != nil {
		t.Fatalf("run: %v", err)
	}
	lines := strings.Split(strings.TrimRight(out.String(), "\n"), "\n")
	if last := lines[len(lines)-1]; !regexp.MustCompile(`^ordinary write: [0-9]+ rows/s$`).MatchString(last) {
		t.Fatalf("last line %q is not the result line", last)
	}
	for _, want := range []string{"wrote 5000 rows", "rows/s", "MB/s", "p50", "p99", "peak RSS", "200 sampled rows read back equal", "counted 5000 rows"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("report lacks %q", want)
		}
	}
	// 5000 rows in batches of at most 300 over 3 buckets: at least 17 batches.
	m := regexp.MustCompile(`batches: ([0-9]+) acknowledged`).FindStringSubmatch(out.String())
	if m == nil || len(m[1]) < 2 {
		t.Errorf("batch count %v: want at least 17", m)
	}
}

func TestFlags(t *testing.T) {
	for _, args := range [][]string{
		{"--rows", "0"},
		{"--buckets", "0"},
		{"--key-bytes", "1", "--rows", "1000"},
		{"--protocol", "http3"},
		{"--value-bytes", "-1"},
		{"extra"},
	} {
		if err := Run(t.Context(), &bytes.Buffer{}, args); err == nil {
			t.Errorf("%q: no error", args)
		}
	}
}
