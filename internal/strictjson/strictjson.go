// Package strictjson checks what encoding/json does not, for thaw's strict
// parsers of serialized state (build contexts and results, ledger records,
// configs, request bodies): encoding/json keeps the last of repeated keys,
// matches member names case-insensitively, accepts null for any member and
// ignores nothing after the value only when asked. Check catches those, so
// a parser can then decode with DisallowUnknownFields knowing that names
// match exactly; Members checks an object's member set.
//
// Standard library only.
package strictjson

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"slices"
	"strconv"
	"unicode/utf8"
)

// Options tune Check. The zero value checks a document whose every
// object key is a lowercase snake_case member name.
type Options struct {
	// MaxDepth bounds the nesting of arrays and objects; 0 means 32.
	MaxDepth int
	// FreeKeys names top-level members whose value, an object, has keys of
	// the user's choosing (HTTP headers, properties): those keys are only
	// checked for repeats, not for their spelling.
	FreeKeys []string
	// NoNull makes a null member value an error in every object, not only
	// at the top level (which Check reports in its result either way).
	NoNull bool
}

// Check checks one JSON document: valid text (see Text); one value and
// nothing after it; no key repeated within an object; every key spelled
// [a-z0-9_] (names then match the struct tags of lowercase snake_case
// members exactly) except under FreeKeys; nesting at most MaxDepth deep.
// For a document that is an object it returns its members, each mapped to
// whether its value is null; for any other value, nil. Errors read Text's
// ("invalid utf-8 at byte N", "unpaired surrogate ..."), "trailing data
// after the document", `unknown member "K"`, `duplicate member "K"`,
// `member "K" is null`, "nested deeper than N" or encoding/json's syntax
// error.
func Check(b []byte, o Options) (map[string]bool, error) {
	if err := Text(b); err != nil {
		return nil, err
	}
	maxDepth := o.MaxDepth
	if maxDepth <= 0 {
		maxDepth = 32
	}
	type frame struct {
		object, wantKey, free bool
		keys                  map[string]bool // key → its value is null
		last                  string          // the key whose value is next
	}
	var stack []*frame
	var top map[string]bool
	done := false
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.UseNumber()
	for {
		tok, err := dec.Token()
		switch {
		case errors.Is(err, io.EOF) && done:
			return top, nil
		case errors.Is(err, io.EOF):
			return nil, errors.New("unexpected end of JSON input")
		case err != nil && done:
			return nil, fmt.Errorf("trailing data after the document: %w", err)
		case err != nil:
			return nil, err
		case done:
			return nil, errors.New("trailing data after the document")
		}
		n := len(stack)
		if n > 0 && stack[n-1].object && stack[n-1].wantKey {
			if key, ok := tok.(string); ok {
				f := stack[n-1]
				if !f.free && !snakeCase(key) {
					return nil, fmt.Errorf("unknown member %q", key)
				}
				if _, dup := f.keys[key]; dup {
					return nil, fmt.Errorf("duplicate member %q", key)
				}
				f.keys[key], f.wantKey, f.last = false, false, key
				continue
			}
		}
		if tok == nil && n > 0 && stack[n-1].object {
			if o.NoNull {
				return nil, fmt.Errorf("member %q is null", stack[n-1].last)
			}
			stack[n-1].keys[stack[n-1].last] = true
		}
		switch tok {
		case json.Delim('{'), json.Delim('['):
			if n == maxDepth {
				return nil, fmt.Errorf("nested deeper than %d", maxDepth)
			}
			f := &frame{object: tok == json.Delim('{'), wantKey: true, keys: map[string]bool{}}
			f.free = n == 1 && f.object && slices.Contains(o.FreeKeys, stack[0].last)
			if n == 0 && f.object {
				top = f.keys
			}
			stack = append(stack, f)
			continue
		case json.Delim('}'), json.Delim(']'):
			stack = stack[:n-1]
			n--
		}
		if n == 0 {
			done = true
		} else if stack[n-1].object {
			stack[n-1].wantKey = true
		}
	}
}

// Members checks the members of an object (as Check returns them): every
// present one required or optional, none null, every required one present.
// It names the first member at fault, unknown ones in sorted order.
func Members(members map[string]bool, required, optional []string) error {
	for _, k := range slices.Sorted(maps.Keys(members)) {
		if !slices.Contains(required, k) && !slices.Contains(optional, k) {
			return fmt.Errorf("unknown member %q", k)
		}
		if members[k] {
			return fmt.Errorf("member %q is null", k)
		}
	}
	for _, k := range required {
		if _, ok := members[k]; !ok {
			return fmt.Errorf("missing member %q", k)
		}
	}
	return nil
}

// Text checks what encoding/json would silently replace with U+FFFD
// (and so change the data it decodes): bytes that are not UTF-8, and \u
// escapes of a surrogate that is not half of a pair. Errors read "invalid
// utf-8 at byte N" and "unpaired surrogate \ud800 at byte N". A
// backslash is only valid JSON inside a string, so the scan needs no
// tokenizer: whatever else is wrong is left to the decoder.
func Text(b []byte) error {
	if !utf8.Valid(b) {
		return fmt.Errorf("invalid utf-8 at byte %d", invalidAt(b))
	}
	for i := 0; i < len(b); i++ {
		if b[i] != '\\' {
			continue
		}
		r, ok := escapedRune(b, i)
		if !ok {
			i++ // a two-byte escape such as \\ or \"; a bad one is the decoder's
			continue
		}
		switch {
		case r >= 0xD800 && r < 0xDC00: // high half: a low half must follow
			if lo, ok := escapedRune(b, i+6); ok && lo >= 0xDC00 && lo < 0xE000 {
				i += 11
				continue
			}
			return fmt.Errorf("unpaired surrogate %s at byte %d", b[i:i+6], i)
		case r >= 0xDC00 && r < 0xE000:
			return fmt.Errorf("unpaired surrogate %s at byte %d", b[i:i+6], i)
		}
		i += 5
	}
	return nil
}

// escapedRune reads the \uXXXX escape at b[i:], if there is one.
func escapedRune(b []byte, i int) (rune, bool) {
	if i+6 > len(b) || b[i] != '\\' || b[i+1] != 'u' {
		return 0, false
	}
	r, err := strconv.ParseUint(string(b[i+2:i+6]), 16, 16)
	return rune(r), err == nil
}

// invalidAt is the offset of the first byte of b that does not start a
// valid UTF-8 sequence.
func invalidAt(b []byte) int {
	for i := 0; i < len(b); {
		r, n := utf8.DecodeRune(b[i:])
		if r == utf8.RuneError && n <= 1 {
			return i
		}
		i += n
	}
	return len(b)
}

func snakeCase(s string) bool {
	for _, c := range []byte(s) {
		if (c < 'a' || c > 'z') && (c < '0' || c > '9') && c != '_' {
			return false
		}
	}
	return s != ""
}
