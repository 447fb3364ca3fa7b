package tablet

import (
	"context"
	"encoding/binary"
	"errors"
	"math/rand/v2"
	"sync"
	"time"

	"connectrpc.com/connect"

	tierv1 "github.com/thawdb/thaw/gen/thaw/tier/v1"
	"github.com/thawdb/thaw/tier/meta"
	"github.com/thawdb/thaw/tier/tablet/replica"
	"github.com/thawdb/thaw/tier/tierpb"
)

// Scan returns one page of a bucket's rows. A page token carries the
// bucket, the prefix and the last key returned; a consistent scan's token
// also names the pinned view (a replica.View) its pages read, which is
// released when the scan completes, after ScanIdleTimeout without a page,
// or when the replica closes (then the token fails with SCAN_EXPIRED).
func (h *service) Scan(ctx context.Context, req *connect.Request[tierv1.ScanRequest]) (_ *connect.Response[tierv1.ScanResponse], err error) {
	s := h.s
	defer func() { s.m.reads.WithLabelValues("scan", resultOf(err)).Inc() }()
	m := req.Msg
	r, rep, release, err := s.readReplica(ctx, req.Header(), m.GetTarget(), m.GetBucket(), m.LeaderEpoch, "scan")
	if err != nil {
		return nil, err
	}
	defer release()
	limit := int(m.GetLimit())
	switch {
	case limit < 0:
		return nil, errInvalid("scan: limit %d", limit)
	case limit == 0:
		limit = s.cfg.ScanPageRows
	}
	limit = min(limit, s.cfg.MaxBatchMutations)

	tok := scanToken{key: r.key, prefix: m.GetPrefix(), after: m.GetStartAfter()}
	if len(m.GetPageToken()) > 0 {
		if tok, err = decodeScanToken(m.GetPageToken()); err != nil {
			return nil, errInvalid("scan: page token: %v", err)
		}
		if tok.key != r.key {
			return nil, errInvalid("scan: the page token is for %s bucket %d", tok.key.target, tok.key.bucket)
		}
	} else if m.GetConsistent() {
		view, verr := rep.NewView()
		if verr != nil {
			return nil, replicaErr("scan", verr)
		}
		if tok.session, verr = s.scans.add(r.key, view); verr != nil {
			_ = view.Close()
			return nil, verr
		}
		// A first page that fails leaves the client no token for the
		// view: release it now, not after the idle timeout.
		defer func() {
			if err != nil {
				s.scans.remove(tok.session)
			}
		}()
	}
	opts := replica.ScanOptions{Prefix: tok.prefix, StartAfter: tok.after, Limit: limit}
	var page replica.Page
	if tok.session != 0 {
		view := s.scans.get(tok.session, r.key)
		if view == nil {
			return nil, rpcErr(tierpb.ReasonScanExpired, nil, "scan: the scan's view was released; start the scan again")
		}
		if page, err = view.Scan(ctx, opts); errors.Is(err, replica.ErrClosed) {
			s.scans.remove(tok.session)
			return nil, rpcErr(tierpb.ReasonScanExpired, nil, "scan: the scan's view was released with its replica; start the scan again")
		}
	} else {
		page, err = rep.ScanPage(ctx, opts)
	}
	if err != nil {
		return nil, replicaErr("scan", err)
	}
	resp := &tierv1.ScanResponse{Rows: make([]*tierv1.Row, len(page.Rows)), LogOffset: page.LogOffset}
	for i, kv := range page.Rows {
		resp.Rows[i] = &tierv1.Row{Key: kv.Key, Value: kv.Value}
	}
	if page.Next != nil {
		tok.after = page.Next
		resp.NextPageToken = tok.encode()
	} else if tok.session != 0 {
		s.scans.remove(tok.session)
	}
	return connect.NewResponse(resp), nil
}

// scanToken is the state of a scan between pages.
type scanToken struct {
	key     bucketKey
	session uint64 // the pinned view of a consistent scan; 0: none
	prefix  []byte
	after   []byte
}

const scanTokenVersion = 1

