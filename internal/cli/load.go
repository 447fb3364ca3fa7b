package cli

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"math"
	"math/bits"
	"os"
	"strings"
	"sync"
	"time"

	"connectrpc.com/connect"
	"github.com/apache/arrow-go/v18/arrow"

	"github.com/thawdb/thaw/bulkload"
	"github.com/thawdb/thaw/bulkload/bulkloadclient"
	tierv1 "github.com/thawdb/thaw/gen/thaw/tier/v1"
	"github.com/thawdb/thaw/gen/thaw/tier/v1/tierv1connect"
	"github.com/thawdb/thaw/internal/daemon"
	"github.com/thawdb/thaw/kv"
	"github.com/thawdb/thaw/objstore"
	"github.com/thawdb/thaw/snapshotbuild"
	"github.com/thawdb/thaw/tier/tierpb"
)

// ---------------------------------------------------------------------------
// thaw load: Parquet files into an empty table or partition, in one bulk-load
// transaction (Begin, one build session for every bucket, Commit; Abort on
// any failure before Commit).

// shareOf is size*part/whole (whole at least 1) without overflowing: the
// bytes of a file of size bytes that part of its whole rows stand for.
func shareOf(size, part, whole int64) int64 {
	hi, lo := bits.Mul64(uint64(size), uint64(part))
	q, _ := bits.Div64(hi%uint64(max(whole, 1)), lo, uint64(max(whole, 1)))
	hq := hi / uint64(max(whole, 1))
	if hq > 0 || q > math.MaxInt64 {
		return math.MaxInt64
	}
	return int64(q)
}

// progressOutput receives the progress and notes of commands whose stdout
// carries data (thaw bulkload begin and build, thaw lake scan --json).
var progressOutput io.Writer = os.Stderr

// plainProgressInterval is how often plain progress lines repeat while one
// file is being read (a line is printed after every file as well).
var plainProgressInterval = 5 * time.Second

// testHoldAfterPutEnv names the test hook of the build commands: when set,
// the first object upload whose key contains its value completes, then the
// process prints "thaw: test hook: holding after put of KEY" to its progress
// output and blocks until it is killed or interrupted. Tests use it to kill a
// builder at an exact point (internal/cli/distributed_test.go); it is not a
// user feature.
const testHoldAfterPutEnv = "THAW_TEST_HOLD_AFTER_PUT"

// progress reports how a build advances: a bar redrawn in place on a
// terminal, plain lines otherwise. It is safe for concurrent use.
type progress struct {
	w   io.Writer
	bar bool
	in  *parquetInput

	mu       sync.Mutex
	rows     int64
	bytes    int64
	done     int // files read completely
	last     time.Time
	barShown bool
}

func newProgress(w io.Writer, in *parquetInput) *progress {
	return &progress{w: w, bar: isTerminal(w), in: in, last: time.Now()}
}

// advance records rows and bytes read; fileDone says a file was read to its end.
func (p *progress) advance(rows, bytes int64, fileDone bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.rows += rows
	p.bytes += bytes
	if fileDone {
		p.done++
	}
	now := time.Now()
	if p.bar {
		if fileDone || now.Sub(p.last) >= 100*time.Millisecond {
			p.last = now
			p.drawLocked()
		}
		return
	}
	if fileDone || now.Sub(p.last) >= plainProgressInterval {
		p.last = now
		fmt.Fprintf(p.w, "read %s (%s) from %d/%d files\n", plural(p.rows, "row", "rows"), humanBytes(p.bytes), p.done, len(p.in.files))
	}
}

func (p *progress) drawLocked() {
	const width = 30
	frac := 1.0
	if p.in.rows > 0 {
		frac = min(1, float64(p.rows)/float64(p.in.rows))
	}
	n := int(frac * width)
	bar := strings.Repeat("=", n)
	if n < width {
		bar += ">" + strings.Repeat(" ", width-n-1)
	}
	fmt.Fprintf(p.w, "\r\033[K[%s] %3.0f%%  %d/%d rows  %s  %d/%d files", bar, 100*frac, p.rows, p.in.rows, humanBytes(p.bytes), p.done, len(p.in.files))
	p.barShown = true
}

