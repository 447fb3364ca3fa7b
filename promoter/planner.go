package promoter

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"maps"
	"math"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/thawdb/thaw/kv"
	"github.com/thawdb/thaw/lake"
	"github.com/thawdb/thaw/policies"
)

// estimatedBuildRate is the lake bytes per second a plan's EstimatedBuild
// assumes (Parquet in, snapshots out, on one or two cores): a rough guide
// for operators, not a promise.
const estimatedBuildRate = 32 << 20

// estimateBuild is the build time PlanItem.EstimatedBuild gives a target of
// the given lake bytes, rounded to the millisecond. It divides before it
// multiplies (bytes times a second overflows from about 8.6 GiB) and
// saturates at the largest Duration.
func estimateBuild(bytes int64) time.Duration {
	if bytes <= 0 {
		return 0
	}
	secs := bytes / estimatedBuildRate
	if secs >= int64(math.MaxInt64/time.Second) {
		return math.MaxInt64
	}
	rest := time.Duration(bytes%estimatedBuildRate) * time.Second / estimatedBuildRate
	return (time.Duration(secs)*time.Second + rest).Round(time.Millisecond)
}

// source is what building one policy's targets needs besides the plan item:
// the lake, the mapped tier schema and the partition mapping at the scan
// snapshot.
type source struct {
	pol     *policies.Policy
	lk      Lake
	scan    int64 // scan snapshot id
	schema  kv.TableSchema
	mapping lake.PartitionMapping
}

// group is one tier partition: the lake partitions mapped to it (Removed
// ones included: their removal counts in newest, though they hold no row).
type group struct {
	name  string
	parts []lake.PartitionStats
}

// newest returns the lake partition of g updated last (by sequence number,
// then commit time, then snapshot id): its LastUpdatedSnapshotID is the
// identity's source snapshot. A format-v1 table's sequence numbers are all
// 0: its commit times tell its lake partitions apart (snapshot ids are
// random, and a later append that happened to get a smaller id left the
// identity unchanged).
func (g *group) newest() lake.PartitionStats {
	return slices.MaxFunc(g.parts, func(a, b lake.PartitionStats) int {
		if c := cmp.Compare(a.LastUpdatedSequenceNumber, b.LastUpdatedSequenceNumber); c != 0 {
			return c
		}
		if c := a.LastUpdatedAt.Compare(b.LastUpdatedAt); c != 0 {
			return c
		}
		return cmp.Compare(a.LastUpdatedSnapshotID, b.LastUpdatedSnapshotID)
	})
}

// refs returns the lake partitions to scan: those holding data files.
func (g *group) refs() []string {
	live := lake.Live(g.parts)
	out := make([]string, len(live))
	for i, p := range live {
		out[i] = partitionRefString(p.Ref())
	}
	return out
}

// partitionRefString is the "spec/path" form of a lake partition in
// records and plans.
func partitionRefString(r lake.PartitionRef) string {
	return strconv.Itoa(r.SpecID) + "/" + r.Path
}

func parsePartitionRef(s string) (lake.PartitionRef, error) {
	spec, path, ok := strings.Cut(s, "/")
	id, err := strconv.Atoi(spec)
	if !ok || err != nil {
		return lake.PartitionRef{}, fmt.Errorf("promoter: invalid lake partition %q", s)
	}
	return lake.PartitionRef{SpecID: id, Path: path}, nil
}

func parsePartitionRefs(ss []string) ([]lake.PartitionRef, error) {
	out := make([]lake.PartitionRef, 0, len(ss))
	for _, s := range ss {
		r, err := parsePartitionRef(s)
		if err != nil {
			return nil, err
		}
		out = append(out, r)
	}
	return out, nil
}

// mappingOptions are the policy's target options for lake.MapSchema.
func mappingOptions(pol *policies.Policy, snapshotID *int64) lake.MappingOptions {
	t := pol.Target()
	return lake.MappingOptions{PrimaryKey: t.PrimaryKey, Buckets: t.Buckets, Bucketing: t.Bucketing, SnapshotID: snapshotID}
}

