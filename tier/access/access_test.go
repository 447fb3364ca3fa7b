package access

import (
	"strings"
	"testing"
)

func TestPatterns(t *testing.T) {
	for _, p := range []string{"*", "shop.*", "shop.items", "a-b.c_d"} {
		if err := CheckPattern(p); err != nil {
			t.Errorf("CheckPattern(%q): %v", p, err)
		}
	}
	for _, p := range []string{"", "shop", "shop.", ".items", "*.items", "sh*.items", "shop.it*", "a.b.c", "**", "shop.**",
		// Names no database or table can have: they matched nothing, silently.
		"shop.items ", " shop.*", "shop.it$ems", "sh op.items", "shöp.*"} {
		if err := CheckPattern(p); err == nil {
			t.Errorf("CheckPattern(%q) accepted", p)
		}
	}
	for _, tc := range []struct {
		p, db, table string
		want         bool
	}{
		{"*", "shop", "items", true},
		{"shop.*", "shop", "items", true},
		{"shop.*", "shopping", "items", false},
		{"shop.items", "shop", "items", true},
		{"shop.items", "shop", "items2", false},
		{"shop.items", "lake", "items", false},
	} {
		if got := Match(tc.p, tc.db, tc.table); got != tc.want {
			t.Errorf("Match(%q, %s, %s) = %v", tc.p, tc.db, tc.table, got)
		}
	}
	if !MatchAny([]string{"lake.x", "shop.*"}, "shop", "a") || MatchAny(nil, "shop", "a") || MatchAny([]string{"lake.*"}, "shop", "a") {
		t.Error("MatchAny")
	}
	if !MatchDatabase([]string{"shop.*"}, "shop") || !MatchDatabase([]string{"*"}, "shop") || MatchDatabase([]string{"shop.items"}, "shop") {
		t.Error("MatchDatabase")
	}
}

func TestBearer(t *testing.T) {
	for _, tc := range []struct {
		in   []string
		tok  string
		isOK bool
	}{
		{[]string{"Bearer abc"}, "abc", true},
		{nil, "", false},
		{[]string{"Bearer "}, "", false},
		{[]string{"bearer abc"}, "", false},
		{[]string{"Basic abc"}, "", false},
		{[]string{"Bearer a", "Bearer b"}, "", false},
	} {
		tok, ok := Bearer(tc.in)
		if ok != tc.isOK || (ok && tok != tc.tok) {
			t.Errorf("Bearer(%q) = %q, %v", tc.in, tok, ok)
		}
	}
	if h := TokenSHA256("abc"); h != "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad" || CheckTokenSHA256(h) != nil {
		t.Errorf("TokenSHA256: %s", h)
	}
	if CheckName("etl-1.prod_x") != nil || CheckName("ETL") == nil || CheckName("") == nil {
		t.Error("CheckName")
	}
}

func TestIdentities(t *testing.T) {
	var ids Identities
	h1, h2 := TokenSHA256("one-0123456789abcdef"), TokenSHA256("two-0123456789abcdef")
	for i, tc := range []struct {
		name, hash string
		want       []string
	}{
		{"a", h1, nil},
		{"b", h2, nil},
		{"a", TokenSHA256("three-0123456789abc"), []string{"caller a: named twice"}},
		{"c", h1, []string{"caller c: token sha256 also of caller a"}},
		{"D", "abc", []string{`caller 4: name "D"`, "caller D: token sha256 is not 64 lowercase hex digits"}},
	} {
		errs := ids.Add(i, tc.name, tc.hash)
		if len(errs) != len(tc.want) {
			t.Fatalf("%s: %v, want %v", tc.name, errs, tc.want)
		}
		for i, w := range tc.want {
			if !strings.Contains(errs[i].Error(), w) {
				t.Errorf("%s: %v, want %q", tc.name, errs[i], w)
			}
		}
	}
}
