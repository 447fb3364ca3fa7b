package daemon

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"path/filepath"
	"slices"
	"sync"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/thawdb/thaw/gen/thaw/tier/v1/tierv1connect"
	"github.com/thawdb/thaw/tier/meta"
	"github.com/thawdb/thaw/tier/tablet"
)

// tabletConfig maps the tablet options to a tablet.Config for a server
// whose bucket logs live in logs.
func tabletConfig(id, advertise, dataDir string, logs changelogProvider, o TabletOptions) tablet.Config {
	return tablet.Config{
		ID:                  id,
		AdvertiseAddress:    advertise,
		ChangelogIdentity:   logs.Identity(),
		DataDir:             dataDir,
		SnapshotInterval:    o.SnapshotInterval,
		BlockCacheBytes:     int64(o.CacheSize),
		MemtableBudgetBytes: int64(o.MemTableBudget),
		ExpectedReplicas:    o.ExpectedReplicas,
		MaxBatchMutations:   o.MaxBatchRows,
		MaxBatchBytes:       int(o.MaxBatchBytes),
		RestoreConcurrency:  o.RestoreConcurrency,
		TransferConcurrency: o.TransferConcurrency,
		LeaseTTL:            o.LeaseTTL,

		ChangelogSweepInterval: o.ChangelogSweepInterval,
	}
}

