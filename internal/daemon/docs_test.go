package daemon

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/thawdb/thaw/policies"
)

// yamlBlock is a fenced ```yaml block of a documentation page; a fence may
// be indented (a block inside a list item), and so is its body.
var yamlBlock = regexp.MustCompile("(?ms)^( *)```ya?ml\n(.*?)^( *)```")

// docYAMLKinds are the files an operator may copy a documented YAML block
// into, each decoded as thaw decodes it: strictly, so an unknown or
// misspelt key, a value of the wrong type or a duplicate key is an error.
var docYAMLKinds = []struct {
	name   string
	decode func([]byte) error
}{
	{"thaw server config", func(b []byte) error { return DecodeConfig(bytes.NewReader(b), "doc", &ServerConfig{}) }},
	{"thaw coordinator config", func(b []byte) error { return DecodeConfig(bytes.NewReader(b), "doc", &CoordinatorConfig{}) }},
	{"thaw tablet config", func(b []byte) error { return DecodeConfig(bytes.NewReader(b), "doc", &TabletConfig{}) }},
	{"thaw promoter config", func(b []byte) error { return DecodeConfig(bytes.NewReader(b), "doc", &PromoterConfig{}) }},
	{"coordinator.callers_file", func(b []byte) error {
		var doc struct {
			Callers []CallerOptions `yaml:"callers"`
		}
		return decodeStrict(bytes.NewReader(b), &doc)
	}},
	{"api_callers_file", func(b []byte) error {
		var doc struct {
			Callers []APICaller `yaml:"callers"`
		}
		return decodeStrict(bytes.NewReader(b), &doc)
	}},
	{"promotion policy", func(b []byte) error { _, err := policies.Parse(b, "doc"); return err }},
}

// TestDocsYAMLDecodes reads every ```yaml block of the README and docs/ and
// fails on one that no thaw file decodes: a key renamed or removed in the
// code but not in the documentation. Blocks are checked as decoded only
// (their placeholders, like "2c26b4...", need not validate). A block whose
// first line names its file (# tablet.yaml, # coord.yaml) must decode as
// that kind.
func TestDocsYAMLDecodes(t *testing.T) {
	root := filepath.Join("..", "..")
	files, err := filepath.Glob(filepath.Join(root, "docs", "*.md"))
	if err != nil {
		t.Fatal(err)
	}
	files = append(files, filepath.Join(root, "README.md"))
	named := map[string]string{"tablet.yaml": "thaw tablet config", "coord.yaml": "thaw coordinator config"}
	blocks := 0
	for _, f := range files {
		data, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		rel, _ := filepath.Rel(root, f)
		for _, m := range yamlBlock.FindAllSubmatchIndex(data, -1) {
			blocks++
			line := bytes.Count(data[:m[0]], []byte("\n")) + 1
			indent := string(data[m[2]:m[3]])
			var body strings.Builder
			for _, l := range strings.SplitAfter(string(data[m[4]:m[5]]), "\n") {
				body.WriteString(strings.TrimPrefix(l, indent))
			}
			doc := []byte(body.String())
			want := ""
			for file, kind := range named {
				if first, _, _ := strings.Cut(body.String(), "\n"); strings.HasPrefix(first, "# "+file) {
					want = kind
				}
			}
			var errs []string
			ok := false
			for _, k := range docYAMLKinds {
				if want != "" && k.name != want {
					continue
				}
				if err := k.decode(doc); err != nil {
					errs = append(errs, fmt.Sprintf("as %s: %v", k.name, err))
					continue
				}
				ok = true
				break
			}
			if !ok {
				t.Errorf("%s:%d: the yaml block decodes as no thaw file:\n  %s", rel, line, strings.Join(errs, "\n  "))
			}
		}
	}
	if blocks < 10 {
		t.Errorf("found %d yaml blocks in the docs, want at least 10: the scan is broken", blocks)
	}
}

// metricName finds a metric's name where the code declares it: a
// collector's Opts (Name: "thaw_...") or a custom collector's
// prometheus.NewDesc("thaw_...".
var metricName = regexp.MustCompile(`(?:Name:\s*|NewDesc\(\s*)"(thaw_[a-z0-9_]+)"`)

// TestDocsListEveryMetric: every metric a thaw component exports is named
// in the documentation (docs/tier.md's list, docs/bulkload.md,
// docs/promoter.md), so an operator building alerts from the docs finds it
// (thaw_tablet_replicas, the only count of restoring or failed replicas,
// was in none).
func TestDocsListEveryMetric(t *testing.T) {
	var docs strings.Builder
	pages, err := filepath.Glob("../../docs/*.md")
	if err != nil || len(pages) == 0 {
		t.Fatalf("docs pages: %v %v", pages, err)
	}
	for _, p := range append(pages, "../../README.md") {
		b, err := os.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		docs.Write(b)
	}
	found := 0
	err = filepath.WalkDir("../..", func(path string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && (d.Name() == ".git" || d.Name() == "testdata") {
			return filepath.SkipDir
		}
		if d.IsDir() || !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
			return nil
		}
		src, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		for _, m := range metricName.FindAllStringSubmatch(string(src), -1) {
			found++
			if !regexp.MustCompile(`\b` + m[1] + `\b`).MatchString(docs.String()) {
				t.Errorf("%s exports %s, which no page of docs/ names", path, m[1])
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if found < 50 {
		t.Fatalf("found %d metric declarations: the pattern no longer matches how metrics are declared", found)
	}
}
