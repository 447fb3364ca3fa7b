package bulktxn

import (
	"strings"

	"github.com/cockroachdb/datadriven"

	"github.com/thawdb/thaw/snapshot"
)

func init() {
	register("commit", commitCmd)
	register("validate", validateCmd)
}

// commit [manifest=m1] [now=...]: Commit names a manifest (m1, m2, ...
// differ by digest; "bad" has length 0).
func commitCmd(e *env, d *datadriven.TestData) {
	e.step(CommitRequested{Req: e.reqArg(d), Manifest: e.manifest(e.arg(d, "manifest", "m1")), Now: e.setNow(d)})
	e.state()
}

// validate [invalid=rule,...] answers ValidateManifest: valid with log
// offsets 1000+b, or the listed violations.
func validateCmd(e *env, d *datadriven.TestData) {
	var in ValidationFinished
	if rules := e.arg(d, "invalid", ""); rules != "" {
		for _, r := range strings.Split(rules, ",") {
			in.Violations = append(in.Violations, &snapshot.Violation{Rule: snapshot.Rule(r), Bucket: -1, Detail: "from the trace"})
		}
	} else {
		in.LogOffsets = make([]int64, e.m.rec.Buckets)
		for b := range in.LogOffsets {
			in.LogOffsets[b] = 1000 + int64(b)
		}
	}
	e.step(in)
	e.state()
}
