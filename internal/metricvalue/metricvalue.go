// Package metricvalue reads one value out of a Prometheus registry, for
// tests that check what a component counted (and for bench load, which
// reports what the embedded tier's upload gateway did).
package metricvalue

import (
	"github.com/prometheus/client_golang/prometheus"
)

// Value returns the value of the first metric called name whose labels
// include every one of labels (others may be present): a counter's or
// gauge's value, a histogram's sample count. ok is false if there is none.
func Value(g prometheus.Gatherer, name string, labels map[string]string) (v float64, ok bool, err error) {
	mfs, err := g.Gather()
	if err != nil {
		return 0, false, err
	}
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
	next:
		for _, m := range mf.GetMetric() {
			have := make(map[string]string, len(m.GetLabel()))
			for _, lp := range m.GetLabel() {
				have[lp.GetName()] = lp.GetValue()
			}
			for k, want := range labels {
				if got, ok := have[k]; !ok || got != want {
					continue next
				}
			}
			switch {
			case m.GetCounter() != nil:
				return m.GetCounter().GetValue(), true, nil
			case m.GetHistogram() != nil:
				return float64(m.GetHistogram().GetSampleCount()), true, nil
			default:
				return m.GetGauge().GetValue(), true, nil
			}
		}
	}
	return 0, false, nil
}