// openSource describes the policy's lake table and maps its schema at
// snapshot (nil: the current one). It returns the table info too.
func (p *Promoter) openSource(ctx context.Context, pol *policies.Policy, snapshot *int64) (*source, *lake.TableInfo, error) {
	src := pol.Source()
	lk := p.cfg.Lakes[src.Catalog]
	info, err := lk.Describe(ctx, src.Table)
	if err != nil {
		return nil, nil, fmt.Errorf("promoter: policy %s: describe %s: %w", pol.Name(), src.Table, err)
	}
	if snapshot == nil {
		snapshot = info.CurrentSnapshotID
	}
	schema, mapping, err := lake.MapSchema(info, mappingOptions(pol, snapshot))
	switch {
	case errors.Is(err, lake.ErrNotFound):
		// The snapshot is gone (expired by the lake's maintenance), not
		// the schema wrong: retriable, and a new attempt pins the current
		// snapshot.
		return nil, nil, fmt.Errorf("promoter: policy %s: lake table %s: %w", pol.Name(), src.Table, err)
	case err != nil:
		return nil, nil, fmt.Errorf("%w: policy %s: lake table %s: %w", ErrSchema, pol.Name(), src.Table, err)
	}
	if err := checkSelectionFields(pol, info, mapping); err != nil {
		return nil, nil, err
	}
	s := &source{pol: pol, lk: lk, schema: schema, mapping: mapping}
	if snapshot != nil {
		s.scan = *snapshot
	}
	return s, info, nil
}

// checkColumnIdentity refuses to plan when a tier column's lake column is
// another Iceberg field than when a committed promotion of this table read
// it (a column dropped and added again under its name, two columns' names
// swapped): the tier serves the old column's values under that name, and
// the tier schema, compared by names and types, cannot tell. Promotions
// whose scan snapshot has expired are not checked (their schema is not
// known any more).
func checkColumnIdentity(pol *policies.Policy, info *lake.TableInfo, schema kv.TableSchema, records map[string][]Record) error {
	cur := map[string]int{}
	for _, f := range info.Schema.Fields {
		cur[f.Name] = f.ID
	}
	schemas := map[int]lake.SchemaInfo{}
	for _, sc := range info.Schemas {
		schemas[sc.ID] = sc
	}
	snapSchema := map[int64]int{}
	for _, sn := range info.Snapshots {
		if sn.SchemaID != nil {
			snapSchema[sn.ID] = *sn.SchemaID
		}
	}
	tierCol := map[string]bool{}
	for _, c := range schema.Columns {
		tierCol[c.Name] = true
	}
	checked := map[int]bool{}
	for _, rs := range records {
		for _, r := range rs {
			sid, ok := snapSchema[r.ScanSnapshotID]
			if r.Phase != PhaseCommitted || !ok || checked[sid] {
				continue
			}
			checked[sid] = true
			for _, f := range schemas[sid].Fields {
				if id, ok := cur[f.Name]; ok && tierCol[f.Name] && id != f.ID {
					return fmt.Errorf("%w: policy %s: column %s of lake table %s is Iceberg field %d now, but was field %d when %s was promoted (lake snapshot %d): "+
						"the tier serves the old column's values under its name; drop the tier table %s.%s (or promote into another one) to promote the new column",
						ErrSchema, pol.Name(), f.Name, pol.Source().Table, id, f.ID, r.ID, r.ScanSnapshotID, r.Database, r.Table)
				}
			}
		}
	}
	return nil
}

