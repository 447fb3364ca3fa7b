package bulktxn

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/cockroachdb/datadriven"

	"github.com/thawdb/thaw/bulkload"
)

// TestTraces runs the datadriven traces in testdata. Each command feeds one
// input (or a few, for the "-all" forms) to the machine and prints the
// effects, then the record and registration the machine believes
// persisted. Rewrite the expectations with -rewrite.
func TestTraces(t *testing.T) {
	datadriven.Walk(t, "testdata", func(t *testing.T, path string) {
		e := &env{t: t}
		datadriven.RunTest(t, path, func(t *testing.T, d *datadriven.TestData) string {
			e.t = t
			h, ok := handlers[d.Cmd]
			if !ok {
				d.Fatalf(t, "unknown command %q", d.Cmd)
			}
			var out strings.Builder
			e.out = &out
			h(e, d)
			return out.String()
		})
	})
}

var base = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

const testTxnID = "00000000-0000-4000-8000-000000000001"

// env is one trace's world: the machine, etcd and the holders.
type env struct {
	t       *testing.T
	out     *strings.Builder
	cfg     Config
	m       *Machine
	db      *etcdModel
	holders Holders
	now     int64
	nextReq RequestID
}

type handler func(e *env, d *datadriven.TestData)

// handlers maps commands to their handlers, one file per family.
var handlers = map[string]handler{}

func register(cmd string, h handler) { handlers[cmd] = h }

// step feeds one input and prints what it produced.
func (e *env) step(in Input) {
	effs, err := e.m.Step(in)
	if err != nil {
		fmt.Fprintf(e.out, "error: %v\n", err)
		return
	}
	e.print(effs)
}

func (e *env) print(effs []Effect) {
	for _, f := range effs {
		fmt.Fprintln(e.out, e.fmtEffect(f))
	}
}

func (e *env) state() {
	m := e.m
	fmt.Fprintf(e.out, "=> %s reg=%s", fmtRecord(&m.rec, m.recRev > 0), m.reg)
	if m.op != OpNone {
		fmt.Fprintf(e.out, " op=%s", m.op)
		if m.retryAt > 0 {
			fmt.Fprintf(e.out, "(retry %s)", e.rel(m.retryAt))
		}
	}
	if r := m.round; r != nil {
		fmt.Fprintf(e.out, " round=%s#%d(%d left)", r.kind, r.id, r.left)
	}
	if m.halted != nil {
		fmt.Fprint(e.out, " HALTED")
	}
	if m.gone {
		fmt.Fprint(e.out, " GONE")
	}
	fmt.Fprintln(e.out)
}

func (e *env) rel(ms int64) string {
	return "+" + (time.Duration(ms-base.UnixMilli()) * time.Millisecond).String()
}

func (e *env) arg(d *datadriven.TestData, key, def string) string {
	if a, ok := d.Arg(key); ok {
		if len(a.Vals) == 0 {
			return "true"
		}
		return strings.Join(a.Vals, ",")
	}
	return def
}

func (e *env) intArg(d *datadriven.TestData, key string, def int) int {
	v, err := strconv.Atoi(e.arg(d, key, strconv.Itoa(def)))
	if err != nil {
		d.Fatalf(e.t, "%s: %v", key, err)
	}
	return v
}

// setNow moves the clock to now=<duration since base> if given, never back.
func (e *env) setNow(d *datadriven.TestData) time.Time {
	if s := e.arg(d, "now", ""); s != "" {
		dur, err := time.ParseDuration(s)
		if err != nil {
			d.Fatalf(e.t, "now: %v", err)
		}
		e.now = max(e.now, base.Add(dur).UnixMilli())
	}
	return timeOf(e.now)
}

func (e *env) req() RequestID {
	e.nextReq++
	return e.nextReq
}

// reqArg returns req=N if given (to repeat a request id), else a new id.
func (e *env) reqArg(d *datadriven.TestData) RequestID {
	if d.HasArg("req") {
		return RequestID(e.intArg(d, "req", 0))
	}
	return e.req()
}

// buckets parses buckets=0,1,5-7; def when absent.
func (e *env) buckets(d *datadriven.TestData, def []int) []int {
	s := e.arg(d, "buckets", "")
	if s == "" {
		return def
	}
	var out []int
	for _, part := range strings.Split(s, ",") {
		lo, hi, found := strings.Cut(part, "-")
		a, err1 := strconv.Atoi(lo)
		b := a
		var err2 error
		if found {
			b, err2 = strconv.Atoi(hi)
		}
		if err1 != nil || err2 != nil {
			d.Fatalf(e.t, "buckets %q", s)
		}
		for i := a; i <= b; i++ {
			out = append(out, i)
		}
	}
	return out
}

// roundMembers returns the unconfirmed buckets of server in the current
// round, or nil.
func (e *env) roundMembers(server string) []int {
	r := e.m.round
	if r == nil {
		return nil
	}
	var bs []int
	for k, done := range r.members {
		if k.server == server && !done {
			bs = append(bs, k.bucket)
		}
	}
	slices.Sort(bs)
	return bs
}

// roundServers returns the servers with unconfirmed members, sorted.
func (e *env) roundServers() []string {
	var ss []string
	if r := e.m.round; r != nil {
		for k, done := range r.members {
			if !done && !slices.Contains(ss, k.server) {
				ss = append(ss, k.server)
			}
		}
	}
	slices.Sort(ss)
	return ss
}

