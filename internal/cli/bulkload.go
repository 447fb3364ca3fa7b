package cli

import (
	"bytes"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"maps"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"connectrpc.com/connect"

	"github.com/thawdb/thaw/bulkload"
	"github.com/thawdb/thaw/bulkload/bulkloadclient"
	tierv1 "github.com/thawdb/thaw/gen/thaw/tier/v1"
	"github.com/thawdb/thaw/gen/thaw/tier/v1/tierv1connect"
	"github.com/thawdb/thaw/snapshotbuild"
)

// ---------------------------------------------------------------------------
// thaw bulkload: inspect and abort bulk-load transactions, and the
// scriptable pieces of a distributed load: begin (prints the build context),
// build (some buckets from Parquet files; prints their results) and commit
// (checks the results cover every bucket once, commits). See
// docs/bulkload-cli.md.

func bulkloadCommands() []command {
	return []command{
		{name: "begin", summary: "begin a bulk load of an empty target and print its build context", run: runBulkloadBegin},
		{name: "build", summary: "build some buckets of a begun bulk load from Parquet files and print their results", run: runBulkloadBuild},
		{name: "commit", summary: "commit a bulk load from the results of its builds", run: runBulkloadCommit},
		{name: "list", summary: "list bulk-load transactions (--all includes terminal ones)", run: runBulkloadList},
		{name: "status", summary: "show one bulk-load transaction, with restore progress", run: runBulkloadStatus},
		{name: "abort", summary: "abort a BEGUN bulk-load transaction (by TXN_ID or --context) and lift its fence", run: runBulkloadAbort},
	}
}

// runBulkload is `thaw bulkload`.
func runBulkload(ctx context.Context, stdout io.Writer, args []string) error {
	return dispatch(ctx, "thaw bulkload", bulkloadCommands(), args, stdout)
}

// bulkConn talks to the active coordinator's BulkLoadService.
type bulkConn = leaderConn[tierv1connect.BulkLoadServiceClient]

func dialBulkLoad(server string) *bulkConn {
	return dialLeader(server, tierv1connect.NewBulkLoadServiceClient)
}

// bulkDo calls the BulkLoadService of the active coordinator.
func bulkDo[Req, Res any](ctx context.Context, c *bulkConn, req *Req,
	call func(tierv1connect.BulkLoadServiceClient, context.Context, *connect.Request[Req]) (*connect.Response[Res], error),
) (*Res, error) {
	return leaderDo(ctx, c, req, call)
}

// parseTarget parses DATABASE.TABLE[/PARTITION].
func parseTarget(s string) (*tierv1.TargetPath, error) {
	tbl, part, hasPart := strings.Cut(s, "/")
	name, err := parseTableName(tbl)
	if err != nil {
		return nil, usageError("target %q: want DATABASE.TABLE or DATABASE.TABLE/PARTITION", s)
	}
	p := &tierv1.TargetPath{Database: name.db, Table: name.table}
	if hasPart {
		if part == "" {
			return nil, usageError("target %q: empty partition", s)
		}
		p.Partition = &part
	}
	return p, nil
}

// bulkStatusJSON is a transaction as the commands print it in JSON.
type bulkStatusJSON struct {
	TxnID                  string             `json:"txn_id"`
	Target                 string             `json:"target"`
	TableID                int64              `json:"table_id"`
	PartitionID            int64              `json:"partition_id,omitempty"`
	State                  string             `json:"state"`
	Phase                  string             `json:"phase"`
	AbortReason            string             `json:"abort_reason,omitempty"`
	AbortMessage           string             `json:"abort_message,omitempty"`
	CallerToken            string             `json:"caller_token"`
	Registration           string             `json:"registration"`
	FenceReady             bool               `json:"fence_ready"`
	Buckets                int32              `json:"buckets"`
	AdoptedBuckets         int32              `json:"adopted_buckets"`
	Created                string             `json:"created"`
	Updated                string             `json:"updated"`
	BuildDeadline          string             `json:"build_deadline"`
	CommitDecisionDeadline string             `json:"commit_decision_deadline,omitempty"`
	ResultExpires          string             `json:"result_expires,omitempty"`
	Manifest               *bulkManifestJSON  `json:"manifest,omitempty"`
	Error                  string             `json:"error,omitempty"`
	Restore                []bulkProgressJSON `json:"restore,omitempty"`
}

type bulkManifestJSON struct {
	Path   string `json:"path"`
	Length int64  `json:"length"`
	SHA256 string `json:"sha256"`
}

