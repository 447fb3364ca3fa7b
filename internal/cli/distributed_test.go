package cli

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/thawdb/thaw/bulkload/bulkloadclient"
	"github.com/thawdb/thaw/internal/daemon"
	"github.com/thawdb/thaw/internal/metricvalue"
	"github.com/thawdb/thaw/internal/testvgw"
	"github.com/thawdb/thaw/snapshotbuild"
	"github.com/thawdb/thaw/tier/tierclient"
)

// The multi-process tests: the tier runs in the test process, every thaw
// command (begin, each builder, commit, abort, load, get) is a separate
// process of the real binary, built once per test run.

var (
	thawBinOnce sync.Once
	thawBinDir  string
	thawBinPath string
	thawBinErr  error
)

func TestMain(m *testing.M) {
	code := m.Run()
	if thawBinDir != "" {
		_ = os.RemoveAll(thawBinDir)
	}
	os.Exit(code)
}

// thawBinary builds cmd/thaw the first time a test asks for it (tests that
// do not need it do not pay for the build).
func thawBinary(t *testing.T) string {
	t.Helper()
	thawBinOnce.Do(func() {
		thawBinDir, thawBinErr = os.MkdirTemp("", "thaw-cli-test-")
		if thawBinErr != nil {
			return
		}
		thawBinPath = filepath.Join(thawBinDir, "thaw")
		out, err := exec.Command("go", "build", "-o", thawBinPath, "github.com/thawdb/thaw/cmd/thaw").CombinedOutput()
		if err != nil {
			thawBinErr = fmt.Errorf("go build ./cmd/thaw: %w\n%s", err, out)
		}
	})
	if thawBinErr != nil {
		t.Fatal(thawBinErr)
	}
	return thawBinPath
}

// thawResult is how a thaw process ended.
type thawResult struct {
	stdout, stderr string
	code           int
}

func (r thawResult) String() string {
	return fmt.Sprintf("exit %d\nstdout:\n%s\nstderr:\n%s", r.code, r.stdout, r.stderr)
}

// childEnv is a thaw process's environment: this one's, with TMPDIR in
// the test's directory, so what a process leaves there (fileblob's staging
// file of an upload a killed builder was in the middle of) goes with the
// test, and extra.
func childEnv(t *testing.T, extra ...string) []string {
	return append(append(os.Environ(), "TMPDIR="+t.TempDir()), extra...)
}

// runThaw runs the binary to its end.
func runThaw(t *testing.T, env []string, args ...string) thawResult {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, thawBinary(t), args...)
	cmd.Env = childEnv(t, env...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	res := thawResult{stdout: stdout.String(), stderr: stderr.String()}
	var ee *exec.ExitError
	switch {
	case err == nil:
	case errors.As(err, &ee) && ee.Exited():
		res.code = ee.ExitCode()
	default:
		t.Fatalf("thaw %s: %v\n%s", strings.Join(args, " "), err, res)
	}
	return res
}

// mustThaw runs the binary and requires exit status 0.
func mustThaw(t *testing.T, args ...string) thawResult {
	t.Helper()
	r := runThaw(t, nil, args...)
	if r.code != 0 {
		t.Fatalf("thaw %s: %s", strings.Join(args, " "), r)
	}
	return r
}

// killedBuild starts a builder with the test hook armed to hold right
// after its first _METADATA upload, waits until it holds, and kills it
// with SIGKILL: a builder that dies after uploading every data file of
// its buckets and one _METADATA, with no chance to clean up.
func killedBuild(t *testing.T, args ...string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, thawBinary(t), args...)
	cmd.Env = childEnv(t, testHoldAfterPutEnv+"=_METADATA")
	stderr, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	held := make(chan string, 1)
	var lines []string
	go func() {
		sc := bufio.NewScanner(stderr)
		for sc.Scan() {
			lines = append(lines, sc.Text())
			if strings.Contains(sc.Text(), "thaw: test hook: holding after put of ") {
				held <- sc.Text()
				return
			}
		}
		close(held)
	}()
	select {
	case line, ok := <-held:
		if !ok {
			err := cmd.Wait()
			t.Fatalf("the builder ended without reaching the hook: %v\n%s", err, strings.Join(lines, "\n"))
		}
		t.Logf("builder: %s", line)
	case <-ctx.Done():
		t.Fatal("the builder did not reach the hook in time")
	}
	if err := cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	var ee *exec.ExitError
	if err := cmd.Wait(); !errors.As(err, &ee) || ee.Exited() {
		t.Fatalf("the builder was not killed: %v", err)
	}
}

