// Package benchload is the `thaw bench load` harness: in one run, on one
// embedded tier, the same synthetic rows go through
//
//	(a) the ordinary write path — one tierclient.Writer batching rows per
//	    bucket and pipelining the batches over every bucket, with
//	    `thaw bench write`'s loader settings (8,192 rows or 2 MiB per
//	    request, 64 requests in flight, one per bucket) — into one empty
//	    table, and
//	(b) the bulk path — bulkloadclient Begin, OpenBuildSession, Add of
//	    Arrow record batches (or AddRow with --bulk-input rows), Finish,
//	    Commit — into another empty table with the same schema,
//
// and the report ends with the line "ratio bulk/ordinary: R", R being the
// bulk path's rows/s over the ordinary path's. The line before it, "CPU
// per row, ordinary/bulk: C", compares the CPU time (user + system, whole
// process) the two paths spent on the same rows: what loading costs, apart
// from how long it takes.
//
// Data: the table of `thaw bench write` (an id BIGINT primary key, or a
// BYTES key of --key-bytes, and a STRING payload of --value-bytes),
// --buckets buckets, Fluss bucketing, replication factor 3 on the default
// 3 tablet servers. Row i is the same in both paths: its key a bijection
// of i (unique, random order), its payload one of 4,096 distinct strings.
// Rows are generated inside both measurements, since a real load has to
// produce its rows too, and in both on a goroutine of their own, up to two
// chunks of 8,192 rows (Arrow batches of --arrow-batch rows for the bulk
// path, through bulkloadclient.ReadAhead) ahead of the writer or builder,
// as a real loader decodes its input while it writes (`thaw load` and the
// promoter read ahead the same way). --bulk-input rows feeds AddRow on one
// goroutine, without read-ahead.
//
// Each path's clock runs until every row is readable:
//
//   - (a) from NewWriter until Close returned: every row acknowledged,
//     i.e. durable in its bucket's changelog and applied by its leader,
//     which serves reads from what it applied;
//   - (b) from Begin until Commit returned, which the coordinator answers
//     only once the whole target is readable (every replica restored
//     every bucket's snapshot).
//
// The new tables' start-up (leaders elected, replicas opened) is waited
// for before either clock starts. After each measurement, untimed,
// --verify-sample rows spread over the key space are read back with Get
// and compared, and (--verify-count, default on) a Scan of every bucket
// must count exactly --rows rows.
//
// Path (a) runs first, then (b); the tier keeps (a)'s table, and (b)
// starts once the process has gone idle after (a) (Pebble's compactions of
// (a)'s table done, at most a minute; untimed). rows/s and MB/s count the encoded key and value bytes of each row
// (as `thaw bench write` and `thaw bench build` do). /proc/loadavg is
// printed before and after each path.
//
// --cpuprofile FILE writes a CPU profile of the whole process during the
// bulk path's measurement (Begin to Commit) and --cpuprofile-ordinary FILE
// one of the ordinary path's (NewWriter to Close); `go tool pprof thaw FILE`
// reads them. Profiling adds a few percent of CPU to the measured path.
package benchload
