package bulktxn

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"flag"
	"fmt"
	"math/rand/v2"
	"reflect"
	"slices"
	"testing"
	"time"

	"github.com/thawdb/thaw/bulkload"
	"github.com/thawdb/thaw/snapshot"
)

var (
	seedFlag  = flag.Uint64("seed", 0, "run TestRandomized with this seed only")
	seedsFlag = flag.Int("seeds", 300, "number of seeds TestRandomized runs")
)

// TestRandomized drives one transaction per seed through a random
// interleaving of requests, replica reports (lost, repeated, stale, not
// empty, failed), holder changes, etcd write outcomes (applied, failed,
// applied with the response lost, lost leadership), checks, ticks and
// coordinator crashes with recovery, then lets it run to the end without
// faults. Invariants are checked after every step. Reproduce a failure
// with -seed.
func TestRandomized(t *testing.T) {
	n := *seedsFlag
	if testing.Short() {
		n = min(n, 50)
	}
	seeds := make([]uint64, 0, n)
	if *seedFlag != 0 {
		seeds = append(seeds, *seedFlag)
	} else {
		for i := range n {
			seeds = append(seeds, uint64(i+1))
		}
	}
	outcomes := map[string]int{}
	for _, seed := range seeds {
		s := newSim(t, seed)
		s.run()
		outcomes[s.outcome]++
	}
	t.Logf("outcomes over %d seeds: %v", len(seeds), outcomes)
	if *seedFlag == 0 && (outcomes["COMMITTED"] == 0 || outcomes["ABORTED"] == 0) {
		t.Fatalf("the random runs never reached both outcomes: %v", outcomes)
	}
}

type reqInfo struct {
	kind    reqKind
	replies int
	lost    bool // its machine crashed before answering
}

type sim struct {
	t        *testing.T
	seed     uint64
	rng      *rand.Rand
	cfg      Config
	db       *etcdModel
	m        *Machine
	servers  []string
	rf       int
	holders  Holders
	now      int64
	nextTick int64
	queue    []Effect // replica commands sent and not yet answered
	reqs     map[RequestID]*reqInfo
	nextReq  RequestID
	nextID   int64 // snapshot id sequence
	steps    int
	outcome  string
	ended    bool // the record is gone (or was never created), and the machine with it

	// What the current machine was told since the holders last changed.
	fenced, restored map[replica]bool
	validOK          bool // the last validation result was valid

	// History of what etcd showed.
	sawCommitting, gone bool
	terminal            bulkload.State
	adopted             int
}

func newSim(t *testing.T, seed uint64) *sim {
	rng := rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15))
	cfg := DefaultConfig()
	cfg.AdoptBatch = 1 + rng.IntN(MaxAdoptBatch)
	cfg.ResultRetention = time.Hour
	s := &sim{
		t: t, seed: seed, rng: rng, cfg: cfg, db: newEtcdModel(),
		now: base.UnixMilli(), reqs: map[RequestID]*reqInfo{}, nextID: 1,
	}
	for i := range 1 + rng.IntN(4) {
		s.servers = append(s.servers, fmt.Sprintf("ts-%d", i+1))
	}
	s.rf = 1 + rng.IntN(len(s.servers))
	n := 1 + rng.IntN(150)
	s.holders = placement(n, s.servers, s.rf)
	m, effs, err := New(cfg, Begin{
		Req: s.req(reqBegin), TxnID: testTxnID, CallerToken: "t1",
		Principal: bulkload.Principal{Type: "User", Name: "alice"}, Now: timeOf(s.now),
		Target: bulkload.Target{Database: "sales", Table: "orders"}, TableID: 7,
		RemoteDataDir: "s3://bucket/thaw", Schema: testSchema(n, false),
		RegistrationRev: s.db.regRev, Holders: s.holders,
	})
	if err != nil {
		t.Fatalf("seed %d: New: %v", seed, err)
	}
	s.m = m
	s.resetProgress()
	s.absorb(effs)
	return s
}

