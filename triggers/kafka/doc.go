// Package kafka consumes promotion control events from Kafka topics
// (franz-go) and enqueues promotion keys. Triggers only enqueue keys; they
// never promote.
//
// Status: implemented with the promoter's event triggers.
package kafka
