package bulktxn

import (
	"encoding/json"
	"fmt"
	"strings"
	"time"

	"github.com/cockroachdb/datadriven"

	"github.com/thawdb/thaw/bulkload"
)

func init() {
	register("begin", beginCmd)
	register("begin-again", beginAgainCmd)
	register("target-info", targetInfoCmd)
}

// begin [buckets=4] [servers=ts-1,ts-2] [rf=2] [token=t1] [principal=alice]
// [timeout=1h] [partition=p] [now=...] [adopt-batch=64] [resend=5s]
// starts a fresh world and a transaction with New.
func beginCmd(e *env, d *datadriven.TestData) {
	e.cfg = DefaultConfig()
	e.cfg.AdoptBatch = e.intArg(d, "adopt-batch", MaxAdoptBatch)
	e.db = newEtcdModel()
	e.now = base.UnixMilli()
	e.nextReq = 0
	n := e.intArg(d, "buckets", 4)
	e.holders = placement(n, strings.Split(e.arg(d, "servers", "ts-1,ts-2"), ","), e.intArg(d, "rf", 2))
	timeout, err := time.ParseDuration(e.arg(d, "timeout", "0s"))
	if err != nil {
		d.Fatalf(e.t, "timeout: %v", err)
	}
	part := e.arg(d, "partition", "")
	b := Begin{
		Req: e.req(), TxnID: testTxnID, CallerToken: e.arg(d, "token", "t1"),
		Principal: bulkload.Principal{Type: "User", Name: e.arg(d, "principal", "alice")},
		Now:       e.setNow(d),
		Target:    bulkload.Target{Database: "sales", Table: "orders", Partition: part},
		TableID:   7, RemoteDataDir: "s3://bucket/thaw",
		Schema:       json.RawMessage(testSchema(n, part != "")),
		BuildTimeout: timeout, RegistrationRev: e.db.regRev, Holders: e.holders,
	}
	if part != "" {
		b.PartitionID = 3
	}
	m, effs, err := New(e.cfg, b)
	if err != nil {
		fmt.Fprintf(e.out, "error: %v\n", err)
		return
	}
	e.m = m
	e.print(effs)
	e.state()
}

// begin-again [token=t1] [principal=alice] [now=...]: Begin found this
// transaction by its caller token.
func beginAgainCmd(e *env, d *datadriven.TestData) {
	e.step(BeginRequested{
		Req: e.reqArg(d), CallerToken: e.arg(d, "token", "t1"),
		Principal: bulkload.Principal{Type: "User", Name: e.arg(d, "principal", "alice")}, Now: e.setNow(d),
	})
	e.state()
}

// target-info prints the frozen facts in full.
func targetInfoCmd(e *env, d *datadriven.TestData) {
	info, ok := e.m.TargetInfo()
	if !ok {
		fmt.Fprintln(e.out, "not ready")
		return
	}
	fmt.Fprintf(e.out, "handle: %s table=%d partition=%d txn=%s\n", info.Handle.Target, info.Handle.TableID, info.Handle.PartitionID, info.Handle.TxnID)
	fmt.Fprintf(e.out, "schema %d, %d buckets, %s bucketing, remote %s\n", info.SchemaID, info.Buckets, info.Bucketing, info.RemoteDataDir)
	fmt.Fprintf(e.out, "schema json: %s\n", info.Schema)
	for b, dir := range info.SnapshotDirs {
		fmt.Fprintf(e.out, "bucket %d: snapshot %d at %s\n", b, info.SnapshotIDs[b], dir)
	}
	fmt.Fprintf(e.out, "manifest: %s\nbuild deadline: %s\n", info.ManifestPath, info.BuildDeadline.Format(time.RFC3339))
}