func (s *sim) fatalf(format string, args ...any) {
	s.t.Helper()
	s.t.Fatalf("seed %d step %d: %s", s.seed, s.steps, fmt.Sprintf(format, args...))
}

func (s *sim) req(kind reqKind) RequestID {
	s.nextReq++
	s.reqs[s.nextReq] = &reqInfo{kind: kind}
	return s.nextReq
}

func (s *sim) resetProgress() {
	s.fenced, s.restored = map[replica]bool{}, map[replica]bool{}
	s.validOK = false
}

func (s *sim) chance(p float64) bool { return s.rng.Float64() < p }

func (s *sim) run() {
	chaos := 100 + s.rng.IntN(400)
	for s.steps = 0; s.steps < chaos && s.alive(); s.steps++ {
		s.chaosStep()
	}
	for limit := s.steps + 200000; s.alive(); s.steps++ {
		if s.steps > limit {
			s.fatalf("no end after the faults stopped: %s op=%s", fmtRecord(&s.m.rec, s.m.recRev > 0), s.m.op)
		}
		s.calmStep()
	}
	for id, r := range s.reqs {
		if !r.lost && r.replies != 1 {
			s.fatalf("request %d answered %d times", id, r.replies)
		}
	}
}

// alive reports whether the transaction can still make progress: a
// machine that is not gone, or a record a successor can recover.
func (s *sim) alive() bool {
	switch {
	case s.m.gone || s.ended && s.gone:
		s.outcome = s.terminal.String()
		return false
	case s.ended || s.m.halted != nil && s.db.rec == nil:
		s.outcome = "NEVER CREATED"
		return false
	}
	return true
}

func (s *sim) step(in Input) {
	before := s.m.rec.State
	wasRetry := s.m.op != OpNone && s.m.retryAt > 0
	prevOp := s.m.op
	effs, err := s.m.Step(in)
	if err != nil {
		s.fatalf("%T refused: %v", in, err)
	}
	s.checkTransition(before)
	if wasRetry && prevOp == s.m.op {
		// A retried operation is the effect issued before; its checks
		// were made then.
		s.absorbRetry(effs)
		return
	}
	s.absorb(effs)
}

// checkTransition checks that the machine's state moved along the state
// machine's edges only.
func (s *sim) checkTransition(before bulkload.State) {
	after := s.m.rec.State
	switch {
	case after == before,
		before == bulkload.Begun && (after == bulkload.Committing || after == bulkload.Aborted),
		before == bulkload.Committing && after == bulkload.Committed:
	default:
		s.fatalf("machine state went from %s to %s", before, after)
	}
}

func (s *sim) absorbRetry(effs []Effect) {
	for _, e := range effs {
		s.track(e)
	}
	s.check()
}

// absorb records the effects of a step and checks the invariants that
// concern the moment an effect is issued.
func (s *sim) absorb(effs []Effect) {
	for _, e := range effs {
		switch e := e.(type) {
		case ProveEmpty:
			s.requireAll(s.fenced, "emptiness proof before every holder confirmed the fence")
		case PersistRecord:
			switch e.Op {
			case OpDecide:
				if !s.validOK {
					s.fatalf("COMMITTING decided without a valid validation")
				}
			case OpActivate:
				s.requireAll(s.restored, "ACTIVE published before every bucket and replica restored")
				if len(s.db.registry) != s.m.rec.Buckets || s.db.rec.AdoptedBuckets != s.m.rec.Buckets {
					s.fatalf("ACTIVE published with %d of %d buckets adopted", len(s.db.registry), s.m.rec.Buckets)
				}
			}
		}
		s.track(e)
	}
	s.check()
}

func (s *sim) track(e Effect) {
	switch e := e.(type) {
	case SendFence, SendRestore, SendPublish, SendUnfence:
		s.queue = append(s.queue, e)
	case Reply:
		r := s.reqs[e.Req]
		if r == nil {
			s.fatalf("reply to unknown request %d", e.Req)
		}
		if r.replies++; r.replies > 1 {
			s.fatalf("request %d answered twice", e.Req)
		}
		s.checkReply(r.kind, e)
	case ScheduleTick:
		s.nextTick = e.At.UnixMilli()
	case Halt:
		s.queue = nil
	}
}