// printf prints a line (after the bar, which it ends first).
func (p *progress) printf(format string, args ...any) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.barShown {
		fmt.Fprintln(p.w)
		p.barShown = false
	}
	fmt.Fprintf(p.w, format+"\n", args...)
}

// buildOptions are the build flags of thaw load and thaw bulkload build.
type buildOptions struct {
	buckets []int // nil: every bucket
	skip    bool  // rows of other buckets are dropped (else an error)
	tempDir string
	memory  int64
	workers int
	// scoped: write through the coordinator's upload gateway with
	// credentials from client (--scoped-uploads).
	scoped bool
	client *bulkloadclient.Client
	// objectStore is --object-store, store the store it opened (nil: the
	// build context's remote data dir, opened by the session).
	objectStore string
	store       *objstore.Store
}

// openStore opens --object-store, if given; the caller closes o.store.
func (o *buildOptions) openStore(ctx context.Context) error {
	if o.objectStore == "" {
		return nil
	}
	if o.scoped {
		return usageError("--object-store and --scoped-uploads exclude each other: a scoped build opens no store")
	}
	st, err := objstore.Open(ctx, o.objectStore)
	if err != nil {
		return usageError("--object-store: %v", err)
	}
	o.store = st
	return nil
}

// closeStore closes what openStore opened.
func (o *buildOptions) closeStore() error {
	if o.store == nil {
		return nil
	}
	return o.store.Close()
}

// checkStore refuses a store other than the one bc's bulk load writes to.
func checkStore(st *objstore.Store, bc *bulkloadclient.BuildContext) error {
	return checkStoreDir(st, "bulk load "+bc.Handle().TxnID, bc.RemoteDataDir())
}

// checkStoreDir refuses a store whose base is not dir, where what (a bulk
// load) writes.
func checkStoreDir(st *objstore.Store, what, dir string) error {
	if st != nil && st.Base() != dir {
		return usageError("--object-store addresses %s, but %s writes under %s (the tier's object_store)", st.Base(), what, dir)
	}
	return nil
}

// removeStaleTemp removes the temporary directories that builds of killed
// processes left in dir (os.TempDir() if empty) and says so; a failure is
// a warning (the build goes on).
func removeStaleTemp(dir string, prog *progress) {
	if dir == "" {
		dir = os.TempDir()
	}
	st, err := snapshotbuild.RemoveStaleTemp(dir)
	if st.Dirs > 0 {
		prog.printf("removed %s (%s) that builds of killed processes left in %s",
			plural(st.Dirs, "temporary build directory", "temporary build directories"), humanBytes(st.Bytes), dir)
	}
	if err != nil {
		prog.printf("warning: %v", err)
	}
}

