package snapshot

import (
	"errors"
	"strings"
	"testing"
)

func TestTargetPaths(t *testing.T) {
	plain := Target{RemoteDir: "s3://bkt/remote", Database: "db", Table: "orders", TableID: 42}
	part := plain
	part.Partition, part.PartitionID = "2024-01-01", 7
	const txn = "0b9f4d7e-3c1a-4c2b-9f00-5d2e8c7a1b23"
	for _, tc := range []struct{ got, want string }{
		{plain.Dir(), "s3://bkt/remote/kv/db/orders-42"},
		{plain.TabletDir(3), "s3://bkt/remote/kv/db/orders-42/3"},
		{plain.SnapshotDir(3, 17), "s3://bkt/remote/kv/db/orders-42/3/snap-17"},
		{plain.MetadataPath(3, 17), "s3://bkt/remote/kv/db/orders-42/3/snap-17/_METADATA"},
		{plain.SharedDir(3), "s3://bkt/remote/kv/db/orders-42/3/shared"},
		{plain.BulkLoadDir(txn), "s3://bkt/remote/kv/db/orders-42/_bulkload/" + txn},
		{plain.ManifestPath(txn), "s3://bkt/remote/kv/db/orders-42/_bulkload/" + txn + "/manifest"},
		{part.Dir(), "s3://bkt/remote/kv/db/orders-42/2024-01-01-p7"},
		{part.TabletDir(0), "s3://bkt/remote/kv/db/orders-42/2024-01-01-p7/0"},
		{part.SnapshotDir(0, 0), "s3://bkt/remote/kv/db/orders-42/2024-01-01-p7/0/snap-0"},
		{part.MetadataPath(0, 0), "s3://bkt/remote/kv/db/orders-42/2024-01-01-p7/0/snap-0/_METADATA"},
		{part.SharedDir(0), "s3://bkt/remote/kv/db/orders-42/2024-01-01-p7/0/shared"},
		{part.ManifestPath(txn), "s3://bkt/remote/kv/db/orders-42/2024-01-01-p7/_bulkload/" + txn + "/manifest"},
		{Target{RemoteDir: "file:///data/remote", Database: "d", Table: "t"}.Dir(), "file:///data/remote/kv/d/t-0"},
	} {
		if tc.got != tc.want {
			t.Errorf("got %s, want %s", tc.got, tc.want)
		}
	}
	if plain.Partitioned() || !part.Partitioned() {
		t.Error("Partitioned is wrong")
	}
}

func TestTargetValidate(t *testing.T) {
	good := Target{RemoteDir: "s3://bkt/remote", Database: "db", Table: "orders", TableID: 42}
	for _, remote := range []string{"s3://bkt", "s3://bkt/a/b", "file:///data/remote", "gs://b/p-1/x_y"} {
		tg := good
		tg.RemoteDir = remote
		if err := tg.Validate(); err != nil {
			t.Errorf("%s: %v", remote, err)
		}
	}
	part := good
	// Multi-key partition names join their values with '$' (Fluss).
	for _, name := range []string{"2024-01-01", "2024-01-01$EU", "1$2$3"} {
		part.Partition, part.PartitionID = name, 0
		if err := part.Validate(); err != nil {
			t.Errorf("%s: %v", name, err)
		}
	}
	for _, name := range []string{"$", "a$", "$a", "a$$b", "a$..", "a$b/c"} {
		part.Partition = name
		if err := part.Validate(); err == nil {
			t.Errorf("partition %q: want an error", name)
		}
	}
	unpart := good
	unpart.PartitionID = -1 // ignored without a partition
	if err := unpart.Validate(); err != nil {
		t.Error(err)
	}

	for name, mut := range map[string]func(*Target){
		"empty remote":          func(t *Target) { t.RemoteDir = "" },
		"remote trailing slash": func(t *Target) { t.RemoteDir = "s3://bkt/remote/" },
		"remote no scheme":      func(t *Target) { t.RemoteDir = "/data/remote" },
		"remote opaque":         func(t *Target) { t.RemoteDir = "file:data/remote" },
		"remote upper scheme":   func(t *Target) { t.RemoteDir = "S3://bkt/remote" },
		"remote query":          func(t *Target) { t.RemoteDir = "s3://bkt/remote?x=1" },
		"remote fragment":       func(t *Target) { t.RemoteDir = "s3://bkt/remote#x" },
		"remote dotdot":         func(t *Target) { t.RemoteDir = "s3://bkt/a/../b" },
		"remote dot":            func(t *Target) { t.RemoteDir = "s3://bkt/./b" },
		"remote empty segment":  func(t *Target) { t.RemoteDir = "s3://bkt//b" },
		"remote backslash":      func(t *Target) { t.RemoteDir = `s3://bkt/a\b` },
		"remote control":        func(t *Target) { t.RemoteDir = "s3://bkt/a\nb" },
		"remote bare scheme":    func(t *Target) { t.RemoteDir = "mem://" },
		"empty database":        func(t *Target) { t.Database = "" },
		"database slash":        func(t *Target) { t.Database = "a/b" },
		"database dotdot":       func(t *Target) { t.Database = ".." },
		"empty table":           func(t *Target) { t.Table = "" },
		"table dot":             func(t *Target) { t.Table = "a.b" },
		"table too long":        func(t *Target) { t.Table = strings.Repeat("x", 201) },
		"negative table id":     func(t *Target) { t.TableID = -1 },
		"partition slash":       func(t *Target) { t.Partition, t.PartitionID = "a/b", 1 },
		"partition dotdot":      func(t *Target) { t.Partition, t.PartitionID = "..", 1 },
		"partition too long":    func(t *Target) { t.Partition, t.PartitionID = strings.Repeat("1", 201), 1 },
		"negative partition id": func(t *Target) { t.Partition, t.PartitionID = "p", -1 },
	} {
		tg := good
		mut(&tg)
		if err := tg.Validate(); !errors.Is(err, ErrInvalidTarget) {
			t.Errorf("%s: got %v, want ErrInvalidTarget", name, err)
		} else if !strings.HasPrefix(err.Error(), "snapshot: ") {
			t.Errorf("%s: message %q lacks the package prefix", name, err)
		}
	}
	tg := good
	tg.Table = strings.Repeat("x", 200)
	if err := tg.Validate(); err != nil {
		t.Errorf("200-character name: %v", err)
	}
}

