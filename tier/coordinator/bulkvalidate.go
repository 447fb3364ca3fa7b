package coordinator

import (
	"context"
	"errors"
	"fmt"
	"io"
	"sync"

	"golang.org/x/sync/errgroup"

	"github.com/thawdb/thaw/objstore"
	"github.com/thawdb/thaw/snapshot"
	"github.com/thawdb/thaw/tier/bulktxn"
)

// RuleFileDigest is thaw's validation rule on top of snapshot's: a data
// file's content (read from the object store) does not have the size and
// SHA-256 its _METADATA gives. Violations of it are *snapshot.Violation
// values like the others.
const RuleFileDigest snapshot.Rule = "file-digest"

// validateManifest runs the snapshot.Validator stages for a commit
// request, reading from the object store exactly what each stage names
// (bounded by the lengths the manifest and its references declare, one
// byte more to see an object that grew), then — if everything else holds
// — streams every data file through objstore's verifying reader to check
// its size and SHA-256. A violation is part of the result; an error is a
// storage failure (the outcome is unknown and the validation is retried).
// On success it returns each bucket's log_offset.
func validateManifest(ctx context.Context, objs BulkObjectStore, plan snapshot.Plan, req snapshot.CommitRequest, fanout int) (bulktxn.ValidationFinished, error) {
	v := snapshot.NewValidator(plan)
	var manifest []byte
	if v.CheckRequest(req) {
		b, found, err := readBounded(ctx, objs, req.ManifestPath, req.ManifestLength+1)
		if err != nil {
			return bulktxn.ValidationFinished{}, err
		}
		if found {
			manifest = b
		}
	}
	refs := v.CheckManifest(manifest)
	// The _METADATA documents are read ahead, at most fanout at a time,
	// and each is dropped once checked: memory stays at fanout documents
	// however many buckets the manifest names.
	rctx, stop := context.WithCancel(ctx)
	defer stop()
	type read struct {
		b     []byte
		found bool
		err   error
	}
	reads := make([]chan read, len(refs))
	for i := range reads {
		reads[i] = make(chan read, 1)
	}
	slots := make(chan struct{}, max(fanout, 1))
	go func() {
		for i, ref := range refs {
			select {
			case slots <- struct{}{}:
			case <-rctx.Done():
				return
			}
			go func() {
				b, found, err := readBounded(rctx, objs, ref.Path, ref.Length+1)
				reads[i] <- read{b, found, err}
			}()
		}
	}()
	files, err := v.CheckMetadataFrom(func(i int, _ snapshot.MetadataRef) ([]byte, bool, error) {
		select {
		case r := <-reads[i]:
			<-slots
			return r.b, r.found, r.err
		case <-ctx.Done():
			return nil, false, ctx.Err()
		}
	})
	if err != nil {
		return bulktxn.ValidationFinished{}, err
	}
	var mu sync.Mutex
	sizes := make(map[string]int64, len(files))
	g, gctx := errgroup.WithContext(ctx)
	g.SetLimit(max(fanout, 1))
	for _, f := range files {
		g.Go(func() error {
			key, err := objs.Key(f.Path)
			if err != nil {
				return fmt.Errorf("coordinator: validate: %s: %w", f.Path, err)
			}
			a, err := objs.Stat(gctx, key)
			if errors.Is(err, objstore.ErrNotFound) {
				return nil
			}
			if err != nil {
				return fmt.Errorf("coordinator: validate: stat %s: %w", f.Path, err)
			}
			mu.Lock()
			sizes[f.Path] = a.Size
			mu.Unlock()
			return nil
		})
	}
	if err := g.Wait(); err != nil {
		return bulktxn.ValidationFinished{}, err
	}
	v.CheckSizes(sizes)
	vs := v.Violations()
	if len(vs) == 0 {
		digest, err := verifyFiles(ctx, objs, files, fanout)
		if err != nil {
			return bulktxn.ValidationFinished{}, err
		}
		vs = digest
	}
	if len(vs) > 0 {
		out := make([]error, len(vs))
		for i, x := range vs {
			out[i] = x
		}
		return bulktxn.ValidationFinished{Violations: out}, nil
	}
	return bulktxn.ValidationFinished{LogOffsets: v.LogOffsets()}, nil
}

// readBounded reads at most limit bytes of the object at uri; found is
// false if there is none.
func readBounded(ctx context.Context, objs BulkObjectStore, uri string, limit int64) (_ []byte, found bool, err error) {
	key, err := objs.Key(uri)
	if err != nil {
		return nil, false, fmt.Errorf("coordinator: validate: %s: %w", uri, err)
	}
	rc, err := objs.Open(ctx, key)
	if errors.Is(err, objstore.ErrNotFound) {
		return nil, false, nil
	}
	if err != nil {
		return nil, false, fmt.Errorf("coordinator: validate: read %s: %w", uri, err)
	}
	defer func() {
		if cerr := rc.Close(); cerr != nil && err == nil {
			err = fmt.Errorf("coordinator: validate: close %s: %w", uri, cerr)
		}
	}()
	b, err := io.ReadAll(io.LimitReader(rc, limit))
	if err != nil {
		return nil, false, fmt.Errorf("coordinator: validate: read %s: %w", uri, err)
	}
	return b, true, nil
}

// verifyFiles streams every file through a verifying reader and returns a
// RuleFileDigest violation for each whose content does not match.
func verifyFiles(ctx context.Context, objs BulkObjectStore, files []snapshot.FileHandle, fanout int) ([]*snapshot.Violation, error) {
	var (
		mu  sync.Mutex
		bad []*snapshot.Violation
	)
	g, gctx := errgroup.WithContext(ctx)
	g.SetLimit(max(fanout, 1))
	for _, f := range files {
		g.Go(func() error {
			why, err := verifyFile(gctx, objs, f)
			if err != nil || why == nil {
				return err
			}
			mu.Lock()
			bad = append(bad, &snapshot.Violation{Rule: RuleFileDigest, Bucket: -1, Path: f.Path, Err: why})
			mu.Unlock()
			return nil
		})
	}
	if err := g.Wait(); err != nil {
		return nil, err
	}
	return bad, nil
}

// verifyFile returns why f's content is wrong (nil if it is right), or a
// storage error.
func verifyFile(ctx context.Context, objs BulkObjectStore, f snapshot.FileHandle) (why error, err error) {
	key, err := objs.Key(f.Path)
	if err != nil {
		return nil, fmt.Errorf("coordinator: validate: %s: %w", f.Path, err)
	}
	rc, err := objs.OpenVerified(ctx, key, f.Size, f.SHA256)
	if errors.Is(err, objstore.ErrNotFound) {
		return fmt.Errorf("object vanished: %w", err), nil
	}
	if err != nil {
		return nil, fmt.Errorf("coordinator: validate: read %s: %w", f.Path, err)
	}
	defer func() {
		if cerr := rc.Close(); cerr != nil && err == nil && why == nil {
			err = fmt.Errorf("coordinator: validate: close %s: %w", f.Path, cerr)
		}
	}()
	_, err = io.Copy(io.Discard, rc)
	switch {
	case errors.Is(err, objstore.ErrIntegrity):
		return err, nil
	case err != nil:
		return nil, fmt.Errorf("coordinator: validate: read %s: %w", f.Path, err)
	}
	return nil, nil
}
