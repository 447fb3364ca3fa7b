package policies

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"math"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"unicode"
	"unicode/utf8"

	"gopkg.in/yaml.v3"
)

// Parse decodes every document of data (documents are separated by ---).
// name is the file name used in errors. On any problem it returns nil and an
// Errors holding every problem found, sorted by line.
func Parse(data []byte, name string) ([]*Policy, error) {
	p := &parser{file: name}
	docs := p.decode(data)
	var out []*Policy
	seen := map[string]*Policy{}
	for _, doc := range docs {
		pol := p.document(doc)
		if pol == nil {
			continue
		}
		if first, ok := seen[pol.name]; ok {
			p.errs = append(p.errs, &Error{File: name, Line: pol.line, Column: pol.col, Field: "metadata.name",
				Msg: fmt.Sprintf("duplicate policy name %q (first defined at line %d)", pol.name, first.line)})
			continue
		}
		seen[pol.name] = pol
		out = append(out, pol)
	}
	if len(p.errs) > 0 {
		p.errs.sort()
		return nil, p.errs
	}
	return out, nil
}

type parser struct {
	file string
	errs Errors
}

func (p *parser) errAt(n *yaml.Node, field, format string, args ...any) {
	e := &Error{File: p.file, Field: field, Msg: fmt.Sprintf(format, args...)}
	if n != nil {
		e.Line, e.Column = n.Line, n.Column
	}
	p.errs = append(p.errs, e)
}

var yamlLine = regexp.MustCompile(`^yaml: line (\d+): (.*)$`)

// yamlParserProblems are the messages of yaml.v3's parser errors (parserc.go),
// whose line numbers it reports 0-based; scanner errors are 1-based.
var yamlParserProblems = map[string]bool{
	"did not find expected ',' or ']'":       true,
	"did not find expected ',' or '}'":       true,
	"did not find expected '-' indicator":    true,
	"did not find expected <document start>": true,
	"did not find expected <stream-start>":   true,
	"did not find expected key":              true,
	"did not find expected node content":     true,
	"found duplicate %TAG directive":         true,
	"found duplicate %YAML directive":        true,
	"found incompatible YAML document":       true,
}

// decode splits data into document nodes. A YAML syntax error ends the
// stream; documents before it are still checked.
func (p *parser) decode(data []byte) (docs []*yaml.Node) {
	if !utf8.Valid(data) {
		line, col := invalidUTF8(data)
		p.errs = append(p.errs, &Error{File: p.file, Line: line, Column: col, Msg: "not valid UTF-8"})
		return nil
	}
	defer func() {
		// yaml.v3 has panicked on hostile input in the past; a policy file is
		// input, so turn a panic into an error rather than crash the promoter.
		if r := recover(); r != nil {
			p.errs = append(p.errs, &Error{File: p.file, Line: 1, Column: 1, Msg: fmt.Sprintf("malformed YAML: %v", r)})
			docs = nil
		}
	}()
	dec := yaml.NewDecoder(bytes.NewReader(data))
	for {
		var n yaml.Node
		err := dec.Decode(&n)
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			p.syntaxError(data, err)
			break
		}
		if p.boundAliases(&n) {
			docs = append(docs, &n)
		}
	}
	if len(docs) == 0 && len(p.errs) == 0 {
		p.errs = append(p.errs, &Error{File: p.file, Line: 1, Column: 1, Msg: "no policy documents"})
	}
	return docs
}

