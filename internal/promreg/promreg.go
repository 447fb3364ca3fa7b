// Package promreg registers Prometheus collectors so that the parts a
// process builds anew for every leadership term (the promoter, its
// triggers) share the metrics of the first term instead of failing to
// register them again.
package promreg

import (
	"errors"

	"github.com/prometheus/client_golang/prometheus"
)

// Register registers c with reg and returns it, or returns the collector
// of the same description and type registered before. A nil reg registers
// nothing. Any other registration error (a clashing description) is
// returned with c.
func Register[C prometheus.Collector](reg prometheus.Registerer, c C) (C, error) {
	if reg == nil {
		return c, nil
	}
	if err := reg.Register(c); err != nil {
		var are prometheus.AlreadyRegisteredError
		if errors.As(err, &are) {
			if old, ok := are.ExistingCollector.(C); ok {
				return old, nil
			}
		}
		return c, err
	}
	return c, nil
}
