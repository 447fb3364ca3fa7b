// Package promoter is thaw's reconcile core: a de-duplicating queue of
// promotion keys, a planner that applies policies and prechecks, an
// executor that runs one bulk-load transaction per tier target, and a
// durable ledger of promotions in etcd.
//
// Contract: the same lake snapshot of the same partition is never promoted
// twice; a restarted promoter resumes or aborts what its ledger holds and
// never starts a second transaction for one target; no credential ever
// enters a ledger record, log line, metric or event.
//
// # Identity
//
// A promotion's identity is (catalog, lake table, tier table, tier
// partition, source snapshot id). The tier partition is what lake.PartitionMapping.PartitionName
// names for a lake partition; several lake partitions (of several partition
// specs) may map to one tier partition and are promoted together. The source
// snapshot id is the LastUpdatedSnapshotID of the newest of them (by
// LastUpdatedSequenceNumber, then LastUpdatedAt, for format-v1 tables
// whose sequence numbers are all 0): a lake commit that adds or changes
// another partition leaves an identity unchanged, a commit that adds files
// to this partition makes a new one (one that only removes whole files
// does not: a known limit, the statistics come from live files only). The ledger id is PromotionID (p- and 16 hex
// digits of a SHA-256) and the caller token of attempt n is
// "thaw-promoter/{id}/{n}" (CallerToken): deterministic, so Begin after a
// restart resumes the same transaction; not a secret.
//
// The identity names the tier table too, so a policy moved to another tier
// table promotes there afresh (the ledger's records of the old table stay
// as they are). A lake table is promoted by one policy of a promoter: New
// rejects two policies of one lake table (or of one tier table).
//
// # Planning
//
// Plan (and every reconcile) describes the lake table, maps its schema at
// the current snapshot with the policy's target options (lake.MapSchema; a
// failure wraps ErrSchema and names the field), compares it with an existing
// tier table (ErrSchema when it differs) or notes that the table will be
// created (createIfMissing; ErrNotFound otherwise), groups the lake
// partitions by tier partition, asks the policy to Select among them, and
// decides each tier partition, in this order: not selected; the identity is
// committed ("already promoted"), in progress, or failed terminally; another
// identity of the partition is committed ("stale": replacing promoted data is
// out of scope) or in progress; the target holds rows ("target not empty");
// otherwise promote. Plan changes nothing.
//
// # Phases
//
// A record moves planned → begun → building → committing → committed, or
// ends an attempt in aborted or failed:
//
//   - planned: the record is created (or, for a new attempt of an aborted or
//     retriably failed identity, updated with attempt+1 and a new token)
//     before anything touches the tier;
//   - begun: the target table and partition exist (created if needed) and
//     Begin with the record's token returned a transaction (its id is
//     recorded);
//   - building: the lake partitions are scanned at the record's scan
//     snapshot (with the mapping's derived partition columns) into one
//     build session of the bulk-load SDK (bulkloadclient.OpenBuildSession)
//     over every bucket (buildWorkers, memory, duplicateKeys and uploadMBps
//     from the policy), which uploads the bucket snapshots;
//   - committing: persisted before Commit is sent; from here the commit
//     decision may be taken and the promotion is never aborted by the
//     promoter;
//   - committed: Commit (or Status) reported COMMITTED: the whole target
//     is readable. Once the tier said COMMITTED no new attempt starts: the
//     write that records it is tried again (re-reading the record); if it
//     still fails the record stays committing, and Resume or the next
//     reconcile records it through Status.
//
// Every failure before committing aborts the transaction and records the
// attempt aborted with the error. The transaction is the one the record
// names or, when a Begin's outcome is unknown (its context ended, the tier
// unavailable, or a resumed record without a transaction id), the one the
// record's token may have begun: Begin is asked again with the token (it
// resumes a token's transaction), on a short deadline shutdown does not
// cancel, and what it returns is aborted. If that Begin's outcome is
// unknown too, the record keeps its phase and token for Resume. A retriable error (IsRetriable: the tier
// or the lake unavailable, a deadline, a conflict — everything but data,
// schema and target errors) is retried with backoff (Config.Retry) as a new
// attempt; after Retry.Attempts attempts, or at once for a terminal error,
// the record is failed with the error and whether it is retriable. A
// retriably failed or aborted identity is promoted again by the next
// reconcile; a terminally failed one only by an explicit request (Request
// with a partition, or Promote) or when the lake changes the partition.
// A failed Commit is settled through Status: COMMITTED → committed,
// COMMITTING → wait (CommitBudget), ABORTED → a new attempt, BEGUN → abort
// (but BEGUN with the manifest frozen after a retriable error, the
// coordinator still validating, is waited for like COMMITTING).
//
// # Resume
//
// Resume (Run calls it first) settles every non-terminal record, oldest
// first: planned, begun and building records Begin again with their token —
// which resumes the BEGUN transaction, or fails with the token aborted, and
// the next attempt starts — and rebuild (the build is deterministic, so the
// objects an earlier attempt uploaded are adopted); committing records ask
// Status: COMMITTED is recorded, COMMITTING and BEGUN with its manifest
// frozen (a Commit being decided) awaited, other BEGUN rebuilt and
// committed, ABORTED retried as a new attempt; a transaction the tier no
// longer knows (bulkload.ErrNotFound: the coordinator forgets a finished
// one after its result retention) is decided by the target — rows in it:
// committed; empty: aborted and retried as a new attempt; unreadable: left
// committing. A record whose policy is gone is released (its transaction
// aborted, unless its commit is decided or being decided). A reconcile
// also enqueues the unsettled records of its policy that no worker runs. Because Begin takes
// the record's token and a new attempt starts only after the previous
// attempt's transaction is aborted (or the tier aborted it), one key never
// has two transactions at once.
//
// Every build is counted in its record while it runs
// (Record.InterruptedBuilds: written before the build begins, taken back
// when it returns, whatever its outcome), so the count keeps the builds
// whose promoter died mid-build. A promotion with MaxInterruptedBuilds is
// not built again but aborted and failed with ErrInterrupted (terminal),
// so one that brings the process down every time (a panic decoding a
// damaged lake file, an out-of-memory kill) fails alone instead of keeping
// every promoter that takes over in a crash loop. A request and a commit
// clear the count (not a request stored before the record's last change,
// which a crash leaves stored; after an ErrInterrupted failure such a
// request is skipped: requestedBefore); every other new attempt keeps it;
// a lake change to the partition is a new identity.
//
// A record the ledger cannot read (corrupt, or written by a newer promoter:
// ErrRecordVersion) is logged with its key and left exactly as it is; the
// other records are settled and Resume's error names it, so Run does not
// start over a ledger it cannot fully read (see docs/promoter.md, "Ledger
// record format and upgrades").
//
// Run prunes the ledger at its start and every hour (PruneLedger): finished
// records older than Config.LedgerRetention go, except those a plan still
// decides by (the newest committed record of each target and, without one,
// its newest failure that is not retriable).
//
// # Requests
//
// Request stores what it queues in the ledger (StoredRequest, one per key,
// under prefix+"/requests/") before it answers, and a worker deletes a
// key's stored request once the key's turn has come and gone — promoted,
// skipped (noted for Skipped) or failed to start (noted too, with why) —
// unless the promoter was stopping: then the request stays, and the next
// promoter's Run queues it again before its workers start. A request is
// therefore not lost to a restart, a crash or a failover between its
// answer and its turn. A stored request of a policy the next promoter does
// not have, or that no longer takes requests, is deleted with a warning.
//
// # Shutdown
//
// When Run's context is done, the queue stops taking work, promotions before
// their commit decision are aborted (with a context shutdown does not
// cancel; a Begin the shutdown cut is asked again with its token to learn
// its transaction) and recorded aborted with "shutdown: ..." — retriable, so the next
// promoter promotes them again as attempt+1 (its reconcile, or the stored
// request) — and a Commit in flight
// finishes within CommitBudget (the commit is the decision and is not
// cancelled); if its outcome is still unknown, the record stays committing
// for Resume. A transaction that could not be aborted leaves its record in
// its phase, for Resume.
//
// # Concurrency
//
// The queue holds each Key (policy, tier partition) at most once; a key
// being processed is never handed out again (a key added meanwhile runs
// again afterwards); at most Config.Workers keys run at once, and at most
// limits.concurrentPromotions keys of one policy. Promote and Resume take
// the same per-key exclusion. Without Run, Drain runs the queue with Workers
// workers of its own. Ledger writes are compare-and-swap on the record's
// revision and, with a Leadership, fenced: a write after the leadership is
// lost fails with a fencing error, the promotion stops without any further
// write, and Run returns that error (metric thaw_promoter_halted). See
// DESIGN.md for which goroutine owns what.
//
// # Observability
//
// Metrics (Config.Registry): thaw_promoter_promotions_total{policy,outcome}
// (committed, aborted, failed, retried), thaw_promoter_promotion_seconds,
// thaw_promoter_rows_total, thaw_promoter_queue_depth,
// thaw_promoter_running, thaw_promoter_halted and
// thaw_promoter_reconciles_total{policy,result}. Logs: one slog event per
// phase ("promotion phase") with promotion, policy, target, attempt, phase
// and txn; warnings for retries and aborts, errors for failures. Progress
// reports a running promotion's rows read and each bucket's rows and bytes.
// Status events (Config.Status, a StatusSink): after every successful
// ledger write, StatusEventOf the written record — its state with the
// record's revision, without the caller token — in write order; the daemon
// publishes them to Kafka (triggers/kafka), ParseStatusEvent reads them
// strictly. Records, logs, metrics and events carry names, ids, counts,
// times and error messages only: no credential is ever handed to this
// package.
//
// # Estimates
//
// PlanItem.EstimatedBuild assumes 32 MiB/s of lake bytes: a rough guide,
// not a measurement.
package promoter
