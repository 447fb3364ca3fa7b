package daemon

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/thawdb/thaw/internal/metricvalue"
	"github.com/thawdb/thaw/internal/testlog"
	"github.com/thawdb/thaw/promoter"
	"github.com/thawdb/thaw/triggers/kafka"
)

// TestStatusEventsOfManyLakePartitions: a tier table without partitions
// promoted from a lake table partitioned by hour has a record with every
// hour's lake partition. A year of them (about 250 KB of event, beyond the
// 64 KiB that ParseStatusEvent once allowed) reaches the topic through the
// daemon's sink and a real-protocol broker with default limits, and parses
// there; an event beyond MaxStatusEventBytes is not sent (consumers would
// refuse it) but logged and counted failed.
func TestStatusEventsOfManyLakePartitions(t *testing.T) {
	const topic = "thaw-status"
	c, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(1, topic))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	var logs testlog.Buffer
	log := NewLogger(&logs, LogConfig{Level: "info", Format: "json"})
	reg := prometheus.NewRegistry()
	pub, err := kafka.NewPublisher(kafka.PublisherConfig{Brokers: c.ListenAddrs(), Topic: topic, Logger: log, Registerer: reg})
	if err != nil {
		t.Fatal(err)
	}
	sink := statusSink{pub: pub, log: log}
	record := func(id string, hours int) promoter.Record {
		now := time.Date(2025, 1, 8, 0, 0, 0, 0, time.UTC)
		start := time.Date(2024, 1, 1, 0, 0, 0, 0, time.UTC)
		parts := make([]string, hours)
		for h := range parts {
			parts[h] = "0/event_hour=" + start.Add(time.Duration(h)*time.Hour).Format("2006-01-02-15")
		}
		return promoter.Record{
			ID: id, Policy: "all", Catalog: "default", LakeTable: "lake.events", LakePartitions: parts,
			SourceSnapshotID: 42, ScanSnapshotID: 42, Database: "shop", Table: "events",
			Attempt: 1, Phase: promoter.PhasePlanned, Buckets: 8, CreatedAt: now, UpdatedAt: now, Revision: 7,
		}
	}
	year := promoter.StatusEventOf(record("p-0123456789abcdef", 24*365))
	// About 960 KiB: the largest event a broker with default limits takes.
	largest := promoter.StatusEventOf(record("p-1123456789abcdef", 33000))
	tooLarge := promoter.StatusEventOf(record("p-2123456789abcdef", 40000))
	for _, e := range []promoter.StatusEvent{year, largest, tooLarge} {
		sink.Publish(e)
	}
	if err := pub.Close(t.Context()); err != nil {
		t.Fatal(err)
	}
	for outcome, want := range map[string]float64{"published": 2, "failed": 1} {
		if got, _, err := metricvalue.Value(reg, "thaw_promoter_status_events_total", map[string]string{"outcome": outcome}); err != nil || got != want {
			t.Fatalf("%s events: %v (%v), want %v\n%s", outcome, got, err, want, logs.String())
		}
	}
	if !strings.Contains(logs.String(), "status event not published") || !strings.Contains(logs.String(), tooLarge.Promotion) {
		t.Fatalf("no warning for the event too large:\n%s", logs.String())
	}
	cl, err := kgo.NewClient(kgo.SeedBrokers(c.ListenAddrs()...), kgo.ConsumeTopics(topic), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	var got []promoter.StatusEvent
	for len(got) < 2 {
		fs := cl.PollFetches(ctx)
		if ctx.Err() != nil {
			t.Fatalf("read %d of 2 events", len(got))
		}
		for _, r := range fs.Records() {
			e, err := promoter.ParseStatusEvent(r.Value)
			if err != nil {
				t.Fatalf("event of %d bytes: %v", len(r.Value), err)
			}
			t.Logf("event %s: %d bytes, %d lake partitions", e.Promotion, len(r.Value), len(e.LakePartitions))
			got = append(got, e)
		}
	}
	for i, want := range []promoter.StatusEvent{year, largest} {
		if got[i].Promotion != want.Promotion || len(got[i].LakePartitions) != len(want.LakePartitions) {
			t.Fatalf("event %d: %s with %d lake partitions, want %s with %d", i, got[i].Promotion, len(got[i].LakePartitions), want.Promotion, len(want.LakePartitions))
		}
	}
	if b, err := largest.Marshal(); err != nil || len(b) < promoter.MaxStatusEventBytes-32<<10 {
		t.Fatalf("the largest event: %d bytes (%v), want within 32 KiB of the bound", len(b), err)
	}
}
