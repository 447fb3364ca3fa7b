package kv

import (
	"errors"
	"fmt"
	"math"
	"strconv"
	"strings"
)

// Kind is the root of a column type.
type Kind uint8

// The supported kinds. Nested kinds (ARRAY, MAP, ROW, MULTISET) are not supported.
const (
	KindBoolean Kind = iota + 1
	KindTinyInt
	KindSmallInt
	KindInt
	KindBigInt
	KindFloat
	KindDouble
	KindDecimal
	KindChar
	KindString
	KindBinary
	KindBytes
	KindDate
	KindTime
	KindTimestamp
	KindTimestampLTZ
)

var kindNames = [...]string{
	KindBoolean:      "BOOLEAN",
	KindTinyInt:      "TINYINT",
	KindSmallInt:     "SMALLINT",
	KindInt:          "INT",
	KindBigInt:       "BIGINT",
	KindFloat:        "FLOAT",
	KindDouble:       "DOUBLE",
	KindDecimal:      "DECIMAL",
	KindChar:         "CHAR",
	KindString:       "STRING",
	KindBinary:       "BINARY",
	KindBytes:        "BYTES",
	KindDate:         "DATE",
	KindTime:         "TIME",
	KindTimestamp:    "TIMESTAMP",
	KindTimestampLTZ: "TIMESTAMP_LTZ",
}

func (k Kind) valid() bool { return k >= KindBoolean && k <= KindTimestampLTZ }

// String returns the SQL name of the kind, e.g. "TIMESTAMP_LTZ".
func (k Kind) String() string {
	if k.valid() {
		return kindNames[k]
	}
	return "Kind(" + strconv.Itoa(int(k)) + ")"
}

const (
	maxDecimalPrecision  = 38
	maxCompactDecimal    = 18 // DECIMAL(p<=18) is stored as its unscaled long
	maxTimePrecision     = 9
	maxCompactTimestamp  = 3 // TIMESTAMP(p<=3) is stored as millis only
	maxFixedLength       = math.MaxInt32
	defaultDecimalPrec   = 10
	defaultDecimalScale  = 0
	defaultFixedLength   = 1
	defaultTimePrecision = 0
	defaultTimestampPrec = 6
)

// Type is a column type. Precision, Scale and Length are zero for kinds that do not
// take them.
type Type struct {
	Kind      Kind
	Precision int // DECIMAL p 1..38; TIME, TIMESTAMP, TIMESTAMP_LTZ p 0..9
	Scale     int // DECIMAL s 0..p
	Length    int // CHAR(n), BINARY(n): n >= 1
}

// String returns the canonical spelling: "DECIMAL(10,2)", "TIMESTAMP(3)", "STRING".
func (t Type) String() string {
	switch t.Kind {
	case KindDecimal:
		return fmt.Sprintf("DECIMAL(%d,%d)", t.Precision, t.Scale)
	case KindChar, KindBinary:
		return fmt.Sprintf("%s(%d)", t.Kind, t.Length)
	case KindTime, KindTimestamp, KindTimestampLTZ:
		return fmt.Sprintf("%s(%d)", t.Kind, t.Precision)
	}
	return t.Kind.String()
}

// Validate reports whether t is a supported type with parameters in range.
func (t Type) Validate() error {
	if err := t.check(); err != nil {
		return fmt.Errorf("%w %s: %v", ErrInvalidType, t, err)
	}
	return nil
}

func (t Type) check() error {
	var precision, scale, length bool // which parameters the kind takes
	switch t.Kind {
	case KindDecimal:
		precision, scale = true, true
		if t.Precision < 1 || t.Precision > maxDecimalPrecision {
			return fmt.Errorf("precision %d is out of range 1..%d", t.Precision, maxDecimalPrecision)
		}
		if t.Scale < 0 || t.Scale > t.Precision {
			return fmt.Errorf("scale %d is out of range 0..%d", t.Scale, t.Precision)
		}
	case KindChar, KindBinary:
		length = true
		if t.Length < 1 || t.Length > maxFixedLength {
			return fmt.Errorf("length %d is out of range 1..%d", t.Length, maxFixedLength)
		}
	case KindTime, KindTimestamp, KindTimestampLTZ:
		precision = true
		if t.Precision < 0 || t.Precision > maxTimePrecision {
			return fmt.Errorf("precision %d is out of range 0..%d", t.Precision, maxTimePrecision)
		}
	default:
		if !t.Kind.valid() {
			return errors.New("unknown kind")
		}
	}
	switch {
	case !precision && t.Precision != 0:
		return fmt.Errorf("%s takes no precision", t.Kind)
	case !scale && t.Scale != 0:
		return fmt.Errorf("%s takes no scale", t.Kind)
	case !length && t.Length != 0:
		return fmt.Errorf("%s takes no length", t.Kind)
	}
	return nil
}

// MarshalText returns the canonical spelling; an invalid type is an error.
func (t Type) MarshalText() ([]byte, error) {
	if err := t.Validate(); err != nil {
		return nil, err
	}
	return []byte(t.String()), nil
}

// UnmarshalText parses b with ParseType.
func (t *Type) UnmarshalText(b []byte) error {
	p, err := ParseType(string(b))
	if err != nil {
		return err
	}
	*t = p
	return nil
}

