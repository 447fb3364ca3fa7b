package redact

import (
	"strings"
	"testing"
)

func TestURL(t *testing.T) {
	for _, c := range []struct{ in, want string }{
		{"s3://bucket/p", "s3://bucket/p"},
		{"s3://AKID:SECRET@bucket/p", "s3://AKID:xxxxx@bucket/p"},
		{"postgres://u:p%40ss@h:5432/db?sslmode=disable", "postgres://u:xxxxx@h:5432/db?sslmode=disable"},
		{"s3://AKID:SECRET@bucket/%zz", "s3://xxxxx@bucket/%zz"},
		{"http://u:pw@h:1/%zz", "http://xxxxx@h:1/%zz"},
		{"not a url", "not a url"},
	} {
		got := URL(c.in)
		if got != c.want || strings.Contains(got, "SECRET") || strings.Contains(got, "pw@") {
			t.Errorf("URL(%q) = %q, want %q", c.in, got, c.want)
		}
	}
}