// checkSelectionFields refuses a policy whose selection (where, window)
// names a field that no partition spec of the lake table has: such a
// policy (a typo, most likely) would select nothing, forever, each item
// merely "not selected". It also refuses a field the lake table has that
// is not one of the tier's partition keys (a bucket or void field, or an
// older spec's field over another column or transform): a tier partition
// holds every value of such a field, so no one value decides it, and the
// decision would rest on whichever lake partition came first. A field of
// an older spec over a key's column and transform (a renamed day field)
// is a key.
func checkSelectionFields(pol *policies.Policy, info *lake.TableInfo, m lake.PartitionMapping) error {
	type keyOf struct {
		source    int
		transform string
	}
	keys := map[keyOf]bool{}
	for _, k := range m.Keys {
		keys[keyOf{k.SourceID, k.Transform}] = true
	}
	var have, usable []string
	for _, spec := range info.Specs {
		for _, f := range spec.Fields {
			if !slices.Contains(have, f.Name) {
				have = append(have, f.Name)
			}
			if keys[keyOf{f.SourceID, f.Transform}] && !slices.Contains(usable, f.Name) {
				usable = append(usable, f.Name)
			}
		}
	}
	sel := pol.Selection()
	var named []string
	for _, c := range sel.Where {
		named = append(named, c.Field)
	}
	if sel.Window != nil {
		named = append(named, sel.Window.Field)
	}
	for _, f := range named {
		switch {
		case slices.Contains(usable, f):
			continue
		case slices.Contains(have, f):
			keys := "none: the tier table is not partitioned"
			if len(usable) > 0 {
				keys = strings.Join(usable, ", ")
			}
			return fmt.Errorf("%w: policy %s: the selection names partition field %s of lake table %s, which is not a tier partition key: "+
				"a tier partition holds every value of it, so no one value selects it (fields to select on: %s)",
				ErrSchema, pol.Name(), f, pol.Source().Table, keys)
		}
		fields := "it is not partitioned"
		if len(have) > 0 {
			fields = "its partition fields: " + strings.Join(have, ", ")
		}
		return fmt.Errorf("%w: policy %s: the selection names partition field %s, which lake table %s does not have (%s)",
			ErrSchema, pol.Name(), f, pol.Source().Table, fields)
	}
	return nil
}

// planState is a plan plus what executing its items needs.
type planState struct {
	plan   *Plan
	src    *source
	groups map[string]*group
	// removed are the tier partitions all of whose lake partitions are
	// Removed: no row to promote (see removedItem).
	removed map[string]*group
	// records are the ledger's records of this policy's lake table, by
	// tier partition.
	records map[string][]Record
	// tierParts are the target table's partitions in the tier, read by
	// targetDropped when first needed.
	tierParts map[string]bool
}