type bulkProgressJSON struct {
	Bucket     int32 `json:"bucket"`
	Replicas   int32 `json:"replicas"`
	Restored   int32 `json:"restored"`
	DoneBytes  int64 `json:"done_bytes"`
	TotalBytes int64 `json:"total_bytes"`
}

// msTime renders ms since the Unix epoch as RFC 3339 (UTC) with three
// fractional digits, so that a column of them lines up; "" for 0.
func msTime(ms int64) string {
	if ms == 0 {
		return ""
	}
	return time.UnixMilli(ms).UTC().Format("2006-01-02T15:04:05.000Z07:00")
}

func bulkTargetName(h *tierv1.BulkLoadHandle) string {
	s := h.GetTarget().GetDatabase() + "." + h.GetTarget().GetTable()
	if h.GetTarget().Partition != nil {
		s += "/" + h.GetTarget().GetPartition()
	}
	return s
}

func bulkStateName(s tierv1.BulkLoadState) string {
	return strings.TrimPrefix(s.String(), "BULK_LOAD_STATE_")
}

func bulkStatusJSONOf(st *tierv1.BulkLoadStatus) bulkStatusJSON {
	out := bulkStatusJSON{
		TxnID: st.GetHandle().GetTxnId(), Target: bulkTargetName(st.GetHandle()),
		TableID: st.GetHandle().GetTableId(), PartitionID: st.GetHandle().GetPartitionId(),
		State: bulkStateName(st.GetState()), Phase: st.GetPhase(), AbortMessage: st.GetAbortMessage(),
		CallerToken: st.GetCallerToken(), Registration: st.GetRegistration(), FenceReady: st.GetFenceReady(),
		Buckets: st.GetBucketCount(), AdoptedBuckets: st.GetAdoptedBuckets(),
		Created: msTime(st.GetCreatedMs()), Updated: msTime(st.GetUpdatedMs()), BuildDeadline: msTime(st.GetBuildDeadlineMs()),
		CommitDecisionDeadline: msTime(st.GetCommitDecisionDeadlineMs()), ResultExpires: msTime(st.GetResultExpireMs()),
		Error: st.GetError(),
	}
	if r := st.GetAbortReason(); r != tierv1.BulkLoadAbortReason_BULK_LOAD_ABORT_REASON_UNSPECIFIED {
		out.AbortReason = strings.TrimPrefix(r.String(), "BULK_LOAD_ABORT_REASON_")
	}
	if st.GetManifestPath() != "" {
		out.Manifest = &bulkManifestJSON{Path: st.GetManifestPath(), Length: st.GetManifestLength(), SHA256: st.GetManifestSha256()}
	}
	for _, p := range st.GetBuckets() {
		out.Restore = append(out.Restore, bulkProgressJSON{Bucket: p.GetBucket(), Replicas: p.GetReplicas(), Restored: p.GetRestored(),
			DoneBytes: p.GetDoneBytes(), TotalBytes: p.GetTotalBytes()})
	}
	return out
}

// printBulkStatus prints one transaction as "key  value" lines, then its
// restore progress.
func printBulkStatus(stdout io.Writer, st *tierv1.BulkLoadStatus) error {
	j := bulkStatusJSONOf(st)
	w := tabwriter.NewWriter(stdout, 0, 4, 2, ' ', 0)
	line := func(k, v string) {
		if v != "" {
			fmt.Fprintf(w, "%s\t%s\n", k, v)
		}
	}
	line("txn", j.TxnID)
	line("target", j.Target)
	line("state", j.State)
	line("phase", j.Phase)
	if j.AbortReason != "" {
		line("abort reason", j.AbortReason)
		line("abort message", j.AbortMessage)
	}
	line("caller token", j.CallerToken)
	line("registration", j.Registration)
	line("fence ready", fmt.Sprint(j.FenceReady))
	line("buckets", fmt.Sprintf("%d (%d adopted)", j.Buckets, j.AdoptedBuckets))
	line("created", j.Created)
	line("updated", j.Updated)
	line("build deadline", j.BuildDeadline)
	line("commit deadline", j.CommitDecisionDeadline)
	line("result expires", j.ResultExpires)
	if m := j.Manifest; m != nil {
		line("manifest", fmt.Sprintf("%s (%d bytes, sha256 %s)", m.Path, m.Length, m.SHA256))
	}
	line("error", j.Error)
	if len(j.Restore) > 0 {
		fmt.Fprintln(w, "bucket\trestored\tbytes")
		for _, p := range j.Restore {
			fmt.Fprintf(w, "  %d\t%d/%d\t%d/%d\n", p.Bucket, p.Restored, p.Replicas, p.DoneBytes, p.TotalBytes)
		}
	}
	return w.Flush()
}

