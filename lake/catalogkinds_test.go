package lake

import (
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/apache/iceberg-go"
)

// TestGlueNamespaces: a Glue catalog (no nested namespaces: it refuses to
// list a database's children) with one database and one table. Namespaces
// asked each database for its children and failed ("hierarchical
// namespace is not supported"), and with it Tables("") and thaw lake
// tables; Hive did the same.
func TestGlueNamespaces(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/x-amz-json-1.1")
		switch r.Header.Get("X-Amz-Target") {
		case "AWSGlue.GetDatabases":
			_, _ = io.WriteString(w, `{"DatabaseList":[{"Name":"db1"}]}`)
		case "AWSGlue.GetTables":
			_, _ = io.WriteString(w, `{"TableList":[{"Name":"t1","Parameters":{"table_type":"ICEBERG","metadata_location":"s3://b/m.json"}}]}`)
		default:
			w.WriteHeader(400)
			_, _ = io.WriteString(w, `{"__type":"InvalidInputException","Message":"unexpected"}`)
		}
	}))
	defer srv.Close()
	l, err := Open(t.Context(), Config{Type: CatalogGlue, Warehouse: "s3://b/w",
		Glue: GlueConfig{Region: "us-east-1", Endpoint: srv.URL, AccessKeyID: "test", SecretAccessKey: "test"}})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	if nss, err := l.Namespaces(t.Context()); err != nil || !slices.Equal(nss, []string{"db1"}) {
		t.Errorf("Namespaces on glue: %v, %v", nss, err)
	}
	for _, ns := range []string{"", "db1"} {
		if tbls, err := l.Tables(t.Context(), ns); err != nil || !slices.Equal(tbls, []string{"db1.t1"}) {
			t.Errorf("Tables(%q) on glue: %v, %v", ns, tbls, err)
		}
	}
}

// TestNonParquetDataFile: a table with an ORC data file (added from
// another writer) cannot be read by iceberg-go: the scan refuses it at
// once, naming the file, as unmappable (terminal for the promoter). The
// error came only when the file's turn came, after the files before it
// were decoded, without its name, and the promoter retried it.
func TestNonParquetDataFile(t *testing.T) {
	l := scratch(t)
	ctx := t.Context()
	tbl := newRegionTable(t, l, "orc")
	tbl = appendRows(t, tbl, []any{int64(1)}, []any{"us"}, []any{"a"})
	path := filepath.Join(t.TempDir(), "part-0.orc")
	if err := os.WriteFile(path, []byte("ORC\x00garbage"), 0o644); err != nil {
		t.Fatal(err)
	}
	dfb, err := iceberg.NewDataFileBuilder(tbl.Spec(), iceberg.EntryContentData, "file://"+path, iceberg.OrcFile,
		map[int]any{1000: "eu"}, nil, nil, 3, 11)
	if err != nil {
		t.Fatal(err)
	}
	tx := tbl.NewTransaction()
	if err := tx.AddDataFiles(ctx, []iceberg.DataFile{dfb.Build()}, nil); err != nil {
		t.Fatal(err)
	}
	if _, err = tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	_, _, err = l.Scan(ctx, "t.orc", ScanOptions{})
	if !errors.Is(err, ErrUnmappable) || !strings.Contains(err.Error(), path) {
		t.Fatalf("scan of a table with an ORC data file: %v; want ErrUnmappable naming %s", err, path)
	}
}
