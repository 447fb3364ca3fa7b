package tablet

import (
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promauto"

	tierv1 "github.com/thawdb/thaw/gen/thaw/tier/v1"
)

// metrics are the server's Prometheus metrics. The registerer given to New
// is wrapped with the label server="{id}", so that the tablet servers of
// one process share a registry.
type metrics struct {
	writes          *prometheus.CounterVec   // result
	reads           *prometheus.CounterVec   // rpc, result
	control         *prometheus.CounterVec   // rpc, result
	batchMutations  prometheus.Histogram     // mutations per accepted write
	batchBytes      prometheus.Histogram     // changelog bytes per accepted write
	restoreSeconds  *prometheus.HistogramVec // result
	snapshotSeconds *prometheus.HistogramVec // trigger, result
	snapshotBytes   prometheus.Counter       // bytes uploaded (incremental)
	registered      prometheus.Gauge
	leaseLost       prometheus.Counter
	replicaFailures prometheus.Counter
	logsSwept       prometheus.Counter
}

func newMetrics(reg prometheus.Registerer, s *Server) *metrics {
	f := promauto.With(reg)
	m := &metrics{
		writes: f.NewCounterVec(prometheus.CounterOpts{
			Name: "thaw_tablet_writes_total",
			Help: "Write requests, by result (ok or the error reason).",
		}, []string{"result"}),
		reads: f.NewCounterVec(prometheus.CounterOpts{
			Name: "thaw_tablet_reads_total",
			Help: "Lookup, PrefixLookup and Scan requests, by RPC and result.",
		}, []string{"rpc", "result"}),
		control: f.NewCounterVec(prometheus.CounterOpts{
			Name: "thaw_tablet_control_requests_total",
			Help: "Coordinator requests (NotifyAssignment, SetDataState, RestoreSnapshot, TakeSnapshot, ReplicaStatus), by RPC and result.",
		}, []string{"rpc", "result"}),
		batchMutations: f.NewHistogram(prometheus.HistogramOpts{
			Name:    "thaw_tablet_write_batch_mutations",
			Help:    "Mutations per accepted write batch.",
			Buckets: prometheus.ExponentialBuckets(1, 4, 9),
		}),
		batchBytes: f.NewHistogram(prometheus.HistogramOpts{
			Name:    "thaw_tablet_write_batch_bytes",
			Help:    "Changelog bytes per accepted write batch.",
			Buckets: prometheus.ExponentialBuckets(64, 4, 10),
		}),
		restoreSeconds: f.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "thaw_tablet_restore_duration_seconds",
			Help:    "Replica restores (download, verify, open, changelog replay), by result.",
			Buckets: prometheus.ExponentialBuckets(0.01, 3, 10),
		}, []string{"result"}),
		snapshotSeconds: f.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "thaw_tablet_snapshot_duration_seconds",
			Help:    "Ordinary snapshots (allocate, checkpoint, upload, report), by trigger (periodic, request) and result.",
			Buckets: prometheus.ExponentialBuckets(0.01, 3, 10),
		}, []string{"trigger", "result"}),
		snapshotBytes: f.NewCounter(prometheus.CounterOpts{
			Name: "thaw_tablet_snapshot_uploaded_bytes_total",
			Help: "Bytes of snapshot files uploaded (files taken over from the previous snapshot are not counted).",
		}),
		registered: f.NewGauge(prometheus.GaugeOpts{
			Name: "thaw_tablet_registered",
			Help: "1 while the server holds its registration lease.",
		}),
		leaseLost: f.NewCounter(prometheus.CounterOpts{
			Name: "thaw_tablet_lease_lost_total",
			Help: "Registrations that ended without the server asking (lease expired or revoked).",
		}),
		replicaFailures: f.NewCounter(prometheus.CounterOpts{
			Name: "thaw_tablet_replica_failures_total",
			Help: "Replica restores and changelog tails that failed (each is retried with backoff).",
		}),
		logsSwept: f.NewCounter(prometheus.CounterOpts{
			Name: "thaw_tablet_changelogs_swept_total",
			Help: "Changelogs of dropped tables and partitions that the periodic sweep deleted (logs the dropping replicas missed).",
		}),
	}
	f.NewCounterFunc(prometheus.CounterOpts{
		Name: "thaw_tablet_write_stalls_total",
		Help: "Times a replica's Pebble database stalled writes (memtables or L0 full, waiting for flushes or compactions).",
	}, func() float64 { n, _ := s.host.WriteStalls(); return float64(n) })
	f.NewCounterFunc(prometheus.CounterOpts{
		Name: "thaw_tablet_write_stall_seconds_total",
		Help: "Seconds replicas' Pebble databases stalled writes, over ended stalls.",
	}, func() float64 { _, d := s.host.WriteStalls(); return d.Seconds() })
	reg.MustRegister(replicaCollector{s: s, desc: prometheus.NewDesc("thaw_tablet_replicas",
		"Replicas hosted, by role (leader, follower) and state (restoring, ready, failed).",
		[]string{"role", "state"}, nil)})
	return m
}

// replicaCollector counts the hosted replicas by role and state when
// scraped.
type replicaCollector struct {
	s    *Server
	desc *prometheus.Desc
}

func (c replicaCollector) Describe(ch chan<- *prometheus.Desc) { ch <- c.desc }

func (c replicaCollector) Collect(ch chan<- prometheus.Metric) {
	type key struct{ role, state string }
	counts := map[key]int{}
	for _, role := range []string{"leader", "follower"} {
		for _, state := range []string{"restoring", "ready", "failed"} {
			counts[key{role, state}] = 0
		}
	}
	c.s.mu.RLock()
	for k, e := range c.s.mu.replicas {
		role := "follower"
		if tv := c.s.mu.targets[k.target]; tv != nil && tv.routes[k.bucket].leader == c.s.cfg.ID {
			role = "leader"
		}
		state := "restoring"
		switch e.getStatus().state {
		case tierv1.ReplicaState_REPLICA_STATE_READY:
			state = "ready"
		case tierv1.ReplicaState_REPLICA_STATE_FAILED:
			state = "failed"
		}
		counts[key{role, state}]++
	}
	c.s.mu.RUnlock()
	for k, n := range counts {
		ch <- prometheus.MustNewConstMetric(c.desc, prometheus.GaugeValue, float64(n), k.role, k.state)
	}
}