// typeSyntax describes how a type name is written: how many parameters it takes and
// the parameters it gets when they are omitted (Fluss's and Flink's defaults).
type typeSyntax struct {
	kind     Kind
	defaults []int
}

var typeSyntaxes = map[string]typeSyntax{
	"BOOLEAN":       {kind: KindBoolean},
	"TINYINT":       {kind: KindTinyInt},
	"SMALLINT":      {kind: KindSmallInt},
	"INT":           {kind: KindInt},
	"INTEGER":       {kind: KindInt},
	"BIGINT":        {kind: KindBigInt},
	"FLOAT":         {kind: KindFloat},
	"DOUBLE":        {kind: KindDouble},
	"DECIMAL":       {kind: KindDecimal, defaults: []int{defaultDecimalPrec, defaultDecimalScale}},
	"CHAR":          {kind: KindChar, defaults: []int{defaultFixedLength}},
	"STRING":        {kind: KindString},
	"BINARY":        {kind: KindBinary, defaults: []int{defaultFixedLength}},
	"BYTES":         {kind: KindBytes},
	"DATE":          {kind: KindDate},
	"TIME":          {kind: KindTime, defaults: []int{defaultTimePrecision}},
	"TIMESTAMP":     {kind: KindTimestamp, defaults: []int{defaultTimestampPrec}},
	"TIMESTAMP_LTZ": {kind: KindTimestampLTZ, defaults: []int{defaultTimestampPrec}},
}

var nestedTypeNames = []string{"ARRAY", "MAP", "ROW", "MULTISET"}

// ParseType parses a type such as "BIGINT", "decimal(10, 2)", "TIMESTAMP_LTZ(6)" or
// "CHAR(4)". Names are case-insensitive and spaces are allowed around names,
// parentheses, commas and numbers. Omitted parameters take Fluss's defaults:
// DECIMAL = DECIMAL(10,0), DECIMAL(p) = DECIMAL(p,0), CHAR = CHAR(1),
// BINARY = BINARY(1), TIME = TIME(0), TIMESTAMP = TIMESTAMP(6),
// TIMESTAMP_LTZ = TIMESTAMP_LTZ(6); INTEGER is accepted for INT. Nested types are
// rejected with an error wrapping ErrNestedType.
func ParseType(s string) (Type, error) {
	t, err := parseType(s)
	if err != nil {
		if errors.Is(err, ErrNestedType) {
			return Type{}, err
		}
		return Type{}, fmt.Errorf("%w %q: %v", ErrInvalidType, s, err)
	}
	if err := t.check(); err != nil {
		return Type{}, fmt.Errorf("%w %q: %v", ErrInvalidType, s, err)
	}
	return t, nil
}

func parseType(s string) (Type, error) {
	rest := strings.TrimSpace(s)
	n := 0
	for n < len(rest) && isIdentChar(rest[n]) {
		n++
	}
	name := strings.ToUpper(rest[:n])
	rest = strings.TrimSpace(rest[n:])
	if name == "" {
		return Type{}, errors.New("missing type name")
	}
	for _, nested := range nestedTypeNames {
		if name == nested {
			return Type{}, fmt.Errorf("%w: %s in %q", ErrNestedType, name, s)
		}
	}
	syntax, ok := typeSyntaxes[name]
	if !ok {
		return Type{}, fmt.Errorf("unknown type name %s", name)
	}
	params := syntax.defaults
	if strings.HasPrefix(rest, "(") {
		inner, after, closed := strings.Cut(rest[1:], ")")
		if !closed {
			return Type{}, errors.New("missing )")
		}
		if after = strings.TrimSpace(after); after != "" {
			return Type{}, fmt.Errorf("unexpected %q after the type", after)
		}
		var err error
		if params, err = parseTypeParams(name, inner, syntax.defaults); err != nil {
			return Type{}, err
		}
	} else if rest != "" {
		return Type{}, fmt.Errorf("unexpected %q after the type", rest)
	}
	t := Type{Kind: syntax.kind}
	switch syntax.kind {
	case KindDecimal:
		t.Precision, t.Scale = params[0], params[1]
	case KindChar, KindBinary:
		t.Length = params[0]
	case KindTime, KindTimestamp, KindTimestampLTZ:
		t.Precision = params[0]
	}
	return t, nil
}

// parseTypeParams parses the comma-separated numbers between the parentheses. Missing
// trailing parameters take their defaults; at least one must be given.
func parseTypeParams(name, inner string, defaults []int) ([]int, error) {
	if len(defaults) == 0 {
		return nil, fmt.Errorf("%s takes no parameters", name)
	}
	fields := strings.Split(inner, ",")
	if len(fields) > len(defaults) {
		return nil, fmt.Errorf("%s takes at most %d parameters, got %d", name, len(defaults), len(fields))
	}
	params := append([]int(nil), defaults...)
	for i, f := range fields {
		f = strings.TrimSpace(f)
		if f == "" || strings.TrimLeft(f, "0123456789") != "" {
			return nil, fmt.Errorf("parameter %q is not a non-negative integer", f)
		}
		v, err := strconv.Atoi(f)
		if err != nil {
			return nil, fmt.Errorf("parameter %q is out of range", f)
		}
		params[i] = v
	}
	return params, nil
}

func isIdentChar(c byte) bool {
	return c == '_' || ('a' <= c && c <= 'z') || ('A' <= c && c <= 'Z') || ('0' <= c && c <= '9')
}
