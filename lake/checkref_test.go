package lake

import (
	"strings"
	"testing"
)

// TestCheckRef: a partition reference fits when its spec is the table's
// and its path names the spec's fields in order (escaped as paths are);
// values are not checked.
func TestCheckRef(t *testing.T) {
	info := &TableInfo{Name: "ns.t", Specs: []PartitionSpecInfo{
		{ID: 0},
		{ID: 2, Fields: []PartitionFieldInfo{{Name: "event_day"}, {Name: "a b"}}},
	}}
	for _, tc := range []struct {
		ref  PartitionRef
		want string // "" = fits
	}{
		{PartitionRef{SpecID: 0}, ""},
		{PartitionRef{SpecID: 0, Path: "x=1"}, "spec 0 of ns.t is unpartitioned: its one partition has the empty path"},
		{PartitionRef{SpecID: 2, Path: "event_day=2024-01-01/a+b=null"}, ""},
		{PartitionRef{SpecID: 2, Path: "event_day=not a day/a+b="}, ""},
		{PartitionRef{SpecID: 2, Path: "event_day=2024-01-01/a b=x"}, "not a partition path of spec 2 of ns.t: its paths read event_day=VALUE/a+b=VALUE"},
		{PartitionRef{SpecID: 2, Path: "a+b=x/event_day=2024-01-01"}, "its paths read event_day=VALUE/a+b=VALUE"},
		{PartitionRef{SpecID: 2, Path: "event_day=2024-01-01"}, "its paths read"},
		{PartitionRef{SpecID: 2, Path: "event_day=2024-01-01/a+b=x/c=1"}, "its paths read"},
		{PartitionRef{SpecID: 2, Path: "event_day/a+b"}, "its paths read"},
		{PartitionRef{SpecID: 2}, "its paths read"},
		{PartitionRef{SpecID: 1, Path: "event_day=2024-01-01"}, "ns.t has no partition spec 1 (its specs: 0, 2)"},
	} {
		err := info.CheckRef(tc.ref)
		if tc.want == "" && err != nil || tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)) {
			t.Errorf("CheckRef(%+v) = %v, want %q", tc.ref, err, tc.want)
		}
	}
}