// txnArg returns the one TXN_ID argument.
func txnArg(fs interface{ Name() string }, pos []string) (string, error) {
	if len(pos) != 1 {
		return "", usageError("%s takes one TXN_ID (got %d arguments)", fs.Name(), len(pos))
	}
	if bulkload.ValidateTxnID(pos[0]) != nil {
		return "", usageError("%s: %q is not a TXN_ID: a transaction id is a lowercase UUID, as thaw bulkload begin and thaw bulkload list print it",
			fs.Name(), pos[0])
	}
	return pos[0], nil
}

func runBulkloadList(ctx context.Context, stdout io.Writer, args []string) error {
	fs := tierFlagSet("thaw bulkload list", "", stdout)
	var cf clientFlags
	cf.register(fs)
	all := fs.Bool("all", false, "include COMMITTED and ABORTED transactions whose result is retained")
	targetFlag := fs.String("target", "", "only the transactions of DATABASE.TABLE[/PARTITION]")
	if err := parseFlags(fs, args, false); err != nil {
		return err
	}
	if err := cf.check(); err != nil {
		return err
	}
	req := &tierv1.ListBulkLoadsRequest{IncludeTerminal: *all}
	if *targetFlag != "" {
		tp, err := parseTarget(*targetFlag)
		if err != nil {
			return err
		}
		req.Target = tp
	}
	ctx, cancel := context.WithTimeout(ctx, cf.timeout)
	defer cancel()
	resp, err := bulkDo(ctx, dialBulkLoad(cf.server), req, tierv1connect.BulkLoadServiceClient.List)
	if err != nil {
		return wrapTier("list bulk loads", err)
	}
	if cf.json() {
		out := []bulkStatusJSON{}
		for _, st := range resp.GetTransactions() {
			out = append(out, bulkStatusJSONOf(st))
		}
		return writeTierJSON(stdout, out)
	}
	if len(resp.GetTransactions()) == 0 {
		what := "no bulk load is in progress"
		if *all {
			what = "no bulk load is in progress or retained"
		}
		if req.Target != nil {
			what += " for " + *targetFlag
		}
		if !*all {
			what += " (--all also lists the finished ones the tier retains)"
		}
		_, err := fmt.Fprintln(stdout, what)
		return err
	}
	return printBulkList(stdout, resp.GetTransactions())
}

// printBulkList prints transactions as a table. When the list holds
// transactions of a table dropped and created again under its name, their
// targets name the table ids.
func printBulkList(stdout io.Writer, txns []*tierv1.BulkLoadStatus) error {
	tableOf := func(st *tierv1.BulkLoadStatus) string {
		return st.GetHandle().GetTarget().GetDatabase() + "." + st.GetHandle().GetTarget().GetTable()
	}
	ids := map[string]map[int64]bool{} // table name → the table ids listed
	for _, st := range txns {
		if ids[tableOf(st)] == nil {
			ids[tableOf(st)] = map[int64]bool{}
		}
		ids[tableOf(st)][st.GetHandle().GetTableId()] = true
	}
	w := tabwriter.NewWriter(stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(w, "TXN\tTARGET\tSTATE\tPHASE\tADOPTED\tCREATED\tDETAIL")
	for _, st := range txns {
		j := bulkStatusJSONOf(st)
		if len(ids[tableOf(st)]) > 1 {
			j.Target += fmt.Sprintf(" (table id %d)", j.TableID)
		}
		detail := j.AbortReason
		if detail == "" {
			detail = j.Error
		}
		fmt.Fprintf(w, "%s\t%s\t%s\t%s\t%d/%d\t%s\t%s\n", j.TxnID, j.Target, j.State, j.Phase, j.AdoptedBuckets, j.Buckets, j.Created, orDash(detail))
	}
	return w.Flush()
}

func runBulkloadStatus(ctx context.Context, stdout io.Writer, args []string) error {
	fs := tierFlagSet("thaw bulkload status", "TXN_ID", stdout)
	var cf clientFlags
	cf.register(fs)
	pos, err := parseArgs(fs, args)
	if err != nil {
		return err
	}
	id, err := txnArg(fs, pos)
	if err != nil {
		return err
	}
	if err := cf.check(); err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, cf.timeout)
	defer cancel()
	resp, err := bulkDo(ctx, dialBulkLoad(cf.server), &tierv1.BulkLoadStatusRequest{Handle: &tierv1.BulkLoadHandle{TxnId: id}},
		tierv1connect.BulkLoadServiceClient.Status)
	if err != nil {
		return wrapTier("bulk load "+id, err)
	}
	if cf.json() {
		return writeTierJSON(stdout, bulkStatusJSONOf(resp.GetStatus()))
	}
	return printBulkStatus(stdout, resp.GetStatus())
}