// buildInput reads every file of in into a build session of bc and
// returns the results of the session's buckets. The caller has checked
// o.store against bc (checkStore).
func buildInput(ctx context.Context, bc *bulkloadclient.BuildContext, in *parquetInput, o buildOptions, prog *progress) (_ []snapshotbuild.BucketResult, err error) {
	tbl := bc.Table()
	if err := checkParquet(in, tbl, bc.Target().Partition); err != nil {
		return nil, err
	}
	removeStaleTemp(o.tempDir, prog)
	sopts := bulkloadclient.SessionOptions{
		Buckets: o.buckets, TempDir: o.tempDir, MemoryBudget: o.memory, Workers: o.workers,
		// A builder of some buckets reads the whole input (--route skip):
		// the session drops rows of other buckets, after checking them.
		SkipOtherBuckets: o.buckets != nil && o.skip,
		Logger:           slog.New(slog.DiscardHandler),
	}
	switch {
	case o.scoped:
		sopts.Store = o.client.ScopedStore(bc, o.buckets...) // nil: every bucket (and the manifest, for thaw load)
	case o.store != nil:
		sopts.Store = o.store
	}
	if match := os.Getenv(testHoldAfterPutEnv); match != "" && !o.scoped {
		st := o.store
		if st == nil {
			if st, err = objstore.Open(ctx, bc.RemoteDataDir()); err != nil {
				return nil, fmt.Errorf("open remote data dir %s: %w", bc.RemoteDataDir(), err)
			}
			defer func() { err = errors.Join(err, st.Close()) }()
		}
		sopts.Store = objstore.New(&holdBucket{Bucket: st.Bucket(), match: match, w: progressOutput}, st.Base())
	}
	s, err := bulkloadclient.OpenBuildSession(ctx, bc, sopts)
	if err != nil {
		return nil, err
	}
	defer func() { err = errors.Join(err, s.Close()) }()

	for _, f := range in.files {
		r, err := openParquet(f, tbl, bc.Target().Partition)
		if err != nil {
			return nil, err
		}
		var read, sent int64 // rows read, bytes reported
		add := func(rec arrow.RecordBatch) error {
			first := read
			read += rec.NumRows()
			b := shareOf(f.size, read, f.rows)
			prog.advance(rec.NumRows(), b-sent, false)
			sent = b
			if err := s.Add(ctx, rec); err != nil {
				if ne := (*snapshotbuild.NotOwnedError)(nil); errors.As(err, &ne) {
					return fmt.Errorf("file %s: row %d belongs to bucket %d, which this build does not own (--route error; --route skip leaves such rows to the builders of their buckets): %w",
						f.path, first+int64(ne.Row), ne.Bucket, snapshotbuild.ErrBucketNotOwned)
				}
				return fileRowError(f.path, first, err)
			}
			return nil
		}
		// Decoding the file overlaps with encoding and sorting.
		for rec, rerr := range bulkloadclient.ReadAhead(ctx, parquetReadAhead, r.batches(ctx)) {
			if rerr != nil {
				err = rerr
				break
			}
			err = add(rec)
			rec.Release()
			if err != nil {
				break
			}
		}
		err = errors.Join(err, r.close())
		if err != nil {
			return nil, err
		}
		prog.advance(0, f.size-sent, true)
	}
	prog.printf("sorting and writing %s", plural(len(sessionBuckets(bc, o.buckets)), "bucket", "buckets"))
	results, err := s.Finish(ctx)
	if err != nil {
		return nil, fmt.Errorf("build buckets: %w", err)
	}
	for _, r := range results {
		note := ""
		if r.Duplicates > 0 {
			note = fmt.Sprintf(", %s dropped", plural(r.Duplicates, "duplicate", "duplicates"))
		}
		if r.MetadataAdopted {
			note += ", adopted an identical earlier build"
		}
		prog.printf("built bucket %d: %s, %s%s", r.Bucket, plural(r.RowCount, "row", "rows"), humanBytes(r.Bytes), note)
	}
	return results, nil
}

func sessionBuckets(bc *bulkloadclient.BuildContext, buckets []int) []int {
	if buckets != nil {
		return buckets
	}
	all := make([]int, bc.Buckets())
	for i := range all {
		all[i] = i
	}
	return all
}

// holdBucket is the test hook's bucket (see testHoldAfterPutEnv).
type holdBucket struct {
	objstore.Bucket
	match string
	w     io.Writer
	once  sync.Once
}

func (h *holdBucket) Put(ctx context.Context, key string, r io.Reader, ifNotExist bool) error {
	if err := h.Bucket.Put(ctx, key, r, ifNotExist); err != nil || !strings.Contains(key, h.match) {
		return err
	}
	hold := false
	h.once.Do(func() { hold = true })
	if !hold {
		return nil
	}
	fmt.Fprintf(h.w, "thaw: test hook: holding after put of %s\n", key)
	<-ctx.Done()
	return ctx.Err()
}

// newCallerToken returns a fresh caller token for a command that was given
// none.
func newCallerToken(prefix string) string {
	var b [8]byte
	_, _ = rand.Read(b[:])
	return prefix + hex.EncodeToString(b[:])
}

// bulkClient returns an SDK client of the coordinator at server, with the
// bearer token of THAW_TOKEN if set; scoped makes it write manifests through
// the coordinator's upload gateway, a store (--object-store) into that
// store.
func bulkClient(ctx context.Context, server string, scoped bool, store *objstore.Store) (*bulkloadclient.Client, error) {
	hc, err := daemon.NewCLIHTTPClient()
	if err != nil {
		return nil, usageError("%v", err)
	}
	opts := []bulkloadclient.Opt{bulkloadclient.WithHTTPClient(hc)}
	if tok := os.Getenv(daemon.EnvToken); tok != "" {
		opts = append(opts, bulkloadclient.WithBearerToken(tok))
	}
	if scoped {
		opts = append(opts, bulkloadclient.WithScopedUploads())
	}
	if store != nil {
		opts = append(opts, bulkloadclient.WithObjectStore(store))
	}
	return bulkloadclient.New(ctx, server, opts...)
}

