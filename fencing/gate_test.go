package fencing_test

import (
	"errors"
	"sync"
	"testing"

	"github.com/thawdb/thaw/fencing"
)

func TestGateAdmit(t *testing.T) {
	type step struct {
		epoch   fencing.Epoch
		stale   bool
		highest fencing.Epoch // after the step
	}
	for _, tc := range []struct {
		name  string
		steps []step
	}{
		{"first epoch", []step{{5, false, 5}}},
		{"equal admitted", []step{{5, false, 5}, {5, false, 5}}},
		{"higher recorded", []step{{5, false, 5}, {9, false, 9}, {9, false, 9}}},
		{"lower rejected", []step{{5, false, 5}, {9, false, 9}, {5, true, 9}, {8, true, 9}}},
		{"zero rejected", []step{{0, true, 0}, {3, false, 3}, {0, true, 3}}},
		{"negative rejected", []step{{-1, true, 0}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var g fencing.Gate
			for i, s := range tc.steps {
				err := g.Admit(s.epoch)
				if s.stale {
					var se *fencing.StaleEpochError
					if !errors.Is(err, fencing.ErrStaleEpoch) || !errors.As(err, &se) || se.Epoch != s.epoch || se.Highest != s.highest || !fencing.IsFenced(err) {
						t.Fatalf("step %d: admit %d: %v; want stale against %d", i, s.epoch, err, s.highest)
					}
				} else if err != nil {
					t.Fatalf("step %d: admit %d: %v", i, s.epoch, err)
				}
				if got := g.Highest(); got != s.highest {
					t.Fatalf("step %d: highest %d, want %d", i, got, s.highest)
				}
			}
		})
	}
}

func TestStaleEpochErrorMessage(t *testing.T) {
	for _, tc := range []struct {
		err  *fencing.StaleEpochError
		want string
	}{
		{&fencing.StaleEpochError{Epoch: 5, Highest: 9}, "fencing: stale epoch: 5 is lower than 9"},
		{&fencing.StaleEpochError{Scope: "coordinator", Epoch: 5, Highest: 9}, `fencing: stale epoch in scope "coordinator": 5 is lower than 9`},
		{&fencing.StaleEpochError{Epoch: 0, Highest: 0}, "fencing: stale epoch: 0 is not a valid epoch, highest seen 0"},
	} {
		if got := tc.err.Error(); got != tc.want {
			t.Errorf("got %q, want %q", got, tc.want)
		}
	}
}

// TestGateConcurrentAdmit races admits of every epoch in 1..n from several
// goroutines: the gate must end at n, an admitted epoch must be recorded
// (the highest is never below it afterwards), and a rejection must name a
// higher epoch.
func TestGateConcurrentAdmit(t *testing.T) {
	const workers, n = 8, 2000
	var g fencing.Gate
	var wg sync.WaitGroup
	for w := range workers {
		wg.Go(func() {
			for e := fencing.Epoch(1 + w); e <= n; e += workers {
				err := g.Admit(e)
				var se *fencing.StaleEpochError
				switch {
				case err == nil:
					if h := g.Highest(); h < e {
						t.Errorf("admitted %d, highest %d", e, h)
					}
				case errors.As(err, &se) && se.Highest > e:
				default:
					t.Errorf("admit %d: %v", e, err)
				}
			}
		})
	}
	wg.Wait()
	if got := g.Highest(); got != n {
		t.Fatalf("highest %d, want %d", got, n)
	}
}

func TestGatesScopesAreIndependent(t *testing.T) {
	var g fencing.Gates
	if err := g.Admit("coordinator", 9); err != nil {
		t.Fatal(err)
	}
	if err := g.Admit("promoter", 3); err != nil {
		t.Fatalf("other scope: %v", err)
	}
	err := g.Admit("coordinator", 4)
	var se *fencing.StaleEpochError
	if !errors.As(err, &se) || se.Scope != "coordinator" || se.Highest != 9 {
		t.Fatalf("got %v; want stale in scope coordinator", err)
	}
	if g.Gate("promoter").Highest() != 3 || g.Gate("coordinator").Highest() != 9 {
		t.Fatal("scopes mixed up")
	}
}
