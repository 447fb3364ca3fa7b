// Package tierclient reads and writes thaw's real-time tier: the client
// of the CoordinatorService (metadata, routing) and of the tablet servers'
// TabletService (Write, Lookup, PrefixLookup, Scan), in the manner of a
// Fluss or Kafka client.
//
// # Routing
//
// New takes the address of any coordinator, or a comma-separated list of
// coordinators ("a:7070,b:7070"), as bulkloadclient.New does; a standby
// answers NOT_LEADER naming the active one, which the client follows at
// once (at most MaxLeaderRedirects times per attempt) and from then on.
// With a list, a coordinator that cannot be connected to is passed over
// for the next one within the attempt, and so is, for metadata reads, one
// that answers unavailable; changes (CreateTable, CreateDatabase, ...)
// move on within an attempt only where they certainly did nothing (no
// connection, NOT_LEADER). After a coordinator was found not serving (no
// connection, NOT_LEADER, UNAVAILABLE, a transport failure) later requests
// start at the next one in the list, so the client finds the new active
// coordinator even when the one it used is gone. Failed attempts are
// retried with backoff under the RetryPolicy, as below.
//
// A Target is a non-partitioned table, one partition, or a partitioned
// table as a whole, whose rows go to the partition their partition-key
// values name (created on demand for upserts with WithCreatePartitions;
// a Get or Delete of a key whose partition does not exist finds nothing).
// The client caches each physical target's GetTargetLocations answer
// (ids, schema, each bucket's leader and leader epoch), encodes rows with
// package kv, computes each row's bucket and sends the bucket's requests
// to its leader with the leader epoch. NOT_LEADER with a newer leader in
// its hint, and STALE_EPOCH, NOT_FOUND (replica moved) or a bucket
// without a leader after a refresh of the locations, move the request to
// the new leader; UNAVAILABLE, transport failures and timed-out attempts
// are retried with exponential backoff, all under the RetryPolicy. A TLS
// handshake that fails verification (an untrusted, wrong-host or expired
// certificate) is not: it fails the call at once. A request the server
// finds too large (BATCH_TOO_LARGE) is halved and sent again. A target
// found dropped and created again, or with a new schema, fails the rows
// encoded for the old one with ErrTargetChanged: they never land in the
// new one. Table descriptions (Table) are cached too; a table another
// client dropped, or dropped and created again, stays cached until a data
// call finds it changed: RefreshTable asks the coordinator and updates
// the cache, for callers that decide on a table's existence or schema.
//
// # Writes: batching, ordering, delivery
//
// Writer (and Upsert and Delete, which use one) appends each encoded row
// to its bucket's open batch, bounded by WithMaxBatchRows and
// WithMaxBatchBytes. A bucket with no request in flight sends what it has
// at once; while one is in flight, rows gather in the next batch, so
// batches grow with load and no linger timer delays a quiet writer.
// Requests for different buckets are in flight together, up to
// WithMaxInFlight over the whole client.
//
// Ordering: with WithMaxInFlightPerBucket(1), the default, a bucket has at
// most one request in flight and the next is sent only after the previous
// one was acknowledged (or retried until it was), so every bucket applies
// a Writer's mutations in the order of the Writer's calls, and for each key
// the last upsert or delete written wins. Keys of different buckets are
// not ordered with each other. With a higher limit, batches of a bucket
// may apply in any order: use it only when no key is written twice.
// Writes from different Writers or clients are not ordered.
//
// Delivery is at least once: a request whose outcome is unknown (timeout,
// broken connection, a response cut off after its headers, leader change)
// is sent again, so its mutations may be
// applied twice. Upserts and deletes are idempotent per key, and a retry
// happens before the bucket's next batch is sent, so a retried batch
// cannot undo a later one; the resulting rows are the same as with exactly
// one delivery (only the changelog may hold a mutation twice). One case
// is not covered: an attempt the client gave up on (its timeout passed)
// that the network still delivers later — after its retry and later
// batches were applied — is applied then (a tablet server drops an
// attempt whose client is gone, but cannot tell a late one: requests
// carry no writer sequence numbers yet), and may bring back an older
// value of a key. It takes a network that holds a request for longer than
// the retry and the next batches (a buffering proxy, a healed partition).
//
// Flush returns when every row written before it (and during it) is
// acknowledged: durable in its bucket's changelog and applied by the
// bucket's leader, so Get and Scan see it. Close flushes, then releases
// the Writer. The first request the client gives up on fails the Writer:
// it drops the rows it still holds, and Write, Flush and Close return an
// error joining one *BucketError per failed bucket; what the error names
// may be partly written, everything acknowledged before stays written. A
// loader that must not lose rows resumes from its last successful Flush
// and writes the rows since then again.
//
// # Reads
//
// Get and PrefixGet group keys per bucket and look them up in one request
// per bucket (per WithMaxBatchRows), buckets in parallel, at the leaders,
// which see every acknowledged write. Scan pages through every bucket in
// turn; each page is consistent, a row present for the whole scan is seen
// exactly once, but the scan is not a snapshot of the target.
//
// # Errors
//
// Errors keep the server's error inside (errors.As to *connect.Error), so
// tierpb.ReasonOf, tierpb.IsTargetLoading (a bulk load holds the target;
// writes and reads fail with it until the load ends, and are not retried)
// and tierpb.IsNotLeader work on them. IsRetriable tells errors worth
// retrying later from the ones that are not. Rows that do not fit the
// schema fail with a *kv.RowError (wrapping kv.ErrInvalidRow); Upsert,
// Delete, Get and PrefixGet wrap the failure of a row (key, prefix) they
// could not encode or route (the partition of an upserted row does not
// exist, a key of another partition than the call's target, ...) in a
// *RowError with the row's index.
//
// # Transport
//
// The default protocol is the Connect protocol with binary protobuf over
// HTTP/1.1 keep-alive connections, pooled up to the in-flight limit per
// server; gRPC and Connect over cleartext HTTP/2 (h2c, one multiplexed
// connection per server) are options (WithProtocol). With batches of
// thousands of rows the transport is a few percent of the write path's
// CPU, and the three measured within 2% of each other (docs/performance.md).
// Responses are not compressed. A tier that serves TLS is named with an
// https:// address; the client then speaks TLS (HTTP/1.1, or HTTP/2 by
// ALPN for the HTTP/2 protocols) and trusts WithTLSConfig's RootCAs (default:
// the system's roots). A certificate it does not trust fails the call at
// once (not retried). A tier that authorizes its callers
// (coordinator.callers with authorize_ddl or authorize_data) wants their
// token: WithBearerToken sends it with every call; UNAUTHENTICATED and
// PERMISSION_DENIED are not retried.
//
// # Concurrency
//
// A Client, a Writer and the calls on them are safe for concurrent use.
// Each Writer runs one goroutine per bucket with requests to send, which
// ends when the bucket has none; Get and PrefixGet run one per request;
// Close of a Writer waits for its goroutines. DESIGN.md has the details.
package tierclient