// plan plans pol for who asks (the zero item: the policy's own
// reconcile). With only set, only that tier partition is planned (and
// ErrNotFound returned when the lake has no such partition). A request's
// items promote again targets dropped from the tier since their
// promotion, and try again identities that failed terminally; a forced
// one (a request of one target) also skips the policy's selection.
func (p *Promoter) plan(ctx context.Context, pol *policies.Policy, only *string, asker item) (*planState, error) {
	src, info, err := p.openSource(ctx, pol, nil)
	if err != nil {
		return nil, err
	}
	s, t := pol.Source(), pol.Target()
	plan := &Plan{
		Policy: pol.Name(), Catalog: s.Catalog, LakeTable: s.Table, LakeSnapshotID: src.scan,
		Database: t.Database, Table: t.Table, Schema: src.schema, Buckets: src.schema.Buckets,
	}
	have, exists, err := p.cfg.Tier.TableSchema(ctx, t.Database, t.Table)
	if err != nil {
		return nil, fmt.Errorf("promoter: policy %s: target %s.%s: %w", pol.Name(), t.Database, t.Table, err)
	}
	plan.TableExists = exists
	if exists {
		if d := kv.SchemaDiff(have, src.schema); d != "" {
			return nil, fmt.Errorf("%w: policy %s: target %s.%s exists with another schema: %s",
				ErrSchema, pol.Name(), t.Database, t.Table, d)
		}
	} else if !t.CreateIfMissing {
		return nil, fmt.Errorf("%w: policy %s: target table %s.%s does not exist and createIfMissing is false",
			ErrNotFound, pol.Name(), t.Database, t.Table)
	} else {
		plan.WillCreate = true
	}
	ps := &planState{plan: plan, src: src, groups: map[string]*group{}, removed: map[string]*group{}, records: map[string][]Record{}}
	if info.CurrentSnapshotID == nil {
		if only != nil {
			// An empty lake table (created so, or dropped and created
			// again since a request was stored) has no partition at all.
			return nil, fmt.Errorf("%w: policy %s: the lake table %s has no snapshot, so no partition mapped to %q", ErrNotFound, pol.Name(), s.Table, *only)
		}
		return ps, nil
	}
	parts, err := p.lakePartitions(ctx, src.lk, s.Catalog, s.Table, info)
	if err != nil {
		return nil, fmt.Errorf("promoter: policy %s: partitions of %s: %w", pol.Name(), s.Table, err)
	}
	for _, lp := range parts {
		name, err := src.mapping.PartitionName(lp)
		if err != nil {
			if errors.Is(err, lake.ErrNoTierPartition) {
				if !lp.Removed {
					plan.Unmapped = append(plan.Unmapped, partitionRefString(lp.Ref())+": "+err.Error())
				}
				continue
			}
			return nil, fmt.Errorf("promoter: policy %s: %w", pol.Name(), err)
		}
		g := ps.groups[name]
		if g == nil {
			g = &group{name: name}
			ps.groups[name] = g
		}
		g.parts = append(g.parts, lp)
	}
	// A lake partition whose data files were all removed holds no row,
	// but its removal changes the tier partition it shares with others
	// (their newest update, and so the identity); alone, it makes none,
	// and is only reported when the tier holds what was promoted of it.
	for name, g := range ps.groups {
		if !slices.ContainsFunc(g.parts, func(p lake.PartitionStats) bool { return !p.Removed }) {
			delete(ps.groups, name)
			ps.removed[name] = g
		}
	}
	// A record the ledger cannot read might be of this policy's target:
	// plan nothing rather than plan without it.
	recs, err := p.cfg.Ledger.List(ctx)
	if err != nil {
		p.logUnreadable(err)
		return nil, err
	}
	for _, r := range recs {
		if r.Catalog == s.Catalog && r.LakeTable == s.Table && r.Database == plan.Database && r.Table == plan.Table {
			ps.records[r.Partition] = append(ps.records[r.Partition], r)
		}
	}
	if only != nil {
		_, live := ps.groups[*only]
		if _, removed := ps.removed[*only]; !live && !(removed && unfinished(ps.records[*only]) != nil) {
			return nil, fmt.Errorf("%w: policy %s: the lake table %s has no partition mapped to %q", ErrNotFound, pol.Name(), s.Table, *only)
		}
	}

	if err := checkColumnIdentity(pol, info, src.schema, ps.records); err != nil {
		return nil, err
	}

	names := make([]string, 0, len(ps.groups))
	for n := range ps.groups {
		names = append(names, n)
	}
	slices.Sort(names)
	aliases := keyAliases(info, src.mapping)
	cands := make([]policies.Candidate, len(names))
	for i, n := range names {
		cands[i] = candidate(ps.groups[n], src.mapping, aliases)
	}
	decisions := pol.Select(cands, p.now())
	for i, n := range names {
		if only != nil && n != *only {
			continue
		}
		d := decisions[i]
		it := p.planItem(ctx, ps, ps.groups[n], d, asker)
		plan.Items = append(plan.Items, it)
	}
	if len(ps.removed) > 0 {
		// Selected as the policy would select them among the others (a
		// partition outside the selection is none of its business), but
		// an unfinished promotion is settled whatever the selection: its
		// item is the one reconciles resume it by.
		removed := slices.Sorted(maps.Keys(ps.removed))
		all := slices.Clone(cands)
		for _, n := range removed {
			all = append(all, candidate(ps.removed[n], src.mapping, aliases))
		}
		rd := pol.Select(all, p.now())[len(cands):]
		for i, n := range removed {
			if only != nil && n != *only {
				continue
			}
			if r := unfinished(ps.records[n]); r != nil {
				plan.Items = append(plan.Items, PlanItem{
					Key: Key{Policy: plan.Policy, Partition: n}, LakePartitions: r.LakePartitions,
					SourceSnapshotID: r.SourceSnapshotID, Action: ActionSkip, Reason: ReasonInProgress + r.ID, PromotionID: r.ID,
				})
				continue
			}
			if !rd[i].Selected {
				continue
			}
			if it, ok := p.removedItem(ctx, ps, ps.removed[n]); ok {
				plan.Items = append(plan.Items, it)
			}
		}
		slices.SortStableFunc(plan.Items, func(a, b PlanItem) int { return strings.Compare(a.Key.Partition, b.Key.Partition) })
	}
	return ps, nil
}

