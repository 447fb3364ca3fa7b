package coordinator

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"strings"
	"testing"

	"connectrpc.com/connect"

	"github.com/thawdb/thaw/bulkload"
	"github.com/thawdb/thaw/tier/tierpb"
)

func hashOf(tok string) string {
	s := sha256.Sum256([]byte(tok))
	return hex.EncodeToString(s[:])
}

func TestCallersValidate(t *testing.T) {
	good := Caller{Name: "etl", TokenSHA256: hashOf("t1"), Tables: []string{"shop.items", "lake.*", "*"}}
	if err := ValidateCallers([]Caller{good}); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name    string
		callers []Caller
		want    string
	}{
		{"bad name", []Caller{{Name: "ETL", TokenSHA256: hashOf("t"), Tables: []string{"*"}}}, "name"},
		{"twice", []Caller{good, {Name: "etl", TokenSHA256: hashOf("t2"), Tables: []string{"*"}}}, "named twice"},
		{"same token", []Caller{good, {Name: "other", TokenSHA256: hashOf("t1"), Tables: []string{"*"}}}, "also of caller etl"},
		{"upper hex", []Caller{{Name: "a", TokenSHA256: strings.ToUpper(hashOf("t")), Tables: []string{"*"}}}, "lowercase hex"},
		{"no tables", []Caller{{Name: "a", TokenSHA256: hashOf("t")}}, "no tables"},
		{"partial wildcard", []Caller{{Name: "a", TokenSHA256: hashOf("t"), Tables: []string{"shop.it*"}}}, "table pattern"},
		{"database wildcard", []Caller{{Name: "a", TokenSHA256: hashOf("t"), Tables: []string{"*.items"}}}, "table pattern"},
		{"no table", []Caller{{Name: "a", TokenSHA256: hashOf("t"), Tables: []string{"shop"}}}, "table pattern"},
		{"three parts", []Caller{{Name: "a", TokenSHA256: hashOf("t"), Tables: []string{"a.b.c"}}}, "table pattern"},
	} {
		if err := ValidateCallers(tc.callers); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: %v, want an error about %s", tc.name, err, tc.want)
		}
	}
}

func TestCallerAuthorization(t *testing.T) {
	a, err := newAuthn([]Caller{
		{Name: "one", TokenSHA256: hashOf("token-one"), Tables: []string{"shop.items"}},
		{Name: "db", TokenSHA256: hashOf("token-db"), Tables: []string{"lake.*"}},
		{Name: "all", TokenSHA256: hashOf("token-all"), Tables: []string{"*"}},
	})
	if err != nil {
		t.Fatal(err)
	}
	c := &Coordinator{auth: a}
	for _, tc := range []struct {
		tok    string
		target bulkload.Target
		ok     bool
	}{
		{"token-one", bulkload.Target{Database: "shop", Table: "items"}, true},
		{"token-one", bulkload.Target{Database: "shop", Table: "items", Partition: "2024-01-01"}, true},
		{"token-one", bulkload.Target{Database: "shop", Table: "itemsx"}, false},
		{"token-one", bulkload.Target{Database: "lake", Table: "items"}, false},
		{"token-db", bulkload.Target{Database: "lake", Table: "events"}, true},
		{"token-db", bulkload.Target{Database: "lakes", Table: "events"}, false},
		{"token-all", bulkload.Target{Database: "x", Table: "y"}, true},
	} {
		caller, err := a.authenticate([]string{"Bearer " + tc.tok})
		if err != nil {
			t.Fatal(err)
		}
		err = c.allowed(withCaller(t.Context(), caller), tc.target)
		if (err == nil) != tc.ok {
			t.Errorf("%s on %s: %v", tc.tok, tc.target, err)
		}
		if err != nil && tierpb.ReasonOf(err) != tierpb.ReasonPermissionDenied {
			t.Errorf("%s on %s: reason %s", tc.tok, tc.target, tierpb.ReasonOf(err))
		}
	}
	for name, h := range map[string][]string{
		"none": nil, "two": {"Bearer token-one", "Bearer token-all"}, "basic": {"Basic dG9rZW4tb25l"},
		"unknown": {"Bearer token-two"}, "lowercase scheme": {"bearer token-one"},
	} {
		_, err := a.authenticate(h)
		var ce *connect.Error
		if !errors.As(err, &ce) || tierpb.ReasonOf(err) != tierpb.ReasonUnauthenticated || strings.Contains(err.Error(), "token-") {
			t.Errorf("%s: %v", name, err)
		}
	}
	// Authentication off: everyone may.
	if err := (&Coordinator{}).allowed(t.Context(), bulkload.Target{Database: "x", Table: "y"}); err != nil {
		t.Fatal(err)
	}
}
