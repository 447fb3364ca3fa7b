package replica

import (
	"context"
	"errors"
	"fmt"

	"github.com/thawdb/thaw/objstore"
)

// DeleteFiles deletes the objects at the given URIs in order. An object
// that is already gone counts as deleted, so a repeated call finishes an
// interrupted one. It stops at the first other error, leaving the rest:
// callers list a snapshot's data files before its _METADATA, so that an
// interrupted deletion leaves the _METADATA naming what is left (as the
// coordinator's retention deletes).
func DeleteFiles(ctx context.Context, store *objstore.Store, uris []string) error {
	for _, uri := range uris {
		key, err := store.Key(uri)
		if err != nil {
			return fmt.Errorf("replica: delete snapshot files: %w", err)
		}
		if err := store.Delete(ctx, key); err != nil && !errors.Is(err, objstore.ErrNotFound) {
			return fmt.Errorf("replica: delete snapshot files: %w", err)
		}
	}
	return nil
}
