package kafkalog

import (
	"fmt"
	"strings"
	"testing"

	"github.com/thawdb/thaw/tier/meta"
)

func TestIdentity(t *testing.T) {
	many := make([]string, 40)
	for i := range many {
		many[i] = fmt.Sprintf("broker-%02d.kafka.example.com:9092", i)
	}
	longPrefix := strings.Repeat("p", 200)
	for _, c := range []struct {
		cluster string
		brokers []string
		prefix  string
		want    string // "" when the name is hashed
	}{
		{"MkU3OEVBNTcwNTJENDM2Qk", []string{"b:9092"}, "thaw.changelog", "kafka:MkU3OEVBNTcwNTJENDM2Qk/thaw.changelog"},
		{"", []string{"b:9092", "a:9092", "b:9092"}, "it", "kafka:brokers=a:9092,b:9092/it"},
		{"", many, "it", ""},
		{"", many, longPrefix, ""},
		{"id with spaces", nil, "it", ""},
		{"id\x00", nil, "it", ""},
		{"brokers=a:1", nil, "it", ""},
		{strings.Repeat("c", maxIdentityName+1), nil, longPrefix, ""},
	} {
		got := identity(c.cluster, c.brokers, c.prefix)
		if err := meta.CheckChangelogIdentity(got); err != nil {
			t.Errorf("identity(%q, %d brokers, %d-byte prefix) = %q: %v", c.cluster, len(c.brokers), len(c.prefix), got, err)
		}
		if !strings.HasSuffix(got, "/"+c.prefix) {
			t.Errorf("identity(%q, ...) = %q: not ending in the topic prefix", c.cluster, got)
		}
		if c.want != "" && got != c.want {
			t.Errorf("identity(%q, %q, %q) = %q, want %q", c.cluster, c.brokers, c.prefix, got, c.want)
		}
		if c.want == "" && !strings.HasPrefix(got, "kafka:sha256=") {
			t.Errorf("identity(%q, %d brokers, ...) = %q, want a hashed name", c.cluster, len(c.brokers), got)
		}
	}

	// The seeds' order and repeats do not matter; which seeds do, and so
	// does the topic prefix.
	reversed := make([]string, 0, 2*len(many))
	for i := len(many) - 1; i >= 0; i-- {
		reversed = append(reversed, many[i], many[i])
	}
	if a, b := identity("", many, "it"), identity("", reversed, "it"); a != b {
		t.Errorf("same seeds in another order: %q and %q", a, b)
	}
	distinct := map[string]string{}
	for name, id := range map[string]string{
		"40 seeds":          identity("", many, "it"),
		"39 seeds":          identity("", many[1:], "it"),
		"40 seeds, prefix2": identity("", many, "it2"),
		"two seeds":         identity("", many[:2], "it"),
		"cluster id":        identity("brokers=a:1", nil, "it"),
		"seed a:1":          identity("", []string{"a:1"}, "it"),
		"cluster id, long":  identity("brokers="+strings.Join(many, ","), nil, "it"),
	} {
		if other, dup := distinct[id]; dup {
			t.Errorf("%s and %s share identity %q", name, other, id)
		}
		distinct[id] = name
	}
}