func (s *sim) requireAll(done map[replica]bool, what string) {
	for b, servers := range s.holders.Replicas {
		for _, srv := range servers {
			if !done[replica{b, srv}] {
				s.fatalf("%s: bucket %d on %s", what, b, srv)
			}
		}
	}
}

func (s *sim) checkReply(kind reqKind, r Reply) {
	if r.Err != nil {
		return
	}
	state := s.terminal // the record may already be garbage-collected
	if s.db.rec != nil {
		state = s.db.rec.State
	}
	switch {
	case kind == reqCommit && (r.Status.State != bulkload.Committed || state != bulkload.Committed):
		s.fatalf("commit succeeded with status %s, etcd %s", r.Status.State, state)
	case kind == reqAbort && (r.Status.State != bulkload.Aborted || state != bulkload.Aborted):
		s.fatalf("abort succeeded with status %s, etcd %s", r.Status.State, state)
	case kind == reqBegin && r.Info != nil && (r.Status.State != bulkload.Begun || s.db.rec == nil || !s.db.rec.FenceReady()):
		s.fatalf("begin returned target info in %s", r.Status.State)
	case kind == reqBegin && r.Info == nil && r.Status.State != bulkload.Committing && r.Status.State != bulkload.Committed:
		s.fatalf("begin succeeded without target info in %s", r.Status.State)
	}
}

// check verifies what etcd holds after every step.
func (s *sim) check() {
	db := s.db
	if db.rec == nil {
		s.gone = db.writes > 0
		if len(db.registry) > 0 && !s.sawCommitting {
			s.fatalf("snapshots adopted without a COMMITTING decision")
		}
		return
	}
	if s.gone {
		s.fatalf("record reappeared after its deletion")
	}
	r := db.rec
	b, err := bulkload.EncodeRecord(*r)
	if err != nil {
		s.fatalf("etcd holds an invalid record: %v", err)
	}
	if back, err := bulkload.DecodeRecord(b); err != nil || !reflect.DeepEqual(back, *r) {
		s.fatalf("record does not round-trip: %v", err)
	}
	switch {
	case r.State == bulkload.Begun && !r.Aborting() && db.reg != RegLoading,
		r.Aborting() && db.reg != RegActiveWithID,
		r.State == bulkload.Committing && db.reg == RegActive,
		r.State == bulkload.Committing && db.reg == RegActiveWithID && r.AdoptedBuckets != r.Buckets,
		r.State.Terminal() && db.reg != RegActive:
		s.fatalf("record %s (aborting %t, adopted %d) with registration %s", r.State, r.Aborting(), r.AdoptedBuckets, db.reg)
	}
	if (r.State == bulkload.Begun || r.State == bulkload.Aborted) && len(db.registry) > 0 {
		s.fatalf("%d snapshots adopted in %s", len(db.registry), r.State)
	}
	if r.State == bulkload.Committing || r.State == bulkload.Committed {
		s.sawCommitting = true
	} else if s.sawCommitting {
		s.fatalf("record went back to %s after COMMITTING", r.State)
	}
	if s.terminal != 0 && r.State != s.terminal {
		s.fatalf("terminal %s became %s", s.terminal, r.State)
	}
	if r.State.Terminal() {
		s.terminal = r.State
	}
	if r.AdoptedBuckets < s.adopted {
		s.fatalf("adoption cursor went back from %d to %d", s.adopted, r.AdoptedBuckets)
	}
	s.adopted = r.AdoptedBuckets
}

func (s *sim) chaosStep() {
	if s.m.halted != nil {
		s.recover()
		return
	}
	switch x := s.rng.IntN(100); {
	case x < 30:
		s.deliverOp(true)
	case x < 60:
		s.deliverCommand(true)
	case x < 75:
		s.tick(true)
	case x < 88:
		s.request()
	case x < 94:
		s.changeHolders()
	case x < 97:
		s.crash()
	default:
		s.staleInputs()
	}
}

