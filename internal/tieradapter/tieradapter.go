// Package tieradapter adapts the tier's client (tier/tierclient) to the
// promoter's consumer interface promoter.Tier, so that package promoter
// never imports the tier.
//
// IsEmpty scans the target and stops at the first row: one page of one
// bucket at most for a non-empty target, every bucket for an empty one.
// (The tier's location statistics are not exact row counts while writes are
// in flight, so they are not used.) A target that a bulk load holds
// (TARGET_LOADING) is reported as an error, not as empty or non-empty.
package tieradapter

import (
	"context"
	"errors"
	"fmt"
	"slices"

	"github.com/thawdb/thaw/kv"
	"github.com/thawdb/thaw/promoter"
	"github.com/thawdb/thaw/tier/tierclient"
	"github.com/thawdb/thaw/tier/tierpb"
)

// Tier is promoter.Tier over a *tierclient.Client.
type Tier struct {
	c *tierclient.Client
}

var _ promoter.Tier = (*Tier)(nil)

// New returns the adapter. It does not own c.
func New(c *tierclient.Client) promoter.Tier { return &Tier{c: c} }

func isNotFound(err error) bool { return tierpb.ReasonOf(err) == tierpb.ReasonNotFound }

// TableSchema implements promoter.Tier: the coordinator's answer now, not
// the client's cache (the table may have been dropped, or dropped and
// created again, by another client since it was cached).
func (t *Tier) TableSchema(ctx context.Context, database, table string) (kv.TableSchema, bool, error) {
	info, err := t.c.RefreshTable(ctx, database, table)
	if err != nil {
		if isNotFound(err) {
			return kv.TableSchema{}, false, nil
		}
		return kv.TableSchema{}, false, fmt.Errorf("tieradapter: table %s.%s: %w", database, table, err)
	}
	return info.KV.Schema(), true, nil
}

// CreateTable implements promoter.Tier.
func (t *Tier) CreateTable(ctx context.Context, database, table string, schema kv.TableSchema, replicationFactor int) error {
	if err := t.c.CreateDatabase(ctx, database); err != nil {
		return fmt.Errorf("tieradapter: create database %s: %w", database, err)
	}
	_, err := t.c.CreateTable(ctx, database, table, schema, replicationFactor)
	if err == nil {
		return nil
	}
	if tierpb.ReasonOf(err) != tierpb.ReasonAlreadyExists {
		return fmt.Errorf("tieradapter: create table %s.%s: %w", database, table, err)
	}
	have, ok, herr := t.TableSchema(ctx, database, table)
	if herr != nil {
		return herr
	}
	if !ok {
		return fmt.Errorf("tieradapter: create table %s.%s: %w", database, table, err)
	}
	if d := kv.SchemaDiff(have, schema); d != "" {
		return fmt.Errorf("tieradapter: table %s.%s exists with another schema: %s", database, table, d)
	}
	return nil
}

// CreatePartition implements promoter.Tier.
func (t *Tier) CreatePartition(ctx context.Context, database, table, partition string) error {
	if err := t.c.CreatePartition(ctx, database, table, partition); err != nil && tierpb.ReasonOf(err) != tierpb.ReasonAlreadyExists {
		return fmt.Errorf("tieradapter: create partition %s.%s/%s: %w", database, table, partition, err)
	}
	return nil
}

// Partitions implements promoter.Tier.
func (t *Tier) Partitions(ctx context.Context, database, table string) ([]string, error) {
	ps, err := t.c.Partitions(ctx, database, table)
	if err != nil {
		return nil, fmt.Errorf("tieradapter: partitions of %s.%s: %w", database, table, err)
	}
	return ps, nil
}

var errStop = errors.New("stop")

// IsEmpty implements promoter.Tier.
func (t *Tier) IsEmpty(ctx context.Context, database, table, partition string) (bool, error) {
	if partition != "" {
		ps, err := t.Partitions(ctx, database, table)
		if err != nil {
			if isNotFound(err) {
				return true, nil
			}
			return false, err
		}
		if !slices.Contains(ps, partition) {
			return true, nil
		}
	}
	target := tierclient.Target{Database: database, Table: table, Partition: partition}
	err := t.c.Scan(ctx, target, func(kv.Row) error { return errStop })
	switch {
	case err == nil:
		return true, nil
	case errors.Is(err, errStop):
		return false, nil
	case partition == "" && isNotFound(err):
		// The table missing, or a tablet server without the bucket's
		// replica (moved, or not open yet after a restart) until the
		// client's retries ran out: the coordinator tells which.
		if _, ok, serr := t.TableSchema(ctx, database, table); serr == nil && !ok {
			return true, nil
		}
	}
	return false, fmt.Errorf("tieradapter: scan %s: %w", target, err)
}
