package snapshot

import (
	"fmt"
	"strconv"
	"strings"
	"unicode/utf16"
	"unicode/utf8"
)

// A strict JSON reader (RFC 8259) for the two documents of this package. It
// rejects a byte order mark, invalid UTF-8, lone surrogates, duplicate keys
// at any depth (compared after unescaping), trailing data, nesting deeper
// than maxDepth, more than maxValues values and documents larger than
// MaxDocumentSize, and keeps number literals verbatim so that integers are
// parsed exactly.

// MaxDocumentSize bounds the size of one _METADATA or manifest document.
const MaxDocumentSize = 64 << 20

// maxDepth bounds array and object nesting; the documents need 5 levels.
const maxDepth = 16

// maxValues bounds the values (of any kind, at any depth) of one document.
// The parse tree costs about 100 bytes a value, so a document of small
// values ("[0,0,0,...") would cost 50 times its size before its types are
// checked: 16 MiB of it, 2 GiB of coordinator heap. A _METADATA takes
// about 6 values a data file and a manifest 5 a bucket, so 2^18 values
// leave room for 40,000 files or every bucket of the largest table.
const maxValues = 1 << 18

type jsonKind uint8

const (
	jsonNull jsonKind = iota
	jsonBool
	jsonNumber
	jsonString
	jsonArray
	jsonObject
)

func (k jsonKind) String() string {
	return [...]string{"null", "boolean", "number", "string", "array", "object"}[k]
}

type jsonValue struct {
	kind    jsonKind
	off     int    // byte offset of the value
	text    string // string contents or number literal
	elems   []jsonValue
	members []jsonMember
}

type jsonMember struct {
	key string
	off int // byte offset of the key
	val jsonValue
}

type jsonParser struct {
	doc    string
	b      []byte
	pos    int
	depth  int
	values int
}

func parseJSON(doc string, b []byte) (jsonValue, error) {
	p := &jsonParser{doc: doc, b: b}
	if len(b) > MaxDocumentSize {
		return jsonValue{}, p.errf(ErrTooLarge, "%d bytes, limit %d", len(b), MaxDocumentSize)
	}
	if len(b) >= 3 && b[0] == 0xef && b[1] == 0xbb && b[2] == 0xbf {
		return jsonValue{}, p.errf(ErrBOM, "")
	}
	p.skipSpace()
	v, err := p.value()
	if err != nil {
		return jsonValue{}, err
	}
	p.skipSpace()
	if p.pos != len(b) {
		return jsonValue{}, p.errf(ErrTrailingData, "%d bytes after the value", len(b)-p.pos)
	}
	return v, nil
}

func (p *jsonParser) errf(sentinel error, format string, args ...any) error {
	return &DecodeError{Doc: p.doc, Offset: p.pos, Err: sentinel, Detail: fmt.Sprintf(format, args...)}
}

func (p *jsonParser) syntax(format string, args ...any) error {
	if p.pos >= len(p.b) {
		return p.errf(ErrSyntax, "unexpected end of input")
	}
	return p.errf(ErrSyntax, format, args...)
}

func (p *jsonParser) skipSpace() {
	for p.pos < len(p.b) {
		switch p.b[p.pos] {
		case ' ', '\t', '\n', '\r':
			p.pos++
		default:
			return
		}
	}
}

// consume skips whitespace and then c, reporting whether c was there.
func (p *jsonParser) consume(c byte) bool {
	p.skipSpace()
	if p.pos < len(p.b) && p.b[p.pos] == c {
		p.pos++
		return true
	}
	return false
}

func (p *jsonParser) value() (jsonValue, error) {
	if p.pos >= len(p.b) {
		return jsonValue{}, p.syntax("")
	}
	if p.values++; p.values > maxValues {
		return jsonValue{}, p.errf(ErrTooLarge, "more than %d values", maxValues)
	}
	switch c := p.b[p.pos]; {
	case c == '{':
		return p.object()
	case c == '[':
		return p.array()
	case c == '"':
		off := p.pos
		s, err := p.str()
		return jsonValue{kind: jsonString, off: off, text: s}, err
	case c == '-' || c >= '0' && c <= '9':
		return p.number()
	case c == 't':
		return p.literal("true", jsonBool)
	case c == 'f':
		return p.literal("false", jsonBool)
	case c == 'n':
		return p.literal("null", jsonNull)
	default:
		return jsonValue{}, p.syntax("unexpected character %q", c)
	}
}

