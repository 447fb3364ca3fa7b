package cli

import (
	"bufio"
	"context"
	"io"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/thawdb/thaw/tier/tierclient"
)

// loadProcess starts `thaw load` of n rows into a new partition p of
// shop.items on the tier at server, with extra environment, its stdout
// and stderr pipes; it returns the command, readers of both pipes and a
// function that closes the stdout pipe.
func loadProcess(t *testing.T, ctx context.Context, server, dir, p string, n int, env ...string) (*exec.Cmd, *bufio.Reader, *bufio.Reader, func()) {
	t.Helper()
	f := filepath.Join(dir, p+".parquet")
	writeParquet(t, f, makeItems(p, 1, n), parquetLayout{withDT: true})
	cmd := exec.CommandContext(ctx, thawBinary(t), "load", "--table", "shop.items", "--partition", p, "--create-partition", "--server", server, f)
	cmd.Env = childEnv(t, env...)
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	errOut, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	return cmd, bufio.NewReader(out), bufio.NewReader(errOut), func() { _ = out.Close() }
}

// TestLoadOutputGoneOrHungUp: a `thaw load` whose stdout pipe closes
// (thaw load | head -1) goes on to its end instead of dying of SIGPIPE
// with its target fenced; one whose terminal hangs up (SIGHUP) aborts as
// on Ctrl-C. Either way the target is not left LOADING.
func TestLoadOutputGoneOrHungUp(t *testing.T) {
	thawBinary(t) // build first: the tier's timeouts should not run during it
	e, tc := startTestTier(t)
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	if err := tc.CreateDatabase(ctx, "shop"); err != nil {
		t.Fatal(err)
	}
	if _, err := tc.CreateTable(ctx, "shop", "items", itemsTable(t, true), 2); err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	partitionState := func(p string) string {
		t.Helper()
		loc, err := tc.Locations(ctx, tierclient.Target{Database: "shop", Table: "items", Partition: p}, true)
		if err != nil {
			t.Fatal(err)
		}
		return loc.DataState.String()
	}

	t.Run("stdout closed", func(t *testing.T) {
		const p = "2024-02-01"
		cmd, out, errOut, closeOut := loadProcess(t, ctx, e.HostPort(), dir, p, 2000)
		go func() { _, _ = errOut.WriteTo(io.Discard) }()
		if line, err := out.ReadString('\n'); err != nil || !strings.HasPrefix(line, "loading 2000 rows") {
			t.Fatalf("first line %q, %v", line, err)
		}
		closeOut()
		err := cmd.Wait()
		if ws, ok := cmd.ProcessState.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
			t.Fatalf("thaw load died of %v: %v; partition %s", ws.Signal(), err, partitionState(p))
		}
		if got := scanTarget(t, tc, tierclient.Target{Database: "shop", Table: "items", Partition: p}, 1); len(got) != 2000 {
			t.Fatalf("partition %s (%s) holds %d rows after the load, want 2000 (exit: %v)", p, partitionState(p), len(got), err)
		}
	})

	t.Run("hang-up", func(t *testing.T) {
		const p = "2024-02-02"
		cmd, out, errOut, _ := loadProcess(t, ctx, e.HostPort(), dir, p, 2000, testHoldAfterPutEnv+"=_METADATA")
		var lines []string
		for {
			line, err := errOut.ReadString('\n')
			if err != nil {
				t.Fatalf("thaw load ended before the hook: %v\n%s", err, strings.Join(lines, ""))
			}
			lines = append(lines, line)
			if strings.Contains(line, "thaw: test hook: holding after put of ") {
				break
			}
		}
		go func() { _, _ = errOut.WriteTo(io.Discard) }()
		if err := cmd.Process.Signal(syscall.SIGHUP); err != nil {
			t.Fatal(err)
		}
		rest := new(strings.Builder)
		_, _ = out.WriteTo(rest)
		err := cmd.Wait()
		if ws, ok := cmd.ProcessState.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
			t.Fatalf("thaw load died of %v: %v; partition %s", ws.Signal(), err, partitionState(p))
		}
		if !strings.Contains(rest.String(), "aborted bulk load") || !strings.Contains(rest.String(), "is empty and ACTIVE again") {
			t.Fatalf("after SIGHUP (%v):\n%s%s", err, strings.Join(lines, ""), rest)
		}
		if s := partitionState(p); s != "DATA_STATE_ACTIVE" {
			t.Fatalf("partition %s is %s after the hang-up", p, s)
		}
	})
}