// boundAliases refuses a document whose aliases (*name) expand to more
// than maxExpandedNodes nodes, and says whether it is within. An alias is
// expanded at every use: a few kilobytes of them stand for millions of
// values (yaml.v3 limits expansion only when decoding into Go values, not
// into nodes, which the parser walks).
func (p *parser) boundAliases(doc *yaml.Node) bool {
	sizes := map[*yaml.Node]int{}
	var size func(n *yaml.Node, depth int) int
	size = func(n *yaml.Node, depth int) int {
		if n == nil || depth > 64 {
			return maxExpandedNodes + 1 // deeper than any policy: refuse
		}
		if v, ok := sizes[n]; ok {
			return v
		}
		sizes[n] = maxExpandedNodes + 1 // an alias cycle counts as too large
		total := 1
		if n.Kind == yaml.AliasNode {
			total = size(n.Alias, depth+1)
		}
		for _, c := range n.Content {
			total += size(c, depth+1)
			if total > maxExpandedNodes {
				break
			}
		}
		total = min(total, maxExpandedNodes+1)
		sizes[n] = total
		return total
	}
	if size(doc, 0) > maxExpandedNodes {
		p.errAt(doc, "", "the document expands to more than %d values (through aliases, or nested deeper than 64)", maxExpandedNodes)
		return false
	}
	return true
}

// maxExpandedNodes bounds a policy document's YAML nodes with every alias
// expanded: far more than any policy needs (a where list holds at most
// maxListItems values).
const maxExpandedNodes = 100_000

func (p *parser) syntaxError(data []byte, err error) {
	msg := strings.TrimPrefix(err.Error(), "yaml: ")
	line, col := 1, 1
	if m := yamlLine.FindStringSubmatch(err.Error()); m != nil {
		line, _ = strconv.Atoi(m[1])
		msg = m[2]
		if yamlParserProblems[msg] {
			// yaml.v3 reports a parser (not scanner) error's 0-based line.
			line++
		}
	}
	// YAML forbids tabs in indentation and yaml.v3 reports only the line:
	// point at the first indenting tab at or before the reported line.
	lines := strings.Split(string(data), "\n")
	for i := 0; i < len(lines) && i < line; i++ {
		indent := len(lines[i]) - len(strings.TrimLeft(lines[i], " \t"))
		if j := strings.IndexByte(lines[i][:indent], '\t'); j >= 0 {
			p.errs = append(p.errs, &Error{File: p.file, Line: i + 1, Column: j + 1, Msg: "tab in indentation (YAML indents with spaces)"})
			return
		}
	}
	if line-1 < len(lines) {
		col = len(lines[line-1]) - len(strings.TrimLeft(lines[line-1], " ")) + 1
	}
	p.errs = append(p.errs, &Error{File: p.file, Line: line, Column: col, Msg: "malformed YAML: " + msg})
}

func invalidUTF8(data []byte) (line, col int) {
	line, col = 1, 1
	for len(data) > 0 {
		r, size := utf8.DecodeRune(data)
		if r == utf8.RuneError && size <= 1 {
			return line, col
		}
		if r == '\n' {
			line, col = line+1, 1
		} else {
			col++
		}
		data = data[size:]
	}
	return line, col
}

// --- node helpers ---

func deref(n *yaml.Node) *yaml.Node {
	for i := 0; n != nil && n.Kind == yaml.AliasNode && i < 8; i++ {
		n = n.Alias
	}
	return n
}

func kindOf(n *yaml.Node) string {
	switch n.Kind {
	case yaml.MappingNode:
		return "a mapping"
	case yaml.SequenceNode:
		return "a list"
	case yaml.ScalarNode:
		switch n.ShortTag() {
		case "!!null":
			return "null"
		case "!!int":
			return "an integer"
		case "!!bool":
			return "a boolean"
		case "!!float":
			return "a number"
		case "!!timestamp":
			return "a date"
		}
		return "a string"
	case yaml.AliasNode:
		return "an alias"
	}
	return "nothing"
}

func isNull(n *yaml.Node) bool {
	return n == nil || n.Kind == yaml.ScalarNode && n.ShortTag() == "!!null"
}

type entry struct{ key, val *yaml.Node }

type fields struct {
	node *yaml.Node
	m    map[string]entry
}

func (f fields) get(k string) (entry, bool) {
	e, ok := f.m[k]
	return e, ok
}

