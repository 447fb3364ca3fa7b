package kv

import (
	"errors"
	"fmt"
	"math/big"
	"math/bits"
	"slices"
	"strconv"
	"strings"
)

// Decimal is the unscaled value of a DECIMAL(p,s); the scale comes from the column
// type. Values that fit in an int64 are held without allocation. The zero value is 0.
type Decimal struct {
	small int64
	big   *big.Int // set only when the value does not fit in an int64; never modified
}

// DecimalFromInt64 returns the decimal with the given unscaled value.
func DecimalFromInt64(unscaled int64) Decimal { return Decimal{small: unscaled} }

// DecimalFromBig returns the decimal with the given unscaled value; it does not
// retain unscaled.
func DecimalFromBig(unscaled *big.Int) Decimal {
	if unscaled.IsInt64() {
		return Decimal{small: unscaled.Int64()}
	}
	return Decimal{big: new(big.Int).Set(unscaled)}
}

// Unscaled returns a new big.Int holding the unscaled value.
func (d Decimal) Unscaled() *big.Int {
	if d.big != nil {
		return new(big.Int).Set(d.big)
	}
	return big.NewInt(d.small)
}

// Int64 returns the unscaled value and true when it fits in an int64.
func (d Decimal) Int64() (int64, bool) { return d.small, d.big == nil }

// Equal reports whether d and o have the same unscaled value.
func (d Decimal) Equal(o Decimal) bool {
	if d.big == nil || o.big == nil {
		return d.big == nil && o.big == nil && d.small == o.small
	}
	return d.big.Cmp(o.big) == 0
}

// String formats the value with scale digits after the point, e.g. "-12.50".
func (d Decimal) String(scale int) string {
	digits := strconv.FormatInt(d.small, 10)
	if d.big != nil {
		digits = d.big.String()
	}
	sign := ""
	if digits[0] == '-' {
		sign, digits = "-", digits[1:]
	}
	if scale <= 0 {
		return sign + digits
	}
	if len(digits) <= scale {
		digits = strings.Repeat("0", scale-len(digits)+1) + digits
	}
	return sign + digits[:len(digits)-scale] + "." + digits[len(digits)-scale:]
}

// ParseDecimal parses a plain decimal number such as "-12.5" as a DECIMAL(precision,
// scale). Fewer fractional digits than scale are padded with zeros; more are an
// error wrapping ErrInvalidRow, as is a value with more than precision digits.
// Exponents are not accepted.
func ParseDecimal(s string, precision, scale int) (Decimal, error) {
	t := Type{Kind: KindDecimal, Precision: precision, Scale: scale}
	if err := t.Validate(); err != nil {
		return Decimal{}, err
	}
	d, err := parseDecimal(s, scale)
	if err == nil {
		err = d.checkPrecision(precision)
	}
	if err != nil {
		return Decimal{}, fmt.Errorf("%w: decimal %q for %s: %v", ErrInvalidRow, s, t, err)
	}
	return d, nil
}

func parseDecimal(s string, scale int) (Decimal, error) {
	digits := strings.TrimLeft(s, "+-")
	if len(s)-len(digits) > 1 {
		return Decimal{}, errors.New("more than one sign")
	}
	intPart, frac, _ := strings.Cut(digits, ".")
	if intPart+frac == "" || strings.Trim(intPart+frac, "0123456789") != "" {
		return Decimal{}, errors.New("not a plain decimal number")
	}
	if len(frac) > scale {
		return Decimal{}, fmt.Errorf("more than %d fractional digits", scale)
	}
	unscaled, ok := new(big.Int).SetString(intPart+frac+strings.Repeat("0", scale-len(frac)), 10)
	if !ok {
		return Decimal{}, errors.New("not a plain decimal number")
	}
	if strings.HasPrefix(s, "-") {
		unscaled.Neg(unscaled)
	}
	return DecimalFromBig(unscaled), nil
}

// pow10 holds 10^0..10^18; bigPow10 holds 10^0..10^38.
var (
	pow10    [maxCompactDecimal + 1]int64
	bigPow10 [maxDecimalPrecision + 1]*big.Int
)

func init() {
	p := int64(1)
	for i := range pow10 {
		pow10[i] = p
		p *= 10
	}
	for i := range bigPow10 {
		bigPow10[i] = new(big.Int).Exp(big.NewInt(10), big.NewInt(int64(i)), nil)
	}
}

// checkPrecision reports whether the unscaled value has at most precision digits.
func (d Decimal) checkPrecision(precision int) error {
	var fits bool
	switch {
	case d.big != nil:
		fits = d.big.CmpAbs(bigPow10[precision]) < 0
	case precision > maxCompactDecimal:
		fits = true // every int64 has at most 19 digits
	default:
		fits = -pow10[precision] < d.small && d.small < pow10[precision]
	}
	if !fits {
		return fmt.Errorf("unscaled value %s has more than %d digits", d.String(0), precision)
	}
	return nil
}

// appendUnscaledBytes appends the unscaled value as minimal big-endian two's
// complement, the bytes of Java's BigInteger.toByteArray. tmp is scratch space for
// negative values beyond int64; nil allocates one.
func (d Decimal) appendUnscaledBytes(dst []byte, tmp *big.Int) []byte {
	if d.big == nil {
		m := uint64(d.small)
		if d.small < 0 {
			m = ^m
		}
		for i := bits.Len64(m) / 8; i >= 0; i-- {
			dst = append(dst, byte(d.small>>(8*i)))
		}
		return dst
	}
	mag := d.big
	neg := d.big.Sign() < 0
	if neg {
		if tmp == nil {
			tmp = new(big.Int)
		}
		mag = tmp.Not(d.big) // -x-1: its bits inverted are x's two's complement
	}
	n := mag.BitLen()/8 + 1
	start := len(dst)
	dst = slices.Grow(dst, n)[:start+n]
	mag.FillBytes(dst[start:])
	if neg {
		for i := start; i < len(dst); i++ {
			dst[i] = ^dst[i]
		}
	}
	return dst
}

// maxUnscaledBytes is the length of BigInteger.toByteArray for any 38-digit value.
const maxUnscaledBytes = 16

// decimalFromUnscaledBytes is the inverse of appendUnscaledBytes; it rejects
// non-minimal encodings.
func decimalFromUnscaledBytes(b []byte) (Decimal, error) {
	switch {
	case len(b) == 0:
		return Decimal{}, errors.New("empty unscaled decimal")
	case len(b) > maxUnscaledBytes:
		return Decimal{}, fmt.Errorf("unscaled decimal of %d bytes exceeds %d", len(b), maxUnscaledBytes)
	case len(b) > 1 && (b[0] == 0 && b[1] < 0x80 || b[0] == 0xff && b[1] >= 0x80):
		return Decimal{}, errors.New("unscaled decimal is not minimal two's complement")
	}
	if len(b) <= 8 {
		v := int64(int8(b[0]))
		for _, c := range b[1:] {
			v = v<<8 | int64(c)
		}
		return DecimalFromInt64(v), nil
	}
	x := new(big.Int).SetBytes(b)
	if b[0] >= 0x80 {
		x.Sub(x, new(big.Int).Lsh(big.NewInt(1), uint(8*len(b))))
	}
	return DecimalFromBig(x), nil
}