func (s *sim) calmStep() {
	switch {
	case s.m.halted != nil:
		s.recover()
	case s.m.op != OpNone && s.m.retryAt == 0:
		s.deliverOp(false)
	case len(s.queue) > 0:
		s.deliverCommand(false)
	default:
		s.now = max(s.now+1, s.nextTick)
		s.step(Tick{Now: timeOf(s.now)})
	}
}

func (s *sim) tick(chaos bool) {
	d := int64(s.rng.IntN(6000))
	if chaos && s.chance(0.05) {
		d = int64(s.rng.IntN(int(40 * time.Minute / time.Millisecond)))
	}
	s.now += d
	s.step(Tick{Now: timeOf(s.now)})
}

func (s *sim) manifest(name string) bulkload.ManifestRef {
	h := sha256.Sum256([]byte(name))
	return bulkload.ManifestRef{Path: snapTarget(&s.m.rec).ManifestPath(testTxnID), Length: 100, SHA256: hex.EncodeToString(h[:])}
}

func (s *sim) request() {
	now := timeOf(s.now)
	switch x := s.rng.IntN(100); {
	case x < 30:
		tok := "t1"
		if s.chance(0.2) {
			tok = "t2"
		}
		s.step(BeginRequested{Req: s.req(reqBegin), CallerToken: tok, Principal: bulkload.Principal{Type: "User", Name: "alice"}, Now: now})
	case x < 90:
		name := "m1"
		if s.chance(0.1) {
			name = "m2"
		}
		s.step(CommitRequested{Req: s.req(reqCommit), Manifest: s.manifest(name), Now: now})
	default:
		s.step(AbortRequested{Req: s.req(reqAbort), Now: now})
	}
}

func (s *sim) deliverOp(chaos bool) {
	m := s.m
	if m.op == OpNone || m.retryAt != 0 {
		return
	}
	op, eff := m.op, m.opEff
	if chaos {
		switch x := s.rng.IntN(100); {
		case x < 10:
			s.step(Failed{Op: op, Err: errors.New("timeout")})
			return
		case x < 13:
			s.step(Failed{Op: op, Err: fmt.Errorf("%w: lost leadership", errPrecondition), Precondition: true})
			return
		case x < 20 && (op != OpProveEmpty && op != OpAllocate && op != OpValidate):
			if _, err := s.db.apply(eff); err == nil {
				s.check()
			}
			s.step(Failed{Op: op, Err: errors.New("timeout after the write")})
			return
		}
	}
	switch e := eff.(type) {
	case ProveEmpty:
		s.step(EmptinessChecked{Empty: !chaos || s.chance(0.97), Detail: "bucket 0 has snapshot 1"})
	case AllocateSnapshotIDs:
		ids := make([]int64, e.Buckets)
		for i := range ids {
			ids[i] = s.nextID
			s.nextID++
		}
		s.step(SnapshotIDsAllocated{IDs: ids})
	case ValidateManifest:
		ok := e.Request.ManifestSHA256 == s.manifest("m1").SHA256 && (!chaos || s.chance(0.9))
		if ok {
			offs := make([]int64, e.Plan.Buckets)
			s.validOK = true
			s.step(ValidationFinished{LogOffsets: offs})
		} else {
			s.validOK = false
			s.step(ValidationFinished{Violations: []error{&snapshot.Violation{Rule: snapshot.RuleManifestDigest, Bucket: -1}}})
		}
	default:
		rev, err := s.db.apply(eff)
		s.check()
		s.step(result(op, rev, err))
	}
}