// snapshotObjects lists the objects of some buckets' snapshot directories.
func snapshotObjects(t *testing.T, e *daemon.Embedded, bc *bulkloadclient.BuildContext, buckets ...int) map[string]time.Time {
	t.Helper()
	out := map[string]time.Time{}
	ids := bc.SnapshotIDs()
	for _, b := range buckets {
		prefix, err := e.Objects().Key(bc.SnapshotTarget().SnapshotDir(b, ids[b]))
		if err != nil {
			t.Fatal(err)
		}
		for a, err := range e.Objects().List(t.Context(), prefix) {
			if err != nil {
				t.Fatal(err)
			}
			out[a.Key] = a.ModTime
		}
	}
	return out
}

func readResultsFile(t *testing.T, path string) []snapshotbuild.BucketResult {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var rs []snapshotbuild.BucketResult
	if err := json.Unmarshal(b, &rs); err != nil {
		t.Fatalf("results %s: %v\n%s", path, err, b)
	}
	return rs
}

func TestDistributed(t *testing.T) {
	thawBinary(t) // build first: the tier's timeouts should not run during it
	e, tc := startTestTier(t)
	ctx := t.Context()
	server := "--server=" + e.HostPort()
	if err := tc.CreateDatabase(ctx, "shop"); err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	file := func(name string) string { return filepath.Join(dir, name) }

	// Two builder processes on disjoint bucket sets read the same files;
	// the commit checks coverage; every row is readable afterwards.
	t.Run("build", func(t *testing.T) {
		s := itemsTable(t, false)
		s.Buckets = 8
		if _, err := tc.CreateTable(ctx, "shop", "items", s, 2); err != nil {
			t.Fatal(err)
		}
		in := filepath.Join(dir, "items")
		a := makeItems("", 1, 6000)
		b := makeItems("", 4001, 6000) // 4001..6000 again, last wins
		for i := range b {
			b[i].name += "-b"
		}
		c := makeItems("", 20001, 3000)
		writeParquet(t, filepath.Join(in, "a.parquet"), a, parquetLayout{groupRows: 1000})
		writeParquet(t, filepath.Join(in, "b.parquet"), b, parquetLayout{extra: true})
		writeParquet(t, filepath.Join(in, "c", "c.parquet"), c, parquetLayout{})

		r := mustThaw(t, "bulkload", "begin", server, "shop.items", "--token", "dist-1", "--build-timeout", "5m", "--out", file("ctx.json"))
		if !strings.Contains(r.stderr, "began bulk load ") || !strings.Contains(r.stderr, "8 buckets, caller token dist-1") {
			t.Errorf("begin: %s", r)
		}
		// Begin with the same token resumes the same transaction and
		// prints the same context, to stdout this time.
		again := mustThaw(t, "bulkload", "begin", server, "shop.items", "--token", "dist-1")
		ctxBytes, err := os.ReadFile(file("ctx.json"))
		if err != nil {
			t.Fatal(err)
		}
		if again.stdout != string(ctxBytes) {
			t.Errorf("begin again printed\n%s\nwant\n%s", again.stdout, ctxBytes)
		}

		// A builder under --route error fails on the first row of another bucket.
		r = runThaw(t, nil, "bulkload", "build", "--context", file("ctx.json"), "--buckets", "0-3", "--route", "error", in)
		if r.code != 1 || !regexp.MustCompile(`thaw: build shop.items: file \S+\.parquet: row \d+ belongs to bucket [4-7], which this build does not own \(--route error; `).MatchString(r.stderr) {
			t.Errorf("build --route error: %s", r)
		}

		// Two builders at once.
		var wg sync.WaitGroup
		res := make([]thawResult, 2)
		for i, buckets := range []string{"0-3", "4-7"} {
			wg.Go(func() {
				res[i] = runThaw(t, nil, "bulkload", "build", "--context", file("ctx.json"), "--buckets", buckets,
					"--memory", "1MiB", "--workers", "2", "--temp-dir", t.TempDir(), "--out", file(fmt.Sprintf("r%d.json", i+1)), in)
			})
		}
		wg.Wait()
		for i, r := range res {
			if r.code != 0 {
				t.Fatalf("builder %d: %s", i+1, r)
			}
			for _, want := range []string{"building 4 of 8 buckets", "read 15000 rows (", "from 3/3 files", "built bucket "} {
				if !strings.Contains(r.stderr, want) {
					t.Errorf("builder %d: progress misses %q:\n%s", i+1, want, r.stderr)
				}
			}
		}
		r1, r2 := readResultsFile(t, file("r1.json")), readResultsFile(t, file("r2.json"))
		var rows, dups int64
		for i, r := range append(r1, r2...) {
			if r.Bucket != i {
				t.Errorf("result %d is of bucket %d", i, r.Bucket)
			}
			rows += r.RowCount
			dups += r.Duplicates
		}
		if want := lastWins(a, b, c); rows != int64(len(want)) || dups != 2000 {
			t.Errorf("results: %d rows, %d duplicates; want %d rows, 2000 duplicates", rows, dups, len(want))
		}

		// Coverage is checked before anything is committed.
		r = runThaw(t, nil, "bulkload", "commit", server, "--context", file("ctx.json"), file("r1.json"))
		if r.code != 1 || !strings.Contains(r.stderr, "missing buckets [4 5 6 7]") {
			t.Errorf("commit of half the buckets: %s", r)
		}
		if err := os.WriteFile(file("r1-copy.json"), mustRead(t, file("r1.json")), 0o644); err != nil {
			t.Fatal(err)
		}
		r = runThaw(t, nil, "bulkload", "commit", server, "--context", file("ctx.json"), file("r1.json"), file("r2.json"), file("r1-copy.json"))
		if r.code != 1 || !strings.Contains(r.stderr, "duplicate buckets [0 1 2 3]") ||
			!strings.Contains(r.stderr, "bucket 0 is in "+file("r1.json")+" and "+file("r1-copy.json")) {
			t.Errorf("commit with a bucket twice: %s", r)
		}
		st := mustThaw(t, "bulkload", "status", server, "--output", "json", contextTxn(t, file("ctx.json")))
		if !strings.Contains(st.stdout, `"state": "BEGUN"`) {
			t.Errorf("after refused commits: %s", st)
		}

		r = mustThaw(t, "bulkload", "commit", server, "--context", file("ctx.json"), file("r1.json"), file("r2.json"))
		if !strings.Contains(r.stdout, fmt.Sprintf("committed bulk load %s of shop.items: %d rows in 8 buckets", contextTxn(t, file("ctx.json")), rows)) ||
			!strings.Contains(r.stdout, "COMMITTED") {
			t.Errorf("commit: %s", r)
		}
		checkRows(t, scanTarget(t, tc, tierclient.Target{Database: "shop", Table: "items"}, 0), lastWins(a, b, c), false)
		// And through the CLI.
		g := mustThaw(t, "get", server, "shop.items", "--output", "json", `{"id":5000}`)
		if !strings.Contains(g.stdout, `"name":"item-5000-b"`) {
			t.Errorf("thaw get: %s", g)
		}
	})

	// A builder killed mid-build (data files and one _METADATA uploaded):
	// the rebuild of its buckets with the same context adopts what it left
	// and the load commits.
	t.Run("killed builder, rebuilt", func(t *testing.T) {
		if _, err := tc.CreateTable(ctx, "shop", "orders", itemsTable(t, false), 2); err != nil {
			t.Fatal(err)
		}
		in := file("orders.parquet")
		items := makeItems("", 1, 8000)
		writeParquet(t, in, items, parquetLayout{})
		// (--table: the target as thaw load takes it.)
		mustThaw(t, "bulkload", "begin", server, "--table", "shop.orders", "--out", file("orders-ctx.json"))
		bc, err := readBuildContext(file("orders-ctx.json"))
		if err != nil {
			t.Fatal(err)
		}
		mustThaw(t, "bulkload", "build", "--context", file("orders-ctx.json"), "--buckets", "0,1", "--out", file("o1.json"), in)

		// --workers 1: the builder writes its _METADATA files one at a
		// time, so exactly one exists when the hook holds.
		killedBuild(t, "bulkload", "build", "--context", file("orders-ctx.json"), "--buckets", "2-3", "--workers", "1",
			"--temp-dir", t.TempDir(), "--out", file("o2.json"), in)
		left := snapshotObjects(t, e, bc, 2, 3)
		metas := 0
		data := map[int]int{}
		for k := range left {
			if strings.HasSuffix(k, "/_METADATA") {
				metas++
			}
			for _, b := range []int{2, 3} {
				if strings.Contains(k, fmt.Sprintf("/%d/snap-", b)) {
					data[b]++
				}
			}
		}
		if metas != 1 || data[2] < 2 || data[3] < 2 {
			t.Fatalf("the killed builder left %d _METADATA and %v objects per bucket: %v", metas, data, left)
		}
		if _, err := os.Stat(file("o2.json")); !errors.Is(err, os.ErrNotExist) {
			t.Fatalf("the killed builder wrote results: %v", err)
		}

		r := mustThaw(t, "bulkload", "build", "--context", file("orders-ctx.json"), "--buckets", "2-3", "--out", file("o2.json"), in)
		if !strings.Contains(r.stderr, "adopted an identical earlier build") {
			t.Errorf("rebuild: %s", r)
		}
		adopted := 0
		for _, res := range readResultsFile(t, file("o2.json")) {
			if res.MetadataAdopted {
				adopted++
			}
		}
		if adopted != 1 {
			t.Errorf("%d buckets adopted their _METADATA, want 1", adopted)
		}
		after := snapshotObjects(t, e, bc, 2, 3)
		for k, mt := range left {
			if got, ok := after[k]; !ok || !got.Equal(mt) {
				t.Errorf("object %s was rewritten or removed by the rebuild (mod time %v, then %v)", k, mt, got)
			}
		}
		if len(after) <= len(left) {
			t.Errorf("the rebuild added no _METADATA: %d objects before, %d after", len(left), len(after))
		}
		mustThaw(t, "bulkload", "commit", server, "--context", file("orders-ctx.json"), file("o1.json"), file("o2.json"))
		checkRows(t, scanTarget(t, tc, tierclient.Target{Database: "shop", Table: "orders"}, 0), lastWins(items), false)
	})

	// A builder killed mid-build, then Abort (by context file): the target
	// is empty and ACTIVE, and thaw load (its own process) fills it.
	t.Run("killed builder, aborted, loaded", func(t *testing.T) {
		if _, err := tc.CreateTable(ctx, "shop", "returns", itemsTable(t, false), 2); err != nil {
			t.Fatal(err)
		}
		in := file("returns.parquet")
		items := makeItems("", 1, 3000)
		writeParquet(t, in, items, parquetLayout{})
		mustThaw(t, "bulkload", "begin", server, "shop.returns", "--out", file("returns-ctx.json"))
		killedTemp := t.TempDir()
		killedBuild(t, "bulkload", "build", "--context", file("returns-ctx.json"), "--buckets", "all", "--temp-dir", killedTemp, "--out", file("x.json"), in)
		if left, _ := filepath.Glob(filepath.Join(killedTemp, "thaw-build-*")); len(left) != 1 {
			t.Errorf("the killed build left %v in its temp dir, want its build directory", left)
		}
		r := mustThaw(t, "bulkload", "abort", server, "--context", file("returns-ctx.json"))
		txn := contextTxn(t, file("returns-ctx.json"))
		if !strings.Contains(r.stdout, "aborted bulk load "+txn+" of shop.returns") {
			t.Errorf("abort: %s", r)
		}
		st := mustThaw(t, "bulkload", "status", server, "--output", "json", txn)
		if !strings.Contains(st.stdout, `"state": "ABORTED"`) || !strings.Contains(st.stdout, `"registration": "ACTIVE"`) {
			t.Errorf("status after abort: %s", st)
		}
		target := tierclient.Target{Database: "shop", Table: "returns"}
		if got := scanTarget(t, tc, target, 0); len(got) != 0 {
			t.Errorf("aborted target has %d rows", len(got))
		}

		// thaw load as a process: files that do not fit the table fail it
		// (exit status 1) before it begins anything ...
		bad := file("returns-bad.parquet")
		writeParquet(t, bad, items, parquetLayout{idInt32: true})
		r = runThaw(t, nil, "load", server, "--table", "shop.returns", bad)
		if r.code != 1 || !strings.Contains(r.stderr, "file "+bad+": ") || !strings.Contains(r.stderr, `column "id" of type BIGINT cannot be read from arrow int32`) ||
			strings.Contains(r.stdout, "began") {
			t.Errorf("load of a file with a wrong type: %s", r)
		}
		// ... and a good one commits, with plain progress lines.
		// (in the killed builder's temp dir: the directory it left goes)
		r = mustThaw(t, "load", server, "--table", "shop.returns", "--token", "returns-load", "--temp-dir", killedTemp, in)
		if left, _ := os.ReadDir(killedTemp); len(left) != 0 {
			t.Errorf("after thaw load, the temp dir holds %v", left)
		}
		for _, want := range []string{"loading 3000 rows", "removed 1 temporary build directory (", "that builds of killed processes left in " + killedTemp,
			"began bulk load", "caller token returns-load", "read 3000 rows (", "from 1/1 files",
			"built bucket 3: ", "committed bulk load ", "3000 rows (0 duplicates dropped) in 4 buckets"} {
			if !strings.Contains(r.stdout, want) {
				t.Errorf("thaw load output misses %q:\n%s", want, r)
			}
		}
		if strings.ContainsAny(r.stdout, "\r\033") {
			t.Errorf("progress bar on a pipe:\n%q", r.stdout)
		}
		checkRows(t, scanTarget(t, tc, target, 0), lastWins(items), false)
	})
}

