package policies_test

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/thawdb/thaw/policies"
)

// FuzzParse: Parse never panics; what it accepts renders (Doc) to a document
// that parses to the same policy, and whose own rendering is identical.
func FuzzParse(f *testing.F) {
	files, _ := filepath.Glob("../examples/policies/*.yaml")
	for _, file := range files {
		data, err := os.ReadFile(file)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(data)
	}
	for _, s := range []string{
		head, full, head + "---\n" + head, "", "---\n", "\t", "{{{",
		doc("  target: {buckets: 3, primaryKey: [\"a b\", 'c']}\n"),
		doc("  selection:\n    partitions:\n      where:\n        \"x y\": {eq: \"null\", ne: ~}\n"),
		doc("  triggers:\n    schedule: {cron: \"@every 90s\", timeZone: America/New_York}\n"),
		doc("  limits: {memory: 1000, uploadMBps: 1}\n"),
		doc("  target: &a {buckets: 1}\n  selection: *a\n"),
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		pols, err := policies.Parse(data, "fuzz.yaml")
		if err != nil {
			if pols != nil {
				t.Fatalf("policies and an error")
			}
			if err.Error() == "" {
				t.Fatalf("empty error message")
			}
			return
		}
		if len(pols) == 0 {
			t.Fatalf("no policies and no error")
		}
		for _, p := range pols {
			checkRoundTrip(t, p)
		}
	})
}
