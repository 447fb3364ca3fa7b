package bulkloadclient_test

import (
	"context"
	"encoding/json"
	"fmt"
	"log"
	"os"
	"time"

	"github.com/thawdb/thaw/bulkload"
	"github.com/thawdb/thaw/bulkload/bulkloadclient"
	"github.com/thawdb/thaw/internal/daemon"
	"github.com/thawdb/thaw/kv"
	"github.com/thawdb/thaw/snapshotbuild"
	"github.com/thawdb/thaw/tier/tierclient"
)

// Example loads 1,000 rows into an empty table: the coordinator process
// begins the transaction and ships the serialized build context to two
// workers, each building two of the four buckets; their results come back
// as bytes and the coordinator commits them.
func Example() {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()

	// A tier in this process, so that the example runs on its own. A real
	// program connects to the address of `thaw server` instead.
	dir, err := os.MkdirTemp("", "thaw-sdk-example-")
	if err != nil {
		log.Fatal(err)
	}
	defer os.RemoveAll(dir)
	tier, err := daemon.StartEmbedded(ctx, daemon.EmbeddedConfig{DataDir: dir, EtcdUnsafeNoFsync: true})
	if err != nil {
		log.Fatal(err)
	}
	defer tier.Close()
	if err := tier.WaitReady(ctx); err != nil {
		log.Fatal(err)
	}
	address := tier.Address()

	// The target: an empty table with four buckets.
	tc, err := tierclient.New(ctx, address)
	if err != nil {
		log.Fatal(err)
	}
	defer tc.Close()
	if err := tc.CreateDatabase(ctx, "shop"); err != nil {
		log.Fatal(err)
	}
	info, err := tc.CreateTable(ctx, "shop", "items", kv.TableSchema{
		Columns: []kv.Column{
			{Name: "id", Type: kv.Type{Kind: kv.KindBigInt}},
			{Name: "name", Type: kv.Type{Kind: kv.KindString}},
			{Name: "qty", Type: kv.Type{Kind: kv.KindInt}, Nullable: true},
		},
		PrimaryKey: []string{"id"},
		Buckets:    4,
	}, 0)
	if err != nil {
		log.Fatal(err)
	}

	// Begin. The caller token names this load: Begin with the same token
	// resumes the same transaction, so it is safe to repeat while the
	// error is retriable (a new table answers UNAVAILABLE until its
	// replicas are ready).
	c, err := bulkloadclient.New(ctx, address)
	if err != nil {
		log.Fatal(err)
	}
	target := bulkload.Target{Database: "shop", Table: "items"}
	var bc *bulkloadclient.BuildContext
	for {
		bc, err = c.Begin(ctx, target, "example-load-1", bulkloadclient.BeginOptions{BuildTimeout: 10 * time.Minute})
		if err == nil {
			break
		}
		if !bulkloadclient.IsRetriable(err) {
			log.Fatal(err)
		}
		time.Sleep(100 * time.Millisecond)
	}
	fmt.Printf("begun %s: %d buckets\n", bc.Target(), bc.Buckets())

	// Ship the context: it is plain bytes, with no credentials in it.
	blob, err := bc.Marshal()
	if err != nil {
		log.Fatal(err)
	}

	// Two workers (here in turn; normally processes on other machines)
	// build two buckets each and send their results back as bytes.
	var results []snapshotbuild.BucketResult
	for _, buckets := range [][]int{{0, 1}, {2, 3}} {
		out, err := worker(ctx, blob, buckets)
		if err != nil {
			// Release the target; or run the worker again: a rebuild with
			// the same context writes the same files and adopts them.
			if _, aerr := c.Abort(ctx, bc.Handle()); aerr != nil {
				log.Print(aerr)
			}
			log.Fatal(err)
		}
		var res []snapshotbuild.BucketResult
		if err := json.Unmarshal(out, &res); err != nil {
			log.Fatal(err)
		}
		for _, r := range res {
			fmt.Printf("bucket %d: %d rows, %d duplicates\n", r.Bucket, r.RowCount, r.Duplicates)
		}
		results = append(results, res...)
	}

	// Commit checks that every bucket is covered exactly once, writes the
	// manifest and commits, retrying within the budget; when it returns
	// COMMITTED every row is readable.
	st, err := c.Commit(ctx, bc, results, 5*time.Minute)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(st.State)

	n := 0
	if err := tc.Scan(ctx, tierclient.Target(target), func(kv.Row) error { n++; return nil }); err != nil {
		log.Fatal(err)
	}
	fmt.Println(n, "rows")
	var keys []kv.Row
	for _, id := range []int64{7, 10} {
		k, err := info.KeyRow(id)
		if err != nil {
			log.Fatal(err)
		}
		keys = append(keys, k)
	}
	rows, err := tc.Get(ctx, tierclient.Target(target), keys)
	if err != nil {
		log.Fatal(err)
	}
	for _, r := range rows {
		fmt.Println(r)
	}

	// Output:
	// begun shop.items: 4 buckets
	// bucket 0: 257 rows, 30 duplicates
	// bucket 1: 250 rows, 21 duplicates
	// bucket 2: 262 rows, 31 duplicates
	// bucket 3: 231 rows, 18 duplicates
	// COMMITTED
	// 1000 rows
	// [7 item-7 0]
	// [10 item-10-v2 <nil>]
}

// worker is what one build process runs: it builds the given buckets of
// the transaction whose context is blob and returns its results as JSON.
// Every worker reads the whole input and keeps the rows of its buckets
// (SkipOtherBuckets); with buckets nil one session builds everything.
func worker(ctx context.Context, blob []byte, buckets []int) ([]byte, error) {
	bc, err := bulkloadclient.UnmarshalBuildContext(blob)
	if err != nil {
		return nil, err
	}
	// The session acquires what the process needs to write snapshots (the
	// object store of the context's remote data dir) and removes its local
	// temporary files on Close.
	s, err := bulkloadclient.OpenBuildSession(ctx, bc, bulkloadclient.SessionOptions{
		Buckets: buckets, SkipOtherBuckets: true,
	})
	if err != nil {
		return nil, err
	}
	defer s.Close()
	// Ids 0..999, then ids 0, 10, 20, ... again: the last row of a key wins.
	for id := range int64(1000) {
		if err := s.AddRow(ctx, kv.Row{id, fmt.Sprintf("item-%d", id), int32(id % 7)}); err != nil {
			return nil, err
		}
	}
	for id := int64(0); id < 1000; id += 10 {
		if err := s.AddRow(ctx, kv.Row{id, fmt.Sprintf("item-%d-v2", id), nil}); err != nil {
			return nil, err
		}
	}
	res, err := s.Finish(ctx)
	if err != nil {
		return nil, err
	}
	if err := s.Close(); err != nil {
		return nil, err
	}
	return json.Marshal(res)
}
