package daemon

import (
	"cmp"
	"errors"
	"fmt"
	"reflect"
	"regexp"
	"strconv"
	"strings"

	"gopkg.in/yaml.v3"
)

// unknownField is how yaml.v3 words a key that the target type does not
// have: "line 15: field wokers not found in type daemon.PromoterConfig".
var unknownField = regexp.MustCompile(`^line (\d+): field (.+) not found in type (\S+)$`)

// wrongType is how yaml.v3 words a value of the wrong kind: "line 15:
// cannot unmarshal !!str `1x` into time.Duration" (a mapping or a list has
// no value in the message).
var wrongType = regexp.MustCompile("^line (\\d+): cannot unmarshal !!(\\w+) (?:`(.*)` )?into (\\S+)$")

// kindOf words what a value of Go type t (as yaml.v3 prints it) is written as.
func kindOf(t string) string {
	t = strings.TrimLeft(t, "*")
	switch {
	case t == "time.Duration":
		return "a duration (such as 30s, 15m or 720h)"
	case t == "bool":
		return "true or false"
	case t == "string":
		return "a string"
	case strings.HasPrefix(t, "int") || strings.HasPrefix(t, "uint"):
		return "a whole number"
	case strings.HasPrefix(t, "float"):
		return "a number"
	case strings.HasPrefix(t, "[]"):
		return "a list"
	}
	return "a mapping of keys to values"
}

// wrongKind words a value of YAML kind tag ("str", "int", "seq", ...),
// written as value, that a key of Go type t cannot take.
func wrongKind(line, tag, value, t string) string {
	what := map[string]string{"map": "a mapping", "seq": "a list"}[tag]
	kind := kindOf(t)
	switch {
	case tag == "str" && (kind == kindOf("map") || kind == kindOf("[]")):
		// Not quoted: a string where a mapping or list belongs may be a
		// secret indented one level too shallow (a catalog's password
		// read as a catalog; yaml.v3 gives up to 10 characters of it).
		what = "a string"
	case tag == "str" && value != "":
		what = "the string `" + value + "`"
	case value != "":
		what = "`" + value + "`"
	}
	msg := fmt.Sprintf("line %s: %s is not %s", line, cmp.Or(what, "the value"), kind)
	if tag == "str" && wouldParse(value, kind) {
		msg += " (a quoted value is a string: write it without quotes)"
	}
	return msg
}

// wouldParse reports whether value, unquoted, is of kind.
func wouldParse(value, kind string) bool {
	switch kind {
	case "a whole number":
		_, err := strconv.ParseInt(value, 0, 64)
		return err == nil
	case "a number":
		_, err := strconv.ParseFloat(value, 64)
		return err == nil
	case "true or false":
		return value == "true" || value == "false"
	}
	return false
}

// describeYAMLError rewords yaml.v3's errors for a config file's reader,
// without Go type names: an unknown key is named as such, with the
// closest key of its section when there is one, and a value of the wrong
// kind says what the key takes; other errors are left as they are.
func describeYAMLError(err error, v any) error {
	var te *yaml.TypeError
	if !errors.As(err, &te) {
		return err
	}
	var keys map[string][]string
	msgs := make([]string, len(te.Errors))
	for i, m := range te.Errors {
		if wt := wrongType.FindStringSubmatch(m); wt != nil {
			msgs[i] = wrongKind(wt[1], wt[2], wt[3], wt[4])
			continue
		}
		sm := unknownField.FindStringSubmatch(m)
		if sm == nil {
			msgs[i] = m
			continue
		}
		if keys == nil {
			keys = map[string][]string{}
			yamlKeys(reflect.TypeOf(v), keys)
		}
		msgs[i] = fmt.Sprintf("line %s: unknown key %q", sm[1], sm[2])
		if k := closestKey(sm[2], keys[sm[3]]); k != "" {
			msgs[i] += fmt.Sprintf(" (did you mean %s?)", k)
		}
	}
	return fmt.Errorf("yaml: %s", strings.Join(msgs, "; "))
}

// yamlKeys records, by type name as yaml.v3 prints it, the keys (yaml
// tags) of every struct reachable from t through pointers, slices, arrays
// and map values.
func yamlKeys(t reflect.Type, keys map[string][]string) {
	for t.Kind() == reflect.Pointer || t.Kind() == reflect.Slice || t.Kind() == reflect.Array || t.Kind() == reflect.Map {
		t = t.Elem()
	}
	if t.Kind() != reflect.Struct {
		return
	}
	if _, seen := keys[t.String()]; seen {
		return
	}
	keys[t.String()] = []string{}
	for f := range t.Fields() {
		if name, _, _ := strings.Cut(f.Tag.Get("yaml"), ","); name != "" && name != "-" {
			keys[t.String()] = append(keys[t.String()], name)
		}
		yamlKeys(f.Type, keys)
	}
}

// closestKey returns the key nearest to s by edit distance, if it is near
// enough to be a typo of it (at most 2 edits, fewer than half of s).
func closestKey(s string, keys []string) string {
	best, bestD := "", 3
	for _, k := range keys {
		if d := editDistance(strings.ToLower(s), k); d < bestD && 2*d < len(s) {
			best, bestD = k, d
		}
	}
	return best
}

// editDistance is the Levenshtein distance of a and b (bytes).
func editDistance(a, b string) int {
	prev := make([]int, len(b)+1)
	cur := make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur[0] = i
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
		}
		prev, cur = cur, prev
	}
	return prev[len(b)]
}