// unfinished returns the record among records whose promotion has not
// ended (at most one: a key never has two), or nil.
func unfinished(records []Record) *Record {
	for i, r := range records {
		if !r.Phase.Terminal() {
			return &records[i]
		}
	}
	return nil
}

// requestedBefore reports whether r failed with ErrInterrupted after the
// request asker was stored (its etcd revision is below the record's).
func requestedBefore(r Record, asker item) bool {
	return strings.HasPrefix(r.Error, ErrInterrupted.Error()) && asker.rev != 0 && asker.rev < r.Revision
}

// removedItem is the item of a tier partition whose lake data files were
// all removed (every row deleted) after a promotion the tier still holds:
// skipped as stale, since replacing promoted data is out of scope, so the
// plan says that the tier keeps rows the lake no longer has. Without such
// a commit (never promoted, or its partition dropped from the tier) there
// is nothing to say: no item; nor for a partition the policy does not
// select.
func (p *Promoter) removedItem(ctx context.Context, ps *planState, g *group) (PlanItem, bool) {
	var last *Record
	for i, r := range ps.records[g.name] {
		if r.Phase == PhaseCommitted && (last == nil || r.CreatedAt.After(last.CreatedAt)) {
			last = &ps.records[g.name][i]
		}
	}
	if last == nil {
		return PlanItem{}, false
	}
	if dropped, err := p.targetDropped(ctx, ps, g.name); err != nil || dropped {
		return PlanItem{}, false
	}
	plan := ps.plan
	src := g.newest().LastUpdatedSnapshotID
	it := PlanItem{
		Key:              Key{Policy: plan.Policy, Partition: g.name},
		SourceSnapshotID: src,
		Action:           ActionSkip,
		Reason: fmt.Sprintf("stale: promoted from snapshot %d by %s, lake now at %d, which removed every data file of the partition: "+
			"the tier keeps the promoted rows (drop the partition to follow the lake)", last.SourceSnapshotID, last.ID, src),
	}
	it.PromotionID = PromotionID(plan.Catalog, plan.LakeTable, plan.Database+"."+plan.Table, g.name, src)
	return it, true
}

// candidate turns a tier partition's lake partitions into the policy's
// candidate. Values come from the lake partition of the default spec (the
// mapping's), else from the newest, each under every name the lake
// table's specs give its field (aliases: a renamed field is selected by
// its old name and its new one, as checkSelectionFields accepts both).
func candidate(g *group, m lake.PartitionMapping, aliases map[string][]string) policies.Candidate {
	c := policies.Candidate{Name: g.name, Values: map[string]string{}, Transforms: map[string]string{}}
	rep := g.newest()
	for _, lp := range g.parts {
		c.Rows += lp.RecordCount
		c.Bytes += lp.TotalBytes
		if lp.SpecID == m.SpecID {
			rep = lp
		}
	}
	for _, v := range rep.Values {
		c.Values[v.Name] = v.Human
		c.Transforms[v.Name] = v.Transform
	}
	for _, v := range rep.Values {
		for _, name := range aliases[v.Name] {
			if _, ok := c.Values[name]; !ok {
				c.Values[name] = v.Human
				c.Transforms[name] = v.Transform
			}
		}
	}
	return c
}