func runBulkloadAbort(ctx context.Context, stdout io.Writer, args []string) error {
	fs := tierFlagSet("thaw bulkload abort", "TXN_ID | --context FILE", stdout)
	var cf clientFlags
	cf.register(fs)
	contextFile := fs.String("context", "", "build context file (from thaw bulkload begin; - for stdin) instead of TXN_ID")
	pos, err := parseArgs(fs, args)
	if err != nil {
		return err
	}
	var id string
	if *contextFile != "" {
		if len(pos) > 0 {
			return usageError("%s takes TXN_ID or --context, not both", fs.Name())
		}
		bc, err := readBuildContext(*contextFile)
		if err != nil {
			return err
		}
		id = bc.Handle().TxnID
	} else if id, err = txnArg(fs, pos); err != nil {
		return err
	}
	if err := cf.check(); err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, cf.timeout)
	defer cancel()
	handle := &tierv1.BulkLoadHandle{TxnId: id}
	bl := dialBulkLoad(cf.server)
	// Abort is idempotent: the status first, so that the command does not
	// claim to have aborted a transaction that was aborted before (by the
	// tier's deadlines or an earlier abort).
	before, err := bulkDo(ctx, bl, &tierv1.BulkLoadStatusRequest{Handle: handle}, tierv1connect.BulkLoadServiceClient.Status)
	if err != nil {
		return wrapTier("abort bulk load "+id, err)
	}
	already := before.GetStatus().GetState() == tierv1.BulkLoadState_BULK_LOAD_STATE_ABORTED
	st := before.GetStatus()
	if !already {
		resp, err := bulkDo(ctx, bl, &tierv1.AbortBulkLoadRequest{Handle: handle}, tierv1connect.BulkLoadServiceClient.Abort)
		if err != nil {
			return wrapTier("abort bulk load "+id, err)
		}
		st = resp.GetStatus()
	}
	if cf.json() {
		return writeTierJSON(stdout, bulkStatusJSONOf(st))
	}
	if already {
		j := bulkStatusJSONOf(st)
		why := j.AbortReason
		if j.AbortMessage != "" {
			why += ": " + j.AbortMessage
		}
		fmt.Fprintf(stdout, "bulk load %s of %s was already aborted (%s at %s)\n", id, j.Target, orDash(why), j.Updated)
		return nil
	}
	fmt.Fprintf(stdout, "aborted bulk load %s of %s\n", id, bulkTargetName(st.GetHandle()))
	return nil
}

// readBuildContext reads a serialized build context from path ("-": stdin).
func readBuildContext(path string) (*bulkloadclient.BuildContext, error) {
	var b []byte
	var err error
	if path == "-" {
		b, err = io.ReadAll(tierStdin)
	} else {
		b, err = os.ReadFile(path)
	}
	if err != nil {
		return nil, fmt.Errorf("read build context: %w", err)
	}
	bc, err := bulkloadclient.UnmarshalBuildContext(bytes.TrimSpace(b))
	if err != nil {
		return nil, fmt.Errorf("build context %s: %w", path, err)
	}
	return bc, nil
}

// checkOutFile makes sure, before the work whose result goes to path, that
// path can be written (its directory exists and takes files, and it is no
// directory), so that a begun transaction or a finished build is not lost
// to a typo in --out. A named pipe or device is not opened here (a pipe
// would wait for its reader).
func checkOutFile(path string) error {
	if path == "" {
		return nil
	}
	replace, _, err := outPlan(path)
	if err != nil {
		return usageError("--out %v", err)
	}
	if replace == "" {
		if _, err := os.Stat(path); !errors.Is(err, os.ErrNotExist) {
			return nil // a named pipe or a device (/dev/stdout), or a link to one
		}
		// A dangling symlink (or a chain of them): the file is created
		// where the last one points. Create it there (only if absent: one
		// that appeared meanwhile is not ours to remove), then remove it.
		// A relative target is appended to its link's directory as text,
		// uncleaned, so that the kernel resolves its ".." as the write's
		// open will (through a linked directory).
		target := path
		for range 40 {
			next, err := os.Readlink(target)
			if err != nil {
				break
			}
			if !filepath.IsAbs(next) {
				next = target[:strings.LastIndexByte(target, '/')+1] + next
			}
			target = next
		}
		f, err := os.OpenFile(target, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o644)
		switch {
		case errors.Is(err, os.ErrExist):
			return nil
		case err != nil:
			return usageError("--out %s cannot be written: %v", path, err)
		}
		return errors.Join(f.Close(), os.Remove(target))
	}
	f, err := os.CreateTemp(filepath.Dir(replace), ".thaw-out-check-*")
	if err != nil {
		return usageError("--out %s cannot be written: %v", path, err)
	}
	return errors.Join(f.Close(), os.Remove(f.Name()))
}

