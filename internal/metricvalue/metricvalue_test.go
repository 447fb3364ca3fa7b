package metricvalue

import (
	"testing"

	"github.com/prometheus/client_golang/prometheus"
)

func TestValue(t *testing.T) {
	reg := prometheus.NewRegistry()
	c := prometheus.NewCounterVec(prometheus.CounterOpts{Name: "c_total", Help: "c"}, []string{"a", "b"})
	g := prometheus.NewGauge(prometheus.GaugeOpts{Name: "g", Help: "g"})
	h := prometheus.NewHistogram(prometheus.HistogramOpts{Name: "h", Help: "h"})
	reg.MustRegister(c, g, h)
	c.WithLabelValues("x", "1").Add(2)
	c.WithLabelValues("y", "1").Add(3)
	g.Set(7)
	h.Observe(1)
	h.Observe(2)
	for _, tc := range []struct {
		name   string
		labels map[string]string
		want   float64
		ok     bool
	}{
		{"c_total", map[string]string{"a": "y", "b": "1"}, 3, true},
		{"c_total", map[string]string{"a": "y"}, 3, true},
		{"c_total", map[string]string{"a": "z"}, 0, false},
		{"c_total", map[string]string{"c": ""}, 0, false},
		{"g", nil, 7, true},
		{"h", nil, 2, true},
		{"nothing", nil, 0, false},
	} {
		v, ok, err := Value(reg, tc.name, tc.labels)
		if err != nil || v != tc.want || ok != tc.ok {
			t.Errorf("%s %v: %v %v %v, want %v %v", tc.name, tc.labels, v, ok, err, tc.want, tc.ok)
		}
	}
}