func join(path, key string) string {
	if path == "" {
		return key
	}
	return path + "." + key
}

// mapping checks that n is a mapping whose keys are strings, unique and among
// known (nil known = any key). ok is false when n is not a mapping.
func (p *parser) mapping(n *yaml.Node, path string, known ...string) (fields, bool) {
	n = deref(n)
	if n.Kind != yaml.MappingNode {
		p.errAt(n, path, "want a mapping, got %s", kindOf(n))
		return fields{}, false
	}
	f := fields{node: n, m: map[string]entry{}}
	for i := 0; i+1 < len(n.Content); i += 2 {
		k, v := deref(n.Content[i]), n.Content[i+1]
		if k.Kind != yaml.ScalarNode || isNull(k) {
			p.errAt(k, path, "a key must be a string, got %s", kindOf(k))
			continue
		}
		if prev, dup := f.m[k.Value]; dup {
			p.errAt(k, join(path, k.Value), "duplicate key %q (first at line %d)", k.Value, prev.key.Line)
			continue
		}
		if known != nil && !slices.Contains(known, k.Value) {
			p.errAt(k, join(path, k.Value), "unknown field %q (want one of %s)", k.Value, strings.Join(known, ", "))
			continue
		}
		f.m[k.Value] = entry{key: k, val: deref(v)}
	}
	return f, true
}

// require reports missing keys at the mapping node.
func (p *parser) require(f fields, path string, keys ...string) bool {
	ok := true
	for _, k := range keys {
		if _, has := f.m[k]; !has {
			p.errAt(f.node, path, "missing field %q", k)
			ok = false
		}
	}
	return ok
}

// str reads a non-null scalar as a string.
func (p *parser) str(n *yaml.Node, path string) (string, bool) {
	if n.Kind != yaml.ScalarNode || isNull(n) {
		p.errAt(n, path, "want a string, got %s", kindOf(n))
		return "", false
	}
	if i := strings.IndexFunc(n.Value, unicode.IsControl); i >= 0 {
		p.errAt(n, path, "control character %q in %q", n.Value[i], n.Value)
		return "", false
	}
	return n.Value, true
}

func (p *parser) integer(n *yaml.Node, path string, min, max int64) (int64, bool) {
	if n.Kind != yaml.ScalarNode || n.ShortTag() != "!!int" {
		p.errAt(n, path, "want an integer, got %s", kindOf(n))
		return 0, false
	}
	if n.Style&(yaml.DoubleQuotedStyle|yaml.SingleQuotedStyle) != 0 {
		p.errAt(n, path, "want an integer, got a quoted string (with a tag)")
		return 0, false
	}
	// Decimal digits only: yaml.v3 reads 010 as 8 (and takes 0x10, 0o10,
	// 0b1000, 1_6), where a policy's where conditions read 010 as 10.
	if !decimalInt.MatchString(n.Value) {
		p.errAt(n, path, "integer %s: write it in decimal digits, without leading zeros", n.Value)
		return 0, false
	}
	v, err := strconv.ParseInt(n.Value, 10, 64)
	if err != nil {
		p.errAt(n, path, "integer %s out of range", n.Value)
		return 0, false
	}
	if v < min || v > max {
		switch {
		case max == math.MaxInt64 || max == math.MaxInt32:
			p.errAt(n, path, "must be at least %d, got %d", min, v)
		default:
			p.errAt(n, path, "must be between %d and %d, got %d", min, max, v)
		}
		return 0, false
	}
	return v, true
}

var decimalInt = regexp.MustCompile(`^[-+]?(0|[1-9][0-9]*)$`)

func (p *parser) boolean(n *yaml.Node, path string) (bool, bool) {
	if n.Kind != yaml.ScalarNode || n.ShortTag() != "!!bool" {
		p.errAt(n, path, "want true or false, got %s", kindOf(n))
		return false, false
	}
	var v bool
	if err := n.Decode(&v); err != nil {
		p.errAt(n, path, "want true or false, got %q", n.Value)
		return false, false
	}
	return v, true
}

