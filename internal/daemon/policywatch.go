package daemon

import (
	"context"
	"crypto/sha256"
	"encoding/binary"
	"log/slog"
	"os"
	"time"

	"github.com/thawdb/thaw/internal/periodic"
	"github.com/thawdb/thaw/policies"
)

// policyWatchInterval is how often a running promoter looks at its policy
// files.
const policyWatchInterval = 5 * time.Second

// policyWatch tells the operator when the policy files change under a
// running promoter. The promoter reads its policies at start only (its
// triggers, schedules and plans are built from them), so an edited policy
// does nothing until the next start; without a word, an operator would
// wait for a change that never comes. check logs a warning once per new
// content of the files, and a line when they are back as at start.
type policyWatch struct {
	paths    []string
	validate string // how to validate the files, for the warning's hint
	log      *slog.Logger
	start    [sha256.Size]byte // the files at start
	last     [sha256.Size]byte // the files at the last check
	lastErr  string            // the last read error logged
}

// newPolicyWatch watches the files of paths, whose policyDigest was start
// just before the promoter read them. configFile is the promoter's config
// file, named in the hint ("": the hint says "its --config").
func newPolicyWatch(paths []string, configFile string, start [sha256.Size]byte, log *slog.Logger) *policyWatch {
	validate := "thaw promoter --check with its --config validates them first"
	if configFile != "" {
		validate = "thaw promoter --check --config " + configFile + " validates them first"
	}
	return &policyWatch{paths: paths, validate: validate, log: log, start: start, last: start}
}

// run checks every policyWatchInterval until ctx is done.
func (w *policyWatch) run(ctx context.Context) {
	periodic.Every(ctx, policyWatchInterval, policyWatchInterval, w.check)
}

// policyDigest is the SHA-256 of the policy files' names and contents, in
// the order policies.Load reads them.
func policyDigest(paths []string) ([sha256.Size]byte, error) {
	files, err := policies.Files(paths...)
	if err != nil {
		return [sha256.Size]byte{}, err
	}
	h := sha256.New()
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			return [sha256.Size]byte{}, err
		}
		for _, part := range [][]byte{[]byte(f), b} {
			_ = binary.Write(h, binary.BigEndian, int64(len(part)))
			h.Write(part)
		}
	}
	return [sha256.Size]byte(h.Sum(nil)), nil
}

// check looks at the files once.
func (w *policyWatch) check() {
	d, err := policyDigest(w.paths)
	if err != nil {
		// A file being replaced may be missing for a moment: log a
		// lasting problem once, not every look.
		if err.Error() != w.lastErr {
			w.lastErr = err.Error()
			w.log.Warn("policy files cannot be read; the promoter goes on with the policies it started with", "err", err)
		}
		return
	}
	w.lastErr = ""
	switch {
	case d == w.last:
	case d == w.start:
		w.log.Info("policy files are as they were at start again", "policies", w.paths)
	default:
		w.log.Warn("policy files changed since the promoter started; policies are read at start only: "+
			"restart the promoter to apply them ("+w.validate+")", "policies", w.paths)
	}
	w.last = d
}
