// Package uploadcap mints and checks upload capabilities: the scoped,
// temporary write credentials of a bulk-load build (ARCHITECTURE.md,
// "Scoped temporary write authorization").
//
// A capability names one transaction, an expiry and the buckets it may
// write (every bucket and the manifest, or a list of buckets without the
// manifest), signed with HMAC-SHA256 under a key only the minting
// coordinator holds. It grants nothing by itself: the coordinator's upload
// gateway, which checks the signature, looks the transaction up and allows
// exactly the frozen snapshot directories of those buckets (and the
// manifest path), and only while the transaction is BEGUN. A builder holding one can therefore write the objects of one
// transaction for a short time, and nothing else: no read, no listing, no
// other transaction's directories, no object store credentials.
//
// The token is "thawcap1." + base64url(payload) + "." + base64url(mac),
// where payload is the JSON object {"v":1,"kid":K,"txn":T,"exp":E,"buckets":B}
// (K the signing key's id, T the transaction id, E the expiry in ms since
// the Unix epoch, B "*" for every bucket and the manifest or ascending
// ranges like "0-3,7") and mac the HMAC-SHA256 of everything before the
// last dot. Verify
// is strict: one encoding, exact members, the signature checked in
// constant time before the payload is decoded, the expiry against an
// injected clock.
//
// A token is a credential: it never enters a build context, a bucket
// result, a ledger record, a log line, a metric or an event. Token's
// String, GoString, Format and LogValue print "[REDACTED]".
//
// Standard library only, no I/O, safe for concurrent use.
package uploadcap