// size reads a byte size: an integer (bytes) or a string with a unit.
func (p *parser) size(n *yaml.Node, path string) (int64, bool) {
	if n.Kind == yaml.ScalarNode && n.ShortTag() == "!!int" {
		return p.integer(n, path, 0, math.MaxInt64)
	}
	if n.Kind != yaml.ScalarNode || n.ShortTag() != "!!str" {
		p.errAt(n, path, "want a size such as 1MiB or 10GiB, got %s", kindOf(n))
		return 0, false
	}
	v, err := ParseSize(n.Value)
	if err != nil {
		p.errAt(n, path, "%v", err)
		return 0, false
	}
	return v, true
}

// list reads a sequence of scalars as strings: non-empty, unique.
func (p *parser) list(n *yaml.Node, path, what string) ([]string, bool) {
	if n.Kind != yaml.SequenceNode {
		p.errAt(n, path, "want a list of %s, got %s", what, kindOf(n))
		return nil, false
	}
	if len(n.Content) == 0 {
		p.errAt(n, path, "empty list")
		return nil, false
	}
	if len(n.Content) > maxListItems {
		p.errAt(n, path, "more than %d entries", maxListItems)
		return nil, false
	}
	out := make([]string, 0, len(n.Content))
	first := map[string]int{}
	ok := true
	for i, item := range n.Content {
		item = deref(item)
		ipath := fmt.Sprintf("%s[%d]", path, i)
		v, good := p.str(item, ipath)
		if !good {
			ok = false
			continue
		}
		if v == "" {
			p.errAt(item, ipath, "empty %s", strings.TrimSuffix(what, "s"))
			ok = false
			continue
		}
		if j, dup := first[v]; dup {
			p.errAt(item, ipath, "duplicate entry %q (also at index %d)", v, j)
			ok = false
			continue
		}
		first[v] = i
		out = append(out, v)
	}
	return out, ok
}

// value reads a partition value: any scalar; null is "null".
func (p *parser) value(n *yaml.Node, path string) (string, bool) {
	if n.Kind != yaml.ScalarNode {
		p.errAt(n, path, "want a partition value, got %s", kindOf(n))
		return "", false
	}
	if isNull(n) {
		return "null", true
	}
	// An integer is compared as one only in decimal: yaml.v3 takes 0x10,
	// 0o17, 0b1 and 1_000 as integers, which would compare as text.
	if n.ShortTag() == "!!int" && n.Style&(yaml.DoubleQuotedStyle|yaml.SingleQuotedStyle) == 0 && !decimalDigits.MatchString(n.Value) {
		p.errAt(n, path, "integer %s: write it in decimal digits (or quote it to mean the text)", n.Value)
		return "", false
	}
	return p.str(n, path)
}

var decimalDigits = regexp.MustCompile(`^[-+]?[0-9]+$`)

// --- the document ---

var policyName = regexp.MustCompile(`^[a-z0-9]([-a-z0-9]*[a-z0-9])?$`)

func isTierName(s string) bool {
	ok := s != "" && len(s) <= maxTierName
	for _, c := range []byte(s) {
		ok = ok && (c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '_' || c == '-')
	}
	return ok
}

