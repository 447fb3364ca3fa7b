package daemon

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"

	clientv3 "go.etcd.io/etcd/client/v3"
)

// leasesFileName is the file under an embedded tier's data directory that
// lists the etcd leases the running process holds.
const leasesFileName = "LEASES"

// maxRecordedLeases bounds the file. A process holds a few leases at a time
// (its coordinator's election and address, one registration per tablet
// server); leases that lapsed without a Revoke (a lost keep-alive) stay
// listed until newer grants push them out. A live lease pushed out is only
// waited for at the next start, as before this file existed.
const maxRecordedLeases = 256

// leaseLedger records every lease a process's own etcd clients grant (and
// forgets the ones they revoke) in {data_dir}/LEASES: the embedded tier's
// (thaw server, a promoter's embedded tier), a `thaw tablet`'s and a `thaw
// coordinator`'s that has a data_dir. A process killed without revoking
// them (SIGKILL, a crash, power loss) leaves them in etcd until their TTL
// runs out: until then its coordinator's successor cannot win the election
// and its tablet servers cannot register again. The next start on the same
// data directory is the only process that can hold them (the embedded etcd
// locks its data directory, `thaw tablet` and `thaw coordinator` their
// data_dir/LOCK), so it revokes them before its roles start
// (revokeLeftLeases). Leases of other processes using the same etcd are
// never in the file.
//
// The file is rewritten (temporary file and rename, no fsync) on every
// grant and revoke, which happen a few times per role and term, not per
// request. Losing an update costs only the wait it saves.
type leaseLedger struct {
	path string
	log  *slog.Logger

	mu  sync.Mutex
	ids []clientv3.LeaseID // in grant order
}

func newLeaseLedger(dir string, log *slog.Logger) *leaseLedger {
	return &leaseLedger{path: filepath.Join(dir, leasesFileName), log: log}
}

// record makes cli's grants and revokes go into the ledger.
func (l *leaseLedger) record(cli *clientv3.Client) {
	cli.Lease = recordingLease{Lease: cli.Lease, l: l}
}

// recordingLease is a client's Lease API that tells the ledger what it
// grants and revokes.
type recordingLease struct {
	clientv3.Lease
	l *leaseLedger
}

func (r recordingLease) Grant(ctx context.Context, ttl int64) (*clientv3.LeaseGrantResponse, error) {
	resp, err := r.Lease.Grant(ctx, ttl)
	if err == nil {
		r.l.update(func(ids []clientv3.LeaseID) []clientv3.LeaseID {
			ids = append(ids, resp.ID)
			return ids[max(0, len(ids)-maxRecordedLeases):]
		})
	}
	return resp, err
}

func (r recordingLease) Revoke(ctx context.Context, id clientv3.LeaseID) (*clientv3.LeaseRevokeResponse, error) {
	resp, err := r.Lease.Revoke(ctx, id)
	if err == nil || isLeaseNotFound(err) {
		r.l.update(func(ids []clientv3.LeaseID) []clientv3.LeaseID {
			return slices.DeleteFunc(ids, func(x clientv3.LeaseID) bool { return x == id })
		})
	}
	return resp, err
}

// update changes the list and writes the file; a write that fails is
// logged (the next start then waits for the leases, as without the file).
func (l *leaseLedger) update(change func([]clientv3.LeaseID) []clientv3.LeaseID) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.ids = change(l.ids)
	if err := writeLeases(l.path, l.ids); err != nil {
		l.log.Warn("cannot record the process's etcd leases; after a crash the next start waits for them to expire", "err", err)
	}
}

func writeLeases(path string, ids []clientv3.LeaseID) error {
	var b strings.Builder
	for _, id := range ids {
		fmt.Fprintf(&b, "%016x\n", int64(id))
	}
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, []byte(b.String()), 0o600); err != nil {
		return err
	}
	return os.Rename(tmp, path)
}

// parseLeases reads a LEASES file: one lease id a line, 16 lowercase hex
// digits. Anything else makes the whole file invalid.
func parseLeases(data []byte) ([]clientv3.LeaseID, error) {
	var ids []clientv3.LeaseID
	for i, line := range strings.SplitAfter(string(data), "\n") {
		if line == "" {
			continue
		}
		hex, ok := strings.CutSuffix(line, "\n")
		if !ok || len(hex) != 16 || strings.ToLower(hex) != hex {
			return nil, fmt.Errorf("line %d: %q is not a lease id (16 lowercase hex digits)", i+1, hex)
		}
		v, err := strconv.ParseUint(hex, 16, 64)
		if err != nil || int64(v) <= 0 {
			return nil, fmt.Errorf("line %d: %q is not a lease id (16 lowercase hex digits)", i+1, hex)
		}
		ids = append(ids, clientv3.LeaseID(v))
	}
	return ids, nil
}

// revokeLeftLeases revokes the leases a previous run on dir recorded and
// did not revoke, and empties the file. It never fails the start: a file
// that cannot be read or parsed (left for this run's first grant to
// replace), or a lease etcd refuses to revoke, is reported and left to
// expire (the start then waits for it, as without the
// file); a lease etcd no longer knows (expired meanwhile) is no error.
func revokeLeftLeases(ctx context.Context, cli *clientv3.Client, dir string, log *slog.Logger) {
	path := filepath.Join(dir, leasesFileName)
	data, err := os.ReadFile(path)
	if errors.Is(err, os.ErrNotExist) {
		return
	}
	ids, perr := parseLeases(data)
	if err != nil || perr != nil {
		log.Warn("ignoring the leases file: a killed run's coordinator and tablet servers are waited for until their leases expire", "file", path, "err", errors.Join(err, perr))
		return
	}
	revoked := 0
	for _, id := range ids {
		if _, err := cli.Revoke(ctx, id); err != nil && !isLeaseNotFound(err) {
			log.Warn("cannot revoke a lease the previous run left; waiting for it to expire", "lease", fmt.Sprintf("%016x", int64(id)), "err", err)
		} else if err == nil {
			revoked++
		}
	}
	if revoked > 0 {
		log.Info("revoked the etcd leases the previous run left (it stopped without revoking them)", "leases", revoked)
	}
	if err := writeLeases(path, nil); err != nil {
		log.Warn("cannot empty the leases file", "file", path, "err", err)
	}
}