func (p *jsonParser) literal(lit string, k jsonKind) (jsonValue, error) {
	off := p.pos
	if !strings.HasPrefix(string(p.b[p.pos:min(len(p.b), p.pos+len(lit))]), lit) {
		return jsonValue{}, p.syntax("invalid literal")
	}
	p.pos += len(lit)
	return jsonValue{kind: k, off: off, text: lit}, nil
}

func (p *jsonParser) enter() error {
	if p.depth++; p.depth > maxDepth {
		return p.errf(ErrTooDeep, "more than %d levels", maxDepth)
	}
	return nil
}

func (p *jsonParser) object() (jsonValue, error) {
	v := jsonValue{kind: jsonObject, off: p.pos}
	if err := p.enter(); err != nil {
		return v, err
	}
	defer func() { p.depth-- }()
	p.pos++ // '{'
	if p.consume('}') {
		return v, nil
	}
	seen := make(map[string]struct{})
	for {
		p.skipSpace()
		if p.pos >= len(p.b) || p.b[p.pos] != '"' {
			return v, p.syntax("expected a string key")
		}
		off := p.pos
		key, err := p.str()
		if err != nil {
			return v, err
		}
		if _, dup := seen[key]; dup {
			p.pos = off
			return v, p.errf(ErrDuplicateKey, "%q", key)
		}
		seen[key] = struct{}{}
		if !p.consume(':') {
			return v, p.syntax("expected ':'")
		}
		p.skipSpace()
		val, err := p.value()
		if err != nil {
			return v, err
		}
		v.members = append(v.members, jsonMember{key: key, off: off, val: val})
		if p.consume('}') {
			return v, nil
		}
		if !p.consume(',') {
			return v, p.syntax("expected ',' or '}'")
		}
	}
}

func (p *jsonParser) array() (jsonValue, error) {
	v := jsonValue{kind: jsonArray, off: p.pos}
	if err := p.enter(); err != nil {
		return v, err
	}
	defer func() { p.depth-- }()
	p.pos++ // '['
	if p.consume(']') {
		return v, nil
	}
	for {
		p.skipSpace()
		e, err := p.value()
		if err != nil {
			return v, err
		}
		v.elems = append(v.elems, e)
		if p.consume(']') {
			return v, nil
		}
		if !p.consume(',') {
			return v, p.syntax("expected ',' or ']'")
		}
	}
}

// str reads a string starting at its opening quote.
func (p *jsonParser) str() (string, error) {
	p.pos++ // '"'
	start := p.pos
	var buf []byte // nil until an escape forces a copy
	for p.pos < len(p.b) {
		c := p.b[p.pos]
		switch {
		case c == '"':
			s := string(p.b[start:p.pos])
			if buf != nil {
				s = string(append(buf, p.b[start:p.pos]...))
			}
			p.pos++
			return s, nil
		case c == '\\':
			buf = append(buf, p.b[start:p.pos]...)
			r, err := p.escape()
			if err != nil {
				return "", err
			}
			buf = utf8.AppendRune(buf, r)
			start = p.pos
		case c < 0x20:
			return "", p.syntax("control character %#02x in string", c)
		case c < utf8.RuneSelf:
			p.pos++
		default:
			r, n := utf8.DecodeRune(p.b[p.pos:])
			if r == utf8.RuneError && n == 1 {
				return "", p.syntax("invalid utf-8 in string")
			}
			p.pos += n
		}
	}
	return "", p.syntax("")
}

// escape reads one escape sequence starting at its backslash.
func (p *jsonParser) escape() (rune, error) {
	p.pos++ // '\\'
	if p.pos >= len(p.b) {
		return 0, p.syntax("")
	}
	c := p.b[p.pos]
	p.pos++
	switch c {
	case '"', '\\', '/':
		return rune(c), nil
	case 'b':
		return '\b', nil
	case 'f':
		return '\f', nil
	case 'n':
		return '\n', nil
	case 'r':
		return '\r', nil
	case 't':
		return '\t', nil
	case 'u':
		r, err := p.hex4()
		if err != nil || !utf16.IsSurrogate(r) {
			return r, err
		}
		if r >= 0xdc00 || !strings.HasPrefix(string(p.b[p.pos:min(len(p.b), p.pos+2)]), `\u`) {
			return 0, p.syntax("lone surrogate")
		}
		p.pos += 2
		lo, err := p.hex4()
		if err != nil {
			return 0, err
		}
		if r = utf16.DecodeRune(r, lo); r == utf8.RuneError {
			return 0, p.syntax("lone surrogate")
		}
		return r, nil
	default:
		p.pos--
		return 0, p.syntax("invalid escape %q", c)
	}
}

