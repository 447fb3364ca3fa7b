package cli

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/thawdb/thaw/internal/daemon"
	"github.com/thawdb/thaw/kv"
	"github.com/thawdb/thaw/lake"
	"github.com/thawdb/thaw/promoter"
	"github.com/thawdb/thaw/promoter/promoterhttp"
	"github.com/thawdb/thaw/snapshotbuild"
	"github.com/thawdb/thaw/tier/tierclient"
)

// quickstartPolicy is the text of examples/policies/quickstart.yaml (a
// test keeps them equal).
const quickstartPolicy = `# The policy ` + "`thaw quickstart`" + ` applies (the command embeds this text; a test
# keeps the two equal). It keeps the three newest days of the sample table
# lake.events in the tier table quickstart.events. The window is anchored at
# the newest partition, so with the sample's days 2024-01-01..2024-01-07 it
# selects 2024-01-05, 2024-01-06 and 2024-01-07, whatever today's date is.
apiVersion: thaw.dev/v1
kind: PromotionPolicy
metadata:
  name: quickstart
spec:
  source:
    catalog: default
    table: lake.events
  target:
    database: quickstart
    table: events
    buckets: 4
  selection:
    partitions:
      window: {field: event_day, last: 3d, anchor: latest}
  triggers:
    onRequest: true   # thaw promote quickstart.events --partition ... through a running promoter
`

const quickstartPolicyName = "quickstart"

// runQuickstart is `thaw quickstart`: a sample lake, the embedded tier,
// the example policy, its promotions and a verification, in one process.
func runQuickstart(ctx context.Context, stdout io.Writer, args []string) error {
	fs := newFlagSet("thaw quickstart", stdout)
	dir := fs.String("dir", "", "directory for the lake, the tier and a promoter config (default: a new temporary directory; must be empty)")
	rows := fs.Int("rows", 50_000, "distinct ids in the sample table")
	days := fs.Int("days", 7, "day partitions of the sample table, from 2024-01-01")
	samples := fs.Int("verify", 100, "random lake rows to look up in the tier")
	verbose := fs.Bool("verbose", false, "log the tier and the promoter at info level to stderr")
	if err := parseFlags(fs, args, false); err != nil {
		return err
	}
	if *rows < 2 || *days < 1 || *samples < 1 {
		return usageError("thaw quickstart needs --rows >= 2, --days >= 1 and --verify >= 1")
	}
	level := "error" // etcd warns about its single-node defaults; not the quickstart's business
	if *verbose {
		level = "info"
	}
	q := &quickstart{out: stdout, log: daemon.LogConfig{Level: level, Format: "text"}, rows: *rows, days: *days, samples: *samples}
	return q.run(ctx, *dir)
}

type quickstart struct {
	out                 io.Writer
	log                 daemon.LogConfig
	rows, days, samples int
	dir                 string
	started             time.Time
}

// step prints one line of what was done, with how long it took.
func (q *quickstart) step(what string, since time.Time, format string, args ...any) {
	fmt.Fprintf(q.out, "%-10s %s  (%s)\n", what, fmt.Sprintf(format, args...), time.Since(since).Round(time.Millisecond))
}

