// Package bulkloadclient is thaw's public SDK for the bulk-load workflow: Begin
// returns an immutable, serializable build context; build sessions turn rows
// into bucket snapshots (through snapshotbuild); Commit assembles and writes
// the manifest and retries within the caller's budget; Abort releases the
// target.
//
// Contract: the build context holds only frozen target facts, never
// credentials, connections or local paths. Credentials are acquired by the
// build session and stay in process memory.
//
// A typical flow:
//
//	c, _ := bulkloadclient.New(ctx, "127.0.0.1:9090")
//	bc, _ := c.Begin(ctx, target, token, bulkloadclient.BeginOptions{})
//	blob, _ := bc.Marshal() // ship to workers; UnmarshalBuildContext there
//	s, _ := bulkloadclient.OpenBuildSession(ctx, bc, bulkloadclient.SessionOptions{})
//	_ = s.AddRow(ctx, row) // ...
//	results, _ := s.Finish(ctx)
//	s.Close()
//	st, err := c.Commit(ctx, bc, results, 5*time.Minute)
//
// Errors wrap the bulkload package's sentinels (test with errors.Is);
// IsRetriable reports whether repeating the same request may succeed.
package bulkloadclient
