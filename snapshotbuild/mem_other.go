//go:build !linux

package snapshotbuild

import (
	"errors"
	"os"
)

// mapAnon falls back to the Go heap where anonymous mappings are not wired
// up; the budget then also drives the heap goal, so peak RSS can reach about
// twice the budget.
func mapAnon(n int) ([]byte, error) { return make([]byte, n), nil }

func unmapAnon([]byte) {}

func dropPages([]byte) {}

// discardRange is a no-op where hole punching is not wired up.
func discardRange(*os.File, int64, int64) bool { return false }

// populate is not wired up here; canPopulate says so.
func populate([]byte) error { return errors.ErrUnsupported }

func canPopulate() bool { return false }
