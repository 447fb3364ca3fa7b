package meta

import (
	"context"
	"errors"
	"fmt"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/thawdb/thaw/tier/access"
)

// DataAccess is the data-access policy of the tablet servers
// ({p}/access/data): the leading coordinator writes it from its
// configuration at the start of every term; every tablet server follows
// it. With Enforce, reads (Lookup, PrefixLookup, Scan) and writes (Write)
// need the bearer token of one of Callers whose Read or Write patterns
// cover the table. It holds the SHA-256 of each caller's token, never the
// token.
type DataAccess struct {
	Version int          `json:"version"`
	Enforce bool         `json:"enforce"`
	Callers []DataCaller `json:"callers,omitempty"`
}

// DataCaller is a caller of the tablet servers' reads and writes.
type DataCaller struct {
	Name        string   `json:"name"`
	TokenSHA256 string   `json:"token_sha256"`
	Read        []string `json:"read,omitempty"`
	Write       []string `json:"write,omitempty"`
}

// Validate checks the version, the callers' names and token hashes (each
// once), their patterns (access.CheckPattern), that each caller has some,
// and that an enforced policy has callers.
func (d DataAccess) Validate() error {
	if err := checkVersion(d.Version); err != nil {
		return err
	}
	if d.Enforce && len(d.Callers) == 0 {
		return fmt.Errorf("%w: data access: enforced without callers", ErrInvalid)
	}
	var ids access.Identities
	var errs []error
	for i, c := range d.Callers {
		errs = append(errs, ids.Add(i, c.Name, c.TokenSHA256)...)
		if len(c.Read) == 0 && len(c.Write) == 0 {
			errs = append(errs, fmt.Errorf("caller %s: no read or write patterns", c.Name))
		}
		for _, p := range append(c.Read[:len(c.Read):len(c.Read)], c.Write...) {
			if err := access.CheckPattern(p); err != nil {
				errs = append(errs, fmt.Errorf("caller %s: %w", c.Name, err))
			}
		}
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("%w: data access: %w", ErrInvalid, err)
	}
	return nil
}

// DataAccessKey is the key of the DataAccess record, for watches.
func (s *Store) DataAccessKey() string { return s.k.dataAccess() }

// GetDataAccess reads the data-access policy; ErrNotFound if no
// coordinator has published one.
func (s *Store) GetDataAccess(ctx context.Context) (Versioned[DataAccess], error) {
	return get[DataAccess](ctx, s, s.k.dataAccess(), "data access policy")
}

// PutDataAccess publishes the data-access policy unless the stored one is
// already d (byte for byte), and reports whether it wrote. A zero Version
// is written as RecordVersion.
func (s *Store) PutDataAccess(ctx context.Context, g Guard, d DataAccess) (bool, error) {
	if d.Version == 0 {
		d.Version = RecordVersion
	}
	b, err := Marshal(d)
	if err != nil {
		return false, fmt.Errorf("meta: publish the data access policy: %w", err)
	}
	key := s.k.dataAccess()
	resp, err := s.txn(ctx, g, []clientv3.Cmp{clientv3.Compare(clientv3.Value(key), "=", string(b))}, nil, []clientv3.Op{clientv3.OpPut(key, string(b))})
	switch {
	case err == nil:
		return false, nil
	case failed(err) && resp != nil:
		return true, nil
	default:
		return false, fmt.Errorf("meta: publish the data access policy: %w", err)
	}
}