// document checks and compiles one document; nil when it has errors.
func (p *parser) document(doc *yaml.Node) *Policy {
	before := len(p.errs)
	if len(doc.Content) == 0 || isNull(doc.Content[0]) {
		p.errAt(doc, "", "empty document")
		return nil
	}
	root := deref(doc.Content[0])
	top, ok := p.mapping(root, "", "apiVersion", "kind", "metadata", "spec")
	if !ok {
		return nil
	}
	p.require(top, "", "apiVersion", "kind", "metadata", "spec")
	pol := &Policy{file: p.file}
	if e, ok := top.get("apiVersion"); ok {
		if v, ok := p.str(e.val, "apiVersion"); ok && v != APIVersion {
			p.errAt(e.val, "apiVersion", "unsupported apiVersion %q (want %s)", v, APIVersion)
		}
	}
	if e, ok := top.get("kind"); ok {
		if v, ok := p.str(e.val, "kind"); ok && v != Kind {
			p.errAt(e.val, "kind", "unsupported kind %q (want %s)", v, Kind)
		}
	}
	if e, ok := top.get("metadata"); ok {
		if md, ok := p.mapping(e.val, "metadata", "name"); ok && p.require(md, "metadata", "name") {
			ne, _ := md.get("name")
			if v, ok := p.str(ne.val, "metadata.name"); ok {
				if len(v) > maxNameLen || !policyName.MatchString(v) {
					p.errAt(ne.val, "metadata.name", "invalid name %q (want at most %d characters [a-z0-9-], starting and ending with a letter or digit)", v, maxNameLen)
				}
				pol.name, pol.line, pol.col = v, ne.val.Line, ne.val.Column
			}
		}
	}
	if e, ok := top.get("spec"); ok {
		p.spec(pol, e.val)
	}
	if len(p.errs) > before {
		return nil
	}
	pol.doc = render(pol)
	return pol
}

func (p *parser) spec(pol *Policy, n *yaml.Node) {
	spec, ok := p.mapping(n, "spec", "source", "target", "selection", "triggers", "limits", "duplicateKeys")
	if !ok {
		return
	}
	p.require(spec, "spec", "source")
	var srcNode *yaml.Node
	srcOK := false
	if e, ok := spec.get("source"); ok {
		srcNode = e.val
		srcOK = p.source(pol, e.val)
	}
	p.target(pol, spec, srcNode, srcOK)
	p.selection(pol, spec)
	p.triggers(pol, spec)
	p.limits(pol, spec)
	pol.dupKeys = DuplicateKeysLast
	if e, ok := spec.get("duplicateKeys"); ok {
		if v, ok := p.str(e.val, "spec.duplicateKeys"); ok {
			if v != DuplicateKeysLast && v != DuplicateKeysError {
				p.errAt(e.val, "spec.duplicateKeys", "unknown duplicateKeys %q (want last or error)", v)
			}
			pol.dupKeys = v
		}
	}
}

func (p *parser) source(pol *Policy, n *yaml.Node) bool {
	const path = "spec.source"
	src, ok := p.mapping(n, path, "catalog", "table")
	if !ok {
		return false
	}
	before := len(p.errs)
	p.require(src, path, "table")
	pol.source.Catalog = "default"
	if e, ok := src.get("catalog"); ok {
		if v, ok := p.str(e.val, path+".catalog"); ok {
			if !isTierName(v) || len(v) > maxNameLen {
				p.errAt(e.val, path+".catalog", "invalid catalog name %q (want 1..%d characters [A-Za-z0-9_-])", v, maxNameLen)
			}
			pol.source.Catalog = v
		}
	}
	if e, ok := src.get("table"); ok {
		if v, ok := p.str(e.val, path+".table"); ok {
			parts := strings.Split(v, ".")
			if len(parts) < 2 || slices.Contains(parts, "") || strings.ContainsFunc(v, unicode.IsSpace) {
				p.errAt(e.val, path+".table", "invalid table %q (want namespace.table, such as lake.events)", v)
			}
			pol.source.Table = v
		}
	}
	return len(p.errs) == before
}

