package strictjson

import (
	"maps"
	"strings"
	"testing"
)

func TestCheck(t *testing.T) {
	for _, tc := range []struct {
		name string
		doc  string
		o    Options
		want string          // error substring; "" accepts
		top  map[string]bool // members when accepted (nil: not an object)
	}{
		{"object", `{"a":1,"b_2":[{"c":null}],"d":null}`, Options{}, "", map[string]bool{"a": false, "b_2": false, "d": true}},
		{"array", `[1,{"a":2}]`, Options{}, "", nil},
		{"scalar", ` 7 `, Options{}, "", nil},
		{"empty", ``, Options{}, "unexpected end", nil},
		{"unclosed", `{"a":1`, Options{}, "unexpected end", nil},
		{"invalid utf-8", "{\"a\":\"\xff\"}", Options{}, "invalid utf-8", nil},
		{"trailing value", `{}{}`, Options{}, "trailing data after the document", nil},
		{"trailing brace", `{"a":1}}`, Options{}, "trailing data after the document", nil},
		{"trailing garbage", `{"a":1} x`, Options{}, "trailing data after the document", nil},
		{"repeated key", `{"a":1,"a":2}`, Options{}, `duplicate member "a"`, nil},
		{"repeated nested key", `{"a":{"b":1,"b":1}}`, Options{}, `duplicate member "b"`, nil},
		{"upper case", `{"A":1}`, Options{}, `unknown member "A"`, nil},
		{"nested upper case", `{"a":[{"Bc":1}]}`, Options{}, `unknown member "Bc"`, nil},
		{"empty key", `{"":1}`, Options{}, `unknown member ""`, nil},
		{"free keys", `{"headers":{"X-Api":"1"}}`, Options{FreeKeys: []string{"headers"}}, "", map[string]bool{"headers": false}},
		{"free keys repeated", `{"headers":{"X":"1","X":"2"}}`, Options{FreeKeys: []string{"headers"}}, `duplicate member "X"`, nil},
		{"free only at the top", `{"a":{"headers":{"X":"1"}}}`, Options{FreeKeys: []string{"headers"}}, `unknown member "X"`, nil},
		{"null allowed", `{"a":{"b":null}}`, Options{}, "", map[string]bool{"a": false}},
		{"null refused", `{"a":{"b":null}}`, Options{NoNull: true}, `member "b" is null`, nil},
		{"null in an array is no member", `{"a":[null]}`, Options{NoNull: true}, "", map[string]bool{"a": false}},
		{"depth ok", strings.Repeat("[", 3) + strings.Repeat("]", 3), Options{MaxDepth: 3}, "", nil},
		{"too deep", strings.Repeat("[", 4) + strings.Repeat("]", 4), Options{MaxDepth: 3}, "nested deeper than 3", nil},
		{"default depth", strings.Repeat("[", 33) + strings.Repeat("]", 33), Options{}, "nested deeper than 32", nil},
		{"syntax", `{"a" 1}`, Options{}, "invalid character", nil},
		{"lone surrogate", `{"a":"x\ud800"}`, Options{}, `unpaired surrogate \ud800 at byte 7`, nil},
		{"surrogate pair", `{"a":"\ud83d\ude00"}`, Options{}, "", map[string]bool{"a": false}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			top, err := Check([]byte(tc.doc), tc.o)
			if tc.want != "" {
				if err == nil || !strings.Contains(err.Error(), tc.want) {
					t.Fatalf("Check(%q) = %v, want an error containing %q", tc.doc, err, tc.want)
				}
				return
			}
			if err != nil {
				t.Fatalf("Check(%q): %v", tc.doc, err)
			}
			if (top == nil) != (tc.top == nil) || !maps.Equal(top, tc.top) {
				t.Fatalf("Check(%q) members %v, want %v", tc.doc, top, tc.top)
			}
		})
	}
}

// TestText: exactly what encoding/json would replace with U+FFFD is
// refused, with its offset.
func TestText(t *testing.T) {
	for _, tc := range []struct {
		doc, want string // want: the error; "" accepts
	}{
		{`"plain é 😀"`, ""},
		{`"\u00e9 \u0041 \uFFFD \uE000 \uD7FF"`, ""},
		{`"\ud83d\ude00"`, ""},
		{`"\uD83D\uDE00"`, ""},
		{`"\\ud800"`, ""}, // an escaped backslash, then text
		{`"\\\ud800"`, `unpaired surrogate \ud800 at byte 3`},
		{`"\ud800"`, `unpaired surrogate \ud800 at byte 1`},
		{`"\udc00"`, `unpaired surrogate \udc00 at byte 1`},
		{`"\ud800x"`, `unpaired surrogate \ud800 at byte 1`},
		{`"\ud800\u0041"`, `unpaired surrogate \ud800 at byte 1`},
		{`"\ud800\ud800"`, `unpaired surrogate \ud800 at byte 1`},
		{`"\ud800\n"`, `unpaired surrogate \ud800 at byte 1`},
		{`"\ud83d\ude00\ude00"`, `unpaired surrogate \ude00 at byte 13`},
		{`"\u12"`, ""}, // too short: the decoder's to refuse
		{"\"caf\xe9\"", "invalid utf-8 at byte 4"},
		{"\"\xed\xa0\x80\"", "invalid utf-8 at byte 1"}, // a surrogate in UTF-8 bytes
	} {
		err := Text([]byte(tc.doc))
		if (tc.want == "") != (err == nil) || (err != nil && err.Error() != tc.want) {
			t.Errorf("Text(%q) = %v, want %q", tc.doc, err, tc.want)
		}
	}
}

func TestMembers(t *testing.T) {
	req, opt := []string{"a", "b"}, []string{"c"}
	for _, tc := range []struct {
		members map[string]bool
		want    string
	}{
		{map[string]bool{"a": false, "b": false}, ""},
		{map[string]bool{"a": false, "b": false, "c": false}, ""},
		{map[string]bool{"a": false}, `missing member "b"`},
		{map[string]bool{"a": false, "b": false, "z": false, "y": false}, `unknown member "y"`},
		{map[string]bool{"a": false, "b": true}, `member "b" is null`},
		{map[string]bool{"a": false, "b": false, "c": true}, `member "c" is null`},
	} {
		err := Members(tc.members, req, opt)
		if (tc.want == "") != (err == nil) || (err != nil && err.Error() != tc.want) {
			t.Fatalf("Members(%v) = %v, want %q", tc.members, err, tc.want)
		}
	}
}

func FuzzCheck(f *testing.F) {
	for _, s := range []string{`{"a":1}`, `[{"b":[null,{"c":"d"}]}]`, `{"headers":{"X":"1"}}`, `"x"`, `{}{}`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		top, err := Check(b, Options{FreeKeys: []string{"headers"}})
		if err != nil {
			return
		}
		// What Check accepts is one valid JSON value.
		if _, err2 := Check(append(append([]byte{}, b...), ' '), Options{FreeKeys: []string{"headers"}}); err2 != nil {
			t.Fatalf("accepted %q but not with a trailing space: %v", b, err2)
		}
		if top != nil && !strings.HasPrefix(strings.TrimLeft(string(b), " \t\r\n"), "{") {
			t.Fatalf("members of %q, which is not an object", b)
		}
	})
}