func (p *jsonParser) hex4() (rune, error) {
	if p.pos+4 > len(p.b) {
		return 0, p.syntax("short \\u escape")
	}
	var r rune
	for _, c := range p.b[p.pos : p.pos+4] {
		switch {
		case c >= '0' && c <= '9':
			r = r<<4 | rune(c-'0')
		case c >= 'a' && c <= 'f':
			r = r<<4 | rune(c-'a'+10)
		case c >= 'A' && c <= 'F':
			r = r<<4 | rune(c-'A'+10)
		default:
			return 0, p.syntax("invalid \\u escape")
		}
	}
	p.pos += 4
	return r, nil
}

// number reads a number per the JSON grammar and keeps its literal.
func (p *jsonParser) number() (jsonValue, error) {
	off := p.pos
	p.accept('-')
	switch {
	case p.accept('0'):
	case p.digits() == 0:
		return jsonValue{}, p.syntax("invalid number")
	}
	if p.accept('.') && p.digits() == 0 {
		return jsonValue{}, p.syntax("invalid number")
	}
	if p.accept('e') || p.accept('E') {
		if !p.accept('+') {
			p.accept('-')
		}
		if p.digits() == 0 {
			return jsonValue{}, p.syntax("invalid number")
		}
	}
	return jsonValue{kind: jsonNumber, off: off, text: string(p.b[off:p.pos])}, nil
}

func (p *jsonParser) accept(c byte) bool {
	if p.pos < len(p.b) && p.b[p.pos] == c {
		p.pos++
		return true
	}
	return false
}

func (p *jsonParser) digits() int {
	start := p.pos
	for p.pos < len(p.b) && p.b[p.pos] >= '0' && p.b[p.pos] <= '9' {
		p.pos++
	}
	return p.pos - start
}

// jsonDecoder maps parsed values onto Go values. The first error sticks:
// every later call returns a zero value, so decoding code reads straight.
type jsonDecoder struct {
	doc string
	err error
}

func (d *jsonDecoder) fail(sentinel error, path string, off int, format string, args ...any) {
	if d.err == nil {
		d.err = &DecodeError{Doc: d.doc, Path: path, Offset: off, Err: sentinel, Detail: fmt.Sprintf(format, args...)}
	}
}

// expect checks the kind of v; null is reported as ErrNull.
func (d *jsonDecoder) expect(v *jsonValue, path string, k jsonKind) bool {
	switch {
	case d.err != nil:
		return false
	case v.kind == k:
		return true
	case v.kind == jsonNull:
		d.fail(ErrNull, path, v.off, "want %s", k)
	default:
		d.fail(ErrWrongType, path, v.off, "got %s, want %s", v.kind, k)
	}
	return false
}

func (d *jsonDecoder) integer(v *jsonValue, path string, bits int) int64 {
	if !d.expect(v, path, jsonNumber) {
		return 0
	}
	if strings.ContainsAny(v.text, ".eE") {
		d.fail(ErrNotInteger, path, v.off, "%s", v.text)
		return 0
	}
	n, err := strconv.ParseInt(v.text, 10, bits)
	if err != nil {
		d.fail(ErrOutOfRange, path, v.off, "%s does not fit in int%d", v.text, bits)
		return 0
	}
	return n
}

// version checks the "version" member of a document root, before unknown
// fields so that a future version is reported as such.
func (d *jsonDecoder) version(root *jsonValue) {
	if !d.expect(root, "", jsonObject) {
		return
	}
	for i := range root.members {
		if m := &root.members[i]; m.key == "version" {
			if n := d.integer(&m.val, "version", 32); d.err == nil && n != formatVersion {
				d.fail(ErrUnsupportedVersion, "version", m.val.off, "%d, want %d", n, formatVersion)
			}
			return
		}
	}
	d.fail(ErrMissingVersion, "version", root.off, "")
}

// jsonObj is an object whose keys have been checked against a schema.
type jsonObj struct {
	d    *jsonDecoder
	path string
	off  int
	m    map[string]*jsonValue
}