func (p *parser) target(pol *Policy, spec fields, srcNode *yaml.Node, srcOK bool) {
	const path = "spec.target"
	t := Target{Bucketing: BucketingFluss, CreateIfMissing: true}
	var tf fields
	if e, ok := spec.get("target"); ok && !isNull(e.val) {
		var good bool
		if tf, good = p.mapping(e.val, path, "database", "table", "buckets", "bucketing", "primaryKey", "createIfMissing", "replicationFactor"); !good {
			return
		}
	}
	ns, tbl := pol.source.Split()
	if i := strings.LastIndexByte(ns, '.'); i >= 0 {
		ns = ns[i+1:]
	}
	name := func(key, def, what string) string {
		if e, ok := tf.get(key); ok {
			v, good := p.str(e.val, path+"."+key)
			if good && !isTierName(v) {
				p.errAt(e.val, path+"."+key, "invalid %s name %q (want 1..%d characters [A-Za-z0-9_-])", what, v, maxTierName)
			}
			return v
		}
		if srcOK && !isTierName(def) {
			p.errAt(srcNode, path+"."+key, "the default %s name %q (from spec.source.table) is not a valid tier name (1..%d characters [A-Za-z0-9_-]); set %s.%s", what, def, maxTierName, path, key)
		}
		return def
	}
	t.Database = name("database", ns, "database")
	t.Table = name("table", tbl, "table")
	if e, ok := tf.get("buckets"); ok {
		v, _ := p.integer(e.val, path+".buckets", 0, MaxBuckets)
		t.Buckets = int(v)
	}
	if e, ok := tf.get("bucketing"); ok {
		if v, ok := p.str(e.val, path+".bucketing"); ok {
			switch v {
			case BucketingFluss, BucketingPaimon, BucketingIceberg:
				t.Bucketing = v
			default:
				p.errAt(e.val, path+".bucketing", "unknown bucketing %q (want fluss, paimon or iceberg)", v)
			}
		}
	}
	if e, ok := tf.get("primaryKey"); ok {
		t.PrimaryKey, _ = p.list(e.val, path+".primaryKey", "column names")
	}
	if e, ok := tf.get("createIfMissing"); ok {
		t.CreateIfMissing, _ = p.boolean(e.val, path+".createIfMissing")
	}
	if e, ok := tf.get("replicationFactor"); ok {
		v, _ := p.integer(e.val, path+".replicationFactor", 0, MaxReplicationFactor)
		t.ReplicationFactor = int(v)
	}
	pol.target = t
}

var opOrder = []string{"eq", "ne", "in", "notIn", "gt", "gte", "lt", "lte"}

func (p *parser) selection(pol *Policy, spec fields) {
	const path = "spec.selection"
	e, ok := spec.get("selection")
	if !ok || isNull(e.val) {
		return
	}
	sel, ok := p.mapping(e.val, path, "partitions", "minRows", "maxRows", "minBytes", "maxBytes")
	if !ok {
		return
	}
	if e, ok := sel.get("partitions"); ok {
		p.partitions(pol, e.val)
	}
	bound := func(key string, size bool, min int64) (int64, *yaml.Node) {
		e, ok := sel.get(key)
		if !ok {
			return 0, nil
		}
		var v int64
		var good bool
		if size {
			v, good = p.size(e.val, path+"."+key)
		} else {
			v, good = p.integer(e.val, path+"."+key, 0, math.MaxInt64)
		}
		if good && v < min {
			p.errAt(e.val, path+"."+key, "must be at least %d (leave %s out for no bound)", min, key)
			return 0, nil
		}
		if !good {
			return 0, nil
		}
		return v, e.val
	}
	var minR, maxR, minB, maxB *yaml.Node
	pol.sel.MinRows, minR = bound("minRows", false, 0)
	pol.sel.MaxRows, maxR = bound("maxRows", false, 1)
	pol.sel.MinBytes, minB = bound("minBytes", true, 0)
	pol.sel.MaxBytes, maxB = bound("maxBytes", true, 1)
	if minR != nil && maxR != nil && pol.sel.MinRows > pol.sel.MaxRows {
		p.errAt(minR, path+".minRows", "minRows %d is greater than maxRows %d", pol.sel.MinRows, pol.sel.MaxRows)
	}
	if minB != nil && maxB != nil && pol.sel.MinBytes > pol.sel.MaxBytes {
		p.errAt(minB, path+".minBytes", "minBytes %s is greater than maxBytes %s", FormatSize(pol.sel.MinBytes), FormatSize(pol.sel.MaxBytes))
	}
}

