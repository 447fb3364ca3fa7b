package cli

import (
	"context"
	"errors"
	"fmt"
	"iter"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/memory"
	"github.com/apache/arrow-go/v18/parquet/file"
	"github.com/apache/arrow-go/v18/parquet/pqarrow"

	"github.com/thawdb/thaw/kv"
	"github.com/thawdb/thaw/snapshotbuild"
)

// Parquet input of thaw load and thaw bulkload build.
//
// The arguments are Parquet files or directories; a directory contributes
// every *.parquet file below it (recursively, in lexical path order; files
// and directories whose names start with "." or "_" are skipped, as Spark and
// Hive write their markers there). Files are read one after another in
// argument order, each in its own row order, so for a primary key that occurs
// more than once the last row of the last file wins.
//
// Columns are matched to the table's columns by exact name. Every table
// column (partition keys included) must be in every file; columns the table
// does not have are not read. Types must be ones the snapshot builder accepts
// for the column's kv type (see snapshotbuild.Builder.Add): no implicit casts.

// parquetBatchRows is the number of rows per record batch read, and
// parquetReadAhead how many decoded batches may wait for the build: with the
// one being added and the one being decoded, at most three batches (48 Ki
// rows) are held, about what one batch of 64 Ki rows held before read-ahead.
const (
	parquetBatchRows = 16 << 10
	parquetReadAhead = 1
)

// parquetFile is one input file.
type parquetFile struct {
	path string
	size int64 // bytes on disk
	rows int64 // from the footer
}

// parquetInput is the expanded list of input files.
type parquetInput struct {
	files []parquetFile
	rows  int64
	bytes int64
}

// parquetFiles lists the *.parquet files below dir, recursively and
// sorted, skipping names that start with "." or "_" (Hive and Spark
// markers). Symbolic links are followed, to directories too; a file or
// directory reached twice (two links to one place, a link loop) counts
// once, and a link that leads nowhere is an error, not a skip.
func parquetFiles(dir string) ([]string, error) {
	var found []string
	seen := map[string]bool{}
	var walk func(path string) error
	walk = func(path string) error {
		real, err := filepath.EvalSymlinks(path)
		if err != nil {
			return err
		}
		if seen[real] {
			return nil
		}
		seen[real] = true
		entries, err := os.ReadDir(path)
		if err != nil {
			return err
		}
		for _, e := range entries {
			name := e.Name()
			if strings.HasPrefix(name, ".") || strings.HasPrefix(name, "_") {
				continue
			}
			child := filepath.Join(path, name)
			info, err := os.Stat(child)
			if err != nil {
				return err
			}
			switch {
			case info.IsDir():
				if err := walk(child); err != nil {
					return err
				}
			case info.Mode().IsRegular() && strings.HasSuffix(name, ".parquet"):
				real, err := filepath.EvalSymlinks(child)
				if err != nil {
					return err
				}
				if !seen[real] {
					seen[real] = true
					found = append(found, child)
				}
			}
		}
		return nil
	}
	err := walk(dir)
	slices.Sort(found)
	return found, err
}

// openParquetInput expands paths into Parquet files and reads each file's
// footer (row count).
func openParquetInput(paths []string) (*parquetInput, error) {
	in := &parquetInput{}
	for _, p := range paths {
		st, err := os.Stat(p)
		if err != nil {
			return nil, fmt.Errorf("input: %w", err)
		}
		var found []string
		if st.IsDir() {
			if found, err = parquetFiles(p); err != nil {
				return nil, fmt.Errorf("input directory %s: %w", p, err)
			}
			if len(found) == 0 {
				return nil, fmt.Errorf("input directory %s holds no *.parquet files", p)
			}
		} else {
			found = []string{p}
		}
		for _, f := range found {
			pf, err := parquetFooter(f)
			if err != nil {
				return nil, err
			}
			in.files = append(in.files, pf)
			in.rows += pf.rows
			in.bytes += pf.size
		}
	}
	if len(in.files) == 0 {
		return nil, usageError("no input files")
	}
	return in, nil
}

func parquetFooter(path string) (parquetFile, error) {
	st, err := os.Stat(path)
	if err != nil {
		return parquetFile{}, fmt.Errorf("input: %w", err)
	}
	r, err := openParquetFile(path)
	if err != nil {
		return parquetFile{}, err
	}
	rows := r.NumRows()
	if err := r.Close(); err != nil {
		return parquetFile{}, fmt.Errorf("file %s: %w", path, err)
	}
	return parquetFile{path: path, size: st.Size(), rows: rows}, nil
}