func (t scanToken) encode() []byte {
	b := []byte{scanTokenVersion}
	b = binary.AppendUvarint(b, uint64(t.key.target.TableID))
	b = binary.AppendUvarint(b, uint64(t.key.target.PartitionID))
	b = binary.AppendUvarint(b, uint64(t.key.bucket))
	b = binary.AppendUvarint(b, t.session)
	b = binary.AppendUvarint(b, uint64(len(t.prefix)))
	b = append(b, t.prefix...)
	return append(b, t.after...)
}

var errBadToken = errors.New("malformed page token")

func decodeScanToken(b []byte) (scanToken, error) {
	if len(b) == 0 || b[0] != scanTokenVersion {
		return scanToken{}, errBadToken
	}
	b = b[1:]
	var vals [5]uint64
	for i := range vals {
		v, n := binary.Uvarint(b)
		if n <= 0 {
			return scanToken{}, errBadToken
		}
		vals[i], b = v, b[n:]
	}
	if vals[0] > 1<<62 || vals[1] > 1<<62 || vals[2] > 1<<30 || vals[4] > uint64(len(b)) {
		return scanToken{}, errBadToken
	}
	return scanToken{
		key:     bucketKey{meta.Target{TableID: int64(vals[0]), PartitionID: int64(vals[1])}, int32(vals[2])},
		session: vals[3],
		prefix:  b[:vals[4]],
		after:   b[vals[4]:],
	}, nil
}

// scanTable holds the pinned views of consistent scans.
type scanTable struct {
	mu struct {
		sync.Mutex
		max      int
		sessions map[uint64]*scanSession
	}
}

type scanSession struct {
	key      bucketKey
	view     *replica.View
	lastUsed time.Time
}

func (t *scanTable) init(maxScans int) {
	t.mu.max = maxScans
	t.mu.sessions = make(map[uint64]*scanSession)
}

// add registers a pinned view and returns its session id; UNAVAILABLE
// when MaxScans views are pinned already.
func (t *scanTable) add(key bucketKey, view *replica.View) (uint64, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if len(t.mu.sessions) >= t.mu.max {
		return 0, errUnavailable("scan: %d consistent scans are open, the limit", t.mu.max)
	}
	for {
		id := rand.Uint64()
		if _, taken := t.mu.sessions[id]; id != 0 && !taken {
			t.mu.sessions[id] = &scanSession{key: key, view: view, lastUsed: time.Now()}
			return id, nil
		}
	}
}

// get returns the view of a session of bucket key, nil if there is none.
func (t *scanTable) get(id uint64, key bucketKey) *replica.View {
	t.mu.Lock()
	defer t.mu.Unlock()
	ss := t.mu.sessions[id]
	if ss == nil || ss.key != key {
		return nil
	}
	ss.lastUsed = time.Now()
	return ss.view
}

func (t *scanTable) remove(id uint64) {
	t.mu.Lock()
	ss := t.mu.sessions[id]
	delete(t.mu.sessions, id)
	t.mu.Unlock()
	if ss != nil {
		_ = ss.view.Close() // a view's Close fails only if Pebble does; nothing to do about it
	}
}

// expire releases the views idle for timeout, until ctx is done.
func (t *scanTable) expire(ctx context.Context, timeout time.Duration) {
	tick := time.NewTicker(max(timeout/4, 10*time.Millisecond))
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case now := <-tick.C:
			var idle []*replica.View
			t.mu.Lock()
			for id, ss := range t.mu.sessions {
				if now.Sub(ss.lastUsed) > timeout {
					idle = append(idle, ss.view)
					delete(t.mu.sessions, id)
				}
			}
			t.mu.Unlock()
			for _, v := range idle {
				_ = v.Close()
			}
		}
	}
}

func (t *scanTable) closeAll() {
	t.mu.Lock()
	all := t.mu.sessions
	t.mu.sessions = make(map[uint64]*scanSession)
	t.mu.Unlock()
	for _, ss := range all {
		_ = ss.view.Close()
	}
}
