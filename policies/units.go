package policies

import (
	"fmt"
	"math"
	"strconv"
	"strings"
	"time"
)

type unit struct {
	suffix string
	n      int64
}

// Longest suffixes first so "KiB" is not read as "B".
var sizeUnits = []unit{
	{"KiB", 1 << 10}, {"MiB", 1 << 20}, {"GiB", 1 << 30}, {"TiB", 1 << 40},
	{"KB", 1e3}, {"MB", 1e6}, {"GB", 1e9}, {"TB", 1e12},
	{"B", 1},
}

// ParseSize reads a byte size: a non-negative integer with an optional unit
// B, KiB, MiB, GiB, TiB (powers of 1024) or KB, MB, GB, TB (powers of 1000),
// optionally separated by one space. A plain integer is bytes.
func ParseSize(s string) (int64, error) {
	num, mult := s, int64(1)
	for _, u := range sizeUnits {
		if strings.HasSuffix(s, u.suffix) {
			num, mult = strings.TrimSuffix(strings.TrimSuffix(s, u.suffix), " "), u.n
			break
		}
	}
	if num == "" || strings.TrimLeft(num, "0123456789") != "" {
		return 0, fmt.Errorf("size %q: want an integer with an optional unit B, KiB, MiB, GiB, TiB, KB, MB, GB or TB", s)
	}
	n, err := strconv.ParseInt(num, 10, 64)
	if err != nil || n > math.MaxInt64/mult {
		return 0, fmt.Errorf("size %q is too large", s)
	}
	return n * mult, nil
}

// FormatSize renders n with the largest unit that divides it exactly
// (binary units first), or as plain bytes.
func FormatSize(n int64) string {
	if n == 0 {
		return "0"
	}
	for _, u := range []unit{{"TiB", 1 << 40}, {"GiB", 1 << 30}, {"MiB", 1 << 20}, {"KiB", 1 << 10}, {"TB", 1e12}, {"GB", 1e9}, {"MB", 1e6}, {"KB", 1e3}} {
		if n%u.n == 0 {
			return strconv.FormatInt(n/u.n, 10) + u.suffix
		}
	}
	return strconv.FormatInt(n, 10)
}

// maxWindow keeps window arithmetic far from time.Duration's range.
const maxWindow = 100 * 366 * 24 * time.Hour

// parseWindow reads a window length: a positive integer followed by h
// (hours), d (days) or w (weeks).
func parseWindow(s string) (time.Duration, string, error) {
	d, err := parseWindowDuration(s)
	if err != nil {
		return 0, "", err
	}
	return d, strconv.FormatInt(int64(d/unitOf(s[len(s)-1])), 10) + s[len(s)-1:], nil
}

func unitOf(c byte) time.Duration {
	switch c {
	case 'h':
		return time.Hour
	case 'd':
		return 24 * time.Hour
	}
	return 7 * 24 * time.Hour
}

func parseWindowDuration(s string) (time.Duration, error) {
	if s == "" {
		return 0, fmt.Errorf("want a length such as 7d, 36h or 2w")
	}
	var per time.Duration
	switch s[len(s)-1] {
	case 'h':
		per = time.Hour
	case 'd':
		per = 24 * time.Hour
	case 'w':
		per = 7 * 24 * time.Hour
	default:
		return 0, fmt.Errorf("%q: unit must be h (hours), d (days) or w (weeks)", s)
	}
	num := s[:len(s)-1]
	if num == "" || strings.TrimLeft(num, "-0123456789") != "" {
		return 0, fmt.Errorf("%q: want an integer followed by h, d or w", s)
	}
	n, err := strconv.ParseInt(num, 10, 64)
	if err != nil {
		return 0, fmt.Errorf("%q: want an integer followed by h, d or w", s)
	}
	if n <= 0 {
		return 0, fmt.Errorf("%q: must be greater than zero", s)
	}
	if n > int64(maxWindow/per) {
		return 0, fmt.Errorf("%q: longer than 100 years", s)
	}
	return time.Duration(n) * per, nil
}