func (p *parser) partitions(pol *Policy, n *yaml.Node) {
	const path = "spec.selection.partitions"
	pf, ok := p.mapping(n, path, "where", "window", "names")
	if !ok {
		return
	}
	if len(pf.m) == 0 && len(pf.node.Content) == 0 {
		p.errAt(pf.node, path, "empty: give where, window or names, or leave partitions out to select the whole table")
		return
	}
	if e, ok := pf.get("where"); ok {
		p.where(pol, e.val)
	}
	if e, ok := pf.get("window"); ok {
		p.window(pol, e.val)
	}
	if e, ok := pf.get("names"); ok {
		pol.sel.Names, _ = p.list(e.val, path+".names", "partition names")
	}
}

func (p *parser) where(pol *Policy, n *yaml.Node) {
	const path = "spec.selection.partitions.where"
	wf, ok := p.mapping(n, path)
	if !ok {
		return
	}
	if len(wf.node.Content) == 0 {
		p.errAt(wf.node, path, "empty: give at least one partition field")
		return
	}
	var conds []Condition
	for field, fe := range wf.m {
		fpath := join(path, field)
		if field == "" {
			p.errAt(fe.key, fpath, "empty partition field name")
			continue
		}
		ops, ok := p.mapping(fe.val, fpath, opOrder...)
		if !ok {
			continue
		}
		if len(ops.node.Content) == 0 {
			p.errAt(ops.node, fpath, "no condition (want one of %s)", strings.Join(opOrder, ", "))
			continue
		}
		for op, oe := range ops.m {
			opath := join(fpath, op)
			c := Condition{Field: field, Op: op}
			if op == "in" || op == "notIn" {
				if oe.val.Kind != yaml.SequenceNode {
					p.errAt(oe.val, opath, "want a list of values, got %s", kindOf(oe.val))
					continue
				}
				if len(oe.val.Content) == 0 {
					p.errAt(oe.val, opath, "empty list")
					continue
				}
				if len(oe.val.Content) > maxListItems {
					p.errAt(oe.val, opath, "more than %d entries", maxListItems)
					continue
				}
				good := true
				for i, item := range oe.val.Content {
					ipath := fmt.Sprintf("%s[%d]", opath, i)
					v, ok := p.value(deref(item), ipath)
					if j := slices.IndexFunc(c.Values, func(w string) bool { return compare(v, w) == 0 }); ok && j >= 0 {
						// A typo, most likely ([eu, eu] for [eu, us]): it
						// would leave partitions unselected without a word.
						p.errAt(item, ipath, "duplicate entry %q (also at index %d)", v, j)
						ok = false
					}
					good = good && ok
					c.Values = append(c.Values, v)
				}
				if !good {
					continue
				}
			} else {
				v, ok := p.value(oe.val, opath)
				if !ok {
					continue
				}
				if op != "eq" && op != "ne" && isNull(oe.val) {
					// It compared as the text "null": lt: null selected
					// every date.
					p.errAt(oe.val, opath, "null has no order (use eq, ne, in or notIn)")
					continue
				}
				c.Values = []string{v}
			}
			conds = append(conds, c)
		}
	}
	slices.SortFunc(conds, func(a, b Condition) int {
		if a.Field != b.Field {
			return strings.Compare(a.Field, b.Field)
		}
		return slices.Index(opOrder, a.Op) - slices.Index(opOrder, b.Op)
	})
	pol.sel.Where = conds
}

