// Package objstore is thaw's object storage: snapshots, staging files and
// manifests. It is the only package in thaw that imports gocloud.dev; the
// rest of thaw sees Bucket, Store and the errors below.
//
// # URLs
//
// OpenBucket and Open take one URL. The query carries driver parameters
// and never becomes part of an object's address. The key prefix is the URL
// path; the gocloud "prefix" and "key" parameters are refused.
//
//	file:///data/remote                   fileblob rooted at /data/remote
//	file://./rel                          the same, relative to the working directory
//	mem://name/prefix                     memblob shared by every Open of mem://name in this process
//	mem://                                a private memblob, new on each Open
//	s3://bucket/prefix?region=R           s3blob (AWS SDK v2, default credential chain)
//	s3://bucket/prefix?endpoint=http://127.0.0.1:P&region=us-east-1&use_path_style=true
//	                                      an S3-compatible server such as gofakes3
//
// file:// accepts fileblob's parameters (create_dir, metadata, no_tmp_dir,
// dir_file_mode, base_url, secret_key_path), and objstore sets
// create_dir=true and metadata=skip unless the URL sets them. metadata=skip
// means no ".attrs" sidecar files: fileblob writes them without a rename,
// and a torn sidecar makes its object unreadable. Sidecars that exist anyway
// never appear in List. A put (PutIfAbsent, and PutFile where it cannot
// link the local file) stages its bytes in the root's .objstore-staging
// directory, on the store's own file system, and links them into place
// (renames, on a file system without hard links), so TMPDIR may be another
// file system (fileblob's own writer stages in os.TempDir, and its rename
// then fails with EXDEV). That directory is not a key prefix any object may
// use, List never shows it, and opening the store removes the files a
// crashed put left there once they are a day old. With metadata sidecars
// kept (metadata=), writes go through fileblob's writer as before: set
// TMPDIR to the root's file system, or no_tmp_dir=true, which stages next
// to the object, where List can see an in-flight or crashed upload's
// temporary file.
//
// s3:// accepts s3blob's and gocloud's AWS parameters (region, endpoint,
// use_path_style, hostname_immutable, profile, anonymous,
// request_checksum_calculation, response_checksum_validation, ...).
// Credentials come from the SDK's default chain, for example
// AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY.
//
// mem:// takes no parameters. A named mem bucket lives as long as the
// process; Close on one handle leaves it open for the others.
//
// # Keys and URIs
//
// A key is a "/"-separated, valid UTF-8 path relative to the store: not
// empty, no leading or trailing "/", no empty, "." or ".." segment and no
// segment ending in ".." (fileblob escapes the "/" after one), no
// control characters, '\', '?' or '#', and no ".attrs" suffix, which
// fileblob reserves. Buckets from OpenBucket, and so Stores from Open, and
// PutIfAbsent on any Store refuse other keys with ErrInvalidKey. On file:// one key cannot also be a directory of others:
// "a" and "a/b" cannot both exist, and a key that names a directory is no
// object (Delete answers ErrNotFound).
//
// Base is the store URL without its query and without a trailing slash:
// "file:///data/remote", "mem://name/prefix", "s3://bucket/prefix". URI(key)
// is Base + "/" + key, and Key inverts it. Key works on the exact string:
// a URI with another scheme, host or prefix, a query, or a tail that is not
// a valid key is ErrOutsideStore.
//
// # Writes
//
// Every Put is atomic. The object appears whole when Put returns nil, or
// not at all. Put aborts the upload by cancelling the writer's context
// before closing it, so a failed read of the content or a cancelled ctx
// leaves nothing. On file://, the data goes to a temporary file that is
// renamed into place. On mem://, nothing is stored until Close. On s3://, a
// single PutObject sends nothing until the content ends, and a failed
// multipart upload is aborted. Close errors are never dropped: an upload
// only completes at Close. A plain Put (ifNotExist false) replaces an
// existing object.
//
// Write-if-absent (Put with ifNotExist, and PutIfAbsent) first checks with
// Stat, then writes with gocloud's IfNotExist, which each driver checks
// again when the upload commits:
//
//   - file: fileblob stats the final path and renames under a mutex, but
//     the mutex belongs to the writer, so two writers can both pass the check.
//     objstore serializes that check and rename per path inside the process,
//     and tests show that exactly one writer wins. Two processes writing one
//     file:// key can still both pass the check, and the later rename
//     replaces the earlier one. Give each key one writing process.
//   - mem: memblob checks and stores under the bucket lock, so the
//     precondition is atomic.
//   - s3: a conditional write (If-None-Match: *). AWS S3 enforces it on
//     PutObject and on CompleteMultipartUpload. gofakes3 v1.2.0 enforces it
//     atomically on PutObject, which the AWS SDK's transfer manager uses
//     below 16 MiB. It ignores it on CompleteMultipartUpload (tested: a
//     17 MiB upload replaced an object created mid-upload). Against such
//     servers only the Stat check protects large objects, and two writers
//     racing on one key can both succeed.
//
// An existing key yields an error wrapping ErrExists. PutIfAbsent never
// replaces an object with different bytes; the exceptions are the
// cross-process file:// case and the large-object case on servers that
// ignore the condition, both described above.
//
// Durability: on file://, Put fsyncs the data before the rename and then
// fsyncs every directory from the object's parent up to the root, so an
// object that Put reported is still there after a crash. Delete does not
// fsync. Temporary files of aborted writes are removed, and empty
// directories may remain. An s3:// object is durable when the server
// acknowledges it. mem:// keeps nothing beyond the process.
//
// # Digests
//
// PutIfAbsent hashes the content with SHA-256 as it streams it to the
// store, without reading it twice, and returns the size and the lowercase
// hex digest. If the key is taken, it compares the existing object with
// the Source. Sizes are compared first. Only if they match is the existing
// object read and hashed, and the Source is read again only if it was not
// read through while writing. Identical bytes give Adopted=true. Anything
// else wraps ErrConflict, and the message names the key, both sizes and the
// digests it computed. OpenVerified returns a reader that returns
// ErrIntegrity instead of io.EOF if the object's size or SHA-256 differs
// from the expected values, and as soon as more bytes than expected arrive.
// Data is verified only once that reader has returned io.EOF.
//
// # Files of known digest
//
// PutFile stores a local file whose size and SHA-256 the caller already
// knows (it computed them while writing it), with PutIfAbsent's rules:
// adopt an identical object, ErrConflict on a different one, never replace.
// It verifies the file before anything is stored, so a file that does not
// match its digest is ErrIntegrity and leaves no object. On a file:// store
// (with metadata=skip, the default) whose root is on the file system of the
// file, the object is a hard link to the file instead of a copy: PutFile
// hashes the file while it fsyncs it, links it into place with link(2),
// which refuses an existing name (so this write-if-absent holds across
// processes too), checks that the name refers to the file it hashed and
// fsyncs the directories up to the root. The caller must not modify the
// file afterwards; removing it is fine. PutFileStamped skips the hashing
// for a file that still has the FileStamp its writer took after its last
// write (the writer computed the digest from the bytes it wrote; a file
// with another stamp is hashed as above); LinksFiles reports whether a
// store links at all. Where linking fails because of the file
// system (EXDEV, EPERM, EMLINK, ENOTSUP, ENOSYS) and on every other store,
// PutFile copies like PutIfAbsent, verifying while it streams. Through
// Faults, a link counts as a put and FailNth/FailKey faults apply to it; a
// key that TruncateWrite matches is copied, so the tear happens. A link that
// fails for a file-system reason after Faults counted it is counted again
// by the copy.
//
// GetFile is the mirror: it writes the object at key to a new local file
// dst (which must not exist: fs.ErrExist, dst untouched) and guarantees its
// size and SHA-256, reading the object once. An object that does not match
// is ErrIntegrity, and every failure leaves no dst. On a file:// store
// (metadata=skip) on the file system of dst, dst is a hard link to the
// object's file, made after the file was hashed and checked afterwards to
// still be the file that was hashed (a plain Put may replace an object by
// rename; then dst is removed and the object copied). The process
// remembers the FileStamp of each object file it verified this way, or
// read through OpenVerified to the end and found right, and a later
// GetFile of a file that still has that stamp and the same expected size
// and digest links it without reading it again: on one machine, the
// coordinator validating a bulk load and the replicas restoring it read
// each file once between them. Elsewhere, and when linking fails for a
// file-system reason, GetFile copies through OpenVerified. Since dst may be
// the object, the caller must never modify dst in place (no writes,
// appends, truncation or chmod); removing or renaming it is fine. Files
// that will be appended to, such as a Pebble MANIFEST, must be copied
// instead. GetFile syncs nothing: a linked dst's
// data is the object's, durable already, but neither its name nor a copy's
// data is. Through Faults, a link counts as an open and FailNth/FailKey
// faults apply to it; a key that CorruptRead matches is copied, so the
// corruption happens and is caught.
//
// # Signed uploads
//
// SignPut lets a holder of no store credentials write one object: on an
// s3:// store it presigns, with the store's own credentials, a PutObject
// of the key with x-amz-checksum-sha256 (the object's SHA-256),
// Content-Length (when not 0) and If-None-Match: *, for a short lifetime,
// and returns the URL and the headers to send (SignedPut, which prints as
// "[REDACTED]"). A server that checks signatures (AWS S3; versitygw in the
// tests) then stores exactly those bytes at that key, once, while the key
// is free, and nothing else. An existing key is not signed: identical
// bytes are adopted, others are ErrConflict. Other stores answer
// errors.ErrUnsupported. gofakes3 checks no signature, so against it a
// signed PUT scopes nothing.
//
// S3 keeps the checksum a signed PUT declared, and the AWS SDK validates
// stored checksums on every read by default. Reads that objstore verifies
// itself against a known size and SHA-256 (OpenVerified, GetFile's copies,
// adopting an existing object) turn that off, so each byte is hashed once;
// plain reads (Get, Open) keep it.
//
// # Errors
//
// Errors wrap objstore's sentinels, tested with errors.Is, and keep the
// error beneath (the AWS SDK's, gocloud's, the file system's), so errors.Is
// and errors.As still reach it. Every operation of a Bucket from OpenBucket,
// and so of a Store (Put, PutIfAbsent, PutFile, Get, GetFile, Open, Stat,
// List, Delete, a reader's Read), and Open itself give a failure of the
// store one class, decided in one place by the most specific evidence: S3's
// error code, then the HTTP status, then the errno, then gocloud's code.
//
//   - ErrNotFound: the object does not exist. On file:// a key below an
//     object (ENOTDIR) is none either.
//   - ErrBucketNotFound: the store itself does not exist: S3's
//     NoSuchBucket, or a file:// root missing at Open, which only happens
//     with create_dir off ("create_dir=false", "0" or empty; objstore
//     passes fileblob an empty value, since fileblob takes any value as
//     on). It does not wrap
//     ErrNotFound. Every operation says it, on s3:// too, where Stat and
//     Delete (which gocloud begins with a HEAD, whose answer has no body to
//     say NoSuchBucket) ask whether the bucket exists when a HEAD first
//     answers "not found": one request more, once per Store (a bucket seen
//     is taken to stay).
//   - ErrPermission: S3 answered 401 or 403 (AccessDenied, wrong or
//     expired credentials, a bad signature), gocloud's PermissionDenied, or
//     EACCES, EPERM or EROFS under a file:// root.
//   - ErrNoSpace: ENOSPC or EDQUOT under a file:// root, HTTP 507 from an
//     S3-compatible server. Not transient: a full disk or quota seldom frees
//     itself within seconds; someone has to make room.
//   - ErrInvalidRequest: the store refused the request as it stands:
//     gocloud's InvalidArgument or Unimplemented, a FailedPrecondition
//     outside write-if-absent (there it is ErrExists), S3's 400 (other than
//     RequestTimeout and expired tokens), 405, 411, 413, 414, 416 and 501,
//     and on file:// a key that collides with a directory or a name the file
//     system cannot hold (ENOTDIR on writes, EISDIR, ENAMETOOLONG, ELOOP).
//   - ErrTransient: the store may do it if asked again: a connection
//     refused, reset or dropped mid-body, a timeout, throttling (SlowDown,
//     429), a server error (5xx other than 501 and 507), and whatever
//     gocloud calls Unknown, Internal, ResourceExhausted or DeadlineExceeded
//     — except a TLS handshake whose verification failed (an untrusted
//     certificate, a wrong host name, an expired certificate), which
//     gocloud calls Unknown too but no repeat can fix: it has no class and
//     is not transient. A host name that does not resolve stays transient
//     (service names appear in DNS late while a cluster starts).
//     On s3:// the AWS SDK has already repeated a request (3 attempts in
//     all, with backoff) before such an error reaches objstore, so repeat it
//     after a pause.
//
// ErrExists, ErrConflict, ErrIntegrity, ErrInvalidKey and ErrOutsideStore
// are described above. IsTransient is the classifier for retry loops: true
// for ErrTransient, ErrInjected and network errors that may pass, false for
// every other class and for a call that its context ended (its error wraps
// context.Canceled or context.DeadlineExceeded and no class: the caller gave
// up). Errors objstore cannot classify, such as a Source's read error, an
// error a Faults fault returns, or EIO, are not transient: objstore cannot
// tell that repeating helps, and a caller that wants to repeat them anyway
// decides so itself.
//
// # Concurrency
//
// Buckets from OpenBucket, Store and Faults are safe for concurrent use. A
// reader from Open or OpenVerified belongs to one goroutine.
//
// # Fault injection
//
// Faults wraps any Bucket for tests in other packages. FailNth fails the
// n-th call of an operation, counted from when the fault is armed. FailKey
// fails every call on matching keys. TruncateWrite tears an upload after n
// bytes, and because Put is atomic no object appears, as on a real store.
// CorruptRead flips a byte that Open returns, and OpenVerified detects it.
// Calls and Reset complete the set. An injected failure returns before the
// inner bucket is called.
package objstore