func mustRead(t *testing.T, path string) []byte {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// contextTxn returns the transaction id of a build context file.
func contextTxn(t *testing.T, path string) string {
	t.Helper()
	bc, err := readBuildContext(path)
	if err != nil {
		t.Fatal(err)
	}
	return bc.Handle().TxnID
}

// TestDistributedScoped runs a distributed build whose builder processes
// and committer write only through the coordinator's upload gateway
// (--scoped-uploads): the gateway stores every data file, _METADATA and
// the manifest, and every row is readable after the commit. A builder
// whose transaction was aborted is refused by the gateway and says so.
func TestDistributedScoped(t *testing.T) {
	thawBinary(t)
	e, tc := startTestTier(t)
	ctx := t.Context()
	server := "--server=" + e.HostPort()
	if err := tc.CreateDatabase(ctx, "shop"); err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	file := func(name string) string { return filepath.Join(dir, name) }
	s := itemsTable(t, false)
	s.Buckets = 4
	for _, name := range []string{"items", "gone"} {
		if _, err := tc.CreateTable(ctx, "shop", name, s, 1); err != nil {
			t.Fatal(err)
		}
	}
	in := filepath.Join(dir, "items")
	a := makeItems("", 1, 3000)
	writeParquet(t, filepath.Join(in, "a.parquet"), a, parquetLayout{groupRows: 1000})

	mustThaw(t, "bulkload", "begin", server, "shop.items", "--token", "scoped-1", "--build-timeout", "5m", "--out", file("ctx.json"))
	files, _ := scopedBuilders(t, nil, server, file, in)
	mustThaw(t, "bulkload", "commit", "--scoped-uploads", server, "--context", file("ctx.json"), file("s1.json"), file("s2.json"))
	checkRows(t, scanTarget(t, tc, tierclient.Target{Database: "shop", Table: "items"}, 0), lastWins(a), false)
	puts, _, err := metricvalue.Value(e.Gatherer(), "thaw_coordinator_upload_requests_total", map[string]string{"op": "put", "result": "ok"})
	if err != nil {
		t.Fatal(err)
	}
	if int(puts) != files+1 {
		t.Errorf("the gateway stored %v objects; the builds wrote %d files and _METADATA, and the commit a manifest", puts, files+1)
	}
	for _, f := range []string{"ctx.json", "s1.json", "s2.json"} {
		if bytes.Contains(mustRead(t, file(f)), []byte("thawcap1.")) {
			t.Errorf("%s holds a capability token", f)
		}
	}

	// thaw load in one step, the same way.
	if _, err := tc.CreateTable(ctx, "shop", "loaded", s, 1); err != nil {
		t.Fatal(err)
	}
	mustThaw(t, "load", "--scoped-uploads", server, "--table", "shop.loaded", in)
	checkRows(t, scanTarget(t, tc, tierclient.Target{Database: "shop", Table: "loaded"}, 0), lastWins(a), false)
	after, _, err := metricvalue.Value(e.Gatherer(), "thaw_coordinator_upload_requests_total", map[string]string{"op": "put", "result": "ok"})
	if err != nil {
		t.Fatal(err)
	}
	if after < puts+4*2+1 { // at least a file and a _METADATA per bucket, and the manifest
		t.Errorf("thaw load --scoped-uploads stored %v objects through the gateway", after-puts)
	}

	// An aborted transaction: the builder gets no credentials.
	mustThaw(t, "bulkload", "begin", server, "shop.gone", "--token", "scoped-2", "--out", file("gone.json"))
	mustThaw(t, "bulkload", "abort", server, contextTxn(t, file("gone.json")))
	r := runThaw(t, nil, "bulkload", "build", "--scoped-uploads", server, "--context", file("gone.json"), "--buckets", "all", "--temp-dir", t.TempDir(), in)
	if r.code != 1 || !strings.Contains(r.stderr, "the transaction is not BEGUN") {
		t.Errorf("build of an aborted transaction: %s", r)
	}
}

// scopedBuilders runs two `thaw bulkload build --scoped-uploads` processes
// at once, with env, building buckets 0-1 and 2-3 of the context in
// file("ctx.json") from in into file("s1.json") and file("s2.json"); it
// returns the files and _METADATA they wrote, and their results.
func scopedBuilders(t *testing.T, env []string, server string, file func(string) string, in string) (files int, res []thawResult) {
	t.Helper()
	var wg sync.WaitGroup
	res = make([]thawResult, 2)
	for i, buckets := range []string{"0-1", "2-3"} {
		wg.Go(func() {
			res[i] = runThaw(t, env, "bulkload", "build", "--scoped-uploads", server, "--context", file("ctx.json"), "--buckets", buckets,
				"--temp-dir", t.TempDir(), "--out", file(fmt.Sprintf("s%d.json", i+1)), in)
		})
	}
	wg.Wait()
	for i, r := range res {
		if r.code != 0 {
			t.Fatalf("builder %d: %s", i+1, r)
		}
		for _, br := range readResultsFile(t, file(fmt.Sprintf("s%d.json", i+1))) {
			files += br.Files + 1
		}
	}
	return files, res
}

// TestDistributedSigned is TestDistributedScoped on a tier whose snapshots
// live in S3 (versitygw, which checks signatures): the builder and
// committer processes run without any AWS credentials, so every object
// they write goes straight to S3 with a PUT the gateway signed for it, and
// none through the coordinator. A builder without --scoped-uploads fails
// for want of credentials, which shows that the processes had none.
// Then direct builders and loads with credentials but no AWS endpoint or
// region reach the store through --object-store.
func TestDistributedSigned(t *testing.T) {
	thawBinary(t)
	srv := testvgw.Start(t)
	srv.Bucket(t, "lake")
	e, tc := startTestTierIn(t, srv.StoreURL("lake", "tier"))
	ctx := t.Context()
	server := "--server=" + e.HostPort()
	if err := tc.CreateDatabase(ctx, "shop"); err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	file := func(name string) string { return filepath.Join(dir, name) }
	s := itemsTable(t, false)
	s.Buckets = 4
	if _, err := tc.CreateTable(ctx, "shop", "items", s, 1); err != nil {
		t.Fatal(err)
	}
	in := filepath.Join(dir, "items")
	a := makeItems("", 1, 3000)
	writeParquet(t, filepath.Join(in, "a.parquet"), a, parquetLayout{groupRows: 1000})
	none := filepath.Join(t.TempDir(), "none")
	noCredentials := []string{"AWS_ACCESS_KEY_ID=", "AWS_SECRET_ACCESS_KEY=", "AWS_SESSION_TOKEN=", "AWS_PROFILE=",
		"AWS_CONFIG_FILE=" + none, "AWS_SHARED_CREDENTIALS_FILE=" + none, "AWS_EC2_METADATA_DISABLED=true"}

	mustThaw(t, "bulkload", "begin", server, "shop.items", "--token", "signed-1", "--build-timeout", "5m", "--out", file("ctx.json"))
	// Without scoped uploads a builder opens the store itself (the SDK's
	// environment gives it the endpoint), and has no credentials for it.
	direct := append([]string{"AWS_REGION=us-east-1", "AWS_ENDPOINT_URL_S3=" + srv.Endpoint}, noCredentials...)
	if r := runThaw(t, direct, "bulkload", "build", server, "--context", file("ctx.json"), "--buckets", "0",
		"--temp-dir", t.TempDir(), "--out", file("direct.json"), in); r.code == 0 || !strings.Contains(r.stderr, "credentials") || strings.Contains(r.stderr, "Invalid region") {
		t.Fatalf("a builder without credentials, writing to S3 directly: %s\n%s", r, r.stderr)
	}
	files, res := scopedBuilders(t, noCredentials, server, file, in)
	commit := runThaw(t, noCredentials, "bulkload", "commit", "--scoped-uploads", server, "--context", file("ctx.json"), file("s1.json"), file("s2.json"))
	if commit.code != 0 {
		t.Fatalf("commit: %s", commit)
	}
	checkRows(t, scanTarget(t, tc, tierclient.Target{Database: "shop", Table: "items"}, 0), lastWins(a), false)
	count := func(op string) int {
		v, _, err := metricvalue.Value(e.Gatherer(), "thaw_coordinator_upload_requests_total", map[string]string{"op": op, "result": "ok"})
		if err != nil {
			t.Fatal(err)
		}
		return int(v)
	}
	// The direct builder wrote nothing, so each object was signed once
	// (the two builders' buckets are disjoint).
	if signs, puts := count("sign"), count("put"); signs != files+1 || puts != 0 {
		t.Errorf("the gateway signed %d uploads and stored %d objects; the builds wrote %d files and _METADATA, and the commit a manifest", signs, puts, files)
	}
	outputs := map[string][]byte{"commit output": []byte(commit.stdout + commit.stderr)}
	for i, r := range res {
		outputs[fmt.Sprintf("builder %d output", i+1)] = []byte(r.stdout + r.stderr)
	}
	for _, f := range []string{"ctx.json", "s1.json", "s2.json"} {
		outputs[f] = mustRead(t, file(f))
	}
	for what, b := range outputs {
		for _, needle := range []string{"thawcap1.", "X-Amz-Signature", "X-Amz-Credential"} {
			if bytes.Contains(b, []byte(needle)) {
				t.Errorf("the %s hold a credential (%q)", what, needle)
			}
		}
	}

	// A direct builder (credentials of its own) with neither region nor
	// endpoint in its environment: the context's bare s3://lake/tier does
	// not reach the store, --object-store with the tier's URL does, and a
	// URL of another place is refused before anything is written.
	noEndpoint := []string{"AWS_REGION=", "AWS_DEFAULT_REGION=", "AWS_ENDPOINT_URL_S3=", "AWS_ENDPOINT_URL="}
	tierURL := srv.StoreURL("lake", "tier")
	for _, tbl := range []string{"direct", "loaded"} {
		if _, err := tc.CreateTable(ctx, "shop", tbl, s, 1); err != nil {
			t.Fatal(err)
		}
	}
	mustThaw(t, "bulkload", "begin", server, "shop.direct", "--out", file("direct-ctx.json"))
	build := func(extra ...string) thawResult {
		args := []string{"bulkload", "build", server, "--context", file("direct-ctx.json"), "--buckets", "all",
			"--temp-dir", t.TempDir(), "--out", file("direct.json"), in}
		return runThaw(t, noEndpoint, append(args, extra...)...)
	}
	if r := build(); r.code == 0 || !strings.Contains(r.stderr, "Invalid region") {
		t.Fatalf("a direct builder without endpoint or region: %s, want it to fail for want of a region", r)
	}
	for _, bad := range []struct {
		args []string
		want string
	}{
		{[]string{"--object-store", srv.StoreURL("lake", "elsewhere")}, "--object-store addresses s3://lake/elsewhere, but bulk load"},
		{[]string{"--object-store", tierURL, "--scoped-uploads"}, "--object-store and --scoped-uploads exclude each other"},
	} {
		if r := build(bad.args...); r.code != 2 || !strings.Contains(r.stderr, bad.want) {
			t.Fatalf("build %v: %s, want exit 2 saying %q", bad.args, r, bad.want)
		}
	}
	if r := build("--object-store", tierURL); r.code != 0 {
		t.Fatalf("build --object-store: %s", r)
	}
	if r := runThaw(t, noEndpoint, "bulkload", "commit", server, "--context", file("direct-ctx.json"), "--object-store", tierURL, file("direct.json")); r.code != 0 {
		t.Fatalf("commit --object-store: %s", r)
	}
	checkRows(t, scanTarget(t, tc, tierclient.Target{Database: "shop", Table: "direct"}, 0), lastWins(a), false)
	if r := runThaw(t, noEndpoint, "load", server, "--table", "shop.loaded", "--temp-dir", t.TempDir(), "--object-store", srv.StoreURL("lake", "elsewhere"), in); r.code != 2 ||
		!strings.Contains(r.stderr, "--object-store addresses s3://lake/elsewhere, but a bulk load of shop.loaded writes under s3://lake/tier") ||
		strings.Contains(r.stdout+r.stderr, "began") {
		t.Fatalf("load --object-store of another place: %s, want it refused before Begin", r)
	}
	if r := mustThaw(t, "bulkload", "list", server, "--all", "--output", "json"); strings.Contains(r.stdout, "loaded") {
		t.Fatalf("a refused load left a transaction: %s", r.stdout)
	}
	if r := runThaw(t, noEndpoint, "load", server, "--table", "shop.loaded", "--temp-dir", t.TempDir(), "--object-store", tierURL, in); r.code != 0 {
		t.Fatalf("load --object-store: %s", r)
	}
	checkRows(t, scanTarget(t, tc, tierclient.Target{Database: "shop", Table: "loaded"}, 0), lastWins(a), false)
}