func (p *parser) window(pol *Policy, n *yaml.Node) {
	const path = "spec.selection.partitions.window"
	wf, ok := p.mapping(n, path, "field", "last", "anchor")
	if !ok {
		return
	}
	p.require(wf, path, "field", "last")
	w := &Window{Anchor: AnchorNow}
	if e, ok := wf.get("field"); ok {
		if v, ok := p.str(e.val, path+".field"); ok {
			if v == "" {
				p.errAt(e.val, path+".field", "empty partition field name")
			}
			w.Field = v
		}
	}
	if e, ok := wf.get("last"); ok {
		if v, ok := p.str(e.val, path+".last"); ok {
			d, canon, err := parseWindow(v)
			if err != nil {
				p.errAt(e.val, path+".last", "%v", err)
			}
			w.Duration, w.Last = d, canon
		}
	}
	if e, ok := wf.get("anchor"); ok {
		if v, ok := p.str(e.val, path+".anchor"); ok {
			if v != AnchorNow && v != AnchorLatest {
				p.errAt(e.val, path+".anchor", "unknown anchor %q (want now or latest)", v)
			}
			w.Anchor = v
		}
	}
	pol.sel.Window = w
}

func (p *parser) triggers(pol *Policy, spec fields) {
	const path = "spec.triggers"
	pol.triggers = Triggers{OnRequest: true}
	e, ok := spec.get("triggers")
	if !ok || isNull(e.val) {
		return
	}
	tf, ok := p.mapping(e.val, path, "schedule", "onLakeCommit", "onRequest")
	if !ok {
		return
	}
	if e, ok := tf.get("schedule"); ok {
		spath := path + ".schedule"
		if sf, ok := p.mapping(e.val, spath, "cron", "timeZone"); ok && p.require(sf, spath, "cron") {
			s := &Schedule{TimeZone: "UTC"}
			ce, _ := sf.get("cron")
			if v, ok := p.str(ce.val, spath+".cron"); ok {
				if err := ValidateCron(v); err != nil {
					p.errAt(ce.val, spath+".cron", "%v", err)
				}
				s.Cron = strings.Join(strings.Fields(v), " ")
			}
			if ze, ok := sf.get("timeZone"); ok {
				if v, ok := p.str(ze.val, spath+".timeZone"); ok {
					if _, err := LoadTimeZone(v); err != nil {
						p.errAt(ze.val, spath+".timeZone", "%v", err)
					}
					s.TimeZone = v
				}
			}
			pol.triggers.Schedule = s
		}
	}
	if e, ok := tf.get("onLakeCommit"); ok {
		pol.triggers.OnLakeCommit, _ = p.boolean(e.val, path+".onLakeCommit")
	}
	if e, ok := tf.get("onRequest"); ok {
		pol.triggers.OnRequest, _ = p.boolean(e.val, path+".onRequest")
	}
}

// maxUploadMBps keeps UploadBytesPerSecond within int64.
const maxUploadMBps = math.MaxInt64 / 1_000_000

func (p *parser) limits(pol *Policy, spec fields) {
	const path = "spec.limits"
	pol.limits = Limits{ConcurrentPromotions: 1}
	e, ok := spec.get("limits")
	if !ok || isNull(e.val) {
		return
	}
	lf, ok := p.mapping(e.val, path, "concurrentPromotions", "buildWorkers", "uploadMBps", "memory")
	if !ok {
		return
	}
	if e, ok := lf.get("concurrentPromotions"); ok {
		v, _ := p.integer(e.val, path+".concurrentPromotions", 1, 1024)
		pol.limits.ConcurrentPromotions = max(int(v), 1)
	}
	if e, ok := lf.get("buildWorkers"); ok {
		v, _ := p.integer(e.val, path+".buildWorkers", 0, 1024)
		pol.limits.BuildWorkers = int(v)
	}
	if e, ok := lf.get("uploadMBps"); ok {
		v, _ := p.integer(e.val, path+".uploadMBps", 0, maxUploadMBps)
		pol.uploadMB = v
		pol.limits.UploadBytesPerSecond = v * 1_000_000
	}
	if e, ok := lf.get("memory"); ok {
		pol.limits.MemoryBytes, _ = p.size(e.val, path+".memory")
	}
}
