package cli

import (
	"context"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
	"time"

	"connectrpc.com/connect"

	tierv1 "github.com/thawdb/thaw/gen/thaw/tier/v1"
	"github.com/thawdb/thaw/gen/thaw/tier/v1/tierv1connect"
)

// ---------------------------------------------------------------------------
// thaw bulkload: inspect and abort bulk-load transactions. Beginning and
// committing them is the promoter's (or an SDK caller's) business.

func bulkloadCommands() []command {
	return []command{
		{name: "list", summary: "list bulk-load transactions (--all includes terminal ones)", run: runBulkloadList},
		{name: "status", summary: "show one bulk-load transaction, with restore progress", run: runBulkloadStatus},
		{name: "abort", summary: "abort a BEGUN bulk-load transaction and wait until its fence is lifted", run: runBulkloadAbort},
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

// msTime renders ms since the Unix epoch as RFC 3339 (UTC); "" for 0.
func msTime(ms int64) string {
	if ms == 0 {
		return ""
	}
	return time.UnixMilli(ms).UTC().Format(time.RFC3339Nano)
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
	w := tabwriter.NewWriter(stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(w, "TXN\tTARGET\tSTATE\tPHASE\tADOPTED\tCREATED\tDETAIL")
	for _, st := range resp.GetTransactions() {
		j := bulkStatusJSONOf(st)
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
	fs := tierFlagSet("thaw bulkload abort", "TXN_ID", stdout)
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
	resp, err := bulkDo(ctx, dialBulkLoad(cf.server), &tierv1.AbortBulkLoadRequest{Handle: &tierv1.BulkLoadHandle{TxnId: id}},
		tierv1connect.BulkLoadServiceClient.Abort)
	if err != nil {
		return wrapTier("abort bulk load "+id, err)
	}
	if cf.json() {
		return writeTierJSON(stdout, bulkStatusJSONOf(resp.GetStatus()))
	}
	fmt.Fprintf(stdout, "aborted bulk load %s of %s\n", id, bulkTargetName(resp.GetStatus().GetHandle()))
	return nil
}