func (d *jsonDecoder) object(v *jsonValue, path string, known ...string) *jsonObj {
	o := &jsonObj{d: d, path: path, off: v.off}
	if !d.expect(v, path, jsonObject) {
		return o
	}
	o.m = make(map[string]*jsonValue, len(v.members))
	for i := range v.members {
		m := &v.members[i]
		if !contains(known, m.key) {
			d.fail(ErrUnknownField, joinPath(path, m.key), m.off, "%q", m.key)
			return o
		}
		o.m[m.key] = &m.val
	}
	return o
}

func contains(list []string, s string) bool {
	for _, e := range list {
		if e == s {
			return true
		}
	}
	return false
}

func joinPath(path, key string) string {
	if path == "" {
		return key
	}
	return path + "." + key
}

// get returns the member key, or nil when it is absent (reported as
// ErrMissingField when required) or decoding already failed.
func (o *jsonObj) get(key string, required bool) (*jsonValue, string) {
	path := joinPath(o.path, key)
	if o.d.err != nil {
		return nil, path
	}
	v := o.m[key]
	if v == nil && required {
		o.d.fail(ErrMissingField, path, o.off, "%q", key)
	}
	return v, path
}

func (o *jsonObj) int64(key string) int64 {
	if v, path := o.get(key, true); v != nil {
		return o.d.integer(v, path, 64)
	}
	return 0
}

func (o *jsonObj) int32(key string) int32 {
	if v, path := o.get(key, true); v != nil {
		return int32(o.d.integer(v, path, 32))
	}
	return 0
}

func (o *jsonObj) optInt64(key string) *int64 {
	v, path := o.get(key, false)
	if v == nil {
		return nil
	}
	n := o.d.integer(v, path, 64)
	return &n
}

func (o *jsonObj) string(key string) string {
	if v, path := o.get(key, true); v != nil && o.d.expect(v, path, jsonString) {
		return v.text
	}
	return ""
}

// digest reads an optional sha256 member; present means non-empty.
func (o *jsonObj) digest(key string) string {
	v, path := o.get(key, false)
	if v == nil || !o.d.expect(v, path, jsonString) {
		return ""
	}
	if v.text == "" {
		o.d.fail(ErrInvalidValue, path, v.off, "empty sha256; omit the key instead")
	}
	return v.text
}

func (o *jsonObj) object(key string, known ...string) *jsonObj {
	v, path := o.get(key, true)
	if v == nil {
		return &jsonObj{d: o.d, path: path}
	}
	return o.d.object(v, path, known...)
}

// array calls fn for each element of the array key. It reports whether the
// key was present; fn is not called once decoding has failed.
func (o *jsonObj) array(key string, required bool, fn func(v *jsonValue, path string)) bool {
	v, path := o.get(key, required)
	if v == nil || !o.d.expect(v, path, jsonArray) {
		return v != nil
	}
	for i := range v.elems {
		if o.d.err != nil {
			break
		}
		fn(&v.elems[i], fmt.Sprintf("%s[%d]", path, i))
	}
	return true
}

// jsonWriter writes the canonical encoding: no whitespace, strings escaped
// as Jackson does (only '"', '\\' and control characters).
type jsonWriter struct {
	buf []byte
	err error
}

func (w *jsonWriter) raw(s string) { w.buf = append(w.buf, s...) }

func (w *jsonWriter) int(n int64) { w.buf = strconv.AppendInt(w.buf, n, 10) }

func (w *jsonWriter) str(field, s string) {
	if !utf8.ValidString(s) && w.err == nil {
		w.err = fmt.Errorf("snapshot: encode %s: string %q is not valid utf-8", field, s)
	}
	const hexDigits = "0123456789abcdef"
	w.buf = append(w.buf, '"')
	for i := 0; i < len(s); i++ {
		switch c := s[i]; c {
		case '"', '\\':
			w.buf = append(w.buf, '\\', c)
		case '\b':
			w.buf = append(w.buf, '\\', 'b')
		case '\f':
			w.buf = append(w.buf, '\\', 'f')
		case '\n':
			w.buf = append(w.buf, '\\', 'n')
		case '\r':
			w.buf = append(w.buf, '\\', 'r')
		case '\t':
			w.buf = append(w.buf, '\\', 't')
		default:
			if c < 0x20 {
				w.buf = append(w.buf, '\\', 'u', '0', '0', hexDigits[c>>4], hexDigits[c&0xf])
			} else {
				w.buf = append(w.buf, c)
			}
		}
	}
	w.buf = append(w.buf, '"')
}