// keyAliases maps the name of each partition field that is a tier
// partition key (its source column and transform are a mapping key's) to
// every name any of the lake table's specs gives such a field.
func keyAliases(info *lake.TableInfo, m lake.PartitionMapping) map[string][]string {
	type keyOf struct {
		source    int
		transform string
	}
	isKey := map[keyOf]bool{}
	for _, k := range m.Keys {
		isKey[keyOf{k.SourceID, k.Transform}] = true
	}
	names := map[keyOf][]string{}
	for _, spec := range info.Specs {
		for _, f := range spec.Fields {
			if k := (keyOf{f.SourceID, f.Transform}); isKey[k] && !slices.Contains(names[k], f.Name) {
				names[k] = append(names[k], f.Name)
			}
		}
	}
	out := map[string][]string{}
	for _, ns := range names {
		for _, n := range ns {
			out[n] = ns
		}
	}
	return out
}

// targetDropped reports whether the tier no longer has a target the ledger
// has a commit of: its table, or its partition, was dropped since. The
// plan's partition list is read once, when first needed.
func (p *Promoter) targetDropped(ctx context.Context, ps *planState, partition string) (bool, error) {
	if !ps.plan.TableExists {
		return true, nil
	}
	if partition == "" {
		return false, nil
	}
	if ps.tierParts == nil {
		parts, err := p.cfg.Tier.Partitions(ctx, ps.plan.Database, ps.plan.Table)
		if err != nil {
			return false, err
		}
		ps.tierParts = make(map[string]bool, len(parts))
		for _, n := range parts {
			ps.tierParts[n] = true
		}
	}
	return !ps.tierParts[partition], nil
}

// promotedNote is what a not-selected item's reason adds when the ledger
// has a commit of its target all the same (promoted on request, or while
// the selection included it), which "not selected" alone would hide.
// dropped is asked only when there is such a commit: it reports whether
// the tier has dropped the target since.
func promotedNote(records []Record, it PlanItem, dropped func() bool) string {
	var found *Record // a commit of this lake data, else the newest commit
	for i, r := range records {
		if r.Phase != PhaseCommitted {
			continue
		}
		if r.ID == it.PromotionID || r.SourceSnapshotID == it.SourceSnapshotID {
			found = &records[i]
			break
		}
		if found == nil || r.UpdatedAt.After(found.UpdatedAt) {
			found = &records[i]
		}
	}
	if found == nil {
		return ""
	}
	note := "promoted by " + found.ID
	if found.SourceSnapshotID != it.SourceSnapshotID {
		note += fmt.Sprintf(" from lake snapshot %d", found.SourceSnapshotID)
	}
	if dropped() {
		note += "; dropped from the tier since"
	}
	return " (" + note + ")"
}

// lakeSnapshot names one snapshot of one lake table (the table's UUID
// tells a table dropped and created again under its name).
type lakeSnapshot struct {
	catalog, table, uuid string
	snapshot             int64
}

