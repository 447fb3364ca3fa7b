// Package daemon is the only place where thaw's concrete parts are wired
// together: embedded or external etcd, the object store, the changelog, the
// coordinator and tablet servers, and the promoter with its triggers.
//
// # Roles
//
//   - RunServer (`thaw server`): the embedded tier in one process, through
//     StartEmbedded: etcd on {data_dir}/etcd (over TLS with etcd.tls,
//     EmbeddedEtcdTLS; a warning when it serves plain HTTP beyond
//     loopback), one coordinator, N tablet
//     servers ts-1..ts-N sharing one changelog.LocalProvider on
//     {data_dir}/changelog, replicas under {data_dir}/tablets/{id}, and a
//     file:// object store on {data_dir}/remote unless configured.
//   - RunCoordinator (`thaw coordinator`) and RunTablet (`thaw tablet`): one
//     role each against an external etcd, each on its own listener.
//   - RunPromoter (`thaw promoter`), through StartPromoter: the tier (the
//     embedded one on {data_dir}/tier by default, or a coordinator address
//     and its etcd), the lake catalogs, the policies, the cron trigger, the
//     Kafka control-event trigger and status-event publisher (the `kafka`
//     section) and the HTTP API (/v1/..., /metrics, /healthz, /readyz). It
//     campaigns for the promoter leadership in etcd; only the leader
//     resumes the ledger, consumes control events and promotes, a lost
//     leadership stops the process. Shutdown: readiness off, HTTP drained,
//     the promoter cancelled (work before a commit decision is aborted,
//     commits in flight finish within their budget), resign, the last
//     status events flushed, close. PlanPromoter (`thaw plan`) is the
//     read-only dry run.
//
// # One listener per process
//
// Every process serves one http.Server speaking HTTP/1.1 and h2c, or,
// with a tls section (ListenerTLS), HTTPS only (HTTP/1.1 and HTTP/2 by
// ALPN); the addresses it publishes then start with https:// and its own
// clients trust the section's ca_file. Client commands trust the bundle
// in THAW_TLS_CA (ClientTLSFromEnv, NewCLIHTTPClient). In the embedded mode the CoordinatorService is at "/" (served by whichever
// local coordinator leads), tablet server {id} at "/t/{id}/" (so its
// registered address is "http://HOST:PORT/t/{id}") and every coordinator
// also at "/c/{id}/". /metrics serves the injected Prometheus registry plus
// one registry per component instance (labels coordinator="id" or
// server="id"); /healthz answers while the process serves; /readyz checks
// that etcd answers, a coordinator is elected and (embedded, thaw tablet)
// the tablet servers are registered.
//
// The RPCs internal to the tier (the coordinator's orders to tablet
// servers, their snapshot reports: internalProcedures) need the tier's
// internal token in the Thaw-Internal-Token header: random per process in
// the embedded mode (Embedded.InternalHTTPClient presents it), read from
// internal_token_file by thaw coordinator and thaw tablet (unguarded
// without the key). Files that change without a restart (TLS key pairs,
// client CAs and the CA bundles of the tier's RPC clients and of the etcd
// and Kafka clients, the internal token file, coordinator.callers_file) are
// served by one reloader: a change is noticed by its contents' SHA-256, at
// most once a second, and one that does not load is logged and ignored.
//
// # Lifecycle
//
// Every long-running part is a Runnable (Start or Run blocks until its
// context is done). StartEmbedded starts them and returns; Close shuts down
// in order: readiness turns 503, the HTTP server drains running requests
// (bounded by the shutdown timeout), coordinators resign, tablet servers
// deregister and close their replicas, then the changelog, the object
// store and etcd close. A component that fails on its own closes Done and
// RunServer stops the process.
//
// # Test hooks
//
// Embedded.KillTablet and KillCoordinator stop a component as a crash
// would, as far as the rest of the tier can tell: its own etcd client is
// closed first, so it neither deregisters nor resigns, and its mount
// answers UNAVAILABLE at once. (Its goroutines still unwind in the
// process; a tablet server's local replicas are never reused anyway, they
// are rebuilt from snapshot and changelog.) KillTablet then revokes the
// dead registration's lease (a crash noticed at once;
// KillTabletKeepLease leaves it to expire), KillCoordinator leaves the
// election lease to expire. StartTablet and StartCoordinator start them
// again on the same directories.
//
// # Limits
//
// The local changelog provider locks its root: one process per root. The
// tablet servers of a host therefore share a process (thaw server); a
// `thaw tablet` process has its own root, and since followers replicate by
// tailing the leader's log, replicas of one bucket on tablet processes
// with different roots do not replicate: on the local changelog, thaw
// coordinator / thaw tablet serve only replication factor 1 across
// processes. With changelog.kafka (tier/changelog/kafkalog) the bucket
// logs live in Kafka and tablet processes replicate through it; an
// Embedded tier on Kafka gives each tablet server its own Kafka client, as
// separate hosts would have.
//
// # Concurrency
//
// Embedded's methods are safe for concurrent use. DESIGN.md lists the
// goroutines.
package daemon
