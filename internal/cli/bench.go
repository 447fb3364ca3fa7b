package cli

import (
	"context"
	"io"

	"github.com/thawdb/thaw/internal/benchbuild"
	"github.com/thawdb/thaw/internal/benchload"
	"github.com/thawdb/thaw/internal/benchparquet"
	"github.com/thawdb/thaw/internal/benchwrite"
)

func benchCommands() []command {
	return []command{
		{name: "build", summary: "offline snapshot build against the raw SST write limit", run: benchbuild.Run},
		{name: "load", summary: "the bulk path against the ordinary write path, same rows, one embedded tier", run: benchload.Run},
		{name: "parquet", summary: "write the benchmarks' synthetic rows as Parquet files (input for timing thaw load)", run: benchparquet.Run},
		{name: "write", summary: "the ordinary write path end to end on the embedded tier", run: benchwrite.Run},
	}
}

func runBench(ctx context.Context, stdout io.Writer, args []string) error {
	return dispatch(ctx, "thaw bench", benchCommands(), args, stdout)
}