// outPlan says how --out is written: replace is the regular file to
// replace whole (path with its symlinks resolved, so that a link stays a
// link and its target gets the output), perm the mode of the file it
// replaces (nil for a new one). replace is "" for what is written in
// place, as a stream: a named pipe, a device (/dev/stdout), a dangling
// symlink.
func outPlan(path string) (replace string, perm *os.FileMode, err error) {
	st, err := os.Stat(path)
	switch {
	case errors.Is(err, os.ErrNotExist):
		if lst, lerr := os.Lstat(path); lerr == nil && lst.Mode()&os.ModeSymlink != 0 {
			return "", nil, nil
		}
		return path, nil, nil
	case err != nil:
		return "", nil, err
	case st.IsDir():
		return "", nil, fmt.Errorf("%s is a directory", path)
	case !st.Mode().IsRegular():
		return "", nil, nil
	}
	real, err := filepath.EvalSymlinks(path)
	if err != nil {
		return "", nil, nil // (a /proc link to a deleted file, say)
	}
	m := st.Mode().Perm()
	return real, &m, nil
}

// writeOutput writes b to the file path, or to stdout when path is "".
// A regular file (or a new one) is replaced whole: b is written to a file
// beside it, synced, and renamed over it, so that a command killed while
// writing leaves no truncated context or results for a script to hand
// on; the file keeps its mode, a new one gets 0644 less the umask.
func writeOutput(stdout io.Writer, path string, b []byte) error {
	if path == "" {
		_, err := stdout.Write(b)
		return err
	}
	replace, perm, err := outPlan(path)
	if err != nil {
		return fmt.Errorf("write output: %w", err)
	}
	if replace == "" {
		f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o644)
		if err == nil {
			_, err = f.Write(b)
			err = errors.Join(err, f.Close())
		}
		if err != nil {
			return fmt.Errorf("write output %s: %w", path, err)
		}
		return nil
	}
	f, err := createBeside(replace, perm)
	if err != nil {
		return fmt.Errorf("write output %s: %w", path, err)
	}
	_, err = f.Write(b)
	if perm != nil {
		err = errors.Join(err, f.Chmod(*perm)) // (the umask applied at creation)
	}
	err = errors.Join(err, f.Sync(), f.Close())
	if err == nil {
		err = os.Rename(f.Name(), replace)
	}
	if err != nil {
		return fmt.Errorf("write output %s: %w", path, errors.Join(err, os.Remove(f.Name())))
	}
	return nil
}

// createBeside creates a new file in path's directory, with mode perm
// (0644 when nil) less the umask, as os.WriteFile would create path. (A
// file of mode 0 is created writable by its owner, then given its mode.)
func createBeside(path string, perm *os.FileMode) (*os.File, error) {
	mode := os.FileMode(0o644)
	if perm != nil {
		mode = *perm | 0o600
	}
	for range 100 {
		name := filepath.Join(filepath.Dir(path), ".thaw-out-"+strconv.FormatUint(rand.Uint64(), 36))
		f, err := os.OpenFile(name, os.O_RDWR|os.O_CREATE|os.O_EXCL, mode)
		if !errors.Is(err, os.ErrExist) {
			return f, err
		}
	}
	return nil, fmt.Errorf("no free name beside %s", path)
}

// serverFlags are --server and --timeout, for the commands whose output
// format is fixed.
type serverFlags struct {
	server  string
	timeout time.Duration
}

func (c *serverFlags) register(fs *flag.FlagSet) {
	fs.StringVar(&c.server, "server", defaultServer(), "coordinator HOST:PORT or URL (https:// for a tier that serves TLS; $THAW_TLS_CA names the CA bundle), or a comma-separated list of the tier's coordinators ($THAW_SERVER sets the default)")
	fs.DurationVar(&c.timeout, "timeout", 30*time.Second, "give up waiting for the coordinator after this long")
}

