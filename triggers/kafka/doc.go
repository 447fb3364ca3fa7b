// Package kafka is the promoter's Kafka adapter, the only promoter package
// that imports franz-go (tier/changelog/kafkalog is the tier's). Its
// Trigger consumes a control topic as a member of a consumer group and
// hands each event to a Handler, which only enqueues
// work (triggers never promote); its Publisher sends the promoter's status
// events out (see "Status events" below).
//
// # Events
//
// A record's value is one JSON object (ParseEvent; the key and headers are
// ignored):
//
//	{"version":1,"type":"promote","table":"shop.events","partition":"2024-01-04"}
//	{"version":1,"type":"promote","policy":"events-recent"}
//	{"version":1,"type":"reconcile","policy":"events-recent"}
//	{"version":1,"type":"reconcile"}
//	{"version":1,"type":"lake_commit","catalog":"default","table":"sample.events","snapshot_id":42}
//
// promote asks for an on-demand promotion (as POST /v1/promotions does:
// policy and/or table, optional partition); reconcile reconciles one
// policy or all; lake_commit reports a commit to a lake table, so that the
// policies promoting it on lake commits reconcile without waiting for the
// next lake poll. Parsing is strict: at most MaxEventBytes, one object,
// version 1, a known type with exactly the members that type takes, no
// repeated or null member, well-formed names and partition. A record that
// fails is logged with its partition and offset, counted (type "invalid")
// and skipped: one bad record never stops the topic.
//
// # Delivery
//
// Only committed events are read (read_committed): a producer may write
// its events in a Kafka transaction, and those of an aborted transaction
// are never handled, while an open transaction holds back the events
// behind it in its partitions until it ends.
//
// Events are handled one at a time in each partition's order (producers
// key records by table to keep a table's events in one partition); the
// offset of each is committed as soon as it is handled or rejected, so an
// event is handled at least once — twice only if the process dies between
// handling and committing, which the promoter's level-based, deduplicating
// queue makes harmless. A handler error wrapping ErrRejected (an unknown
// policy, a policy without the onRequest trigger, a partition the lake does
// not have) skips the event; any other error is retried with doubling backoff
// (200ms up to Config.MaxBackoff) and holds back the events behind it in
// that partition, and only there: the partition is paused and rewound to
// the event, which is fetched again when its retry is due (a retry also
// waits for the fetch in flight, up to franz-go's fetch wait of 5 s),
// while the other partitions' events go on. When Run's context ends
// (shutdown, lost leadership) an unhandled event stays uncommitted and
// goes to the next member of the group. A new group starts at the
// topic's earliest retained event unless Config.Start says latest: then a
// member given a partition the group has no offset for commits the
// partition's end before it fetches (pinLatest), so the events produced
// there from then on are handled even if no member runs when they come.
//
// Run is meant to run on the leading promoter only; the group then has one
// member, and leaving it on shutdown hands the partitions to the next
// leader at once. Rebalances wait while an event is being handled
// (franz-go's BlockRebalanceOnPoll), so a handler must not block for
// longer than the group's rebalance timeout (a minute by default).
//
// # Status events
//
// A Publisher produces records (key, value) to one topic without ever
// blocking its caller: TryProduce into franz-go's buffer, which sends them
// acknowledged by all in-sync replicas and idempotently, in order per key,
// retrying while the brokers are away. At most PublisherConfig.MaxBuffered
// records wait; beyond that new ones are dropped and counted, with one
// warning until the brokers take records again. Close flushes for at most
// FlushTimeout and reports what it could not deliver. The daemon hands it
// promoter.StatusEvent values (the JSON format lives in the promoter
// package, keyed by promotion id).
//
// # Security
//
// TLS (Config.TLS) and SASL PLAIN, SCRAM-SHA-256 and SCRAM-SHA-512
// (Config.SASL), the same for the Publisher. The password is held in
// memory only: it is in no log line or metric. Metrics:
// thaw_promoter_control_events_total{type,outcome},
// thaw_promoter_control_brokers_reachable,
// thaw_promoter_status_events_total{outcome} (published, failed, dropped),
// thaw_promoter_status_events_buffered,
// thaw_promoter_status_brokers_reachable.
//
// Tests run against kfake, a Kafka that speaks the real protocol, in the
// test process.
package kafka