// lakePartitions lists the partitions of lake table (info describes it) at
// its current snapshot. A snapshot never changes, so the promoter keeps
// the last list of each table and answers the plans at the same snapshot
// from it: promoting a table's partitions one by one would otherwise list
// every partition again for each (0.1 s a plan at 3,650 partitions). The
// list is shared: callers do not change it.
func (p *Promoter) lakePartitions(ctx context.Context, lk Lake, catalog, table string, info *lake.TableInfo) ([]lake.PartitionStats, error) {
	key := lakeSnapshot{catalog: catalog, table: table, uuid: info.UUID, snapshot: *info.CurrentSnapshotID}
	p.mu.Lock()
	parts, ok := p.mu.lakeParts[key]
	p.mu.Unlock()
	if ok {
		return parts, nil
	}
	parts, err := lk.Partitions(ctx, table, info.CurrentSnapshotID)
	if err != nil {
		return nil, err
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	for k := range p.mu.lakeParts {
		if k.catalog == key.catalog && k.table == key.table {
			delete(p.mu.lakeParts, k) // an older snapshot's
		}
	}
	p.mu.lakeParts[key] = parts
	return parts, nil
}

// planItem decides one tier partition.
func (p *Promoter) planItem(ctx context.Context, ps *planState, g *group, d policies.Decision, asker item) PlanItem {
	requested := asker.requested || asker.forced
	plan := ps.plan
	newest := g.newest()
	it := PlanItem{
		Key:              Key{Policy: plan.Policy, Partition: g.name},
		LakePartitions:   g.refs(),
		SourceSnapshotID: newest.LastUpdatedSnapshotID,
		Rows:             d.Candidate.Rows,
		Bytes:            d.Candidate.Bytes,
		Action:           ActionSkip,
		EstimatedBuild:   estimateBuild(d.Candidate.Bytes),
	}
	it.PromotionID = PromotionID(plan.Catalog, plan.LakeTable, plan.Database+"."+plan.Table, g.name, it.SourceSnapshotID)
	if !d.Selected && !asker.forced {
		// An unfinished promotion of a target the policy does not select
		// (a request's, or one the window has moved past) is still
		// settled by the reconciles, as a selected one is.
		for _, r := range ps.records[g.name] {
			if !r.Phase.Terminal() {
				it.Reason = ReasonInProgress + r.ID
				return it
			}
		}
		note := promotedNote(ps.records[g.name], it, func() bool {
			dropped, err := p.targetDropped(ctx, ps, g.name)
			return err == nil && dropped
		})
		it.Reason = "not selected: " + d.Reason + note
		return it
	}
	// A committed record's target may have been dropped from the tier since
	// (by an operator, or a retention job of its own): a plan goes on
	// skipping it, so that what was dropped is not promoted back on its
	// own, and says so; a request promotes it again.
	committed := func(reason string) (string, bool) {
		dropped, err := p.targetDropped(ctx, ps, g.name)
		switch {
		case err != nil:
			return "cannot check the target: " + err.Error(), true
		case dropped && requested:
			return "", false
		case dropped:
			return reason + " (dropped from the tier since; a request promotes it again)", true
		}
		return reason, true
	}
	for _, r := range ps.records[g.name] {
		if r.ID == it.PromotionID {
			switch {
			case r.Phase == PhaseCommitted:
				reason, skip := committed("already promoted by " + r.ID)
				if !skip {
					continue
				}
				it.Reason = reason
				return it
			case !r.Phase.Terminal():
				it.Reason = ReasonInProgress + r.ID
				return it
			case r.Phase == PhaseFailed && !r.Retriable && !requested:
				it.Reason = fmt.Sprintf("failed: %s (attempt %d; request it to try again)", r.Error, r.Attempt)
				return it
			case r.Phase == PhaseFailed && requestedBefore(r, asker):
				// A request stored before its builds brought the promoter
				// down MaxInterruptedBuilds times (the request is still
				// stored when the process dies) would start them again,
				// for ever: only one made since does.
				it.Reason = fmt.Sprintf("failed: %s (attempt %d; requested before it failed: request it again to try again)", r.Error, r.Attempt)
				return it
			}
			continue
		}
		switch {
		case r.Phase == PhaseCommitted:
			// The same lake data under another id (a ledger written before the
			// identity named the tier table), or older lake data.
			reason := "already promoted by " + r.ID
			if r.SourceSnapshotID != it.SourceSnapshotID {
				reason = fmt.Sprintf("stale: promoted from snapshot %d by %s, lake now at %d",
					r.SourceSnapshotID, r.ID, it.SourceSnapshotID)
			}
			reason, skip := committed(reason)
			if !skip {
				continue
			}
			it.Reason = reason
			return it
		case !r.Phase.Terminal():
			it.Reason = ReasonInProgress + r.ID
			return it
		}
	}
	// A partition the plan's list (read for a dropped target) lacks is
	// empty without asking the tier again.
	if plan.TableExists && !(g.name != "" && ps.tierParts != nil && !ps.tierParts[g.name]) {
		empty, err := p.cfg.Tier.IsEmpty(ctx, plan.Database, plan.Table, g.name)
		switch {
		case err != nil:
			it.Reason = "cannot check the target: " + err.Error()
			return it
		case !empty:
			it.Reason = "target not empty"
			return it
		}
	}
	it.Action, it.Reason, it.Attempt = ActionPromote, "", 1
	for _, r := range ps.records[g.name] {
		if r.ID == it.PromotionID {
			it.Attempt = r.Attempt + 1
		}
	}
	return it
}
