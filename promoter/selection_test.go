package promoter

import (
	"errors"
	"strings"
	"testing"

	"github.com/thawdb/thaw/lake"
	"github.com/thawdb/thaw/policies"
)

// TestCheckSelectionFields: a selection may name a lake partition field
// that is a tier partition key (in any spec, by column and transform);
// a field the tier does not partition by (a bucket field, an older spec's
// other column) is refused, since a tier partition holds every value of
// it and the decision would rest on whichever lake partition came first.
func TestCheckSelectionFields(t *testing.T) {
	info := &lake.TableInfo{Name: "lake.events", Specs: []lake.PartitionSpecInfo{
		{ID: 0, Fields: []lake.PartitionFieldInfo{
			{FieldID: 1000, Name: "ts_day", SourceID: 3, Transform: "day"},
			{FieldID: 1001, Name: "region", SourceID: 5, Transform: "identity"},
		}},
		{ID: 1, Fields: []lake.PartitionFieldInfo{
			{FieldID: 1002, Name: "event_day", SourceID: 3, Transform: "day"},
			{FieldID: 1003, Name: "id_bucket", SourceID: 1, Transform: "bucket[4]"},
		}},
	}}
	m := lake.PartitionMapping{SpecID: 1, Keys: []lake.PartitionKeyMapping{
		{Column: "event_day", SourceID: 3, Transform: "day", FieldID: 1002, Derived: true},
	}, BucketSource: "id", Buckets: 4}
	for _, tc := range []struct {
		name, selection, err string
	}{
		{"key", "where: {event_day: {gte: 2024-01-01}}", ""},
		{"window on key", "window: {field: event_day, last: 3d}", ""},
		{"older spec's field of the key", "window: {field: ts_day, last: 3d}", ""},
		{"bucket field", "where: {id_bucket: {eq: 0}}", "names partition field id_bucket of lake table lake.events, which is not a tier partition key: " +
			"a tier partition holds every value of it, so no one value selects it (fields to select on: ts_day, event_day)"},
		{"older spec's other field", "where: {region: {eq: eu}}", "names partition field region of lake table lake.events, which is not a tier partition key"},
		{"no such field", "where: {event_dy: {eq: x}}", "names partition field event_dy, which lake table lake.events does not have (its partition fields: ts_day, region, event_day, id_bucket)"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			pols, err := policies.Parse([]byte("apiVersion: thaw.dev/v1\nkind: PromotionPolicy\nmetadata: {name: p}\nspec:\n  source: {table: lake.events}\n"+
				"  selection:\n    partitions:\n      "+tc.selection+"\n"), "p.yaml")
			if err != nil {
				t.Fatal(err)
			}
			err = checkSelectionFields(pols[0], info, m)
			switch {
			case tc.err == "" && err != nil:
				t.Fatalf("refused: %v", err)
			case tc.err != "" && (!errors.Is(err, ErrSchema) || !strings.Contains(err.Error(), tc.err)):
				t.Fatalf("got %v, want ErrSchema saying %q", err, tc.err)
			}
		})
	}
}