// deliverCommand lets a tablet server answer one queued command.
func (s *sim) deliverCommand(chaos bool) {
	if len(s.queue) == 0 {
		return
	}
	i := 0
	if chaos {
		i = s.rng.IntN(len(s.queue))
	}
	e := s.queue[i]
	if !chaos || !s.chance(0.2) { // sometimes answered twice
		s.queue = slices.Delete(s.queue, i, i+1)
	}
	if chaos && s.chance(0.05) {
		return // lost
	}
	switch e := e.(type) {
	case SendFence:
		in := FenceReport{Round: e.Round, Server: e.Server, Buckets: e.Buckets, Empty: !chaos || s.chance(0.98)}
		s.report(in, s.fenced, e.Server, e.Buckets, in.Empty)
	case SendRestore:
		in := RestoreReport{Round: e.Round, Server: e.Server, Buckets: e.Buckets}
		if chaos && s.chance(0.1) {
			in.Err = "download failed"
		}
		s.report(in, s.restored, e.Server, e.Buckets, in.Err == "")
	case SendPublish:
		s.report(ActiveReport{Round: e.Round, Server: e.Server, Buckets: e.Buckets}, nil, "", nil, false)
	case SendUnfence:
		s.report(ActiveReport{Round: e.Round, Server: e.Server, Buckets: e.Buckets}, nil, "", nil, false)
	}
}

// report steps a replica report. If the machine takes it and ok, the
// replicas count as confirmed in set before the step's effects are
// checked. Reports of a restarted or ended round are refused as stale.
func (s *sim) report(in Input, set map[replica]bool, server string, buckets []int, ok bool) {
	before := s.m.rec.State
	effs, err := s.m.Step(in)
	if err != nil {
		if !errors.Is(err, ErrStaleReport) {
			s.fatalf("report refused: %v", err)
		}
		return
	}
	s.checkTransition(before)
	for _, b := range buckets {
		if ok {
			set[replica{b, server}] = true
		}
	}
	s.absorb(effs)
}

func (s *sim) changeHolders() {
	h := s.holders.Clone()
	switch x := s.rng.IntN(3); {
	case x == 0:
		h.Incarnations[s.servers[s.rng.IntN(len(s.servers))]]++
	case x == 1:
		servers := slices.Clone(s.servers)
		s.rng.Shuffle(len(servers), func(i, j int) { servers[i], servers[j] = servers[j], servers[i] })
		p := placement(len(h.Replicas), servers, s.rf)
		h.Replicas = p.Replicas
	default:
		// a server joins
		srv := fmt.Sprintf("ts-%d", len(s.servers)+1)
		s.servers = append(s.servers, srv)
		p := placement(len(h.Replicas), s.servers, s.rf)
		h.Replicas = p.Replicas
		h.Incarnations[srv] = 1
	}
	if h.Equal(s.holders) {
		return
	}
	s.holders = h
	s.fenced, s.restored = map[replica]bool{}, map[replica]bool{}
	s.step(HoldersChanged{Holders: h})
}

// crash loses the coordinator: its pending requests and in-flight results
// are lost; an in-flight write may have landed.
func (s *sim) crash() {
	if s.m.op != OpNone && s.m.retryAt == 0 && s.chance(0.5) {
		if _, ok := s.m.opEff.(PersistRecord); ok {
			if _, err := s.db.apply(s.m.opEff); err == nil {
				s.check()
			}
		}
	}
	for _, p := range s.m.pending {
		s.reqs[p.id].lost = true
	}
	s.m.pending = nil
	s.recover()
}

func (s *sim) recover() {
	s.queue = nil
	if s.db.rec == nil {
		s.ended = true
		return
	}
	m, effs, err := Recover(s.cfg, *s.db.rec, s.db.observed(s.holders, s.now))
	if err != nil {
		s.fatalf("recover: %v", err)
	}
	s.m = m
	s.resetProgress()
	s.absorb(effs)
}

// staleInputs feeds results nobody asked for; the machine must refuse
// them without changing anything.
func (s *sim) staleInputs() {
	before := s.m.rec.Clone()
	for _, in := range []Input{
		Persisted{Op: OpExpire, Rev: 1},
		ValidationFinished{},
		FenceReport{Round: 999, Server: "ts-1", Buckets: []int{0}, Empty: true},
	} {
		if s.m.op == OpExpire {
			break
		}
		if effs, err := s.m.Step(in); err == nil {
			s.fatalf("stale %T accepted with %d effects", in, len(effs))
		}
	}
	if after := s.m.rec; !reflect.DeepEqual(before, after) {
		s.fatalf("a refused input changed the record")
	}
}