// openParquetFile opens path's footer. arrow-go panics on some corrupt
// footers (a slice of a negative length, an invalid logical type): an
// error naming the file instead.
func openParquetFile(path string) (*file.Reader, error) {
	r, err := guardParquet(path, func() (*file.Reader, error) { return file.OpenParquetFile(path, false) })
	if err != nil {
		return nil, fmt.Errorf("not a readable Parquet file: %w", err)
	}
	return r, nil
}

// parquetReader reads one file's table columns.
type parquetReader struct {
	f      parquetFile
	pf     *file.Reader
	fr     *pqarrow.FileReader
	cols   []int         // leaf column indices to read
	schema *arrow.Schema // the projected Arrow schema
}

// openParquet opens path and maps its columns to tbl's by name. Missing
// columns (but partition-key columns when partition, the target partition,
// is given: the builder fills in its values), nested columns and Arrow
// types the builder cannot take for a column are errors naming the file
// and the column.
func openParquet(f parquetFile, tbl *kv.Table, partition string) (_ *parquetReader, err error) {
	pf, err := openParquetFile(f.path)
	if err != nil {
		return nil, err
	}
	defer func() {
		if err != nil {
			_ = pf.Close()
		}
	}()
	// Columns are decoded serially: arrow-go panics on some corrupt column
	// data, and a panic in its parallel decoding goroutines cannot be
	// recovered (the process died after Begin, leaving the target held
	// until the build deadline). ReadAhead overlaps decoding with the
	// build all the same.
	fr, err := guardParquet(f.path, func() (*pqarrow.FileReader, error) {
		return pqarrow.NewFileReader(pf, pqarrow.ArrowReadProperties{BatchSize: parquetBatchRows}, memory.DefaultAllocator)
	})
	if err != nil {
		return nil, err
	}
	r := &parquetReader{f: f, pf: pf, fr: fr}
	byName := map[string]*pqarrow.SchemaField{}
	var names []string
	for i := range fr.Manifest.Fields {
		sf := &fr.Manifest.Fields[i]
		names = append(names, sf.Field.Name)
		if _, dup := byName[sf.Field.Name]; dup {
			byName[sf.Field.Name] = nil // ambiguous
			continue
		}
		byName[sf.Field.Name] = sf
	}
	var missing []string
	var fields []arrow.Field
	for i := range tbl.NumColumns() {
		col := tbl.Column(i)
		sf, ok := byName[col.Name]
		switch {
		case !ok && partition != "" && slices.Contains(tbl.PartitionKeys(), i):
			continue // the partition's value
		case !ok:
			missing = append(missing, fmt.Sprintf("%q (%s)", col.Name, col.Type))
			continue
		case sf == nil:
			return nil, fmt.Errorf("file %s: column %q appears more than once", f.path, col.Name)
		case !sf.IsLeaf() || len(sf.Children) > 0:
			return nil, fmt.Errorf("file %s: column %q (%s): nested Parquet type %s is not supported", f.path, col.Name, col.Type, sf.Field.Type)
		}
		r.cols = append(r.cols, sf.ColIndex)
		fields = append(fields, *sf.Field)
	}
	if len(missing) > 0 {
		what := "column"
		if len(missing) > 1 {
			what = "columns"
		}
		return nil, fmt.Errorf("file %s: missing %s %s (the file has %s)", f.path, what, strings.Join(missing, ", "), strings.Join(names, ", "))
	}
	r.schema = arrow.NewSchema(fields, nil)
	// The builder checks the Arrow types when it sees a schema; an empty
	// batch makes it check now, before any row is read.
	cols := make([]arrow.Array, len(fields))
	for i, fd := range fields {
		cols[i] = array.MakeArrayOfNull(memory.DefaultAllocator, fd.Type, 0)
	}
	empty := array.NewRecordBatch(r.schema, cols, 0)
	for _, c := range cols {
		c.Release()
	}
	defer empty.Release()
	if err := snapshotbuild.NewRowEncoder(tbl, partition).Encode(empty, 0, func(int, int, []byte, []byte) error { return nil }); err != nil {
		return nil, fmt.Errorf("file %s: %w", f.path, unwrapBatch(err))
	}
	return r, nil
}

// unwrapBatch drops the "batch N: " prefix the encoder puts on schema
// errors (the batch number means nothing to a user of files).
func unwrapBatch(err error) error {
	if u := errors.Unwrap(err); u != nil && strings.HasPrefix(err.Error(), "batch ") {
		return u
	}
	return err
}

