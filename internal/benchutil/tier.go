package benchutil

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"

	"github.com/thawdb/thaw/internal/daemon"
	"github.com/thawdb/thaw/kv"
	"github.com/thawdb/thaw/tier/tierclient"
)

// WaitServing waits until the leader of every bucket of t serves reads
// (its replica restored), so that a measurement does not include a new
// table's start-up: it looks up one key of each bucket, which the client
// retries while a leader is missing or restoring.
func WaitServing(ctx context.Context, c *tierclient.Client, t tierclient.Target, info *tierclient.TableInfo) error {
	probes := make([]kv.Row, 0, info.KV.Buckets())
	seen := make(map[int]bool)
	for i := int64(-1); len(seen) < info.KV.Buckets(); i-- {
		row := kv.Row{i, nil}
		if info.KV.Schema().Columns[0].Type.Kind == kv.KindBytes {
			row[0] = binary.BigEndian.AppendUint64(nil, uint64(i))
		}
		b, err := info.KV.Bucket(row)
		if err != nil {
			return err
		}
		if !seen[b] {
			seen[b] = true
			probes = append(probes, row)
		}
	}
	_, err := c.Get(ctx, t, probes)
	return err
}

// VerifySample reads back min(sample, rows) distinct rows of g's rows
// 0..rows-1, chosen by seed (every row when sample >= rows), and compares
// them with what g makes.
func VerifySample(ctx context.Context, c *tierclient.Client, t tierclient.Target, info *tierclient.TableInfo, g *RowGen, rows int64, sample int) error {
	n := min(int64(sample), rows)
	if n <= 0 {
		return nil
	}
	rng := rand.New(rand.NewPCG(g.cfg.Seed, 0x5eed))
	picked := make(map[int64]bool, n)
	keys := make([]kv.Row, n)
	want := make([]kv.Row, n)
	for j := range n {
		i := j // every row
		for n < rows {
			if i = rng.Int64N(rows); !picked[i] {
				picked[i] = true
				break
			}
		}
		want[j] = make(kv.Row, 2)
		g.Row(want[j], i)
		keys[j] = kv.Row{want[j][0], nil}
	}
	got, err := c.Get(ctx, t, keys)
	if err != nil {
		return err
	}
	for j := range got {
		a, _ := info.KV.EncodeValue(got[j])
		b, _ := info.KV.EncodeValue(want[j])
		if got[j] == nil || !bytes.Equal(a, b) {
			return fmt.Errorf("row with key %v: read %v, wrote %v", keys[j][0], got[j], want[j])
		}
	}
	return nil
}

// StartTier starts the embedded tier for the harness named name ("bench
// write") with tablets tablet servers under dataDir, or under a new
// temporary directory when dataDir is "". stop closes the tier and removes
// a temporary directory; call it when err is nil. The tier's warnings and
// errors (a long write stall, say) go to standard error: a harness's
// figures mean little without them. mods adjust the tier's configuration.
func StartTier(ctx context.Context, name, dataDir string, tablets int, mods ...func(*daemon.EmbeddedConfig)) (tier *daemon.Embedded, dir string, stop func() error, err error) {
	dir = dataDir
	removeDir := func() error { return nil }
	if dir == "" {
		if dir, err = os.MkdirTemp("", "thaw-"+strings.ReplaceAll(name, " ", "-")+"-"); err != nil {
			return nil, "", nil, fmt.Errorf("%s: %w", name, err)
		}
		removeDir = func() error { return os.RemoveAll(dir) }
	} else if _, serr := os.Lstat(filepath.Join(dir, "tier")); serr == nil || !errors.Is(serr, fs.ErrNotExist) {
		// An earlier run's tier would be measured along (its tables,
		// replicas and compactions): refused.
		return nil, "", nil, fmt.Errorf("%s: %s is there already (an earlier run's tier?): give --data-dir a new or empty directory", name, filepath.Join(dir, "tier"))
	}
	ec := daemon.EmbeddedConfig{
		DataDir:       filepath.Join(dir, "tier"),
		Listen:        "127.0.0.1:0",
		TabletServers: tablets,
		Logger:        slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn})),
	}
	for _, m := range mods {
		m(&ec)
	}
	tier, err = daemon.StartEmbedded(ctx, ec)
	if err != nil {
		return nil, "", nil, errors.Join(fmt.Errorf("%s: start the embedded tier: %w", name, err), removeDir())
	}
	stop = func() error { return errors.Join(tier.Close(), removeDir()) }
	if err := tier.WaitReady(ctx); err != nil {
		return nil, "", nil, errors.Join(fmt.Errorf("%s: %w", name, err), stop())
	}
	return tier, dir, stop, nil
}