func (c *serverFlags) check() error {
	if c.server == "" {
		return usageError("--server is empty")
	}
	if c.timeout <= 0 {
		return usageError("--timeout must be positive")
	}
	return nil
}

func runBulkloadBegin(ctx context.Context, stdout io.Writer, args []string) error {
	fs := tierFlagSet("thaw bulkload begin", "(DATABASE.TABLE[/PARTITION] | --table DATABASE.TABLE [--partition P])", stdout)
	var sf serverFlags
	sf.register(fs)
	token := fs.String("token", "", "caller token; the same token resumes the same transaction (default: a fresh one)")
	buildTimeout := fs.Duration("build-timeout", 0, "build window: the server aborts the transaction if no Commit comes in time (default: the server's)")
	out := fs.String("out", "", "write the build context to this file instead of stdout")
	table := fs.String("table", "", "target table DATABASE.TABLE, as thaw load takes it (instead of the argument)")
	partition := fs.String("partition", "", "the target partition (with DATABASE.TABLE or --table)")
	pos, err := parseArgs(fs, args)
	if err != nil {
		return err
	}
	spec := strings.Join(pos, " ")
	switch {
	case *table != "" && len(pos) > 0:
		return usageError("%s: give the target as DATABASE.TABLE[/PARTITION] or with --table, not both", fs.Name())
	case *table == "" && *partition != "" && len(pos) == 1 && strings.Contains(pos[0], "/"):
		return usageError("%s: %s names a partition already: give it once", fs.Name(), pos[0])
	case *table == "" && *partition != "" && len(pos) == 1:
		// As thaw scan and thaw get take it: DATABASE.TABLE --partition P.
		spec = pos[0] + "/" + *partition
	case *table == "" && *partition != "" && len(pos) == 0:
		return usageError("%s: --partition goes with a DATABASE.TABLE argument or --table", fs.Name())
	case *table != "":
		spec = *table
		if *partition != "" {
			spec += "/" + *partition
		}
	case len(pos) != 1:
		return usageError("%s takes one DATABASE.TABLE[/PARTITION] (got %d arguments)", fs.Name(), len(pos))
	}
	tp, err := parseTarget(spec)
	if err != nil {
		return err
	}
	if err := sf.check(); err != nil {
		return err
	}
	if *buildTimeout < 0 {
		return usageError("--build-timeout must not be negative")
	}
	if err := checkOutFile(*out); err != nil {
		return err
	}
	target := bulkload.Target{Database: tp.GetDatabase(), Table: tp.GetTable(), Partition: tp.GetPartition()}
	tok := *token
	if tok == "" {
		tok = newCallerToken("thaw-cli-")
	}
	c, err := bulkClient(ctx, sf.server, false, nil)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, sf.timeout)
	defer cancel()
	bc, err := beginRetrying(ctx, c, "", target, tok, bulkloadclient.BeginOptions{BuildTimeout: *buildTimeout})
	if err != nil {
		if *token == "" {
			return abandonBegin(ctx, sf.server, target, tok, sf.timeout, err)
		}
		return err
	}
	b, err := bc.Marshal()
	if err != nil {
		return err
	}
	if err := writeOutput(stdout, *out, append(b, '\n')); err != nil {
		if *token != "" {
			// A caller's token may have resumed a transaction whose
			// context an earlier begin handed to builders: not ours to
			// abort.
			return fmt.Errorf("%w; bulk load %s (caller token %s) is left BEGUN: run thaw bulkload begin --token %s again for its context, or thaw bulkload abort %s",
				err, bc.Handle().TxnID, tok, tok, bc.Handle().TxnID)
		}
		// A new token: nobody could build or commit it. Lift the fence at
		// once rather than at the build deadline.
		actx, acancel := context.WithTimeout(context.WithoutCancel(ctx), sf.timeout)
		defer acancel()
		if _, aerr := c.Abort(actx, bc.Handle()); aerr != nil {
			return fmt.Errorf("%w; bulk load %s (caller token %s) is left BEGUN and fences %s until its build deadline: thaw bulkload abort %s (%v)",
				err, bc.Handle().TxnID, tok, target, bc.Handle().TxnID, aerr)
		}
		return fmt.Errorf("%w; bulk load %s was aborted", err, bc.Handle().TxnID)
	}
	fmt.Fprintf(progressOutput, "thaw: began bulk load %s of %s: %s, caller token %s, build deadline %s\n",
		bc.Handle().TxnID, target, plural(bc.Buckets(), "bucket", "buckets"), tok, bc.BuildDeadline().Format(time.RFC3339))
	return nil
}

