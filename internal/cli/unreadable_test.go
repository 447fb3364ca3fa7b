package cli

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"

	"github.com/thawdb/thaw/internal/daemon"
	"github.com/thawdb/thaw/promoter"
	"github.com/thawdb/thaw/promoter/promoterhttp"
)

// TestStatusWithUnreadableRecord: the ledger holds a committed record and
// one of version 3 (as a newer promoter writes). thaw status prints the
// readable promotion, then a warning naming the other's key and why, and
// exits 1 saying so; --output json lists it under "unreadable"; --policy
// does not hide it; thaw status of its id fails naming it.
func TestStatusWithUnreadableRecord(t *testing.T) {
	s := newPromoterSetup(t, 300, "")
	d := s.start(t, daemon.PromoterOptions{})
	defer func() {
		if err := d.Close(); err != nil {
			t.Error(err)
		}
	}()
	ctx := t.Context()
	readable, err := d.Promoter().Promote(ctx, promoter.Key{Policy: "quickstart", Partition: "2024-01-03"})
	if err != nil {
		t.Fatal(err)
	}

	newer := readable
	newer.ID = promoter.PromotionID("quickstart", "lake.events", "quickstart.events", "2024-01-04", readable.SourceSnapshotID)
	newer.Partition = "2024-01-04"
	newer.CallerToken = promoter.CallerToken(newer.ID, 1)
	b, err := json.Marshal(newer)
	if err != nil {
		t.Fatal(err)
	}
	newerKey := daemon.DefaultPromoterPrefix + "/promotions/" + newer.ID
	if _, err := d.Etcd().Put(ctx, newerKey, `{"version":3,"shard_hint":3,`+string(b[1:])); err != nil {
		t.Fatal(err)
	}
	const why = "record version 3: this promoter reads versions 1 to 2; upgrade it"
	url := d.URL()

	// Table: the promotion, then the warning section; exit 1.
	for _, args := range [][]string{
		{"status", "--promoter", url},
		{"status", "--promoter", url, "--policy", "quickstart"},
	} {
		code, out, errOut := run(t, args...)
		if code != 1 {
			t.Fatalf("%v: exit %d, want 1\n%s\n%s", args, code, out, errOut)
		}
		row := strings.Index(out, readable.ID)
		warn := strings.Index(out, "warning: the promoter cannot read 1 ledger record")
		line := out[max(warn, 0):]
		if row < 0 || !strings.Contains(out, "quickstart.events/2024-01-03") || warn < row ||
			!strings.Contains(line, newerKey) || !strings.Contains(line, why) {
			t.Fatalf("%v: table:\n%s", args, out)
		}
		if strings.Contains(out[:warn], newer.ID) {
			t.Fatalf("%v: the unreadable record is in the table:\n%s", args, out)
		}
		if !strings.Contains(errOut, "thaw: status: the promoter cannot read 1 ledger record: "+newerKey) {
			t.Fatalf("%v: stderr %q", args, errOut)
		}
	}

	// JSON: the same answer as the API, "unreadable" included; exit 1.
	code, out, errOut := run(t, "status", "--promoter", url, "--output", "json")
	var list promoterhttp.PromotionsResponse
	dec := json.NewDecoder(bytes.NewReader([]byte(out)))
	dec.DisallowUnknownFields()
	if code != 1 || dec.Decode(&list) != nil {
		t.Fatalf("status json: %d %s %s", code, out, errOut)
	}
	if len(list.Promotions) != 1 || list.Promotions[0].Record.ID != readable.ID || list.Promotions[0].Record.Phase != promoter.PhaseCommitted {
		t.Fatalf("status json promotions: %s", out)
	}
	if len(list.Unreadable) != 1 || list.Unreadable[0].Key != newerKey || list.Unreadable[0].Error != "decode record: "+why {
		t.Fatalf("status json unreadable: %s", out)
	}

	// One promotion: the unreadable one fails naming its key and why.
	code, _, errOut = run(t, "status", newer.ID, "--promoter", url)
	if code != 1 || !strings.Contains(errOut, newerKey) || !strings.Contains(errOut, why) || !strings.Contains(errOut, "unreadable, HTTP 500") {
		t.Fatalf("status of the unreadable record: %d %s", code, errOut)
	}
	if code, out, errOut := run(t, "status", readable.ID, "--promoter", url); code != 0 || !strings.Contains(out, readable.TxnID) {
		t.Fatalf("status of the readable record: %d %s %s", code, out, errOut)
	}

	// Once it is gone, status exits 0 without a warning.
	if _, err := d.Etcd().Delete(ctx, newerKey); err != nil {
		t.Fatal(err)
	}
	if code, out, errOut := run(t, "status", "--promoter", url); code != 0 || strings.Contains(out, "warning") || errOut != "" {
		t.Fatalf("status after the record is gone: %d\n%s\n%s", code, out, errOut)
	}
	code, out, _ = run(t, "status", "--promoter", url, "--output", "json")
	if code != 0 || strings.Contains(out, `"unreadable"`) {
		t.Fatalf("status json after the record is gone: %d %s", code, out)
	}
}
