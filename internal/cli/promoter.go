package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/thawdb/thaw/internal/daemon"
	"github.com/thawdb/thaw/internal/flock"
	"github.com/thawdb/thaw/promoter"
	"github.com/thawdb/thaw/promoter/promoterhttp"
)

// promoterLogOutput receives the logs of thaw promoter and thaw plan.
var promoterLogOutput io.Writer = os.Stderr

// promoterIsTerminal reports whether w is a terminal (a progress bar is
// drawn there); tests replace it.
var promoterIsTerminal = isTerminal

// defaultPromoter is where promote and status find the promoter when
// neither --promoter nor THAW_PROMOTER says otherwise.
func defaultPromoter() string {
	if v := os.Getenv("THAW_PROMOTER"); v != "" {
		return v
	}
	return daemon.DefaultPromoterListen
}

// runPromoter is `thaw promoter`: the promoter daemon.
func runPromoter(ctx context.Context, stdout io.Writer, args []string) error {
	fs := newFlagSet("thaw promoter", stdout)
	config := fs.String("config", "", "YAML config file (required; see docs/promoter.md)")
	listen := fs.String("listen", "", "HOST:PORT of the API listener (default "+daemon.DefaultPromoterListen+"); overrides listen")
	dataDir := fs.String("data-dir", "", "data directory (embedded tier, spill files); overrides data_dir")
	check := checkFlag(fs)
	if err := parseFlags(fs, args, false); err != nil {
		return err
	}
	cfg, err := loadPromoterConfig(*config, "thaw promoter")
	if err != nil {
		return err
	}
	setIf(&cfg.Listen, *listen)
	setIf(&cfg.DataDir, *dataDir)
	if err := cfg.Validate(); err != nil {
		return fmt.Errorf("promoter config: %w", err)
	}
	if *check {
		return checked(stdout, "thaw promoter", *config, cfg.CheckFiles())
	}
	log := daemon.NewLogger(promoterLogOutput, cfg.Log)
	tier := "tier at " + cfg.Tier.Address
	if cfg.Tier.IsEmbedded() {
		tier = "embedded tier in " + cfg.DataDir + "/tier"
	}
	return daemon.RunPromoter(ctx, cfg, daemon.PromoterOptions{RunOptions: daemon.RunOptions{Logger: log, OnReady: func(addr string) {
		fmt.Fprintf(unchecked(stdout), "thaw promoter: serving on %s%s (%s)\n", cfg.TLS.Scheme(), addr, tier)
	}}, ConfigFile: *config})
}

// loadPromoterConfig decodes the file strictly over the defaults and
// resolves its policy paths against the file's directory; the caller
// applies flags and validates.
func loadPromoterConfig(path, cmd string) (daemon.PromoterConfig, error) {
	var cfg daemon.PromoterConfig
	if path == "" {
		return cfg, usageError("%s needs --config", cmd)
	}
	if err := loadRoleConfig(path, &cfg); err != nil {
		return cfg, err
	}
	cfg.ResolvePaths(dirOf(path))
	return cfg, nil
}

