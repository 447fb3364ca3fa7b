// Package bulkload holds the protocol vocabulary of thaw's bulk-load
// transaction, shared by the tier (server side) and the SDK (client side):
// transaction states, abort reasons, handles, frozen target facts and the
// errors callers branch on.
//
// Semantics (ARCHITECTURE.md "The bulk-load transaction"):
//
//   - States: BEGUN → COMMITTING → COMMITTED, or BEGUN → ABORTED. The step to
//     COMMITTING is the one irreversible decision; it is persisted before any
//     publication.
//   - Begin fences the target (LOADING), proves it empty and freezes schema,
//     bucket count, remote directory and one snapshot id per bucket. Begin with
//     the same caller token and principal resumes the same transaction.
//   - Commit returns only when the whole target is readable; a retried Commit
//     joins the in-flight commit or returns its outcome. An outcome can be
//     unknown to the caller (lost response): it is resolved through Status,
//     never by starting anything new.
//   - Abort is allowed in BEGUN only and is idempotent in ABORTED.
//
// This package imports only the standard library.
//
// Status: implemented with the bulk-load transaction (issue 5).
package bulkload