func TestValidateTxnID(t *testing.T) {
	for _, id := range []string{"0b9f4d7e-3c1a-4c2b-9f00-5d2e8c7a1b23", "txn_1"} {
		if err := ValidateTxnID(id); err != nil {
			t.Errorf("%q: %v", id, err)
		}
	}
	for _, id := range []string{"", "a/b", "..", ".", "a b", strings.Repeat("a", 201)} {
		if err := ValidateTxnID(id); !errors.Is(err, ErrInvalidTarget) {
			t.Errorf("%q: got %v, want ErrInvalidTarget", id, err)
		}
	}
}

func TestPrivateFileName(t *testing.T) {
	// sha256("abc") and sha256("MANIFEST-000001") are fixed vectors.
	const content = "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"
	if got, want := PrivateFileName(content, "abc"), "private-"+content+"-"+content; got != want {
		t.Errorf("got %s, want %s", got, want)
	}
	if got, want := PrivateFileName(content, "MANIFEST-000001"), "private-"+content+"-"+sha256Hex([]byte("MANIFEST-000001")); got != want {
		t.Errorf("got %s, want %s", got, want)
	}
}

func TestValidateLocalPath(t *testing.T) {
	for _, p := range []string{"000005.sst", "MANIFEST-000001", "db/OPTIONS-000003", "a/b/c", "marker.format-version.000001.024", "..x", "x.."} {
		if err := ValidateLocalPath(p); err != nil {
			t.Errorf("%q: %v", p, err)
		}
	}
	for _, p := range []string{"", "/abs", "a/", "a//b", ".", "..", "./a", "a/./b", "a/../b", "../a", `a\b`, "a\x00b", "a\x7fb", "\xff"} {
		if err := ValidateLocalPath(p); !errors.Is(err, ErrUnsafePath) {
			t.Errorf("%q: got %v, want ErrUnsafePath", p, err)
		}
	}
}

func TestCheckLocalTree(t *testing.T) {
	for _, paths := range [][]string{
		nil,
		{"000005.sst", "MANIFEST-000001", "db/OPTIONS-000003", "db/x/y"},
		{"a/b", "a/c", "ab", "a.b/c"},
	} {
		if err := CheckLocalTree(paths); err != nil {
			t.Errorf("%q: %v", paths, err)
		}
	}
	for _, paths := range [][]string{
		{"a", "a/b"},
		{"a/b", "a"},
		{"x", "a/b/c", "a/b"},
		{"a", "a/b/c"},
	} {
		if err := CheckLocalTree(paths); !errors.Is(err, ErrUnsafePath) {
			t.Errorf("%q: got %v, want ErrUnsafePath", paths, err)
		}
	}
}

func TestIsCanonicalSHA256(t *testing.T) {
	good := sha256Hex(nil)
	if good != "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855" {
		t.Fatalf("sha256Hex(nil) = %s", good)
	}
	if !IsCanonicalSHA256(good) {
		t.Error("canonical digest rejected")
	}
	for _, s := range []string{"", good[:63], good + "0", strings.ToUpper(good), good[:63] + "g", " " + good[1:]} {
		if IsCanonicalSHA256(s) {
			t.Errorf("%q accepted", s)
		}
	}
}
