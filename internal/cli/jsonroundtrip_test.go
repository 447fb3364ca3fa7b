package cli

import (
	"math"
	"reflect"
	"strings"
	"testing"

	"github.com/thawdb/thaw/kv"
)

// TestRowJSONRoundTripEdges: what get and scan print of a row, put takes
// back as the same row. Dates and timestamps outside the years 0000-9999
// were printed in a form put refused ("10000-01-01"); they print as days
// or epoch millis, which put takes.
func TestRowJSONRoundTripEdges(t *testing.T) {
	tbl := testTable(t)
	for _, in := range []string{
		`{"dt":"a","id":1,"must":"x","day":3000000}`,
		`{"dt":"a","id":1,"must":"x","day":-800000}`,
		`{"dt":"a","id":1,"must":"x","day":2147483647}`,
		`{"dt":"a","id":1,"must":"x","day":-2147483648}`,
		`{"dt":"a","id":1,"must":"x","day":-719528}`,
		`{"dt":"a","id":1,"must":"x","ts":253402300800000}`,
		`{"dt":"a","id":1,"must":"x","ts":-62198755200000}`,
		`{"dt":"a","id":1,"must":"x","ltz":253402300800000}`,
		`{"dt":"a","id":1,"must":"x","ltz":-62198755200000}`,
		`{"dt":"a","id":1,"must":"x","ts":9223372036854775807}`,
		`{"dt":"a","id":1,"must":"x","ts":"0000-01-01T00:00:00"}`,
		// Outside the years 0000-9999 with digits below the millisecond:
		// printed as a text put refused ("10000-01-01T00:00:00.000001");
		// now epoch millis and the nanoseconds within the millisecond.
		`{"dt":"a","id":1,"must":"x","ts":253402300800000.000001}`,
		`{"dt":"a","id":1,"must":"x","ts":-62198755200001.999999}`,
		`{"dt":"a","id":1,"must":"x","ltz":253402300800000.000500}`,
		`{"dt":"a","id":1,"must":"x","ltz":-62198755200000.000001}`,
	} {
		row, err := rowFromJSON(tbl, []byte(in), 1, false)
		if err != nil {
			t.Errorf("%s: refused: %v", in, err)
			continue
		}
		out, err := rowJSON(tbl, row)
		if err != nil {
			t.Errorf("%s: print: %v", in, err)
			continue
		}
		back, err := rowFromJSON(tbl, out, 1, false)
		if err != nil || !reflect.DeepEqual(back, row) {
			t.Errorf("%s: printed %s, read back %v (%v), want %v", in, out, back, err, row)
		}
	}
}

// TestNaNIsJavasNaN: "NaN" reads as the NaN Java, Arrow and Parquet write
// (0x7ff8000000000000), not Go's math.NaN() (0x7ff8000000000001): a DOUBLE
// key's bytes are its bits, so a key "NaN" missed the row another writer
// stored, a delete of it deleted nothing, and a put added a second row.
func TestNaNIsJavasNaN(t *testing.T) {
	tbl := testTable(t)
	row, err := rowFromJSON(tbl, []byte(`{"dt":"a","id":1,"must":"x","d":"NaN","f":"NaN"}`), 1, false)
	if err != nil {
		t.Fatal(err)
	}
	names := tbl.Schema().Columns
	for i, c := range names {
		switch c.Name {
		case "d":
			if b := math.Float64bits(row[i].(float64)); b != 0x7ff8000000000000 {
				t.Errorf("DOUBLE NaN bits %#x", b)
			}
		case "f":
			if b := math.Float32bits(row[i].(float32)); b != 0x7fc00000 {
				t.Errorf("FLOAT NaN bits %#x", b)
			}
		}
	}
	if b := math.Float64bits(kv.NaN()); b != 0x7ff8000000000000 {
		t.Errorf("kv.NaN bits %#x", b)
	}
}

// TestFractionDigitsBeyondNanos: more than nine fractional digits of a
// second are refused; time.Parse dropped them silently, so TIME took
// "13:45:00.1230000009" as 13:45:00.123 while refusing "13:45:00.1231".
func TestFractionDigitsBeyondNanos(t *testing.T) {
	tbl := testTable(t)
	for _, in := range []string{
		`{"dt":"a","id":1,"must":"x","t":"13:45:00.1230000009"}`,
		`{"dt":"a","id":1,"must":"x","ts":"2024-01-31T13:45:00.1234567899"}`,
		`{"dt":"a","id":1,"must":"x","ltz":"2024-01-31T13:45:00.1234567899Z"}`,
	} {
		if _, err := rowFromJSON(tbl, []byte(in), 1, false); err == nil || !strings.Contains(err.Error(), "13:45:00.123") {
			t.Errorf("%s: %v", in, err)
		}
	}
	if _, err := rowFromJSON(tbl, []byte(`{"dt":"a","id":1,"must":"x","ltz":"2024-01-31T13:45:00.123456789Z"}`), 1, false); err != nil {
		t.Errorf("nine digits: %v", err)
	}
	// A comma before the fraction (time.Parse takes it, and cut digits
	// past nine after it silently) and malformed millis.nanos numbers are
	// refused.
	for _, in := range []string{
		`{"dt":"a","id":1,"must":"x","t":"13:45:00,1230000009"}`,
		`{"dt":"a","id":1,"must":"x","t":"13:45:00,123"}`,
		`{"dt":"a","id":1,"must":"x","ts":"2024-01-31T13:45:00,1234567899"}`,
		`{"dt":"a","id":1,"must":"x","ltz":"2024-01-31T13:45:00,123Z"}`,
		`{"dt":"a","id":1,"must":"x","ts":1.5}`,
		`{"dt":"a","id":1,"must":"x","ts":1.0000001}`,
		`{"dt":"a","id":1,"must":"x","ts":1.5e3}`,
		`{"dt":"a","id":1,"must":"x","ts":1.00000e1}`,
	} {
		if _, err := rowFromJSON(tbl, []byte(in), 1, false); err == nil {
			t.Errorf("%s: accepted", in)
		}
	}
}

// TestZoneOffsetsOfRFC3339: a TIMESTAMP_LTZ's zone offset has hours 00-23
// (RFC 3339); time.Parse took +24:00 and beyond, an instant a day or more
// away from the wall time written. 23:59 still reads.
func TestZoneOffsetsOfRFC3339(t *testing.T) {
	tbl := testTable(t)
	for _, off := range []string{"+24:00", "-24:00", "+99:00"} {
		in := `{"dt":"a","id":1,"must":"x","ltz":"2024-01-31T13:45:00` + off + `"}`
		if _, err := rowFromJSON(tbl, []byte(in), 1, false); err == nil {
			t.Errorf("%s: accepted", in)
		}
	}
	for _, off := range []string{"+23:59", "-23:59", "Z"} {
		in := `{"dt":"a","id":1,"must":"x","ltz":"2024-01-31T13:45:00` + off + `"}`
		if _, err := rowFromJSON(tbl, []byte(in), 1, false); err != nil {
			t.Errorf("%s: %v", in, err)
		}
	}
}
