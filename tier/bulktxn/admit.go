package bulktxn

import (
	"fmt"
	"time"

	"github.com/thawdb/thaw/bulkload"
)

// AdmissionInput is what the driver knows about the cluster and the target
// when a Begin names no transaction of its caller token, read from etcd.
type AdmissionInput struct {
	Config          Config
	PrimaryKey      bool          // the target's table has a primary key
	Active          bool          // the target's registration is ACTIVE
	HeldBy          string        // the bulk_load_id on the registration, if any
	RemoteDataDir   string        // the table's remote data directory
	Buckets         int           // the table's bucket count
	AssignedBuckets int           // buckets the target's assignment covers, 0..n-1
	HasSnapshots    bool          // the snapshot registry holds a snapshot of the target
	ActiveTxns      int           // non-terminal transactions in the cluster
	TargetTxns      int           // transactions retained for the target, terminal ones included
	BuildTimeout    time.Duration // requested; 0 = the default
}

// Admit decides whether a new transaction may begin on a target. It
// returns nil or an error wrapping the bulkload sentinel the caller sees,
// checked in this order: ErrNotPrimaryKeyTable; ErrInvalidRequest (build
// timeout out of bounds, no remote data directory); ErrTargetOccupied (not
// ACTIVE, or a bulk load holds it); ErrTargetNotEmpty (a snapshot is
// registered, so there is no need to fence a live target to find out);
// ErrUnavailable (the assignment does not cover exactly the table's
// buckets yet); ErrTooManyTransactions. Emptiness is proven for certain
// only after the fence round, by the Machine.
func Admit(in AdmissionInput) error {
	if !in.PrimaryKey {
		return fmt.Errorf("%w: bulk load needs a primary-key table", bulkload.ErrNotPrimaryKeyTable)
	}
	if _, err := in.Config.BuildTimeout(in.BuildTimeout); err != nil {
		return err
	}
	switch {
	case in.RemoteDataDir == "":
		return fmt.Errorf("%w: the table has no remote data directory", bulkload.ErrInvalidRequest)
	case in.HeldBy != "":
		return fmt.Errorf("%w: bulk load %s holds the target", bulkload.ErrTargetOccupied, in.HeldBy)
	case !in.Active:
		return fmt.Errorf("%w: the target is not ACTIVE", bulkload.ErrTargetOccupied)
	case in.HasSnapshots:
		return fmt.Errorf("%w: the target has registered snapshots", bulkload.ErrTargetNotEmpty)
	case in.Buckets < 1 || in.AssignedBuckets != in.Buckets:
		return fmt.Errorf("%w: the assignment covers %d of %d buckets", bulkload.ErrUnavailable, in.AssignedBuckets, in.Buckets)
	case in.ActiveTxns >= in.Config.MaxActive:
		return fmt.Errorf("%w: %d active transactions, limit %d", bulkload.ErrTooManyTransactions, in.ActiveTxns, in.Config.MaxActive)
	case in.TargetTxns >= in.Config.MaxPerTarget:
		return fmt.Errorf("%w: %d transactions retained for the target, limit %d", bulkload.ErrTooManyTransactions, in.TargetTxns, in.Config.MaxPerTarget)
	}
	return nil
}
