// Package benchparquet is `thaw bench parquet`: it writes the synthetic
// rows of `thaw bench write` and `thaw bench load` (benchutil.RowGen) as
// Parquet files, the input for timing `thaw load` on files the way a lake
// holds them (docs/performance.md, "thaw load from Parquet").
package benchparquet

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/memory"
	"github.com/apache/arrow-go/v18/parquet"
	"github.com/apache/arrow-go/v18/parquet/compress"
	"github.com/apache/arrow-go/v18/parquet/pqarrow"

	"github.com/thawdb/thaw/internal/benchutil"
	"github.com/thawdb/thaw/internal/flagutil"
	"github.com/thawdb/thaw/kv"
)

type config struct {
	rows       int64
	files      int
	groupRows  int
	gen        benchutil.RowGenConfig
	dictionary bool
	dir        string
}

func parseArgs(stdout io.Writer, args []string) (config, error) {
	c := config{gen: benchutil.RowGenConfig{Buckets: 8}}
	fs := flagutil.New("thaw bench parquet", "", stdout)
	fs.Usage = func() {
		fmt.Fprintln(stdout, "usage: thaw bench parquet [flags] DIR   (DIR must be empty or not exist)")
		flagutil.PrintDefaults(fs, stdout)
	}
	fs.Int64Var(&c.rows, "rows", 1_000_000, "rows to write")
	fs.IntVar(&c.files, "files", 10, "files to write the rows into, in row order")
	fs.IntVar(&c.groupRows, "row-group", 128<<10, "rows per row group")
	fs.IntVar(&c.gen.KeyBytes, "key-bytes", 8, "key bytes: 8 makes a BIGINT id, other sizes a BYTES key")
	fs.IntVar(&c.gen.ValueBytes, "value-bytes", 100, "bytes of the STRING payload column")
	fs.Uint64Var(&c.gen.Seed, "seed", 1, "seed of the synthetic data")
	fs.BoolVar(&c.dictionary, "dictionary", false, "dictionary-encode the columns (the payload has 4,096 distinct values, so a dictionary makes the files unrealistically cheap to read)")
	pos, err := flagutil.ParseArgs(fs, args)
	if err != nil {
		return c, err
	}
	if len(pos) != 1 {
		return c, flagutil.Usagef("bench parquet: want one DIR argument")
	}
	c.dir = pos[0]
	switch {
	case c.gen.Validate(c.rows) != nil:
		return c, fmt.Errorf("bench parquet: %w", c.gen.Validate(c.rows))
	case c.files < 1 || int64(c.files) > c.rows:
		return c, fmt.Errorf("bench parquet: --files %d: want 1 to --rows", c.files)
	case c.groupRows < 1:
		return c, fmt.Errorf("bench parquet: --row-group %d: want at least 1", c.groupRows)
	}
	return c, nil
}

// Run is `thaw bench parquet`.
func Run(ctx context.Context, stdout io.Writer, args []string) error {
	cfg, err := parseArgs(stdout, args)
	if err != nil {
		return err
	}
	if err := emptyDir(cfg.dir); err != nil {
		return err
	}
	g := benchutil.NewRowGen(cfg.gen)
	start := time.Now()
	var bytes int64
	per, extra := cfg.rows/int64(cfg.files), cfg.rows%int64(cfg.files)
	lo := int64(0)
	for f := range cfg.files {
		n := per
		if int64(f) < extra {
			n++
		}
		path := filepath.Join(cfg.dir, fmt.Sprintf("part-%05d.parquet", f))
		size, err := writeFile(ctx, path, g, lo, n, cfg)
		if err != nil {
			return err
		}
		bytes += size
		lo += n
	}
	s := g.Schema()
	var cols []string
	for _, c := range s.Columns {
		cols = append(cols, fmt.Sprintf("--column %q", c.Name+" "+c.Type.String()))
	}
	fmt.Fprintf(stdout, "wrote %d rows %s in %d files, %s, to %s (%.2fs)\n",
		cfg.rows, g.Describe(), cfg.files, benchutil.FmtBytes(bytes), cfg.dir, time.Since(start).Seconds())
	fmt.Fprintf(stdout, "a table they load into: thaw table create DATABASE.TABLE %s --primary-key %s --buckets N\n",
		strings.Join(cols, " "), s.PrimaryKey[0])
	return nil
}

// emptyDir makes dir unless it exists; an existing dir must be empty, so
// that no file of an earlier run is loaded with these.
func emptyDir(dir string) error {
	ents, err := os.ReadDir(dir)
	switch {
	case errors.Is(err, os.ErrNotExist):
		if err := os.MkdirAll(dir, 0o755); err != nil {
			return fmt.Errorf("bench parquet: %w", err)
		}
		return nil
	case err != nil:
		return fmt.Errorf("bench parquet: %w", err)
	case len(ents) > 0:
		return fmt.Errorf("bench parquet: %s is not empty", dir)
	}
	return nil
}

// writeFile writes rows [lo, lo+n) to a new file at path and returns its
// size.
func writeFile(ctx context.Context, path string, g *benchutil.RowGen, lo, n int64, cfg config) (size int64, err error) {
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o644)
	if err != nil {
		return 0, fmt.Errorf("bench parquet: %w", err)
	}
	schema := arrowSchema(g)
	w, err := pqarrow.NewFileWriter(schema, f, parquet.NewWriterProperties(
		parquet.WithMaxRowGroupLength(int64(cfg.groupRows)),
		parquet.WithCompression(compress.Codecs.Snappy),
		parquet.WithDictionaryDefault(cfg.dictionary)), pqarrow.DefaultWriterProps())
	if err != nil {
		_ = f.Close()
		return 0, fmt.Errorf("bench parquet: %s: %w", path, err)
	}
	defer func() {
		if cerr := w.Close(); cerr != nil && err == nil { // closes f
			err = fmt.Errorf("bench parquet: %s: %w", path, cerr)
		}
		if err == nil {
			var st os.FileInfo
			if st, err = os.Stat(path); err == nil {
				size = st.Size()
			}
		}
		if err != nil {
			_ = os.Remove(path) // no partial file is left to be loaded
		}
	}()
	b := array.NewRecordBuilder(memory.DefaultAllocator, schema)
	defer b.Release()
	row := make(kv.Row, 2)
	const batch = 64 << 10
	for at := lo; at < lo+n; at += batch {
		if err := ctx.Err(); err != nil {
			return 0, err
		}
		for i := at; i < min(at+batch, lo+n); i++ {
			g.Row(row, i)
			switch k := b.Field(0).(type) {
			case *array.Int64Builder:
				k.Append(row[0].(int64))
			case *array.BinaryBuilder:
				k.Append(row[0].([]byte))
			}
			b.Field(1).(*array.StringBuilder).Append(row[1].(string))
		}
		rec := b.NewRecordBatch()
		err := w.WriteBuffered(rec)
		rec.Release()
		if err != nil {
			return 0, fmt.Errorf("bench parquet: %s: %w", path, err)
		}
	}
	return 0, nil
}

// arrowSchema is the files' schema: the table's columns by name.
func arrowSchema(g *benchutil.RowGen) *arrow.Schema {
	key := arrow.Field{Name: "id", Type: arrow.PrimitiveTypes.Int64}
	if g.Config().KeyBytes != 8 {
		key = arrow.Field{Name: "k", Type: arrow.BinaryTypes.Binary}
	}
	return arrow.NewSchema([]arrow.Field{key, {Name: "payload", Type: arrow.BinaryTypes.String, Nullable: true}}, nil)
}