// StartTablet starts (or restarts) embedded tablet server id on
// {data_dir}/tablets/{id}, mounted at /t/{id}/. Ids other than
// ts-1..ts-N are allowed: tests add servers this way.
func (e *Embedded) StartTablet(ctx context.Context, id string) error {
	if err := validateID("tablet server id", id); err != nil {
		return fmt.Errorf("daemon: %w", err)
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.mu.closed {
		return errors.New("daemon: embedded tier is closed")
	}
	old := e.mu.tablets[id]
	if old.running() {
		return fmt.Errorf("daemon: tablet server %s is running", id)
	}
	// The mount is registered once per id: a start that failed after it
	// left it there (the mux panics on a second registration).
	sw := e.mu.mounts[id]
	if sw == nil {
		sw = newSwitchable("tablet server " + id)
		e.mux.Handle(TabletPath(id), http.StripPrefix(TabletPath(id)[:len(TabletPath(id))-1], sw))
		e.mu.mounts[id] = sw
	}
	// Its own etcd client, so that a kill can cut it off like a crash.
	cli, err := e.etcd.Client(ctx)
	if err != nil {
		return err
	}
	e.leases.record(cli)
	store, err := meta.New(cli, e.cfg.Prefix, meta.WithLogger(e.log.With("component", "meta", "server", id)))
	if err != nil {
		return errors.Join(err, cli.Close())
	}
	logs := e.logs
	closeLogs := func() error { return nil }
	if logs == nil {
		// The Kafka changelog: a client of this server's own.
		if logs, err = openChangelog("", e.cfg.Changelog, e.log.With("server", id)); err != nil {
			return errors.Join(err, cli.Close())
		}
		closeLogs = logs.Close
	}
	reg := e.gath.component("tablet/"+id, nil)
	srv, err := tablet.New(tabletConfig(id, e.TabletAddress(id), filepath.Join(e.cfg.DataDir, "tablets", id), logs, e.cfg.Tablet), tablet.Deps{
		Meta:        store,
		Etcd:        cli,
		Changelog:   logs,
		Objects:     e.objects,
		Coordinator: tierv1connect.NewCoordinatorServiceClient(e.ihc, e.Address()),
		Logger:      e.log.With("component", "tablet"),
		Registerer:  reg,
	})
	if err != nil {
		return errors.Join(err, closeLogs(), cli.Close())
	}
	_, h := srv.Handler()
	tctx, cancel := context.WithCancel(e.ctx)
	comp := &component{id: id, sw: sw, cancel: cancel, done: make(chan struct{}), tablet: srv}
	var crashOnce sync.Once
	comp.crash = func() {
		crashOnce.Do(func() {
			// A crash: the client goes away without revoking the
			// registration, whose lease then lapses after its TTL.
			_ = cli.Close()
			cancel()
		})
	}
	go func() {
		defer close(comp.done)
		err := srv.Run(tctx)
		sw.set(nil)
		err = errors.Join(err, closeLogs())
		if cerr := cli.Close(); cerr != nil && !comp.killed.Load() && !errors.Is(cerr, context.Canceled) {
			err = errors.Join(err, cerr)
		}
		comp.err = err
		if err != nil && !comp.killed.Load() && e.ctx.Err() == nil {
			e.log.Error("tablet server failed", "server", id, "err", err)
			e.fail(fmt.Errorf("tablet server %s: %w", id, err))
		}
	}()
	sw.set(h)
	e.mu.tablets[id] = comp
	e.log.Info("tablet server started", "server", id)
	return nil
}

// Tablet returns embedded tablet server id while it runs.
func (e *Embedded) Tablet(id string) (*tablet.Server, bool) {
	e.mu.Lock()
	defer e.mu.Unlock()
	c := e.mu.tablets[id]
	if !c.running() {
		return nil, false
	}
	return c.tablet, true
}

// Tablets returns the ids of the running tablet servers, sorted.
func (e *Embedded) Tablets() []string {
	e.mu.Lock()
	defer e.mu.Unlock()
	var ids []string
	for id, c := range e.mu.tablets {
		if c.running() {
			ids = append(ids, id)
		}
	}
	slices.Sort(ids)
	return ids
}

// KillTablet stops tablet server id as a crash would, as far as the rest
// of the tier can tell: its etcd client goes away without deregistering,
// its mount answers UNAVAILABLE, and then its registration lease is
// revoked, as if the crash were noticed at once (KillTabletKeepLease
// leaves the lease to expire after its TTL). It returns once the server
// has stopped.
func (e *Embedded) KillTablet(ctx context.Context, id string) error {
	return e.killTablet(ctx, id, true)
}

// KillTabletKeepLease is KillTablet without revoking the lease: the
// coordinator notices the crash only when the lease expires.
func (e *Embedded) KillTabletKeepLease(ctx context.Context, id string) error {
	return e.killTablet(ctx, id, false)
}

func (e *Embedded) killTablet(ctx context.Context, id string, revoke bool) error {
	e.mu.Lock()
	c := e.mu.tablets[id]
	e.mu.Unlock()
	if !c.running() {
		return fmt.Errorf("daemon: tablet server %q is not running", id)
	}
	var lease clientv3.LeaseID
	if resp, err := e.cli.Get(ctx, e.cfg.Prefix+"/servers/"+id); err == nil && len(resp.Kvs) > 0 {
		lease = clientv3.LeaseID(resp.Kvs[0].Lease)
	}
	c.killed.Store(true)
	c.sw.set(nil)
	c.crash()
	select {
	case <-c.done:
	case <-ctx.Done():
		return context.Cause(ctx)
	}
	if revoke && lease != 0 {
		if _, err := e.cli.Revoke(ctx, lease); err != nil && !isLeaseNotFound(err) {
			return fmt.Errorf("daemon: revoke the lease of tablet server %s: %w", id, err)
		}
	}
	e.gath.drop("tablet/" + id)
	return nil
}

// StopTablet stops tablet server id gracefully: it closes its replicas
// and revokes its registration.
func (e *Embedded) StopTablet(ctx context.Context, id string) error {
	e.mu.Lock()
	c := e.mu.tablets[id]
	e.mu.Unlock()
	if !c.running() {
		return fmt.Errorf("daemon: tablet server %q is not running", id)
	}
	c.killed.Store(true)
	c.cancel()
	select {
	case <-c.done:
		e.gath.drop("tablet/" + id)
		return nil
	case <-ctx.Done():
		return context.Cause(ctx)
	}
}

func isLeaseNotFound(err error) bool { return errors.Is(err, rpctypes.ErrLeaseNotFound) }
