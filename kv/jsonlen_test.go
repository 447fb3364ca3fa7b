package kv

import (
	"bytes"
	"encoding/json"
	"testing"
)

func TestJSONLenMatchesEncoder(t *testing.T) {
	cases := []string{"", "abc", "a\"b\\c", "\x01\x1f\n\r\t", "é€😀", "\u2028\u2029", "\xff\xfe", "a\xe2\x80", "\xef\xbf\xbd", "<>&"}
	for c := range 0x80 { // every ASCII character (\b and \f took 6, not 2)
		cases = append(cases, string(rune(c)))
	}
	for _, s := range cases {
		var b bytes.Buffer
		enc := json.NewEncoder(&b)
		enc.SetEscapeHTML(false)
		if err := enc.Encode(s); err != nil {
			t.Fatal(err)
		}
		if want := b.Len() - 3; jsonLen(s) != want {
			t.Errorf("jsonLen(%q) = %d, encoding/json writes %d", s, jsonLen(s), want)
		}
	}
}