// each calls fn with every record batch of the file, in order, and the
// file-relative index of its first row. fn must not retain rec.
func (r *parquetReader) each(ctx context.Context, fn func(first int64, rec arrow.RecordBatch) error) error {
	if r.f.rows == 0 {
		return nil
	}
	rr, err := guardParquet(r.f.path, func() (pqarrow.RecordReader, error) { return r.fr.GetRecordReader(ctx, r.cols, nil) })
	if err != nil {
		return err
	}
	defer rr.Release()
	var first int64
	for {
		more, err := guardParquet(r.f.path, func() (bool, error) { return rr.Next(), nil })
		if err != nil {
			return fmt.Errorf("%w (rows from %d)", err, first)
		}
		if !more {
			break
		}
		rec := rr.RecordBatch()
		if err := fn(first, rec); err != nil {
			return err
		}
		first += rec.NumRows()
		if err := ctx.Err(); err != nil {
			return err
		}
	}
	if err := rr.Err(); err != nil {
		return fmt.Errorf("file %s: read rows from %d: %w", r.f.path, first, err)
	}
	return nil
}

// guardParquet runs a read of path's data (arrow-go), turning a panic on
// corrupt data into an error naming the file.
func guardParquet[T any](path string, read func() (T, error)) (v T, err error) {
	defer func() {
		if p := recover(); p != nil {
			err = fmt.Errorf("file %s: corrupt Parquet data: %v", path, p)
		}
	}()
	v, err = read()
	if err != nil {
		err = fmt.Errorf("file %s: %w", path, err)
	}
	return v, err
}

// batches is each as a sequence of batches the consumer owns (each one
// retained for it), for bulkloadclient.ReadAhead; an error ends it.
func (r *parquetReader) batches(ctx context.Context) iter.Seq2[arrow.RecordBatch, error] {
	return func(yield func(arrow.RecordBatch, error) bool) {
		stop := errors.New("consumer stopped")
		err := r.each(ctx, func(_ int64, rec arrow.RecordBatch) error {
			rec.Retain()
			if !yield(rec, nil) {
				return stop
			}
			return nil
		})
		if err != nil && err != stop {
			yield(nil, err)
		}
	}
}

func (r *parquetReader) close() error { return r.pf.Close() }

// checkParquet opens every file of in once to check its columns against tbl
// before anything is built.
func checkParquet(in *parquetInput, tbl *kv.Table, partition string) error {
	var errs []error
	var tables []string // Iceberg tables the failing files are in
	for _, f := range in.files {
		r, err := openParquet(f, tbl, partition)
		if err == nil {
			err = r.close()
			if err != nil {
				err = fmt.Errorf("file %s: %w", f.path, err)
			}
		}
		if err == nil {
			continue
		}
		errs = append(errs, err)
		if t := icebergTableOf(f.path); t != "" && !slices.Contains(tables, t) {
			tables = append(tables, t)
		}
	}
	if len(tables) > 0 {
		what := "the files are in the Iceberg table at"
		if len(tables) > 1 {
			what = "the files are in the Iceberg tables at"
		}
		errs = append(errs, fmt.Errorf("(%s %s: besides its current data files, an Iceberg table's directory holds delete files and data that later snapshots replaced, so its files are no input for thaw load; promote the table with a promotion policy instead, see docs/promoter.md)",
			what, strings.Join(tables, ", ")))
	}
	return joinErrors(errs)
}

// icebergTableOf returns the directory of the Iceberg table whose files
// include path (a directory above path with metadata/*.metadata.json), ""
// if there is none.
func icebergTableOf(path string) string {
	if abs, err := filepath.Abs(path); err == nil {
		path = abs // a relative path looks above the working directory too
	}
	for dir := filepath.Dir(path); ; {
		if m, _ := filepath.Glob(filepath.Join(dir, "metadata", "*.metadata.json")); len(m) > 0 {
			return dir
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return ""
		}
		dir = parent
	}
}

// fileRowError names the file and file-relative row of a row error from
// the builder or the encoder; first is the file row of the batch's row 0.
func fileRowError(path string, first int64, err error) error {
	var re *snapshotbuild.RowError
	if errors.As(err, &re) {
		if re.Column != "" {
			return fmt.Errorf("file %s: row %d: column %q: %w", path, first+int64(re.Row), re.Column, re.Err)
		}
		return fmt.Errorf("file %s: row %d: %w", path, first+int64(re.Row), re.Err)
	}
	if errors.Is(err, snapshotbuild.ErrSchemaMismatch) || errors.Is(err, snapshotbuild.ErrUnsupportedArrowType) {
		return fmt.Errorf("file %s: %w", path, unwrapBatch(err))
	}
	return fmt.Errorf("file %s: rows from %d: %w", path, first, err)
}
