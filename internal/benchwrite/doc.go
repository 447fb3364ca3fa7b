// Package benchwrite is the `thaw bench write` harness: it measures the
// tier's ordinary write path end to end — a tierclient.Writer batching
// rows per bucket and pipelining the batches over every bucket, each
// request to the bucket's leader, appended durably to the bucket's
// changelog and applied to its Pebble database — the baseline the bulk
// load is compared with.
//
// Run starts an embedded tier in the process (internal/daemon, N tablet
// servers on one listener, fsync on), or uses a running one (--server),
// creates a table bench.write_{ns} (an id BIGINT or a BYTES key of
// --key-bytes, and a STRING payload of --value-bytes), and writes --rows
// synthetic rows through one Writer. Keys are a bijection of the row
// number, so they are unique and arrive in random order. On a running tier
// it drops the table at the end, and the database bench too when the run
// created it and it holds no other table.
//
// The measurement runs from NewWriter until Close returned, i.e. until
// every row is acknowledged: durable in its bucket's changelog and applied
// by the bucket's leader. Then, outside the measurement, it checks that
// the rows are readable: --verify-sample rows spread over the key space
// are read back with Get and compared, and (--verify-count, default on) a
// Scan of every bucket must count exactly --rows rows. The count reads
// every row back, which is the honest check that nothing was lost; at
// 10 M rows it takes a while, and --verify-count=false skips it.
//
// The report gives rows/s and MB/s (logical bytes: the encoded key and
// value bytes of each row, as the bulk path's bench counts them), the
// number of batches and their mean size, retries, the p50/p99/max batch
// latency from the first attempt to the acknowledgement, the process's
// peak RSS (VmHWM; with the embedded tier it includes etcd, the
// coordinator and the tablet servers), /proc/loadavg before and after, and
// last the line "ordinary write: R rows/s".
package benchwrite
