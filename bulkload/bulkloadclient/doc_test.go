package bulkloadclient_test

import (
	"os"
	"strings"
	"testing"
)

// TestSDKDocMatchesExample keeps the program in docs/sdk.md identical to
// example_test.go, which go test compiles and runs.
func TestSDKDocMatchesExample(t *testing.T) {
	doc, err := os.ReadFile("../../docs/sdk.md")
	if err != nil {
		t.Fatal(err)
	}
	src, err := os.ReadFile("example_test.go")
	if err != nil {
		t.Fatal(err)
	}
	const begin, end = "<!-- begin example_test.go", "<!-- end example_test.go -->"
	s := string(doc)
	i, j := strings.Index(s, begin), strings.Index(s, end)
	if i < 0 || j < i {
		t.Fatalf("docs/sdk.md has no %q ... %q block", begin, end)
	}
	block := s[i:j]
	block = block[strings.Index(block, "\n")+1:]
	code, ok := strings.CutPrefix(block, "```go\n")
	if !ok {
		t.Fatal("the example block does not start with ```go")
	}
	code, ok = strings.CutSuffix(code, "```\n")
	if !ok {
		t.Fatal("the example block does not end with ```")
	}
	if code != string(src) {
		dl, sl := strings.Split(code, "\n"), strings.Split(string(src), "\n")
		for k := range min(len(dl), len(sl)) {
			if dl[k] != sl[k] {
				t.Fatalf("docs/sdk.md differs from example_test.go at line %d of the file:\n doc:  %q\n file: %q", k+1, dl[k], sl[k])
			}
		}
		t.Fatalf("docs/sdk.md has %d lines of the example, the file %d", len(dl), len(sl))
	}
}