// scopedUploadsUsage is the help of --scoped-uploads.
const scopedUploadsUsage = "write snapshot files and the manifest through the coordinator's upload gateway, with credentials scoped to this transaction, " +
	"instead of into the object store directly (this process then needs no object store access)"

// beginRetrying calls Begin until it succeeds, fails for good or ctx ends:
// a new table answers UNAVAILABLE until its replicas are up. createFlag
// is how the calling command creates a missing partition
// ("thaw load --create-partition"; "" when it cannot), for the hint.
func beginRetrying(ctx context.Context, c *bulkloadclient.Client, createFlag string, target bulkload.Target, token string, opts bulkloadclient.BeginOptions) (*bulkloadclient.BuildContext, error) {
	delay := 50 * time.Millisecond
	for {
		bc, err := c.Begin(ctx, target, token, opts)
		if err == nil || !bulkloadclient.IsRetriable(err) {
			return bc, beginHint(err, createFlag, target)
		}
		select {
		case <-ctx.Done():
			return nil, err
		case <-time.After(delay):
			delay = min(2*delay, time.Second)
		}
	}
}

// abandonBegin follows a Begin with a caller token this process made up
// whose outcome is unknown (its answer lost, the time or an interrupt ran
// out): nobody else knows the token, so a transaction it began would hold
// target, fenced, until its build deadline. It looks for that transaction
// by its token, on a detached context bounded by timeout, and aborts it;
// the error it returns says what it did, or names the token. A Begin
// refused for good began nothing: err as it is.
func abandonBegin(ctx context.Context, server string, target bulkload.Target, token string, timeout time.Duration, err error) error {
	if !errors.Is(err, context.DeadlineExceeded) && !errors.Is(err, context.Canceled) && !bulkloadclient.IsRetriable(err) {
		return err
	}
	actx, cancel := context.WithTimeout(context.WithoutCancel(ctx), timeout)
	defer cancel()
	bl := dialBulkLoad(server)
	resp, lerr := bulkDo(actx, bl, &tierv1.ListBulkLoadsRequest{}, tierv1connect.BulkLoadServiceClient.List)
	if lerr != nil {
		return fmt.Errorf("%w (a bulk load of caller token %s may hold %s until its build deadline: see thaw bulkload list)", err, token, target)
	}
	for _, st := range resp.GetTransactions() {
		if st.GetCallerToken() != token {
			continue
		}
		id := st.GetHandle().GetTxnId()
		if _, aerr := bulkDo(actx, bl, &tierv1.AbortBulkLoadRequest{Handle: st.GetHandle()}, tierv1connect.BulkLoadServiceClient.Abort); aerr != nil {
			return fmt.Errorf("%w (bulk load %s of caller token %s holds %s until its build deadline: thaw bulkload abort %s; %v)", err, id, token, target, id, aerr)
		}
		return fmt.Errorf("%w (the bulk load it began, %s, is aborted: %s is as it was)", err, id, target)
	}
	return fmt.Errorf("%w (no bulk load of caller token %s was found; one that appears later is aborted with thaw bulkload abort)", err, token)
}

// checkLoadTarget checks that a partition is named for a partitioned
// table and only for one, before anything is read or begun.
func checkLoadTarget(tbl *kv.Table, name tableName, partition string) error {
	keys := tbl.Schema().PartitionKeys
	switch {
	case len(keys) > 0 && partition == "":
		return usageError("thaw load: %s is partitioned (by %s): name the target partition with --partition", name, strings.Join(keys, ", "))
	case len(keys) == 0 && partition != "":
		return usageError("thaw load: %s is not partitioned: --partition is for partitioned tables", name)
	}
	return nil
}