func (e *env) roundID(d *datadriven.TestData) uint64 {
	if e.m.round != nil {
		return uint64(e.intArg(d, "round", int(e.m.round.id)))
	}
	return uint64(e.intArg(d, "round", 0))
}

// manifest names a manifest reference at the planned path: "m1", "m2"…
// differ by digest; "bad" has length 0.
func (e *env) manifest(name string) bulkload.ManifestRef {
	h := sha256.Sum256([]byte(name))
	ref := bulkload.ManifestRef{Path: snapTarget(&e.m.rec).ManifestPath(testTxnID), Length: 100 + int64(len(name)), SHA256: hex.EncodeToString(h[:])}
	if name == "bad" {
		ref.Length = 0
	}
	return ref
}

// ranges prints 0,1,2,5 as 0-2,5.
func ranges(bs []int) string {
	var parts []string
	for i := 0; i < len(bs); {
		j := i
		for j+1 < len(bs) && bs[j+1] == bs[j]+1 {
			j++
		}
		if j == i {
			parts = append(parts, strconv.Itoa(bs[i]))
		} else {
			parts = append(parts, fmt.Sprintf("%d-%d", bs[i], bs[j]))
		}
		i = j + 1
	}
	return "[" + strings.Join(parts, ",") + "]"
}

func idRange(ids []int64) string {
	if len(ids) == 0 {
		return "-"
	}
	contiguous := true
	for i := range ids {
		if ids[i] != ids[0]+int64(i) {
			contiguous = false
		}
	}
	if contiguous && len(ids) > 1 {
		return fmt.Sprintf("%d..%d", ids[0], ids[len(ids)-1])
	}
	return fmt.Sprint(ids)
}

func fmtRecord(r *bulkload.Record, created bool) string {
	var b strings.Builder
	b.WriteString(r.State.String())
	if !created {
		b.WriteString("(not created)")
	}
	fmt.Fprintf(&b, " ids=%s", idRange(r.SnapshotIDs))
	if r.Manifest != nil {
		fmt.Fprintf(&b, " manifest=%s", r.Manifest.SHA256[:8])
	}
	if r.State == bulkload.Committing || r.State == bulkload.Committed {
		fmt.Fprintf(&b, " adopted=%d/%d", r.AdoptedBuckets, r.Buckets)
	}
	if r.AbortReason != nil {
		fmt.Fprintf(&b, " abort=%s", r.AbortReason)
	}
	return b.String()
}

func (e *env) fmtStatus(s bulkload.Status) string {
	out := s.State.String()
	if s.AbortReason != nil {
		out += "(" + s.AbortReason.String() + ")"
	}
	return out
}

func (e *env) fmtEffect(f Effect) string {
	switch f := f.(type) {
	case PersistRecord:
		s := fmt.Sprintf("persist %s rec@%d", f.Op, f.ExpectRecordRev)
		if w := f.Registration; w != nil {
			s += fmt.Sprintf(" reg@%d->%s", w.ExpectRev, w.To)
		}
		if len(f.Adopt) > 0 {
			bs := make([]int, len(f.Adopt))
			for i, a := range f.Adopt {
				bs[i] = a.Bucket
			}
			s += " adopt" + ranges(bs)
		}
		r := f.Record
		s += ": " + fmtRecord(&r, true)
		if r.CommitDecisionDeadlineMs != 0 && f.Op == OpFreeze {
			s += " decide-by=" + e.rel(r.CommitDecisionDeadlineMs)
		}
		if r.ResultExpireMs != 0 {
			s += " expire=" + e.rel(r.ResultExpireMs)
		}
		return s
	case DeleteRecord:
		return fmt.Sprintf("delete-record rec@%d manifest=%s", f.ExpectRecordRev, strings.TrimPrefix(f.ManifestPath, "s3://bucket/thaw/"))
	case ProveEmpty:
		return "prove-empty"
	case AllocateSnapshotIDs:
		return fmt.Sprintf("allocate-snapshot-ids buckets=%d", f.Buckets)
	case ValidateManifest:
		return fmt.Sprintf("validate-manifest %s ids=%s", f.Request.ManifestSHA256[:8], idRange(f.Plan.SnapshotIDs))
	case SendFence:
		return fmt.Sprintf("send-fence r%d %s %s", f.Round, f.Server, ranges(f.Buckets))
	case SendRestore:
		return fmt.Sprintf("send-restore r%d %s %s", f.Round, f.Server, ranges(f.Buckets))
	case SendPublish:
		return fmt.Sprintf("send-publish r%d %s %s", f.Round, f.Server, ranges(f.Buckets))
	case SendUnfence:
		return fmt.Sprintf("send-unfence r%d %s %s", f.Round, f.Server, ranges(f.Buckets))
	case Reply:
		s := fmt.Sprintf("reply #%d %s", f.Req, e.fmtStatus(f.Status))
		if f.Info != nil {
			s += fmt.Sprintf(" info(ids=%s deadline=%s)", idRange(f.Info.SnapshotIDs), e.rel(f.Info.BuildDeadline.UnixMilli()))
		}
		if f.Err != nil {
			s += " err: " + f.Err.Error()
		}
		return s
	case ScheduleTick:
		return "schedule-tick " + e.rel(f.At.UnixMilli())
	case Halt:
		return "halt: " + f.Err.Error()
	case Forget:
		return "forget"
	}
	return fmt.Sprintf("unknown effect %T", f)
}
