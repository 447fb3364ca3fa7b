package promreg

import (
	"testing"

	"github.com/prometheus/client_golang/prometheus"
)

func TestRegister(t *testing.T) {
	reg := prometheus.NewRegistry()
	opts := prometheus.CounterOpts{Name: "thaw_test_total", Help: "test"}
	first, err := Register(reg, prometheus.NewCounter(opts))
	if err != nil {
		t.Fatal(err)
	}
	second, err := Register(reg, prometheus.NewCounter(opts))
	if err != nil {
		t.Fatal(err)
	}
	if first != second {
		t.Fatal("a second registration did not return the first collector")
	}
	// Another type under the name is an error.
	if _, err := Register(reg, prometheus.NewGauge(prometheus.GaugeOpts{Name: "thaw_test_total", Help: "test"})); err == nil {
		t.Fatal("a gauge was registered under a counter's name")
	}
	// No registry: the collector itself, unregistered.
	c := prometheus.NewCounter(opts)
	if got, err := Register(nil, c); err != nil || got != c {
		t.Fatalf("nil registry: %v %v", got, err)
	}
}