func (q *quickstart) run(ctx context.Context, dir string) (err error) {
	q.started = time.Now()
	if dir == "" {
		if dir, err = os.MkdirTemp("", "thaw-quickstart-"); err != nil {
			return fmt.Errorf("quickstart: %w", err)
		}
	} else {
		ents, err := os.ReadDir(dir)
		if err != nil && !errors.Is(err, os.ErrNotExist) {
			return fmt.Errorf("quickstart: %w", err)
		}
		if len(ents) > 0 {
			return usageError("thaw quickstart: --dir %s is not empty", dir)
		}
	}
	if dir, err = filepath.Abs(dir); err != nil {
		return fmt.Errorf("quickstart: %w", err)
	}
	q.dir = dir
	fmt.Fprintf(q.out, "thaw quickstart: working in %s\n", dir)
	logger := daemon.NewLogger(promoterLogOutput, q.log)

	// 1. The lake.
	t := time.Now()
	info, err := lake.Sample(ctx, lake.SampleOptions{Dir: filepath.Join(dir, "lake"), Rows: q.rows, Days: q.days, Seed: 1})
	if err != nil {
		return fmt.Errorf("quickstart: sample lake: %w", err)
	}
	q.step("lake", t, "created %s in a SQLite Iceberg catalog: %d ids over %d day partitions, %d snapshots (appends, updates, deletes)",
		info.Table, info.Keys, info.Partitions, len(info.Snapshots))

	// 2. The policy, and a config to run the same setup as a daemon later.
	policyPath, configPath := filepath.Join(dir, "policies", "quickstart.yaml"), filepath.Join(dir, "promoter.yaml")
	if err := os.MkdirAll(filepath.Dir(policyPath), 0o755); err != nil {
		return fmt.Errorf("quickstart: %w", err)
	}
	if err := os.WriteFile(policyPath, []byte(quickstartPolicy), 0o644); err != nil {
		return fmt.Errorf("quickstart: %w", err)
	}
	if err := os.WriteFile(configPath, []byte(quickstartConfig(dir, info.Config)), 0o644); err != nil {
		return fmt.Errorf("quickstart: %w", err)
	}

	// 3. The tier, in this process.
	t = time.Now()
	e, err := daemon.StartEmbedded(ctx, daemon.EmbeddedConfig{
		DataDir: filepath.Join(dir, "tier"), TabletServers: 1, ShutdownTimeout: 10 * time.Second,
		Logger: logger.With("component", "tier"),
	})
	if err != nil {
		return fmt.Errorf("quickstart: start the tier: %w", err)
	}
	defer func() { err = errors.Join(err, e.Close()) }()
	if err := e.WaitReady(ctx); err != nil {
		return fmt.Errorf("quickstart: start the tier: %w", err)
	}
	q.step("tier", t, "started the embedded tier (etcd, a coordinator, 1 tablet server) at %s", e.Address())

	// 4. The promoter, against that tier.
	t = time.Now()
	var cfg daemon.PromoterConfig
	cfg.Defaults()
	embedded := false
	cfg.Listen, cfg.DataDir, cfg.Policies = "127.0.0.1:0", dir, []string{policyPath}
	cfg.Catalogs = map[string]lake.Config{"default": info.Config}
	cfg.Tier = daemon.PromoterTierConfig{Embedded: &embedded, Address: e.Address()}
	cfg.Tier.Etcd.Endpoints = e.EtcdEndpoints()
	cfg.Tier.Etcd.Prefix, cfg.Tier.Etcd.DialTimeout = daemon.DefaultPrefix, daemon.DefaultEtcdDialTimeout
	cfg.ReconcileInterval = -1 // the quickstart reconciles once, below
	cfg.ShutdownTimeout = 10 * time.Second
	d, err := daemon.StartPromoter(ctx, cfg, daemon.PromoterOptions{RunOptions: daemon.RunOptions{Logger: logger.With("component", "promoter")}})
	if err != nil {
		return fmt.Errorf("quickstart: start the promoter: %w", err)
	}
	defer func() { err = errors.Join(err, d.Close()) }()
	if err := d.WaitReady(ctx); err != nil {
		return fmt.Errorf("quickstart: start the promoter: %w", err)
	}
	p := d.Promoter()
	q.step("promoter", t, "started the promoter (leading; API at %s) with policy %s from %s", d.URL(), quickstartPolicyName, policyPath)

	// 5. The plan.
	t = time.Now()
	plan, err := p.Plan(ctx, quickstartPolicyName)
	if err != nil {
		return fmt.Errorf("quickstart: plan: %w", err)
	}
	wp := promoterhttp.PlanOf(plan)
	q.step("plan", t, "%d partitions to promote (up to %d rows by the lake's file counts, %s), %d skipped:", wp.Promote, wp.Rows, humanBytes(wp.Bytes), wp.Skip)
	var buf bytes.Buffer
	tw := tabwriter.NewWriter(&buf, 0, 4, 2, ' ', 0)
	for _, it := range wp.Items {
		fmt.Fprintf(tw, "%s\t%s\t%d rows\t%s\n", orNone(it.Partition), it.Action, it.Rows, it.Reason)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	for _, l := range strings.Split(strings.TrimRight(buf.String(), "\n"), "\n") {
		fmt.Fprintf(q.out, "             %s\n", l)
	}
	if wp.Promote == 0 {
		return errors.New("quickstart: the plan promotes nothing")
	}

	// 6. Promote: reconcile once and wait for the queue to drain.
	t = time.Now()
	rep, err := p.Reconcile(ctx)
	if err != nil {
		return fmt.Errorf("quickstart: reconcile: %w", err)
	}
	if err := p.Drain(ctx); err != nil {
		return fmt.Errorf("quickstart: promote: %w", err)
	}
	recs, err := p.Promotions(ctx)
	if err != nil {
		return fmt.Errorf("quickstart: ledger: %w", err)
	}
	slices.SortFunc(recs, func(a, b promoter.Record) int { return strings.Compare(a.Partition, b.Partition) })
	committed := make(map[string]promoter.Record)
	var failed []string
	for _, r := range recs {
		if r.Policy != quickstartPolicyName {
			continue
		}
		if r.Phase != promoter.PhaseCommitted {
			failed = append(failed, fmt.Sprintf("%s %s: %s", targetText(r), r.Phase, r.Error))
			continue
		}
		committed[r.Partition] = r
		dur := time.Duration(0)
		if r.CommittedAt != nil {
			dur = r.CommittedAt.Sub(r.CreatedAt)
		}
		// The record counts the rows read from the lake; the tier holds
		// one per key.
		rows := fmt.Sprintf("%d rows", r.Rows-r.Duplicates)
		if r.Duplicates > 0 {
			rows += fmt.Sprintf(" (%d read, %d duplicate keys dropped)", r.Rows, r.Duplicates)
		}
		fmt.Fprintf(q.out, "%-10s %s: %s, %d buckets, %s in one bulk-load transaction (%s, txn %s)  (%s)\n",
			"promoted", targetText(r), rows, r.Buckets, humanBytes(r.Bytes), r.ID, r.TxnID, dur.Round(time.Millisecond))
	}
	if len(failed) > 0 {
		return fmt.Errorf("quickstart: promotions did not commit: %s", strings.Join(failed, "; "))
	}
	for _, it := range plan.Items {
		if it.Action == promoter.ActionPromote {
			if _, ok := committed[it.Key.Partition]; !ok {
				return fmt.Errorf("quickstart: partition %s was planned but not promoted (reconcile: %+v)", it.Key.Partition, rep)
			}
		}
	}
	q.step("promote", t, "%d promotions committed", len(committed))

	// 7. Verify by lookups in the tier.
	t = time.Now()
	v, err := verifyQuickstart(ctx, e, info.Config, plan, committed, q.samples)
	if err != nil {
		return fmt.Errorf("quickstart: verify: %w", err)
	}
	q.step("verify", t, "%d of %d sampled lake rows found in the tier, equal to the lake's last row of their key; %s",
		v.matched, v.sampled, v.outside)
	if v.matched != v.sampled {
		return fmt.Errorf("quickstart: verify: %d of %d rows differ: %s", v.sampled-v.matched, v.sampled, strings.Join(v.mismatches, "; "))
	}

	fmt.Fprintf(q.out, "done in %s. Everything is in %s; to run it as a daemon:\n", time.Since(q.started).Round(time.Millisecond), dir)
	fmt.Fprintf(q.out, "  thaw promoter --config %s &\n  thaw status\n  thaw plan --promoter %s\n", configPath, daemon.DefaultPromoterListen)
	fmt.Fprintf(q.out, "  thaw get %s.%s %s    # the daemon's tier listens on %s\n", plan.Database, plan.Table, shellQuote(v.example), daemon.DefaultListen)
	return nil
}

// quickstartConfig is a promoter config for the quickstart's directory:
// the embedded tier on {dir}/tier, the sample catalog, the policy.
func quickstartConfig(dir string, lc lake.Config) string {
	return fmt.Sprintf(`# thaw promoter --config %[1]s/promoter.yaml
# The promoter with the tier embedded on %[1]s/tier (where thaw quickstart
# loaded it) and the sample lake. See docs/promoter.md for every key.
listen: %[2]s
data_dir: %[1]q
policies: [policies]
catalogs:
  default:
    type: sql
    uri: %[3]q
    warehouse: %[4]q
tier:
  tablets: 1
  listen: %[5]s   # the tier's address: thaw get, scan and table reach it here
`, dir, daemon.DefaultPromoterListen, lc.URI, lc.Warehouse, daemon.DefaultListen)
}

type quickstartVerification struct {
	sampled, matched int
	mismatches       []string
	outside          string
	example          string // the JSON key of a row found, for thaw get
}

// shellQuote quotes s for a POSIX shell.
func shellQuote(s string) string {
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}

// verifyQuickstart looks up n random keys of the promoted lake partitions
// in the tier and compares the rows byte for byte (encoded with the tier
// table's schema) with the lake's last row of each key, read at the
// snapshot each promotion scanned. It also checks that a partition the
// plan did not select is not in the tier.
func verifyQuickstart(ctx context.Context, e *daemon.Embedded, lc lake.Config, plan *promoter.Plan,
	committed map[string]promoter.Record, n int,
) (v quickstartVerification, err error) {
	tc, err := tierclient.New(ctx, e.Address(), tierclient.WithHTTPClient(e.HTTPClient()))
	if err != nil {
		return v, err
	}
	defer tc.Close()
	ti, err := tc.Table(ctx, plan.Database, plan.Table)
	if err != nil {
		return v, err
	}
	l, err := lake.Open(ctx, lc)
	if err != nil {
		return v, err
	}
	defer closeLake(l, &err)
	desc, err := l.Describe(ctx, plan.LakeTable)
	if err != nil {
		return v, err
	}
	_, mapping, err := lake.MapSchema(desc, lake.MappingOptions{Buckets: plan.Buckets})
	if err != nil {
		return v, err
	}
	// The lake's last row of every key of the promoted partitions.
	type entry struct{ partition, key, value string }
	var all []entry
	for _, part := range slices.Sorted(func(yield func(string) bool) {
		for p := range committed {
			if !yield(p) {
				return
			}
		}
	}) {
		r := committed[part]
		last := make(map[string]string)
		var order []string
		err := scanTierPartition(ctx, l, plan.LakeTable, mapping, r.ScanSnapshotID, part, func(key, value []byte) {
			k := string(key)
			if _, ok := last[k]; !ok {
				order = append(order, k)
			}
			last[k] = string(value)
		}, ti)
		if err != nil {
			return v, fmt.Errorf("scan lake partition %s: %w", part, err)
		}
		for _, k := range order {
			all = append(all, entry{part, k, last[k]})
		}
	}
	if len(all) == 0 {
		return v, errors.New("the promoted lake partitions hold no rows")
	}
	rng := rand.New(rand.NewPCG(uint64(time.Now().UnixNano()), 7))
	rng.Shuffle(len(all), func(i, j int) { all[i], all[j] = all[j], all[i] })
	all = all[:min(n, len(all))]
	byPart := make(map[string][]entry)
	for _, en := range all {
		byPart[en.partition] = append(byPart[en.partition], en)
	}
	for part, ens := range byPart {
		keys := make([]kv.Row, 0, len(ens))
		for _, en := range ens {
			_, row, err := ti.KV.DecodeValue([]byte(en.value))
			if err != nil {
				return v, err
			}
			keys = append(keys, row)
		}
		got, err := tc.Get(ctx, tierclient.Target{Database: plan.Database, Table: plan.Table, Partition: part}, keys)
		if err != nil {
			return v, fmt.Errorf("look up %d keys in %s: %w", len(keys), part, err)
		}
		for i, en := range ens {
			v.sampled++
			if got[i] == nil {
				v.mismatches = append(v.mismatches, fmt.Sprintf("%s key %v: missing in the tier", part, keys[i]))
				continue
			}
			b, err := ti.KV.EncodeValue(got[i])
			if err != nil {
				return v, err
			}
			if string(b) != en.value {
				v.mismatches = append(v.mismatches, fmt.Sprintf("%s key %v: tier row %v differs from lake row %v", part, keys[i], got[i], keys[i]))
				continue
			}
			v.matched++
			if v.example == "" {
				b, err := keyJSON(ti.KV, got[i])
				if err != nil {
					return v, err
				}
				v.example = string(b)
			}
		}
	}
	// A partition outside the window is not in the tier.
	tierParts, err := tc.Partitions(ctx, plan.Database, plan.Table)
	if err != nil {
		return v, err
	}
	v.outside = "no partition lies outside the window"
	for _, it := range plan.Items {
		if it.Action == promoter.ActionPromote || !strings.HasPrefix(it.Reason, "not selected") {
			continue
		}
		if slices.Contains(tierParts, it.Key.Partition) {
			return v, fmt.Errorf("partition %s is outside the window but in the tier", it.Key.Partition)
		}
		v.outside = fmt.Sprintf("%s (outside the window) is absent from the tier, which holds %s", it.Key.Partition, strings.Join(tierParts, ", "))
		break
	}
	return v, nil
}

// scanTierPartition scans the lake partitions that map to the tier
// partition at snapshot and encodes every row with the tier table's
// schema, calling fn with its key and value bytes in scan order.
func scanTierPartition(ctx context.Context, l *lake.Lake, table string, m lake.PartitionMapping, snapshot int64, partition string,
	fn func(key, value []byte), ti *tierclient.TableInfo,
) error {
	parts, err := l.Partitions(ctx, table, &snapshot)
	if err != nil {
		return err
	}
	var refs []lake.PartitionRef
	for _, p := range lake.Live(parts) {
		name, err := m.PartitionName(p)
		if err == nil && name == partition {
			refs = append(refs, p.Ref())
		}
	}
	if len(refs) == 0 {
		return fmt.Errorf("no lake partition maps to %s", partition)
	}
	_, batches, err := l.Scan(ctx, table, lake.ScanOptions{SnapshotID: &snapshot, Partitions: refs, Mapping: &m})
	if err != nil {
		return err
	}
	enc := snapshotbuild.NewRowEncoder(ti.KV, partition)
	var batch int64
	for rec, err := range batches {
		if err != nil {
			return err
		}
		err := enc.Encode(rec, batch, func(_, _ int, key, value []byte) error {
			fn(key, value)
			return nil
		})
		rec.Release()
		if err != nil {
			return err
		}
		batch++
	}
	return nil
}
