package snapshot

import (
	"slices"
	"strconv"
	"testing"
)

func TestRetain(t *testing.T) {
	loc := func(id string) string { return "file:///r/kv/db/t-7/0/snap-" + id }
	meta := func(id string) string { return loc(id) + "/_METADATA" }
	shared := func(n string) KvFileHandle {
		return KvFileHandle{Handle: FileHandle{Path: "file:///r/kv/db/t-7/0/shared/" + n}, LocalPath: n}
	}
	private := func(id, n string) KvFileHandle {
		return KvFileHandle{Handle: FileHandle{Path: loc(id) + "/" + n}, LocalPath: n}
	}
	s := func(id int64, sh []KvFileHandle, pr ...KvFileHandle) Metadata {
		return Metadata{SnapshotID: id, SnapshotLocation: loc(strconv.FormatInt(id, 10)), SharedFiles: sh, PrivateFiles: pr}
	}
	s1 := s(1, []KvFileHandle{shared("a.sst"), shared("b.sst")}, private("1", "M1"))
	s2 := s(2, []KvFileHandle{shared("b.sst"), shared("c.sst")}, private("2", "M2"))
	s3 := s(3, []KvFileHandle{shared("c.sst"), shared("d.sst")}, private("3", "M3"))
	bulk := s(4, nil, private("4", "000005.sst"), private("4", "M4"))
	s5 := s(5, []KvFileHandle{shared("d.sst"), shared("e.sst")}, private("5", "M5"))

	ids := func(ms []Metadata) (out []int64) {
		for _, m := range ms {
			out = append(out, m.SnapshotID)
		}
		return out
	}
	for _, tc := range []struct {
		name      string
		in        []Metadata
		keep      int
		retained  []int64
		deletable []string
	}{
		{"empty", nil, 2, nil, nil},
		{"fewer than keep", []Metadata{s2, s1}, 3, []int64{1, 2}, nil},
		{"keep last two", []Metadata{s3, s1, s2}, 2, []int64{2, 3},
			[]string{meta("1"), "file:///r/kv/db/t-7/0/shared/a.sst", loc("1") + "/M1"}},
		{"keep last one", []Metadata{s1, s2, s3}, 1, []int64{3},
			[]string{meta("1"), meta("2"),
				"file:///r/kv/db/t-7/0/shared/a.sst", "file:///r/kv/db/t-7/0/shared/b.sst",
				loc("1") + "/M1", loc("2") + "/M2"}},
		{"keep zero keeps one", []Metadata{s1, s2}, 0, []int64{2},
			[]string{meta("1"), "file:///r/kv/db/t-7/0/shared/a.sst", loc("1") + "/M1"}},
		{"bulk snapshot private files", []Metadata{s3, bulk, s5}, 1, []int64{5},
			[]string{meta("3"), meta("4"), "file:///r/kv/db/t-7/0/shared/c.sst",
				loc("3") + "/M3", loc("4") + "/000005.sst", loc("4") + "/M4"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			retained, deletable := Retain(tc.in, tc.keep)
			if !slices.Equal(ids(retained), tc.retained) {
				t.Fatalf("retained %v, want %v", ids(retained), tc.retained)
			}
			if !slices.Equal(deletable, tc.deletable) {
				t.Fatalf("deletable\n%q\nwant\n%q", deletable, tc.deletable)
			}
		})
	}
}