// parseBuckets parses "0-7,9,12-13" (or "all") into sorted, distinct
// buckets below n.
func parseBuckets(spec string, n int) ([]int, error) {
	if spec == "all" {
		all := make([]int, n)
		for i := range all {
			all[i] = i
		}
		return all, nil
	}
	seen := make([]bool, n)
	var out []int
	for part := range strings.SplitSeq(spec, ",") {
		lo, hi, isRange := strings.Cut(strings.TrimSpace(part), "-")
		a, err1 := strconv.Atoi(lo)
		b := a
		var err2 error
		if isRange {
			b, err2 = strconv.Atoi(hi)
		}
		if err1 != nil || err2 != nil || a < 0 || b < a {
			return nil, usageError("--buckets %q: want buckets like 0-7,9 or all", spec)
		}
		if b >= n {
			return nil, usageError("--buckets %q: bucket %d out of range: the target has %d buckets (0-%d)", spec, b, n, n-1)
		}
		for i := a; i <= b; i++ {
			if !seen[i] {
				seen[i] = true
				out = append(out, i)
			}
		}
	}
	slices.Sort(out)
	return out, nil
}

func runBulkloadBuild(ctx context.Context, stdout io.Writer, args []string) (err error) {
	fs := tierFlagSet("thaw bulkload build", "--context FILE --buckets LIST FILE|DIR...", stdout)
	contextFile := fs.String("context", "", "build context file from thaw bulkload begin (- for stdin; required)")
	bucketSpec := fs.String("buckets", "", "buckets to build, like 0-7,9 or all (required)")
	route := fs.String("route", "skip", "rows of buckets not in --buckets: skip (every builder reads the same files) or error")
	out := fs.String("out", "", "write the results to this file instead of stdout")
	server := fs.String("server", defaultServer(), "with --scoped-uploads: coordinator HOST:PORT or URL, or a comma-separated list ($THAW_SERVER sets the default)")
	var o buildOptions
	var mem byteSizeFlag
	registerBuildFlags(fs, &o, &mem)
	paths, err := parseArgs(fs, args)
	if err != nil {
		return err
	}
	if *contextFile == "" || *bucketSpec == "" {
		return usageError("%s needs --context FILE and --buckets LIST", fs.Name())
	}
	if err := checkOutFile(*out); err != nil {
		return err
	}
	if len(paths) == 0 {
		return usageError("%s needs Parquet files or directories", fs.Name())
	}
	switch *route {
	case "skip", "error":
	default:
		return usageError("--route %q: want skip or error", *route)
	}
	if o.workers < 0 {
		return usageError("--workers must not be negative")
	}
	bc, err := readBuildContext(*contextFile)
	if err != nil {
		return err
	}
	buckets, err := parseBuckets(*bucketSpec, bc.Buckets())
	if err != nil {
		return err
	}
	if err := o.openStore(ctx); err != nil {
		return err
	}
	defer func() { err = errors.Join(err, o.closeStore()) }()
	if err := checkStore(o.store, bc); err != nil {
		return err
	}
	o.buckets, o.skip, o.memory = buckets, *route == "skip", mem.n
	if o.scoped {
		if o.client, err = bulkClient(ctx, *server, true, nil); err != nil {
			return err
		}
	}
	if len(buckets) == bc.Buckets() {
		o.buckets = nil // every bucket: nothing to route away
	}
	in, err := openParquetInput(paths)
	if err != nil {
		return err
	}
	if d := bc.BuildDeadline(); time.Now().After(d) {
		// The server has most likely aborted the transaction; clocks may
		// differ, so this is a warning and the commit will tell.
		fmt.Fprintf(progressOutput, "thaw: warning: the build deadline of bulk load %s passed at %s\n", bc.Handle().TxnID, d.Format(time.RFC3339))
	}
	prog := newProgress(progressOutput, in)
	prog.printf("building %d of %s of bulk load %s of %s from %s (%s, %s)",
		len(buckets), plural(bc.Buckets(), "bucket", "buckets"), bc.Handle().TxnID, bc.Target(), plural(len(in.files), "file", "files"),
		plural(in.rows, "row", "rows"), humanBytes(in.bytes))
	results, err := buildInput(ctx, bc, in, o, prog)
	if err != nil {
		return prefixErrors("build "+bc.Target().String(), err)
	}
	var buf bytes.Buffer
	if err := writeTierJSON(&buf, results); err != nil {
		return err
	}
	return writeOutput(stdout, *out, buf.Bytes())
}

