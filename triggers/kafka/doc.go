// Package kafka is reserved for the Kafka control-event trigger of the
// cluster deployment (ARCHITECTURE.md: control events arrive on Kafka
// topics, consumed with franz-go, and only enqueue promotion keys; triggers
// never promote).
//
// Status: not built. It holds no code yet. The promoter's triggers today
// are its cron schedules (triggers/cron), polling the lake for new commits,
// its periodic reconcile and the HTTP API / `thaw promote` (see
// docs/promoter.md).
package kafka