func dirOf(path string) string {
	if i := strings.LastIndexAny(path, `/\`); i >= 0 {
		return path[:i+1]
	}
	return "."
}

// runPlan is `thaw plan`: what the policies would promote now.
func runPlan(ctx context.Context, stdout io.Writer, args []string) error {
	fs := newFlagSet("thaw plan", stdout)
	config := fs.String("config", "", "promoter config file: plan in-process against its catalogs and tier (read-only)")
	addr := fs.String("promoter", "", "ask a running promoter (HOST:PORT or URL) instead of planning in-process")
	policy := fs.String("policy", "", "the policy to plan by NAME, or a policy FILE or directory to plan instead of the config's policies (default: every policy of the config)")
	output := fs.String("output", "table", "output format: table or json")
	timeout := fs.Duration("timeout", 5*time.Minute, "give up after this long")
	if err := parseFlags(fs, args, false); err != nil {
		return err
	}
	policyFile := ""
	if isPolicyPath(*policy) {
		if *addr != "" {
			return usageError("thaw plan --promoter plans a running promoter's policies by name, not the file %q", *policy)
		}
		policyFile, *policy = *policy, ""
	}
	if err := checkOutput(*output); err != nil {
		return err
	}
	if (*config == "") == (*addr == "") {
		return usageError("thaw plan needs exactly one of --config (in-process) and --promoter (a running promoter)")
	}
	if *timeout <= 0 {
		return usageError("--timeout must be positive")
	}
	ctx, cancel := context.WithTimeout(ctx, *timeout)
	defer cancel()
	var plans []promoterhttp.Plan
	var failed promoterhttp.PlanErrors // policies of a plan of all that could not be planned
	if *addr != "" {
		c, err := promoterClient(*addr)
		if err != nil {
			return usageError("%v", err)
		}
		if plans, err = c.Plan(ctx, *policy); err != nil && !errors.As(err, &failed) {
			return err
		}
	} else {
		cfg, err := loadPromoterConfig(*config, "thaw plan")
		if err != nil {
			return err
		}
		if policyFile != "" {
			cfg.Policies = []string{policyFile} // relative to the working directory, as given
		}
		if err := cfg.Validate(); err != nil {
			return fmt.Errorf("promoter config: %w", err)
		}
		lc := cfg.Log
		if lc.Level == "info" || lc.Level == "warn" {
			lc.Level = "error" // plan prints its answer; the embedded tier's start-up warnings are noise here
		}
		ps, err := daemon.PlanPromoter(ctx, cfg, *policy, daemon.PromoterOptions{RunOptions: daemon.RunOptions{Logger: daemon.NewLogger(promoterLogOutput, lc)}})
		if errors.Is(err, flock.ErrLocked) {
			// The embedded tier's data_dir is in use: most likely by the
			// promoter of this config, which can be asked instead.
			return fmt.Errorf("%w\n(if a promoter runs with this config, ask it: thaw plan --promoter %s)", err, cfg.Listen)
		}
		if err != nil && !errors.As(err, &failed) {
			return err
		}
		for _, p := range ps {
			plans = append(plans, promoterhttp.PlanOf(p))
		}
	}
	// The policies that could not be planned fail the command (exit 1)
	// after the others' plans are shown.
	var failure error
	if len(failed) > 0 {
		failure = failed
	}
	if *output == "json" {
		if plans == nil {
			plans = []promoterhttp.Plan{}
		}
		return errors.Join(writeJSON(stdout, promoterhttp.PlansResponse{Plans: plans, Errors: failed}), failure)
	}
	for i, p := range plans {
		if i > 0 {
			fmt.Fprintln(stdout)
		}
		if err := printPlan(stdout, p); err != nil {
			return err
		}
	}
	for _, f := range failed {
		if len(plans) > 0 {
			fmt.Fprintln(stdout)
		}
		fmt.Fprintf(stdout, "policy %s: cannot plan: %s\n", f.Policy, f.Error)
	}
	return failure
}

// isPolicyPath tells a policy file or directory from a policy name: a name
// has neither a path separator nor a YAML extension and names no file.
func isPolicyPath(s string) bool {
	if s == "" {
		return false
	}
	if strings.ContainsAny(s, `/\`) || strings.HasSuffix(s, ".yaml") || strings.HasSuffix(s, ".yml") {
		return true
	}
	_, err := os.Stat(s)
	return err == nil
}

func checkOutput(o string) error {
	if o != "table" && o != "json" {
		return usageError("--output %q: want table or json", o)
	}
	return nil
}

// printPlan prints one plan as a table with a summary line.
func printPlan(w io.Writer, p promoterhttp.Plan) error {
	state := "exists"
	switch {
	case p.WillCreate:
		state = "will be created"
	case !p.TableExists:
		state = "missing"
	}
	fmt.Fprintf(w, "policy %s: lake %s/%s at snapshot %d -> tier %s.%s (%s), %s\n",
		p.Policy, p.Catalog, p.LakeTable, p.LakeSnapshotID, p.Database, p.Table, state, plural(p.Buckets, "bucket", "buckets"))
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "PARTITION\tACTION\tROWS\tBYTES\tEST. BUILD\tPROMOTION\tREASON")
	for _, it := range p.Items {
		fmt.Fprintf(tw, "%s\t%s\t%d\t%s\t%s\t%s\t%s\n", orNone(it.Partition), it.Action, it.Rows, humanBytes(it.Bytes),
			durationText(time.Duration(it.EstimatedBuild)), orNone(it.PromotionID), it.Reason)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	_, err := fmt.Fprintf(w, "total: %d to promote (%d rows, %s, estimated build %s), %d skipped\n",
		p.Promote, p.Rows, humanBytes(p.Bytes), durationText(time.Duration(p.EstimatedBuild)), p.Skip)
	return err
}

func orNone(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

// humanBytes prints a byte count with a binary unit.
func humanBytes(b int64) string {
	const unit = 1024
	if b < unit {
		return fmt.Sprintf("%d B", b)
	}
	div, exp := int64(unit), 0
	for n := b / unit; n >= unit && exp < 4; n /= unit {
		div *= unit
		exp++
	}
	return fmt.Sprintf("%.1f %ciB", float64(b)/float64(div), "KMGTP"[exp])
}

func durationText(d time.Duration) string {
	switch {
	case d <= 0:
		return "-"
	case d < time.Second:
		return d.Round(time.Millisecond).String()
	default:
		return d.Round(100 * time.Millisecond).String()
	}
}

// runPromote is `thaw promote db.table`: an on-demand promotion through a
// running promoter.
func runPromote(ctx context.Context, stdout io.Writer, args []string) error {
	fs := tierFlagSet("thaw promote", "DATABASE.TABLE", stdout)
	addr := fs.String("promoter", defaultPromoter(), "promoter HOST:PORT or URL ($THAW_PROMOTER sets the default)")
	partition := fs.String("partition", "", "tier partition to promote (default: every partition the policy selects)")
	policy := fs.String("policy", "", "policy name (needed only when several policies target the table)")
	wait := fs.Bool("wait", false, "wait until every promotion it starts or finds running ends; exit 1 if one failed")
	output := fs.String("output", "table", "output format: table or json")
	timeout := fs.Duration("timeout", 30*time.Minute, "give up after this long (with --wait)")
	pos, err := parseArgs(fs, args)
	if err != nil {
		return err
	}
	if len(pos) != 1 {
		return usageError("thaw promote needs one DATABASE.TABLE (or the lake table NAMESPACE.TABLE)")
	}
	if err := checkOutput(*output); err != nil {
		return err
	}
	req := promoter.Request{Policy: *policy, Table: pos[0], Partition: *partition}
	if err := promoterhttp.ValidateRequest(req); err != nil {
		return usageError("%v", err)
	}
	c, err := promoterClient(*addr)
	if err != nil {
		return usageError("%v", err)
	}
	if *timeout <= 0 {
		return usageError("--timeout must be positive")
	}
	ctx, cancel := context.WithTimeout(ctx, *timeout)
	defer cancel()
	items, err := c.Promote(ctx, req)
	if err != nil {
		return err
	}
	if !*wait {
		if *output == "json" {
			return writeJSON(stdout, promoterhttp.PromoteResponse{Items: nonNilItems(items)})
		}
		return printItems(stdout, items)
	}
	if *output == "table" {
		if err := printItems(stdout, items); err != nil {
			return err
		}
	}
	return waitPromotions(ctx, stdout, c, items, *output == "json")
}

func nonNilItems(items []promoterhttp.Item) []promoterhttp.Item {
	if items == nil {
		return []promoterhttp.Item{}
	}
	return items
}

func printItems(w io.Writer, items []promoterhttp.Item) error {
	if len(items) == 0 {
		_, err := fmt.Fprintln(w, "nothing selected")
		return err
	}
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "POLICY\tPARTITION\tACTION\tPROMOTION\tROWS\tBYTES\tREASON")
	for _, it := range items {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%d\t%s\t%s\n", it.Policy, orNone(it.Partition), it.Action, orNone(it.PromotionID),
			it.Rows, humanBytes(it.Bytes), it.Reason)
	}
	return tw.Flush()
}

// waitPromotions polls the promotions of the items to promote, and of
// those skipped because a promotion of their target is already running,
// until each is terminal, drawing progress on a terminal, then prints
// them.
func waitPromotions(ctx context.Context, stdout io.Writer, c *promoterhttp.Client, items []promoterhttp.Item, asJSON bool) error {
	var ids []string
	attempt := map[string]int{} // the attempt that ends a promotion; 0: any
	requested := map[string]bool{}
	// Items skipped at the request for a reason other than a commit of
	// their data (target not empty, stale, failed, ...): nothing will
	// commit for them, so the command fails, whatever else commits.
	var refused []string
	for _, it := range items {
		if it.Action == promoter.ActionPromote && it.PromotionID != "" {
			ids = append(ids, it.PromotionID)
			attempt[it.PromotionID] = it.Attempt
			requested[it.PromotionID] = true
		} else if id, ok := promoter.InProgressOf(it.Reason); ok {
			if !slices.Contains(ids, id) {
				ids = append(ids, id)
			}
		} else if !strings.HasPrefix(it.Reason, "already promoted") {
			refused = append(refused, fmt.Sprintf("%s %s: %s", it.Policy, orNone(it.Partition), it.Reason))
		}
	}
	if len(ids) == 0 && !asJSON {
		// (As JSON, the empty list of promotions is printed below, and the
		// refusals are the error, as when some were promoted.)
		if len(refused) > 0 {
			return fmt.Errorf("not promoted: %s", strings.Join(refused, "; "))
		}
		_, err := fmt.Fprintln(stdout, "nothing to wait for: no item is promoted or in progress")
		return err
	}
	bar := !asJSON && promoterIsTerminal(stdout)
	note := func(format string, args ...any) { // on stderr, below the bar
		if bar {
			fmt.Fprint(progressOutput, "\r")
		}
		fmt.Fprintf(progressOutput, "thaw: "+format+"\n", args...)
	}
	final := make(map[string]promoterhttp.Promotion)
	skipped := map[string]string{} // promotions skipped when their turn came: why
	away := false                  // the promoter did not answer the last poll
	for len(final)+len(skipped) < len(ids) {
	poll:
		for _, id := range ids {
			if _, ok := final[id]; ok {
				continue
			}
			if _, ok := skipped[id]; ok {
				continue
			}
			pr, err := c.Promotion(ctx, id)
			var ae *promoterhttp.Error
			switch {
			case promoterhttp.IsAway(err) && ctx.Err() == nil:
				// Restarting or failing over: the requests it answered are
				// stored, and the next promoter takes them up.
				if !away {
					away = true
					note("%v; still waiting for it", err)
				}
				break poll
			case away:
				away = false
				note("the promoter answers again")
			}
			switch {
			case errors.Is(err, promoter.ErrNotFound):
				continue // queued; the record is written when it is planned
			case errors.Is(err, promoter.ErrConflict) && errors.As(err, &ae):
				// Requested, then skipped when its turn came: no record will
				// be written for it.
				skipped[id] = ae.Message
				continue
			case err != nil:
				return err
			}
			switch {
			// An attempt the promoter's shutdown interrupted is promoted
			// again by the next promoter (the request is stored).
			case pr.Record.Interrupted() && requested[id] && pr.Record.Attempt >= attempt[id]:
				attempt[id] = pr.Record.Attempt + 1
				note("promotion %s attempt %d was interrupted (%s); waiting for attempt %d", id, pr.Record.Attempt, pr.Record.Error, attempt[id])
			// A terminal record of an earlier attempt (a partition promoted
			// again after it was dropped) is not this promotion's end, nor
			// is one the promoter still drives (live progress: an attempt
			// aborted retriably waits out its backoff before the next)...
			case pr.Record.Phase.Terminal() && pr.Record.Attempt >= attempt[id] && pr.Progress == nil:
				final[id] = pr
			// ... unless the attempt asked for was skipped when its turn came.
			case pr.Skipped != nil && pr.Record.Attempt < attempt[id]:
				skipped[id] = pr.Skipped.Text(id)
			case bar:
				fmt.Fprintf(stdout, "\r%s", progressLine(pr, 30))
			}
		}
		if len(final)+len(skipped) == len(ids) {
			break
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("waiting for promotions: %w", context.Cause(ctx))
		case <-time.After(250 * time.Millisecond):
		}
	}
	if bar {
		fmt.Fprint(stdout, "\r\033[K")
	}
	out := make([]promoterhttp.Promotion, 0, len(ids))
	var failed []string
	for _, id := range ids {
		if why, ok := skipped[id]; ok {
			failed = append(failed, why)
			continue
		}
		pr := final[id]
		out = append(out, pr)
		if pr.Record.Phase != promoter.PhaseCommitted {
			why := fmt.Sprintf("%s %s: %s", id, pr.Record.Phase, pr.Record.Error)
			if pr.Record.Interrupted() && !requested[id] {
				// Found running, not requested here: no stored request of
				// this command makes the next promoter run it again.
				why += " (the promoter stopped during it; this command found it running and did not request it, so it runs again only if its policy still selects it or its own request is stored: run the command again to request it)"
			}
			failed = append(failed, why)
		}
	}
	var err error
	if asJSON {
		err = writeJSON(stdout, promoterhttp.PromotionsResponse{Promotions: out})
	} else {
		err = printPromotions(stdout, out, false)
	}
	if err != nil {
		return err
	}
	if len(failed) > 0 {
		return fmt.Errorf("%d of %d promotions did not commit: %s", len(failed), len(ids), strings.Join(failed, "; "))
	}
	if len(refused) > 0 {
		return fmt.Errorf("not promoted: %s", strings.Join(refused, "; "))
	}
	return nil
}

// runStatus is `thaw status [ID]`: the promoter's ledger, or one
// promotion with its live progress.
func runStatus(ctx context.Context, stdout io.Writer, args []string) error {
	fs := tierFlagSet("thaw status", "[PROMOTION-ID]", stdout)
	addr := fs.String("promoter", defaultPromoter(), "promoter HOST:PORT or URL ($THAW_PROMOTER sets the default)")
	policy := fs.String("policy", "", "only the promotions of this policy")
	output := fs.String("output", "table", "output format: table or json")
	timeout := fs.Duration("timeout", 30*time.Second, "give up after this long")
	pos, err := parseArgs(fs, args)
	if err != nil {
		return err
	}
	if len(pos) > 1 {
		return usageError("thaw status takes at most one promotion id")
	}
	if len(pos) == 1 && *policy != "" {
		return usageError("thaw status: --policy selects promotions of the list; with a promotion id, leave it out")
	}
	c, err := promoterIDClient("thaw status", pos, *output, *addr)
	if err != nil {
		return err
	}
	if *timeout <= 0 {
		return usageError("--timeout must be positive")
	}
	ctx, cancel := context.WithTimeout(ctx, *timeout)
	defer cancel()
	if len(pos) == 1 {
		pr, err := c.Promotion(ctx, pos[0])
		if err != nil {
			return err
		}
		if *output == "json" {
			return writeJSON(stdout, pr)
		}
		return printPromotion(stdout, pr, promoterIsTerminal(stdout))
	}
	// Records the promoter cannot read come as an error beside the
	// others: print what can be read, then them, and exit 1.
	st, err := c.Status(ctx, *policy)
	unreadable := promoterhttp.UnreadableOf(err)
	if err != nil && (!errors.Is(err, promoter.ErrUnreadable) || len(unreadable) == 0) {
		return err
	}
	if *output == "json" {
		if st.Promotions == nil {
			st.Promotions = []promoterhttp.Promotion{}
		}
		st.Unreadable = unreadable
		err = writeJSON(stdout, st)
	} else {
		err = printStatus(stdout, st.Promotions, st.Queued, promoterIsTerminal(stdout))
		if err == nil && len(unreadable) > 0 {
			err = printUnreadable(stdout, unreadable)
		}
	}
	if err != nil {
		return err
	}
	return unreadableStatusError(unreadable)
}

// promoterIDClient checks the promotion ids and the --output of cmd (usage
// errors) and returns the client of the promoter at addr.
func promoterIDClient(cmd string, ids []string, output, addr string) (*promoterhttp.Client, error) {
	for _, id := range ids {
		if !promoter.IsPromotionID(id) {
			return nil, usageError("%s: %q is not a promotion id: an id is p- and 16 lowercase hex digits, as thaw status and thaw promote print it", cmd, id)
		}
	}
	if err := checkOutput(output); err != nil {
		return nil, err
	}
	c, err := promoterClient(addr)
	if err != nil {
		return nil, usageError("%v", err)
	}
	return c, nil
}

// runCancel is `thaw cancel ID...`: withdraw requested promotions that
// wait in the promoter's queue.
func runCancel(ctx context.Context, stdout io.Writer, args []string) error {
	fs := tierFlagSet("thaw cancel", "PROMOTION-ID...", stdout)
	addr := fs.String("promoter", defaultPromoter(), "promoter HOST:PORT or URL ($THAW_PROMOTER sets the default)")
	output := fs.String("output", "table", "output format: table or json")
	timeout := fs.Duration("timeout", 30*time.Second, "give up after this long")
	pos, err := parseArgs(fs, args)
	if err != nil {
		return err
	}
	if len(pos) == 0 {
		return usageError("thaw cancel needs the ids of the queued promotions to withdraw (thaw status lists them)")
	}
	c, err := promoterIDClient("thaw cancel", pos, *output, *addr)
	if err != nil {
		return err
	}
	if *timeout <= 0 {
		return usageError("--timeout must be positive")
	}
	ctx, cancel := context.WithTimeout(ctx, *timeout)
	defer cancel()
	out := promoterhttp.CancelledResponse{Cancelled: []promoterhttp.QueuedPromotion{}}
	var errs []error
	for _, id := range pos {
		q, err := c.Cancel(ctx, id)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		out.Cancelled = append(out.Cancelled, q)
		if *output == "table" {
			fmt.Fprintf(stdout, "cancelled %s: %s (it was %s)\n", q.ID,
				targetText(promoter.Record{Database: q.Database, Table: q.Table, Partition: q.Partition}), q.Where)
		}
	}
	if *output == "json" {
		if err := writeJSON(stdout, out); err != nil {
			return err
		}
	}
	return joinErrors(errs)
}

// printUnreadable prints the warning section of the ledger records the
// promoter cannot read, after the table.
func printUnreadable(w io.Writer, us []promoterhttp.UnreadableRecord) error {
	fmt.Fprintf(w, "\nwarning: the promoter cannot read %s (left as is; see \"Ledger record format and upgrades\" in docs/promoter.md):\n",
		plural(len(us), "ledger record", "ledger records"))
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "  KEY\tREASON")
	for _, u := range us {
		fmt.Fprintf(tw, "  %s\t%s\n", u.Key, u.Error)
	}
	return tw.Flush()
}

// unreadableStatusError is thaw status's error (exit 1) when the ledger
// holds records the promoter cannot read; nil when it holds none.
func unreadableStatusError(us []promoterhttp.UnreadableRecord) error {
	if len(us) == 0 {
		return nil
	}
	keys := make([]string, 0, len(us))
	for _, u := range us {
		keys = append(keys, u.Key)
	}
	return fmt.Errorf("status: the promoter cannot read %s: %s", plural(len(us), "ledger record", "ledger records"), strings.Join(keys, ", "))
}

// plural is "1 record" or "2 records".
func plural[N ~int | ~int32 | ~int64](n N, one, many string) string {
	if n == 1 {
		return "1 " + one
	}
	return fmt.Sprintf("%d %s", n, many)
}

// printPromotions prints promotions as a table; bar adds a progress bar to
// the running ones.
func printPromotions(w io.Writer, prs []promoterhttp.Promotion, bar bool) error {
	return printStatus(w, prs, nil, bar)
}

// printStatus prints the requested promotions waiting in the queue (phase
// queued, in queue order), then the promotions, as one table.
func printStatus(w io.Writer, prs []promoterhttp.Promotion, queued []promoterhttp.QueuedPromotion, bar bool) error {
	if len(prs) == 0 && len(queued) == 0 {
		_, err := fmt.Fprintln(w, "no promotions")
		return err
	}
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "ID\tPOLICY\tTARGET\tPHASE\tATTEMPT\tROWS\tBYTES\tDURATION\tUPDATED\tDETAIL")
	for _, q := range queued {
		fmt.Fprintf(tw, "%s\t%s\t%s\tqueued\t\t\t\t\t\t%s\n", q.ID, q.Policy,
			targetText(promoter.Record{Database: q.Database, Table: q.Table, Partition: q.Partition}), q.Where)
	}
	for _, pr := range prs {
		r := pr.Record
		detail := r.Error
		if pr.Progress != nil && !r.Phase.Terminal() {
			if bar {
				detail = progressLine(pr, 20)
			} else {
				detail = progressText(pr.Progress)
			}
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%d\t%d\t%s\t%s\t%s\t%s\n", r.ID, r.Policy, targetText(r), r.Phase, r.Attempt,
			r.Rows, humanBytes(r.Bytes), durationText(recordDuration(r)), r.UpdatedAt.Local().Format(time.DateTime), detail)
	}
	return tw.Flush()
}

// printPromotion prints one promotion, field by field.
func printPromotion(w io.Writer, pr promoterhttp.Promotion, bar bool) error {
	r := pr.Record
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	line := func(k, v string) {
		if v != "" {
			fmt.Fprintf(tw, "%s:\t%s\n", k, v)
		}
	}
	line("id", r.ID)
	line("policy", r.Policy)
	line("source", fmt.Sprintf("%s/%s at snapshot %d (scanned %d)", r.Catalog, r.LakeTable, r.SourceSnapshotID, r.ScanSnapshotID))
	line("lake partitions", strings.Join(r.LakePartitions, ", "))
	line("target", targetText(r))
	line("phase", string(r.Phase))
	line("attempt", fmt.Sprint(r.Attempt))
	interrupted := r.InterruptedBuilds
	if r.Phase == promoter.PhaseBuilding && pr.Progress != nil {
		interrupted-- // the build running now is counted too (Record.InterruptedBuilds)
	}
	if interrupted > 0 {
		line("interrupted builds", fmt.Sprintf("%d (began and never ended: their promoter stopped mid-build)", interrupted))
	}
	line("transaction", r.TxnID)
	line("buckets", fmt.Sprint(r.Buckets))
	line("rows", fmt.Sprint(r.Rows))
	line("bytes", humanBytes(r.Bytes))
	if r.Duplicates > 0 {
		line("duplicates", fmt.Sprint(r.Duplicates))
	}
	line("created", r.CreatedAt.Local().Format(time.RFC3339))
	line("updated", r.UpdatedAt.Local().Format(time.RFC3339))
	if r.BegunAt != nil {
		line("begun", r.BegunAt.Local().Format(time.RFC3339))
	}
	if r.CommittedAt != nil {
		line("committed", r.CommittedAt.Local().Format(time.RFC3339))
	}
	dur := durationText(recordDuration(r))
	if r.Attempt > 1 && r.BegunAt != nil {
		dur += fmt.Sprintf(" (attempt %d, from its begin)", r.Attempt)
	}
	line("duration", dur)
	if r.Error != "" {
		retr := ""
		if r.Retriable {
			retr = " (retriable)"
		}
		line("error", r.Error+retr)
	}
	if q := pr.Queued; q != nil {
		line("requested again", "queued for its next attempt, "+q.Where)
	}
	if s := pr.Skipped; s != nil {
		line("requested again", fmt.Sprintf("skipped when its turn came (%s): %s", s.At.Local().Format(time.RFC3339), s.Reason))
	}
	if p := pr.Progress; p != nil && !r.Phase.Terminal() {
		if bar {
			line("progress", progressLine(pr, 30))
		} else {
			line("progress", progressText(p))
		}
	}
	return tw.Flush()
}

func targetText(r promoter.Record) string {
	if r.Partition == "" {
		return r.Database + "." + r.Table
	}
	return r.Database + "." + r.Table + "/" + r.Partition
}

// recordDuration is how long the promotion took (or has taken so far):
// its first attempt from the record's creation; a later one (a retry, or
// a promotion again after the target was dropped, maybe days later) from
// that attempt's Begin, once it has begun.
func recordDuration(r promoter.Record) time.Duration {
	start := r.CreatedAt
	if r.Attempt > 1 && r.BegunAt != nil {
		start = *r.BegunAt
	}
	if r.CommittedAt != nil {
		return r.CommittedAt.Sub(start)
	}
	return r.UpdatedAt.Sub(start)
}

// progressText is progress without a bar: "building: 2/4 buckets, 1000 rows
// read", or the phase alone before Begin has given the buckets.
func progressText(p *promoterhttp.Progress) string {
	if len(p.Buckets) == 0 && p.RowsRead == 0 {
		return string(p.Phase)
	}
	return fmt.Sprintf("%s: %d/%d buckets, %d rows read (%s)", p.Phase, p.BucketsDone, len(p.Buckets), p.RowsRead, humanBytes(p.BytesRead))
}

// progressLine draws "[#####.....]  50% building: 2/4 buckets, ..." for a
// running promotion: the bar is the fraction of buckets done.
func progressLine(pr promoterhttp.Promotion, width int) string {
	p := pr.Progress
	if p == nil {
		return fmt.Sprintf("[%s] %s", strings.Repeat(".", width), pr.Record.Phase)
	}
	frac := 0.0
	if n := len(p.Buckets); n > 0 {
		// Within 0..1 whatever the promoter answered (a count past the
		// buckets made the bar's padding negative: a panic).
		frac = min(max(float64(p.BucketsDone)/float64(n), 0), 1)
	}
	fill := int(frac * float64(width))
	return fmt.Sprintf("[%s%s] %3.0f%% %s", strings.Repeat("#", fill), strings.Repeat(".", width-fill), frac*100, progressText(p))
}

// promoterClient is a client of the promoter's API at addr that trusts
// $THAW_TLS_CA for an https:// addr.
func promoterClient(addr string) (*promoterhttp.Client, error) {
	tc, err := daemon.ClientTLSFromEnv()
	if err != nil {
		return nil, usageError("%v", err)
	}
	var rt http.RoundTripper = daemon.NewHTTPClient(tc).Transport
	if tok := os.Getenv(daemon.EnvPromoterToken); tok != "" {
		rt = bearerTransport{rt, tok}
	}
	// No per-call timeout: every command runs under its own --timeout (a
	// plan may take minutes). No redirect is followed: bearerTransport
	// would send the token to wherever it pointed.
	return promoterhttp.NewClient(addr, &http.Client{Transport: rt, CheckRedirect: promoterhttp.NoRedirects})
}

// bearerTransport sends a bearer token with every request.
type bearerTransport struct {
	next  http.RoundTripper
	token string
}

func (t bearerTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	r.Header.Set("Authorization", "Bearer "+t.token)
	return t.next.RoundTrip(r)
}
