package promoter

import (
	"errors"
	"fmt"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/thawdb/thaw/internal/promreg"
)

// metrics are the promoter's Prometheus metrics. Labels carry policy names
// and outcomes only, never a credential.
type metrics struct {
	promotions *prometheus.CounterVec   // policy, outcome
	seconds    *prometheus.HistogramVec // policy, outcome
	rows       *prometheus.CounterVec   // policy
	queueDepth prometheus.Gauge
	running    prometheus.Gauge
	halted     prometheus.Gauge
	reconciles *prometheus.CounterVec // policy, result
	pruned     prometheus.Counter
}

// Outcomes of thaw_promoter_promotions_total.
const (
	outcomeCommitted = "committed"
	outcomeAborted   = "aborted"
	outcomeFailed    = "failed"
	outcomeRetried   = "retried"
)

func newMetrics(reg prometheus.Registerer) (*metrics, error) {
	m := &metrics{
		promotions: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "thaw_promoter_promotions_total",
			Help: "Promotion events by policy and outcome: committed and aborted count attempts as they end; retried counts aborted attempts followed by another attempt, failed promotions given up (not exclusive: an attempt that is retried counts aborted and retried).",
		}, []string{"policy", "outcome"}),
		seconds: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "thaw_promoter_promotion_seconds",
			Help:    "Duration of promotion attempts: a committed one from its Begin to the recorded commit (across a restart when another promoter settles it), the others from the attempt's start to the outcome.",
			Buckets: prometheus.ExponentialBuckets(0.1, 2, 16),
		}, []string{"policy", "outcome"}),
		rows: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "thaw_promoter_rows_total",
			Help: "Lake rows promoted by committed promotions, by policy.",
		}, []string{"policy"}),
		queueDepth: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "thaw_promoter_queue_depth",
			Help: "Promotion keys waiting in the queue.",
		}),
		running: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "thaw_promoter_running",
			Help: "Promotions running now.",
		}),
		halted: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "thaw_promoter_halted",
			Help: "1 when the promoter stopped because its leadership ended (fenced ledger write).",
		}),
		reconciles: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "thaw_promoter_reconciles_total",
			Help: "Reconciles of a policy, by result (ok, error).",
		}, []string{"policy", "result"}),
		pruned: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "thaw_promoter_ledger_records_pruned_total",
			Help: "Finished promotion records deleted from the ledger after the retention (ledger_retention).",
		}),
	}
	var errs []error
	reg1 := func(err error) { errs = append(errs, err) }
	var err error
	m.promotions, err = promreg.Register(reg, m.promotions)
	reg1(err)
	m.seconds, err = promreg.Register(reg, m.seconds)
	reg1(err)
	m.rows, err = promreg.Register(reg, m.rows)
	reg1(err)
	m.queueDepth, err = promreg.Register(reg, m.queueDepth)
	reg1(err)
	m.running, err = promreg.Register(reg, m.running)
	reg1(err)
	m.halted, err = promreg.Register(reg, m.halted)
	reg1(err)
	m.reconciles, err = promreg.Register(reg, m.reconciles)
	reg1(err)
	m.pruned, err = promreg.Register(reg, m.pruned)
	reg1(err)
	if err := errors.Join(errs...); err != nil {
		return nil, fmt.Errorf("promoter: register metrics: %w", err)
	}
	return m, nil
}