// createPartition creates partition part of table name unless it exists.
func createPartition(ctx context.Context, server string, name tableName, part string, prog *progress) error {
	resp, err := coordDo(ctx, dialCoordinator(server), &tierv1.CreatePartitionRequest{
		Path: name.path(), Partition: &tierv1.CreatePartitionRequest_PartitionName{PartitionName: part},
	}, tierv1connect.CoordinatorServiceClient.CreatePartition)
	switch {
	case connect.CodeOf(err) == connect.CodeAlreadyExists:
		return nil
	case err != nil:
		return wrapTier("create partition "+part+" of "+name.String(), err)
	}
	prog.printf("created partition %s of %s (id %d)", resp.GetPartition().GetPartitionName(), name, resp.GetPartition().GetPartitionId())
	return nil
}

// beginHint adds what to do to the Begin errors on target that a person
// can act on; createFlag names the flag that creates a missing partition
// ("" for none).
func beginHint(err error, createFlag string, target bulkload.Target) error {
	switch {
	case errors.Is(err, bulkload.ErrTargetNotFound) && target.Partition == "":
		return fmt.Errorf("%w\n(a bulk load fills an existing empty table or partition: create the table with `thaw table create`)", err)
	case errors.Is(err, bulkload.ErrTargetNotFound):
		also := ""
		if createFlag != "" {
			also = ", or give " + createFlag
		}
		return fmt.Errorf("%w\n(a bulk load fills an existing empty table or partition: create the partition with `thaw partition create %s.%s %s`%s)",
			err, target.Database, target.Table, target.Partition, also)
	case errors.Is(err, bulkload.ErrTargetNotEmpty):
		return fmt.Errorf("%w\n(a bulk load fills an empty table or partition only: load into a new partition, or drop the target and create it again)", err)
	case errors.Is(err, bulkload.ErrInvalidState):
		// Begin with a caller token whose transaction is past building:
		// a repeated --token after the load committed, say.
		return fmt.Errorf("%w\n(this caller token's transaction is past building: COMMITTED means its rows are loaded already, COMMITTING that its commit is in progress; a new load needs a new token, or none)", err)
	case errors.Is(err, bulkload.ErrTargetOccupied):
		if id := tierpb.MetadataOf(err)[tierpb.KeyTxnID]; id != "" {
			return fmt.Errorf("%w\n%s", err, heldHint(id))
		}
	}
	return err
}

// heldHint says how to follow or give up bulk load id, which holds a target.
func heldHint(id string) string {
	return fmt.Sprintf("(bulk load %s holds it until it commits or aborts: `thaw bulkload status %s` shows where it is, `thaw bulkload abort %s` gives it up)", id, id, id)
}

// byteSizeFlag is a flag.Value of a size like 256MiB.
type byteSizeFlag struct{ n int64 }

func (b *byteSizeFlag) String() string {
	if b == nil || b.n == 0 {
		return ""
	}
	return daemon.ByteSize(b.n).String()
}

func (b *byteSizeFlag) Set(s string) error {
	v, err := daemon.ParseByteSize(s)
	if err != nil {
		return err
	}
	if v != 0 && v < snapshotbuild.MinMemoryBudget {
		return fmt.Errorf("%s is below the smallest budget, %s (0: the default)", s, humanBytes(snapshotbuild.MinMemoryBudget))
	}
	b.n = int64(v)
	return nil
}

// registerBuildFlags registers the flags of the build step.
func registerBuildFlags(fs *flag.FlagSet, o *buildOptions, mem *byteSizeFlag) {
	fs.StringVar(&o.tempDir, "temp-dir", "", "directory for the build's temporary files (default: the system's)")
	fs.Var(mem, "memory", "memory budget of the build, e.g. 512MiB (default 256MiB)")
	fs.IntVar(&o.workers, "workers", 0, "buckets built at once (default: GOMAXPROCS)")
	fs.BoolVar(&o.scoped, "scoped-uploads", false, scopedUploadsUsage)
	fs.StringVar(&o.objectStore, "object-store", "", objectStoreUsage)
}

// objectStoreUsage is the help of --object-store.
const objectStoreUsage = "open the snapshot store with this URL, the tier's object_store with its parameters " +
	"(s3://bucket/prefix?endpoint=...&region=...), instead of the build context's remote directory, which carries none " +
	"(default: that directory, with endpoint and region from the AWS environment); not with --scoped-uploads"