// readResults reads result files (a JSON array of bucket results, or one
// result) and reports, per bucket, the files that hold it.
func readResults(paths []string) ([]snapshotbuild.BucketResult, map[int][]string, error) {
	var all []snapshotbuild.BucketResult
	from := map[int][]string{}
	for _, p := range paths {
		b, err := os.ReadFile(p)
		if err != nil {
			return nil, nil, fmt.Errorf("read results: %w", err)
		}
		rs, err := bulkloadclient.UnmarshalBucketResults(b)
		if err != nil {
			return nil, nil, fmt.Errorf("results %s: want the JSON array thaw bulkload build prints: %w", p, err)
		}
		for _, r := range rs {
			from[r.Bucket] = append(from[r.Bucket], p)
		}
		all = append(all, rs...)
	}
	return all, from, nil
}

func runBulkloadCommit(ctx context.Context, stdout io.Writer, args []string) (err error) {
	fs := tierFlagSet("thaw bulkload commit", "--context FILE RESULTS...", stdout)
	var cf clientFlags
	cf.register(fs)
	contextFile := fs.String("context", "", "build context file from thaw bulkload begin (- for stdin; required)")
	budget := fs.Duration("budget", 10*time.Minute, "how long Commit may retry and wait for every bucket to be readable")
	scoped := fs.Bool("scoped-uploads", false, "write the manifest through the coordinator's upload gateway, with credentials scoped to this transaction, instead of into the object store directly")
	var o buildOptions
	fs.StringVar(&o.objectStore, "object-store", "", objectStoreUsage)
	paths, err := parseArgs(fs, args)
	if err != nil {
		return err
	}
	if *contextFile == "" {
		return usageError("%s needs --context FILE", fs.Name())
	}
	if len(paths) == 0 {
		return usageError("%s needs the result files of the builds", fs.Name())
	}
	if err := cf.check(); err != nil {
		return err
	}
	if *budget <= 0 {
		return usageError("--budget must be positive")
	}
	bc, err := readBuildContext(*contextFile)
	if err != nil {
		return err
	}
	results, from, err := readResults(paths)
	if err != nil {
		return err
	}
	if err := bulkloadclient.CheckCoverage(bc, results); err != nil {
		var where []string
		for _, b := range slices.Sorted(maps.Keys(from)) {
			if len(from[b]) > 1 {
				where = append(where, fmt.Sprintf("bucket %d is in %s", b, strings.Join(from[b], " and ")))
			}
		}
		if len(where) > 0 {
			return fmt.Errorf("commit %s: %w (%s)", bc.Target(), err, strings.Join(where, "; "))
		}
		return fmt.Errorf("commit %s: %w", bc.Target(), err)
	}
	o.scoped = *scoped
	if err := o.openStore(ctx); err != nil {
		return err
	}
	defer func() { err = errors.Join(err, o.closeStore()) }()
	if err := checkStore(o.store, bc); err != nil {
		return err
	}
	c, err := bulkClient(ctx, cf.server, *scoped, o.store)
	if err != nil {
		return err
	}
	// Commit is not cut short by the first interrupt: it runs to its budget.
	commitCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), *budget+cf.timeout)
	defer cancel()
	if _, err := c.Commit(commitCtx, bc, results, *budget); err != nil {
		return fmt.Errorf("commit bulk load %s: %w", bc.Handle().TxnID, err)
	}
	resp, err := bulkDo(commitCtx, dialBulkLoad(cf.server), &tierv1.BulkLoadStatusRequest{Handle: &tierv1.BulkLoadHandle{TxnId: bc.Handle().TxnID}},
		tierv1connect.BulkLoadServiceClient.Status)
	if err != nil {
		return wrapTier("bulk load "+bc.Handle().TxnID, err)
	}
	if cf.json() {
		return writeTierJSON(stdout, bulkStatusJSONOf(resp.GetStatus()))
	}
	var rows int64
	for _, r := range results {
		rows += r.RowCount
	}
	fmt.Fprintf(stdout, "committed bulk load %s of %s: %s in %s\n", bc.Handle().TxnID, bc.Target(), plural(rows, "row", "rows"), plural(len(results), "bucket", "buckets"))
	return printBulkStatus(stdout, resp.GetStatus())
}
