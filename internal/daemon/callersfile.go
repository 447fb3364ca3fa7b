package daemon

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"time"

	"github.com/thawdb/thaw/internal/periodic"
	"github.com/thawdb/thaw/tier/coordinator"
)

// callersFileCheck is how often a callers file is looked at for changes.
const callersFileCheck = time.Second

// callersFile is coordinator.callers_file: the tier's callers, read at
// start and again when the file changes (reloader), so that a caller's
// token or grants change without a restart.
type callersFile struct {
	r     *reloader[*callerSet]
	apply func([]coordinator.Caller)
	last  *callerSet // the set apply last received (watch's)
}

// callerSet is one load of the file.
type callerSet struct{ callers []coordinator.Caller }

// readCallersFile reads the callers file and checks it as the
// coordinator's callers are checked; authorizeData also needs a caller
// with read or write patterns. The file must name at least one caller (an
// emptied file would turn authentication off). log receives the reloads
// and the changes that do not load; watch hands each reloaded set to
// apply (outside the reloader's lock, so apply may take locks of its
// own).
func readCallersFile(path string, authorizeData bool, log *slog.Logger, apply func([]coordinator.Caller)) (*callersFile, error) {
	r, err := newReloader([]string{path}, func() (*callerSet, error) {
		cs, err := parseCallersFile(path, authorizeData)
		return &callerSet{cs}, err
	}, func(s *callerSet) {
		log.Info("callers file reloaded", "file", path, "callers", len(s.callers))
	}, func(err error) {
		log.Warn("the changed callers file does not load; keeping the previous callers", "file", path, "err", err)
	})
	if err != nil {
		return nil, err
	}
	return &callersFile{r: r, apply: apply, last: r.get()}, nil
}

// readCallersDoc reads the `callers:` list of a callers file (key names
// its config key in errors) strictly; the list must not be empty (an
// emptied file must not turn authentication off).
func readCallersDoc[C any](key, path string) ([]C, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", key, err)
	}
	var doc struct {
		Callers []C `yaml:"callers"`
	}
	if err := decodeStrict(bytes.NewReader(b), &doc); err != nil {
		return nil, fmt.Errorf("%s %s: %w", key, path, err)
	}
	if len(doc.Callers) == 0 {
		return nil, fmt.Errorf("%s %s names no caller", key, path)
	}
	return doc.Callers, nil
}

// parseCallersFile decodes a callers file strictly and checks it.
func parseCallersFile(path string, authorizeData bool) ([]coordinator.Caller, error) {
	opts, err := readCallersDoc[CallerOptions]("coordinator.callers_file", path)
	if err != nil {
		return nil, err
	}
	callers := toCallers(opts)
	if err := coordinator.ValidateCallers(callers); err != nil {
		return nil, fmt.Errorf("coordinator.callers_file %s: %w", path, err)
	}
	if err := coordinator.CheckDataCallers(authorizeData, callers); err != nil {
		return nil, fmt.Errorf("coordinator.callers_file %s: coordinator.%w", path, err)
	}
	return callers, nil
}

// callers returns the current callers.
func (f *callersFile) callers() []coordinator.Caller { return f.r.get().callers }

// watch looks at the file every callersFileCheck until ctx is done and
// hands a changed set to apply, so that a change takes effect without
// waiting for a call.
func (f *callersFile) watch(ctx context.Context) {
	periodic.Every(ctx, callersFileCheck, callersFileCheck, func() {
		if s := f.r.get(); s != f.last {
			f.last = s
			f.apply(s.callers)
		}
	})
}

// toCallers converts configured callers.
func toCallers(cs []CallerOptions) []coordinator.Caller {
	var out []coordinator.Caller
	for _, c := range cs {
		out = append(out, coordinator.Caller{Name: c.Name, TokenSHA256: c.TokenSHA256, Tables: c.Tables, DDL: c.DDL, Read: c.Read, Write: c.Write})
	}
	return out
}

var errCallersTwice = errors.New("coordinator.callers and coordinator.callers_file are exclusive: name the callers in one place")
