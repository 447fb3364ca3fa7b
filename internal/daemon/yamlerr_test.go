package daemon

import (
	"strings"
	"testing"
)

// TestDescribeYAMLError: an unknown key is named with the nearest key of
// its own section, never with a Go type name, and a key of another section
// is not offered.
func TestDescribeYAMLError(t *testing.T) {
	for _, tc := range []struct {
		doc, want string
	}{
		{"wokers: 2\n", `yaml: line 1: unknown key "wokers" (did you mean workers?)`},
		{"tier:\n  adress: x\n", `yaml: line 2: unknown key "adress" (did you mean address?)`},
		{"kafka:\n  brokers: [k:1]\n  password: x\n", `yaml: line 3: unknown key "password"`},
		{"zzzzzzzz: 1\nlistne: x\n", `yaml: line 1: unknown key "zzzzzzzz"; line 2: unknown key "listne" (did you mean listen?)`},
		{"catalogs:\n  default: {uri: /c.db, passwrd: x}\n", `(did you mean password?)`},
		{"ledger_retention: 1x\n", "yaml: line 1: the string `1x` is not a duration (such as 30s, 15m or 720h)"},
		{"ledger_retention: 5\n", "yaml: line 1: `5` is not a duration (such as 30s, 15m or 720h)"},
		{"workers: two\n", "yaml: line 1: the string `two` is not a whole number"},
		{"workers: '2'\n", "yaml: line 1: the string `2` is not a whole number (a quoted value is a string: write it without quotes)"},
		{"workers: [1, 2]\n", "yaml: line 1: a list is not a whole number"},
		{"tier: x\n", "yaml: line 1: a string is not a mapping of keys to values"},
		{"policies: x\n", "yaml: line 1: a string is not a list"},
		// A string where a mapping or list belongs is not quoted: it may be
		// a secret indented one level too shallow (a catalog's password
		// read as a catalog).
		{"catalogs:\n  default:\n    type: sql\n  password: Pw0rd!x9\n", "yaml: line 4: a string is not a mapping of keys to values"},
		{"tier:\n  embedded: maybe\n", "yaml: line 2: the string `maybe` is not true or false"},
	} {
		var cfg PromoterConfig
		err := decodeStrict(strings.NewReader(tc.doc), &cfg)
		if err == nil || !strings.HasSuffix(err.Error(), tc.want) || strings.Contains(err.Error(), "not found in type") {
			t.Errorf("%q: %v, want %q", tc.doc, err, tc.want)
		}
		if tc.want == `yaml: line 3: unknown key "password"` && err != nil && strings.Contains(err.Error(), "did you mean") {
			t.Errorf("%q: %v offers a key of another section", tc.doc, err)
		}
	}
	for _, tc := range []struct {
		s, key string
	}{{"wokers", "workers"}, {"Workers", "workers"}, {"ac", ""}, {"prefx", "prefix"}, {"xyzzy", ""}} {
		if got := closestKey(tc.s, []string{"workers", "prefix", "listen", "ab"}); got != tc.key {
			t.Errorf("closestKey(%q) = %q, want %q", tc.s, got, tc.key)
		}
	}
}