// loadFlags are thaw load's.
type loadFlags struct {
	server       string
	table        string
	partition    string
	createPart   bool
	token        string
	buildTimeout time.Duration
	budget       time.Duration
	timeout      time.Duration
	build        buildOptions
	memory       byteSizeFlag
}

func runLoad(ctx context.Context, stdout io.Writer, args []string) (err error) {
	fs := tierFlagSet("thaw load", "--table DATABASE.TABLE [--partition P] FILE|DIR...", stdout)
	var lf loadFlags
	fs.StringVar(&lf.server, "server", defaultServer(), "coordinator HOST:PORT or URL (https:// for a tier that serves TLS; $THAW_TLS_CA names the CA bundle), or a comma-separated list of the tier's coordinators ($THAW_SERVER sets the default)")
	fs.StringVar(&lf.table, "table", "", "target table DATABASE.TABLE (required)")
	fs.StringVar(&lf.partition, "partition", "", "target partition of a partitioned table")
	fs.BoolVar(&lf.createPart, "create-partition", false, "create the --partition if it does not exist (it stays, empty, if the load fails)")
	fs.StringVar(&lf.token, "token", "", "caller token of the transaction; repeat it to resume a load (default: a fresh one)")
	fs.DurationVar(&lf.buildTimeout, "build-timeout", 0, "build window asked of Begin (default: the server's)")
	fs.DurationVar(&lf.budget, "budget", 10*time.Minute, "how long Commit may retry and wait for every bucket to be readable")
	fs.DurationVar(&lf.timeout, "timeout", 30*time.Second, "how long to wait for the coordinator at Begin")
	registerBuildFlags(fs, &lf.build, &lf.memory)
	paths, err := parseArgs(fs, args)
	if err != nil {
		return err
	}
	if lf.table == "" {
		return usageError("thaw load needs --table DATABASE.TABLE")
	}
	name, err := parseTableName(lf.table)
	if err != nil {
		return err
	}
	if len(paths) == 0 {
		return usageError("thaw load needs Parquet files or directories")
	}
	if lf.createPart && lf.partition == "" {
		return usageError("thaw load: --create-partition goes with --partition")
	}
	if lf.server == "" || lf.timeout <= 0 || lf.budget <= 0 || lf.buildTimeout < 0 || lf.build.workers < 0 {
		return usageError("thaw load: --server must be set, --timeout and --budget positive, --build-timeout and --workers not negative")
	}
	lf.build.memory = lf.memory.n
	target := bulkload.Target{Database: name.db, Table: name.table, Partition: lf.partition}
	start := time.Now()

	in, err := openParquetInput(paths)
	if err != nil {
		return err
	}
	// Check the files against the table before beginning anything.
	preCtx, cancel := context.WithTimeout(ctx, lf.timeout)
	tc, info, err := openTable(preCtx, lf.server, name)
	cancel()
	if err != nil {
		return err
	}
	tc.Close()
	if err := checkLoadTarget(info.KV, name, target.Partition); err != nil {
		return err
	}
	if err := checkParquet(in, info.KV, target.Partition); err != nil {
		return prefixErrors("load "+target.String(), err)
	}
	if err := lf.build.openStore(ctx); err != nil {
		return err
	}
	defer func() { err = errors.Join(err, lf.build.closeStore()) }()
	// The table's directory; checked again against the context after Begin.
	if err := checkStoreDir(lf.build.store, "a bulk load of "+name.String(), info.RemoteDataDir); err != nil {
		return err
	}
	// thaw load's output is only progress and notes: a closed one does
	// not stop the load, nor fail it once it is done (unchecked).
	prog := newProgress(unchecked(stdout), in)
	prog.printf("loading %s (%s) from %s into %s", plural(in.rows, "row", "rows"), humanBytes(in.bytes), plural(len(in.files), "file", "files"), target)

	c, err := bulkClient(ctx, lf.server, lf.build.scoped, lf.build.store)
	if err != nil {
		return err
	}
	lf.build.client = c
	token := lf.token
	if token == "" {
		token = newCallerToken("thaw-load-")
	}
	beginCtx, cancel := context.WithTimeout(ctx, lf.timeout)
	defer cancel()
	if lf.createPart {
		if err := createPartition(beginCtx, lf.server, name, lf.partition, prog); err != nil {
			return err
		}
	}
	bc, err := beginRetrying(beginCtx, c, "thaw load --create-partition", target, token, bulkloadclient.BeginOptions{BuildTimeout: lf.buildTimeout})
	cancel()
	if err != nil {
		if lf.token == "" {
			err = abandonBegin(ctx, lf.server, target, token, lf.timeout, err)
		}
		return fmt.Errorf("load %s: %w", target, err)
	}
	txn := bc.Handle().TxnID
	prog.printf("began bulk load %s of %s: %s, caller token %s, build deadline %s",
		txn, target, plural(bc.Buckets(), "bucket", "buckets"), token, bc.BuildDeadline().Format(time.RFC3339))
	if err := checkStore(lf.build.store, bc); err != nil {
		return abortAfter(ctx, c, bc, prog, err)
	}

	results, err := buildInput(ctx, bc, in, lf.build, prog)
	if err != nil {
		return abortAfter(ctx, c, bc, prog, fmt.Errorf("load %s: %w", target, err))
	}
	// Commit must not be cut short by the first interrupt: it runs to its
	// budget (a second interrupt exits at once).
	prog.printf("committing bulk load %s (%s)", txn, plural(len(results), "bucket", "buckets"))
	commitCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), lf.budget+30*time.Second)
	defer cancel()
	st, err := c.Commit(commitCtx, bc, results, lf.budget)
	if err != nil {
		// A Commit that was refused leaves the transaction BEGUN: abort it.
		// One whose budget ran out while the coordinator still decides it
		// (the manifest frozen: validating) is left to finish. Any other
		// state is the server's to finish; say where it stands (asked
		// with a deadline of its own: the commit's may be what ran out).
		sctx, scancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
		defer scancel()
		cur, serr := c.Status(sctx, bc.Handle())
		switch {
		case serr == nil && cur.State == bulkload.Begun && cur.ManifestFrozen && bulkloadclient.IsRetriable(err):
			return fmt.Errorf("load %s: commit: %w (the coordinator is still deciding it: see thaw bulkload status %s; thaw load --token %s again waits for it, thaw bulkload abort %s gives up)", target, err, txn, token, txn)
		case serr == nil && cur.State == bulkload.Begun:
			return abortAfter(ctx, c, bc, prog, fmt.Errorf("load %s: commit: %w", target, err))
		case serr == nil:
			return fmt.Errorf("load %s: commit: %w (transaction %s is %s; see thaw bulkload status %s)", target, err, txn, cur.State, txn)
		}
		return fmt.Errorf("load %s: commit: %w (outcome unknown; see thaw bulkload status %s)", target, err, txn)
	}
	var rows, dups, bytes int64
	for _, r := range results {
		rows += r.RowCount
		dups += r.Duplicates
		bytes += r.Bytes
	}
	prog.printf("committed bulk load %s of %s (%s): %s (%s dropped) in %s, %s of snapshots, in %s",
		txn, target, st.State, plural(rows, "row", "rows"), plural(dups, "duplicate", "duplicates"), plural(len(results), "bucket", "buckets"), humanBytes(bytes), time.Since(start).Round(time.Millisecond))
	return nil
}

// abortAfter aborts bc's transaction after cause, with its own deadline
// (the command's context may be the reason for the failure), and reports it.
func abortAfter(ctx context.Context, c *bulkloadclient.Client, bc *bulkloadclient.BuildContext, prog *progress, cause error) error {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
	defer cancel()
	txn := bc.Handle().TxnID
	if _, err := c.Abort(ctx, bc.Handle()); err != nil {
		prog.printf("abort of bulk load %s failed: %v", txn, err)
		return fmt.Errorf("%w; abort of bulk load %s failed too (the server aborts it at its build deadline): %w", cause, txn, err)
	}
	prog.printf("aborted bulk load %s: %s is empty and ACTIVE again", txn, bc.Target())
	return fmt.Errorf("%w (bulk load %s aborted)", cause, txn)
}
