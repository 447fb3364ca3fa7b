// Package bulkloadclient is thaw's public SDK for the bulk-load workflow: Begin
// returns an immutable, serializable build context; build sessions turn rows
// into bucket snapshots (through snapshotbuild); Commit assembles and writes
// the manifest and retries within the caller's budget; Abort releases the
// target. docs/sdk.md is the guide; example_test.go is a complete program.
//
// Contract: the build context holds only frozen target facts, never
// credentials, connections or local paths. Whatever writes to the object
// store (a build session, Commit's manifest write) acquires access in its own
// process and keeps it in memory: its own store access, or, through
// ScopedStore (SessionOptions.Store) and WithScopedUploads, a credential
// the coordinator scopes to the transaction (UploadCredentials), used
// against the coordinator's upload gateway and never serialized.
//
// A typical flow:
//
//	c, err := bulkloadclient.New(ctx, "127.0.0.1:7070")
//	bc, err := c.Begin(ctx, target, token, bulkloadclient.BeginOptions{})
//	blob, err := bc.Marshal() // ship to workers; UnmarshalBuildContext there
//	s, err := bulkloadclient.OpenBuildSession(ctx, bc, bulkloadclient.SessionOptions{Buckets: mine})
//	defer s.Close()
//	err = s.Add(ctx, arrowBatch) // or s.AddRow(ctx, row); last row of a key wins
//	results, err := s.Finish(ctx) // JSON-serializable; send back to the committer
//	st, err := c.Commit(ctx, bc, allResults, 5*time.Minute)
//
// A builder whose input is already split by bucket can give each bucket a
// writer of its own instead, one goroutine each:
//
//	w, err := s.Bucket(b)            // a BucketWriter of one of the session's buckets
//	err = w.Add(ctx, batchOfBucketB) // a row of another bucket is ErrBucketNotOwned
//	res, err := w.Finish(ctx)        // builds and uploads bucket b alone
//
// A session is used one way, session-level input or bucket writers
// (ErrMixedInput); every writer's build gets SessionOptions.MemoryBudget.
// SessionOptions also choose the duplicate-key policy (Duplicates), hear
// per-bucket progress (Progress) and may replace the object store with any
// snapshotbuild.Store (an *objstore.Store or a wrapper, e.g. a rate limiter).
//
// Rebuilding is safe: the same rows give byte-identical files, so a new
// session of the same context (after a builder died) adopts what the dead one
// uploaded, and the store holds one copy of each file.
//
// New takes any coordinator of the tier, or a comma-separated list of them
// ("a:7070,b:7070"). Every call goes to the active coordinator: a standby
// or deposed coordinator answers NOT_LEADER naming the active one, and the
// client repeats the call there at once (at most MaxLeaderRedirects times
// per call; safe, since such a coordinator did not act) and remembers it
// for later calls. A coordinator of the list that cannot be reached is
// passed over for the next; one that answers UNAVAILABLE is passed over by
// the next call (Begin, Commit and Abort are not sent twice within a call
// after an answer). NOT_LEADER naming none (an election) is
// bulkload.ErrUnavailable.
//
// Errors wrap the bulkload package's sentinels (RPCs) or snapshotbuild's
// (input), tested with errors.Is; IsRetriable reports whether repeating the
// same request may succeed. Begin, Commit and Abort are idempotent; Commit
// repeats itself within its budget (the manifest write too, when the object
// store failed in a way that may pass) and resolves an unknown outcome
// through Status, never by starting anything new. A context that ends
// ends the call with its error, which is not retriable.
//
// Client and BuildContext are safe for concurrent use. A Session's and a
// BucketWriter's methods may be called from several goroutines but are
// serialized per session-level build and per writer; writers of different
// buckets build in parallel. Session.Close closes the writers still open.
package bulkloadclient
