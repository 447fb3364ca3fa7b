package coordinator

import (
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promauto"
)

// metrics are the coordinator's Prometheus metrics, registered on the
// Registerer given to New.
type metrics struct {
	leader              prometheus.Gauge
	epoch               prometheus.Gauge
	terms               prometheus.Counter
	ddl                 *prometheus.CounterVec // op, result
	rounds              *prometheus.CounterVec // result
	moves               prometheus.Counter
	leaderChanges       prometheus.Counter
	underReplicated     prometheus.Gauge
	liveServers         prometheus.Gauge
	notifies            *prometheus.CounterVec // result
	reports             *prometheus.CounterVec // result
	snapshotsPruned     prometheus.Counter
	filesDeleted        prometheus.Counter
	filesLeaked         prometheus.Counter
	droppedFilesDeleted prometheus.Counter
	droppedPending      prometheus.Gauge
	refused             *prometheus.CounterVec // reason
	bulk                *bulkMetrics
}

func newMetrics(reg prometheus.Registerer) *metrics {
	f := promauto.With(reg)
	return &metrics{
		bulk: newBulkMetrics(f),
		leader: f.NewGauge(prometheus.GaugeOpts{
			Name: "thaw_coordinator_leader",
			Help: "1 while this coordinator is the active (elected) one, 0 on standby.",
		}),
		epoch: f.NewGauge(prometheus.GaugeOpts{
			Name: "thaw_coordinator_epoch",
			Help: "Epoch (fencing.Epoch) of this coordinator's current term; 0 on standby.",
		}),
		terms: f.NewCounter(prometheus.CounterOpts{
			Name: "thaw_coordinator_terms_total",
			Help: "Leadership terms this coordinator has won.",
		}),
		ddl: f.NewCounterVec(prometheus.CounterOpts{
			Name: "thaw_coordinator_ddl_total",
			Help: "DDL operations served, by operation and result reason (OK on success).",
		}, []string{"op", "result"}),
		rounds: f.NewCounterVec(prometheus.CounterOpts{
			Name: "thaw_coordinator_reconcile_rounds_total",
			Help: "Assignment reconcile rounds, by result (ok, retry, fenced).",
		}, []string{"result"}),
		moves: f.NewCounter(prometheus.CounterOpts{
			Name: "thaw_coordinator_replica_moves_total",
			Help: "Replicas moved between live tablet servers for balance.",
		}),
		leaderChanges: f.NewCounter(prometheus.CounterOpts{
			Name: "thaw_coordinator_bucket_leader_changes_total",
			Help: "Bucket leader changes (each increments the bucket's leader epoch).",
		}),
		underReplicated: f.NewGauge(prometheus.GaugeOpts{
			Name: "thaw_coordinator_under_replicated_buckets",
			Help: "Buckets with fewer replicas than their table's replication factor, as of the last reconcile round.",
		}),
		liveServers: f.NewGauge(prometheus.GaugeOpts{
			Name: "thaw_coordinator_live_tablet_servers",
			Help: "Registered tablet servers, as of the last reconcile round.",
		}),
		notifies: f.NewCounterVec(prometheus.CounterOpts{
			Name: "thaw_coordinator_assignment_notifications_total",
			Help: "NotifyAssignment pushes to tablet servers, by result (ok, error).",
		}, []string{"result"}),
		reports: f.NewCounterVec(prometheus.CounterOpts{
			Name: "thaw_coordinator_snapshot_reports_total",
			Help: "ReportSnapshot calls, by result reason (OK on success).",
		}, []string{"result"}),
		snapshotsPruned: f.NewCounter(prometheus.CounterOpts{
			Name: "thaw_coordinator_snapshots_pruned_total",
			Help: "Snapshot registry entries removed by retention.",
		}),
		filesDeleted: f.NewCounter(prometheus.CounterOpts{
			Name: "thaw_coordinator_snapshot_files_deleted_total",
			Help: "Snapshot objects (data files and _METADATA) deleted by retention.",
		}),
		filesLeaked: f.NewCounter(prometheus.CounterOpts{
			Name: "thaw_coordinator_snapshot_files_leaked_total",
			Help: "Snapshot objects a retention pass could not delete (the bucket's next pass tries again).",
		}),
		droppedFilesDeleted: f.NewCounter(prometheus.CounterOpts{
			Name: "thaw_coordinator_dropped_files_deleted_total",
			Help: "Objects of dropped tables and partitions (snapshot files, _METADATA, bulk-load manifests) deleted from object storage.",
		}),
		droppedPending: f.NewGauge(prometheus.GaugeOpts{
			Name: "thaw_coordinator_dropped_targets_pending",
			Help: "Dropped tables and partitions whose object-store data is not yet known to be all deleted, at the leader's last pass.",
		}),
		refused: f.NewCounterVec(prometheus.CounterOpts{
			Name: "thaw_coordinator_refused_calls_total",
			Help: "Calls refused for their caller: reason unauthenticated (no or an unknown bearer token) or permission_denied (the caller's patterns do not allow it).",
		}, []string{"reason"}),
	}
}
