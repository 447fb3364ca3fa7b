package bulktxn

import (
	"errors"
	"fmt"
	"time"

	"github.com/thawdb/thaw/bulkload"
	"github.com/thawdb/thaw/snapshot"
)

// MaxAdoptBatch is the most buckets one adoption step registers: with the
// record's own write and the epoch guard, 64 snapshot-registry creates fit
// in one etcd transaction (128 operations by default), so a driver may
// write a batch and the advanced cursor atomically.
const MaxAdoptBatch = 64

// ErrInvalidConfig: a Config field is out of range.
var ErrInvalidConfig = errors.New("bulktxn: invalid config")

// Config holds the limits and timers of bulk-load transactions. All
// durations must be positive.
type Config struct {
	DefaultBuildTimeout   time.Duration // Begin without a build timeout
	MaxBuildTimeout       time.Duration // the longest build timeout Begin accepts
	CommitDecisionTimeout time.Duration // from freezing a manifest to the COMMITTING decision
	ResultRetention       time.Duration // a terminal record is kept this long, then garbage-collected
	ResendInterval        time.Duration // unconfirmed replica commands are sent again after this
	RetryInterval         time.Duration // a failed etcd write, check or validation is retried after this
	AdoptBatch            int           // buckets adopted per step, 1..MaxAdoptBatch
	MaxActive             int           // non-terminal transactions in the cluster
	MaxPerTarget          int           // transactions retained per target, terminal ones included
	Limits                snapshot.Limits
	RequireRowCount       bool // every _METADATA must carry row_count (thaw's builder writes it)
}

// DefaultConfig returns the defaults: 1 h default and 24 h maximum build
// timeout, 15 min commit-decision timeout, 24 h result retention, 5 s
// resend and 2 s retry intervals, adoption in batches of 64, 64 active
// transactions, 16 per target, snapshot.DefaultLimits, row count required.
func DefaultConfig() Config {
	return Config{
		DefaultBuildTimeout:   time.Hour,
		MaxBuildTimeout:       24 * time.Hour,
		CommitDecisionTimeout: 15 * time.Minute,
		ResultRetention:       24 * time.Hour,
		ResendInterval:        5 * time.Second,
		RetryInterval:         2 * time.Second,
		AdoptBatch:            MaxAdoptBatch,
		MaxActive:             64,
		MaxPerTarget:          16,
		Limits:                snapshot.DefaultLimits(),
		RequireRowCount:       true,
	}
}

// Validate checks the configuration.
func (c Config) Validate() error {
	for _, d := range []struct {
		name string
		v    time.Duration
	}{
		{"default build timeout", c.DefaultBuildTimeout}, {"max build timeout", c.MaxBuildTimeout},
		{"commit decision timeout", c.CommitDecisionTimeout}, {"result retention", c.ResultRetention},
		{"resend interval", c.ResendInterval}, {"retry interval", c.RetryInterval},
	} {
		if d.v < time.Millisecond {
			return fmt.Errorf("%w: %s %v below 1ms", ErrInvalidConfig, d.name, d.v)
		}
	}
	switch {
	case c.DefaultBuildTimeout > c.MaxBuildTimeout:
		return fmt.Errorf("%w: default build timeout %v above the maximum %v", ErrInvalidConfig, c.DefaultBuildTimeout, c.MaxBuildTimeout)
	case c.AdoptBatch < 1 || c.AdoptBatch > MaxAdoptBatch:
		return fmt.Errorf("%w: adopt batch %d not in 1..%d", ErrInvalidConfig, c.AdoptBatch, MaxAdoptBatch)
	case c.MaxActive < 1 || c.MaxPerTarget < 1:
		return fmt.Errorf("%w: max active %d and max per target %d must be positive", ErrInvalidConfig, c.MaxActive, c.MaxPerTarget)
	}
	return nil
}

// BuildTimeout returns the build timeout Begin uses for a requested one:
// the default for 0; an error wrapping bulkload.ErrInvalidRequest for a
// negative one or one above MaxBuildTimeout.
func (c Config) BuildTimeout(requested time.Duration) (time.Duration, error) {
	switch {
	case requested == 0:
		return c.DefaultBuildTimeout, nil
	case requested < 0 || requested > c.MaxBuildTimeout:
		return 0, fmt.Errorf("%w: build timeout %v not in (0, %v]", bulkload.ErrInvalidRequest, requested, c.MaxBuildTimeout)
	}
	return requested, nil
}
