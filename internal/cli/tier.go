package cli

import (
	"bufio"
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"math"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"text/tabwriter"
	"time"
	"unicode/utf8"

	"connectrpc.com/connect"

	tierv1 "github.com/thawdb/thaw/gen/thaw/tier/v1"
	"github.com/thawdb/thaw/gen/thaw/tier/v1/tierv1connect"
	"github.com/thawdb/thaw/internal/coordlist"
	"github.com/thawdb/thaw/internal/daemon"
	"github.com/thawdb/thaw/internal/flagutil"
	"github.com/thawdb/thaw/internal/strictjson"
	"github.com/thawdb/thaw/kv"
	"github.com/thawdb/thaw/tier/tierclient"
	"github.com/thawdb/thaw/tier/tierpb"
)

// DefaultServer is where the client commands find the tier when neither
// --server nor THAW_SERVER says otherwise: thaw server's default listener.
const DefaultServer = daemon.DefaultListen

// tierStdin is what put and get read rows and keys from when they are
// neither arguments nor --input.
var tierStdin io.Reader = os.Stdin

// tierLogOutput receives the logs of the role commands.
var tierLogOutput io.Writer = os.Stderr

// ---------------------------------------------------------------------------
// Roles: thaw server, thaw coordinator, thaw tablet.

// runServer is `thaw server`: the embedded tier in one process.
func runServer(ctx context.Context, stdout io.Writer, args []string) error {
	fs := newFlagSet("thaw server", stdout)
	config := fs.String("config", "", "YAML config file (see docs/tier.md)")
	dataDir := fs.String("data-dir", "", "data directory (etcd, snapshots, changelog, replicas); overrides data_dir")
	listen := fs.String("listen", "", "HOST:PORT of the one HTTP listener (default "+daemon.DefaultListen+"); overrides listen")
	advertise := fs.String("advertise", "", "HOST:PORT clients reach the listener at; overrides advertise")
	tablets := fs.Int("tablets", 0, "number of tablet servers (default 3); overrides tablets")
	check := checkFlag(fs)
	if err := parseFlags(fs, args, false); err != nil {
		return err
	}
	var cfg daemon.ServerConfig
	if err := loadRoleConfig(*config, &cfg); err != nil {
		return err
	}
	setIf(&cfg.DataDir, *dataDir)
	setIf(&cfg.Listen, *listen)
	setIf(&cfg.Advertise, *advertise)
	if flagGiven(fs, "tablets") { // even as 0: Validate judges it
		cfg.Tablets = *tablets
	}
	if cfg.DataDir == "" {
		return usageError("thaw server needs --data-dir (or data_dir in --config)")
	}
	if err := cfg.Validate(); err != nil {
		return fmt.Errorf("server config: %w", err)
	}
	if *check {
		return checked(stdout, "thaw server", *config, cfg.CheckFiles())
	}
	log := daemon.NewLogger(tierLogOutput, cfg.Log)
	return daemon.RunServer(ctx, cfg, daemon.RunOptions{Logger: log, OnReady: func(addr string) {
		fmt.Fprintf(unchecked(stdout), "thaw server: serving on %s%s (data in %s, %d tablet servers)\n", cfg.TLS.Scheme(), addr, cfg.DataDir, cfg.Tablets)
	}})
}

// checkFlag registers --check: validate the config and read every file it
// names, then exit without starting.
func checkFlag(fs *flag.FlagSet) *bool {
	return fs.Bool("check", false, "check the config and read every file it names (certificates, token and callers files), then exit without starting")
}

// checked reports the result of --check.
func checked(stdout io.Writer, cmd, config string, err error) error {
	if config == "" {
		config = "the default config"
	}
	if err != nil {
		return fmt.Errorf("check of %s: %w", config, err)
	}
	_, err = fmt.Fprintf(stdout, "%s: %s is valid and every file it names loads\n", cmd, config)
	return err
}

// runCoordinator is `thaw coordinator`: one coordinator against an
// external etcd.
func runCoordinator(ctx context.Context, stdout io.Writer, args []string) error {
	fs := newFlagSet("thaw coordinator", stdout)
	config := fs.String("config", "", "YAML config file (required; see docs/tier.md)")
	id := fs.String("id", "", "coordinator id; overrides id")
	listen := fs.String("listen", "", "HOST:PORT to listen on; overrides listen")
	advertise := fs.String("advertise", "", "HOST:PORT others reach it at; overrides advertise")
	dataDir := fs.String("data-dir", "", "directory of this coordinator's own for its lease list (a restart after a kill then leads at once); overrides data_dir")
	check := checkFlag(fs)
	if err := parseFlags(fs, args, false); err != nil {
		return err
	}
	if *config == "" {
		return usageError("thaw coordinator needs --config")
	}
	var cfg daemon.CoordinatorConfig
	if err := loadRoleConfig(*config, &cfg); err != nil {
		return err
	}
	setIf(&cfg.ID, *id)
	setIf(&cfg.Listen, *listen)
	setIf(&cfg.Advertise, *advertise)
	setIf(&cfg.DataDir, *dataDir)
	if err := cfg.Validate(); err != nil {
		return fmt.Errorf("coordinator config: %w", err)
	}
	if *check {
		return checked(stdout, "thaw coordinator", *config, cfg.CheckFiles())
	}
	log := daemon.NewLogger(tierLogOutput, cfg.Log)
	return daemon.RunCoordinator(ctx, cfg, daemon.RunOptions{Logger: log, OnReady: func(addr string) {
		fmt.Fprintf(unchecked(stdout), "thaw coordinator %s: serving on %s%s\n", cfg.ID, cfg.TLS.Scheme(), addr)
	}})
}

// runTablet is `thaw tablet`: one tablet server against an external etcd.
func runTablet(ctx context.Context, stdout io.Writer, args []string) error {
	fs := newFlagSet("thaw tablet", stdout)
	config := fs.String("config", "", "YAML config file (required; see docs/tier.md)")
	id := fs.String("id", "", "tablet server id; overrides id")
	listen := fs.String("listen", "", "HOST:PORT to listen on; overrides listen")
	advertise := fs.String("advertise", "", "HOST:PORT others reach it at; overrides advertise")
	dataDir := fs.String("data-dir", "", "data directory; overrides data_dir")
	check := checkFlag(fs)
	if err := parseFlags(fs, args, false); err != nil {
		return err
	}
	if *config == "" {
		return usageError("thaw tablet needs --config")
	}
	var cfg daemon.TabletConfig
	if err := loadRoleConfig(*config, &cfg); err != nil {
		return err
	}
	setIf(&cfg.ID, *id)
	setIf(&cfg.Listen, *listen)
	setIf(&cfg.Advertise, *advertise)
	setIf(&cfg.DataDir, *dataDir)
	if err := cfg.Validate(); err != nil {
		return fmt.Errorf("tablet config: %w", err)
	}
	if *check {
		return checked(stdout, "thaw tablet", *config, cfg.CheckFiles())
	}
	log := daemon.NewLogger(tierLogOutput, cfg.Log)
	return daemon.RunTablet(ctx, cfg, daemon.RunOptions{Logger: log, OnReady: func(addr string) {
		fmt.Fprintf(unchecked(stdout), "thaw tablet %s: serving on %s%s\n", cfg.ID, cfg.TLS.Scheme(), addr)
	}})
}

// loadRoleConfig decodes the file (if any) over the defaults; the caller
// applies flags and validates.
func loadRoleConfig(path string, cfg daemon.Config) error {
	if path == "" {
		cfg.Defaults()
		return nil
	}
	f, err := os.Open(path)
	if err != nil {
		return fmt.Errorf("read config: %w", err)
	}
	defer f.Close()
	return daemon.DecodeConfig(f, path, cfg)
}

func setIf(dst *string, v string) {
	if v != "" {
		*dst = v
	}
}

// flagGiven reports whether flag name was set on the command line (to any
// value, its default included).
func flagGiven(fs *flag.FlagSet, name string) bool {
	given := false
	fs.Visit(func(f *flag.Flag) { given = given || f.Name == name })
	return given
}

// ---------------------------------------------------------------------------
// Client plumbing.

// clientFlags are the flags every client command takes.
type clientFlags struct {
	server  string
	output  string
	timeout time.Duration
}

func (c *clientFlags) register(fs *flag.FlagSet) {
	fs.StringVar(&c.server, "server", defaultServer(), "coordinator HOST:PORT or URL (https:// for a tier that serves TLS; $THAW_TLS_CA names the CA bundle), or a comma-separated list of the tier's coordinators ($THAW_SERVER sets the default)")
	fs.StringVar(&c.output, "output", "table", "output format: table or json")
	fs.DurationVar(&c.timeout, "timeout", 30*time.Second, "give up after this long")
}

func (c *clientFlags) check() error {
	if c.output != "table" && c.output != "json" {
		return usageError("--output %q: want table or json", c.output)
	}
	if c.server == "" {
		return usageError("--server is empty")
	}
	if c.timeout <= 0 {
		return usageError("--timeout must be positive")
	}
	return nil
}

func (c *clientFlags) json() bool { return c.output == "json" }

// tierFlagSet is newFlagSet with a usage line that names the positional
// arguments.
func tierFlagSet(name, argsUsage string, stdout io.Writer) *flag.FlagSet {
	return flagutil.New(name, argsUsage, stdout)
}

// parseArgs parses flags and positional arguments in any order.
func parseArgs(fs *flag.FlagSet, args []string) ([]string, error) {
	return flagutil.ParseArgs(fs, args)
}

// leaderConn talks to the active coordinator through one of its services
// (C is the generated connect client). --server may name several
// coordinators ("a:7070,b:7070"); the rules for finding the active one are
// the SDK clients' (internal/coordlist).
type leaderConn[C any] struct {
	coords *coordlist.List[C]
	err    error // --server could not be parsed
}

// defaultServer is the default of --server: $THAW_SERVER, else
// DefaultServer.
func defaultServer() string {
	if s := os.Getenv("THAW_SERVER"); s != "" {
		return s
	}
	return DefaultServer
}

func dialLeader[C any](server string, newClient func(connect.HTTPClient, string, ...connect.ClientOption) C) *leaderConn[C] {
	seeds, err := coordlist.Parse(server)
	if err != nil {
		return &leaderConn[C]{err: usageError("--server: %v", err)}
	}
	hc, err := daemon.NewCLIHTTPClient()
	if err != nil {
		return &leaderConn[C]{err: usageError("%v", err)}
	}
	// A coordinator that authenticates bulk-load callers or authorizes DDL
	// wants THAW_TOKEN.
	opts := daemon.BearerFromEnv()
	return &leaderConn[C]{coords: coordlist.New(seeds, func(url string) C { return newClient(hc, url, opts...) })}
}

// leaderDo calls the active coordinator. A round is one coordlist.Route
// pass: it follows up to coordlist.MaxRedirects NOT_LEADER hints and, when
// a coordinator cannot be reached or is unavailable (an election in
// progress), tries the configured coordinators it has not asked yet; when
// the round ends without an answer it waits (backoff) and starts again,
// until ctx is done. Any other error is returned as it is.
func leaderDo[C, Req, Res any](ctx context.Context, c *leaderConn[C], req *Req,
	call func(C, context.Context, *connect.Request[Req]) (*connect.Response[Res], error),
) (*Res, error) {
	if c.err != nil {
		return nil, c.err
	}
	unavailable := func(err error) bool { return tierpb.ReasonOf(err) == tierpb.ReasonUnavailable }
	delay := 50 * time.Millisecond
	for {
		var resp *connect.Response[Res]
		_, err := coordlist.Route(ctx, c.coords, true, unavailable, slog.New(slog.DiscardHandler), "thaw",
			func(co *coordlist.Coordinator[C]) (err error) {
				resp, err = call(co.Svc, ctx, connect.NewRequest(req))
				return err
			})
		if err == nil {
			return resp.Msg, nil
		}
		if _, notLeader := tierpb.IsNotLeader(err); !notLeader && !unavailable(err) && !coordlist.NotSent(err) {
			return nil, err
		}
		select {
		case <-ctx.Done():
			return nil, fmt.Errorf("no coordinator answered at %s: %w", strings.Join(c.coords.Seeds(), ", "), err)
		case <-time.After(delay):
			delay = min(2*delay, time.Second)
		}
	}
}

// coordConn talks to the active coordinator's CoordinatorService.
type coordConn = leaderConn[tierv1connect.CoordinatorServiceClient]

func dialCoordinator(server string) *coordConn {
	return dialLeader(server, tierv1connect.NewCoordinatorServiceClient)
}

// coordDo calls the CoordinatorService of the active coordinator.
func coordDo[Req, Res any](ctx context.Context, c *coordConn, req *Req,
	call func(tierv1connect.CoordinatorServiceClient, context.Context, *connect.Request[Req]) (*connect.Response[Res], error),
) (*Res, error) {
	return leaderDo(ctx, c, req, call)
}

// coordDoLenient makes a create or drop call whose request has an
// ignore-if-exists (or -not-exists) member. It asks strictly first, so that
// the answer tells whether this call made the change; when that fails with
// code and lenient is set, it asks again with the member set by ignore, and
// the coordinator answers as it does for an existing (or missing) target,
// or with whatever else is wrong (a partition's table that does not exist).
// changed reports whether the first call succeeded.
func coordDoLenient[Req, Res any](ctx context.Context, c *coordConn, req *Req,
	call func(tierv1connect.CoordinatorServiceClient, context.Context, *connect.Request[Req]) (*connect.Response[Res], error),
	lenient bool, code connect.Code, ignore func(*Req),
) (res *Res, changed bool, err error) {
	res, err = coordDo(ctx, c, req, call)
	if err == nil || !lenient || connect.CodeOf(err) != code {
		return res, err == nil, err
	}
	ignore(req)
	res, err = coordDo(ctx, c, req, call)
	return res, false, err
}

// tierError prints a tier RPC error as "what: REASON: message" and keeps
// the error for errors.Is / tierpb.ReasonOf. Of an error tierclient
// returns it prints the tier's message only: tierclient's wrapping names
// the operation and the target again, which what already says.
type tierError struct {
	what string
	err  error
}

func (e *tierError) Error() string {
	var ce *connect.Error
	if !errors.As(e.err, &ce) {
		return fmt.Sprintf("%s: %v", e.what, e.err)
	}
	msg := e.err.Error()
	if ce == e.err || strings.HasPrefix(msg, "tierclient: ") {
		msg = ce.Message()
	}
	if strings.TrimSpace(msg) == "" && tierpb.DetailOf(e.err) == nil {
		// No thaw error at all: the address is not a tier's (the
		// promoter's API answers unknown paths 404 without a message).
		msg = "the server answered without a thaw error: is the address a thaw server's or coordinator's (the promoter listens on another port)?"
	}
	reason := tierpb.ReasonOf(e.err)
	if id := tierpb.MetadataOf(e.err)[tierpb.KeyBulkLoadID]; reason == tierpb.ReasonTargetLoading && id != "" {
		return fmt.Sprintf("%s: %s: %s\n%s", e.what, reason, msg, heldHint(id))
	}
	return fmt.Sprintf("%s: %s: %s", e.what, reason, msg)
}

func (e *tierError) Unwrap() error { return e.err }

func wrapTier(what string, err error) error {
	if err == nil {
		return nil
	}
	return &tierError{what: what, err: err}
}

// tableName is db.table.
type tableName struct{ db, table string }

func (n tableName) String() string { return n.db + "." + n.table }

func (n tableName) path() *tierv1.TablePath {
	return &tierv1.TablePath{Database: n.db, Table: n.table}
}

// tierTableArg parses a tier table command's flags and its one DATABASE.TABLE
// argument, then checks the client flags' values.
func tierTableArg(fs *flag.FlagSet, args []string, flags interface{ check() error }) (tableName, error) {
	pos, err := parseArgs(fs, args)
	if err != nil {
		return tableName{}, err
	}
	arg, err := oneArg(fs, pos, "DATABASE.TABLE")
	if err != nil {
		return tableName{}, err
	}
	name, err := parseTableName(arg)
	if err != nil {
		return tableName{}, err
	}
	return name, flags.check()
}

func parseTableName(s string) (tableName, error) {
	db, table, ok := strings.Cut(s, ".")
	if !ok || db == "" || table == "" || strings.Contains(table, ".") {
		return tableName{}, usageError("table %q: want DATABASE.TABLE", s)
	}
	if err := errors.Join(kv.CheckName("database", db), kv.CheckName("table", table)); err != nil {
		return tableName{}, usageError("table %q: %v", s, err)
	}
	return tableName{db, table}, nil
}

func writeTierJSON(w io.Writer, v any) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}

// ---------------------------------------------------------------------------
// thaw database

func databaseCommands() []command {
	return []command{
		{name: "create", summary: "create a database", run: runDatabaseCreate},
		{name: "drop", summary: "drop a database (--cascade drops its tables)", run: runDatabaseDrop},
		{name: "list", summary: "list databases", run: runDatabaseList},
	}
}

func runDatabase(ctx context.Context, stdout io.Writer, args []string) error {
	return dispatch(ctx, "thaw database", databaseCommands(), args, stdout)
}

func oneArg(fs *flag.FlagSet, pos []string, what string) (string, error) {
	if len(pos) != 1 {
		return "", usageError("%s takes one %s (got %d arguments)", fs.Name(), what, len(pos))
	}
	return pos[0], nil
}

func runDatabaseCreate(ctx context.Context, stdout io.Writer, args []string) error {
	fs := tierFlagSet("thaw database create", "DATABASE", stdout)
	var cf clientFlags
	cf.register(fs)
	ifNotExists := fs.Bool("if-not-exists", false, "succeed if the database exists")
	pos, err := parseArgs(fs, args)
	if err != nil {
		return err
	}
	name, err := oneArg(fs, pos, "DATABASE")
	if err != nil {
		return err
	}
	if err := cf.check(); err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, cf.timeout)
	defer cancel()
	c := dialCoordinator(cf.server)
	_, created, err := coordDoLenient(ctx, c, &tierv1.CreateDatabaseRequest{Database: name}, tierv1connect.CoordinatorServiceClient.CreateDatabase,
		*ifNotExists, connect.CodeAlreadyExists, func(r *tierv1.CreateDatabaseRequest) { r.IgnoreIfExists = true })
	if err != nil {
		return wrapTier("create database "+name, err)
	}
	text := "created database " + name
	if !created {
		text = "database " + name + " already exists"
	}
	return printDone(stdout, cf, text, map[string]any{"database": name, "created": created})
}

func runDatabaseDrop(ctx context.Context, stdout io.Writer, args []string) error {
	fs := tierFlagSet("thaw database drop", "DATABASE", stdout)
	var cf clientFlags
	cf.register(fs)
	ifExists := fs.Bool("if-exists", false, "succeed if the database does not exist")
	cascade := fs.Bool("cascade", false, "drop the database's tables too")
	pos, err := parseArgs(fs, args)
	if err != nil {
		return err
	}
	name, err := oneArg(fs, pos, "DATABASE")
	if err != nil {
		return err
	}
	if err := cf.check(); err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, cf.timeout)
	defer cancel()
	c := dialCoordinator(cf.server)
	_, dropped, err := coordDoLenient(ctx, c, &tierv1.DropDatabaseRequest{Database: name, Cascade: *cascade}, tierv1connect.CoordinatorServiceClient.DropDatabase,
		*ifExists, connect.CodeNotFound, func(r *tierv1.DropDatabaseRequest) { r.IgnoreIfNotExists = true })
	if err != nil {
		err = wrapTier("drop database "+name, err)
		if tierpb.ReasonOf(err) == tierpb.ReasonNotEmpty {
			err = fmt.Errorf("%w\n(thaw database drop %s --cascade drops its tables too)", err, name)
		}
		return err
	}
	text := "dropped database " + name
	if !dropped {
		text = "database " + name + " does not exist"
	}
	return printDone(stdout, cf, text, map[string]any{"database": name, "dropped": dropped})
}

func runDatabaseList(ctx context.Context, stdout io.Writer, args []string) error {
	fs := newFlagSet("thaw database list", stdout)
	var cf clientFlags
	cf.register(fs)
	if err := parseFlags(fs, args, false); err != nil {
		return err
	}
	if err := cf.check(); err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, cf.timeout)
	defer cancel()
	resp, err := coordDo(ctx, dialCoordinator(cf.server), &tierv1.ListDatabasesRequest{}, tierv1connect.CoordinatorServiceClient.ListDatabases)
	if err != nil {
		return wrapTier("list databases", err)
	}
	dbs := resp.GetDatabases()
	if cf.json() {
		return writeTierJSON(stdout, nonNil(dbs))
	}
	for _, d := range dbs {
		fmt.Fprintln(stdout, d)
	}
	return nil
}

func nonNil(s []string) []string {
	if s == nil {
		return []string{}
	}
	return s
}

func printDone(stdout io.Writer, cf clientFlags, text string, obj any) error {
	if cf.json() {
		return writeTierJSON(stdout, obj)
	}
	_, err := fmt.Fprintln(stdout, text)
	return err
}

// ---------------------------------------------------------------------------
// thaw table

func tableCommands() []command {
	return []command{
		{name: "create", summary: "create a primary-key table (the database is created if missing)", run: runTableCreate},
		{name: "drop", summary: "drop a table and its partitions", run: runTableDrop},
		{name: "describe", summary: "describe a table: schema, replication, state, bucket leaders", run: runTableDescribe},
		{name: "list", summary: "list the tables of a database (of every database by default)", run: runTableList},
	}
}

func runTable(ctx context.Context, stdout io.Writer, args []string) error {
	return dispatch(ctx, "thaw table", tableCommands(), args, stdout)
}

// tierStringList is a repeatable flag.
type tierStringList []string

func (s *tierStringList) String() string     { return strings.Join(*s, ", ") }
func (s *tierStringList) Set(v string) error { *s = append(*s, v); return nil }

func splitList(s string) []string {
	if s == "" {
		return nil
	}
	parts := strings.Split(s, ",")
	for i := range parts {
		parts[i] = strings.TrimSpace(parts[i])
	}
	return parts
}

// parseColumn parses "name TYPE [NOT NULL | NULL]".
func parseColumn(spec string) (kv.Column, error) {
	s := strings.TrimSpace(spec)
	name, rest, ok := strings.Cut(s, " ")
	rest = strings.TrimSpace(rest)
	if !ok || name == "" || rest == "" {
		return kv.Column{}, usageError("--column %q: want \"NAME TYPE [NOT NULL]\"", spec)
	}
	col := kv.Column{Name: name, Nullable: true}
	upper := strings.ToUpper(rest)
	switch {
	case strings.HasSuffix(upper, " NOT NULL"):
		col.Nullable = false
		rest = strings.TrimSpace(rest[:len(rest)-len(" NOT NULL")])
	case strings.HasSuffix(upper, " NULL"):
		rest = strings.TrimSpace(rest[:len(rest)-len(" NULL")])
	}
	t, err := kv.ParseType(rest)
	if err != nil {
		return kv.Column{}, usageError("--column %q: %v", spec, err)
	}
	col.Type = t
	return col, nil
}

// readSchemaFile reads a schema file strictly (strictjson, unknown and
// null members refused: a null would read as its zero value, "nullable":
// null as NOT NULL): a kv.TableSchema JSON document, or a `thaw table
// describe --output json` document, whose schema it takes.
func readSchemaFile(path string) (kv.TableSchema, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return kv.TableSchema{}, fmt.Errorf("read schema: %w", err)
	}
	members, err := strictjson.Check(b, strictjson.Options{NoNull: true})
	if err == nil && members == nil {
		err = errors.New("want a JSON object")
	}
	if err != nil {
		return kv.TableSchema{}, fmt.Errorf("schema %s: %w", path, err)
	}
	_, described := members["table_id"]
	var t tableJSON
	dst := any(&t.Schema)
	if described {
		dst = &t
	}
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	if err := dec.Decode(dst); err != nil {
		return kv.TableSchema{}, fmt.Errorf("schema %s: %w", path, err)
	}
	return t.Schema, nil
}

func runTableCreate(ctx context.Context, stdout io.Writer, args []string) error {
	fs := tierFlagSet("thaw table create", "DATABASE.TABLE", stdout)
	var cf clientFlags
	cf.register(fs)
	schemaFile := fs.String("schema", "", "schema file: a kv.TableSchema JSON document, or what thaw table describe --output json prints (instead of --column ...)")
	var columns tierStringList
	fs.Var(&columns, "column", `a column, "NAME TYPE [NOT NULL]" (repeatable, in order); primary-key columns are NOT NULL`)
	pk := fs.String("primary-key", "", "comma-separated primary-key columns")
	partKeys := fs.String("partition-key", "", "comma-separated partition-key columns (a subset of the primary key)")
	bucketKey := fs.String("bucket-key", "", "comma-separated bucket-key columns (default: primary key minus partition keys)")
	buckets := fs.Int("buckets", 0, "bucket count (default 1; overrides the schema file's)")
	bucketing := fs.String("bucketing", "", "bucketing function: fluss (default), paimon or iceberg")
	replication := fs.Int("replication", 0, "replicas per bucket (default: the tier's default)")
	ifNotExists := fs.Bool("if-not-exists", false, "succeed if the table exists with this schema (and --replication, if given); a different one is an error")
	name, err := tierTableArg(fs, args, &cf)
	if err != nil {
		return err
	}
	var schema kv.TableSchema
	switch {
	case *schemaFile != "" && (len(columns) > 0 || *pk != "" || *partKeys != "" || *bucketKey != ""):
		return usageError("thaw table create: give --schema or --column/--primary-key/--partition-key/--bucket-key, not both")
	case *schemaFile != "":
		if schema, err = readSchemaFile(*schemaFile); err != nil {
			return err
		}
	case len(columns) == 0:
		return usageError("thaw table create needs --schema FILE or --column \"NAME TYPE\" ... with --primary-key")
	default:
		for _, spec := range columns {
			col, err := parseColumn(spec)
			if err != nil {
				return err
			}
			schema.Columns = append(schema.Columns, col)
		}
		schema.PrimaryKey = splitList(*pk)
		schema.PartitionKeys = splitList(*partKeys)
		schema.BucketKey = splitList(*bucketKey)
		// A primary key implies NOT NULL, as in SQL.
		for i, c := range schema.Columns {
			if slices.Contains(schema.PrimaryKey, c.Name) {
				schema.Columns[i].Nullable = false
			}
		}
	}
	switch {
	case flagGiven(fs, "buckets"): // even as 0: the schema check judges it
		schema.Buckets = *buckets
	case schema.Buckets == 0:
		schema.Buckets = 1
	}
	if *bucketing != "" {
		b, err := kv.ParseBucketing(*bucketing)
		if err != nil {
			return usageError("--bucketing: %v", err)
		}
		schema.Bucketing = b
	}
	if err := schema.Validate(); err != nil {
		return usageError("thaw table create %s: %v", name, err)
	}
	if *replication < 0 || *replication > tierpb.MaxReplicationFactor {
		return usageError("--replication %d: want 1..%d (0: the tier's default)", *replication, tierpb.MaxReplicationFactor)
	}
	ctx, cancel := context.WithTimeout(ctx, cf.timeout)
	defer cancel()
	c := dialCoordinator(cf.server)
	if _, err := coordDo(ctx, c, &tierv1.CreateDatabaseRequest{Database: name.db, IgnoreIfExists: true}, tierv1connect.CoordinatorServiceClient.CreateDatabase); err != nil {
		return wrapTier("create database "+name.db, err)
	}
	// Asked again with IgnoreIfExists, the coordinator answers with the
	// table that exists (or creates it, if it was dropped since).
	resp, created, err := coordDoLenient(ctx, c,
		&tierv1.CreateTableRequest{Path: name.path(), Schema: tierpb.SchemaToProto(schema), ReplicationFactor: int32(*replication)},
		tierv1connect.CoordinatorServiceClient.CreateTable, *ifNotExists, connect.CodeAlreadyExists, func(r *tierv1.CreateTableRequest) { r.IgnoreIfExists = true })
	if err != nil {
		return wrapTier("create table "+name.String(), err)
	}
	info, err := tableJSONOf(resp.GetTable())
	if err != nil {
		return err
	}
	if !created {
		if err := sameTable(name, info, schema, *replication); err != nil {
			return err
		}
	}
	if cf.json() {
		return writeTierJSON(stdout, info)
	}
	did := "created table"
	if !created {
		did = "table already exists:"
	}
	fmt.Fprintf(stdout, "%s %s (id %d, %s, replication %d)\n", did, name, info.TableID, plural(info.Schema.Buckets, "bucket", "buckets"), info.ReplicationFactor)
	return nil
}

// sameTable checks that the table thaw table create --if-not-exists found
// is the one it was asked to create: the same schema and, when
// --replication was given, the same replication factor. Anything else
// would let a script go on against a table it did not describe.
func sameTable(name tableName, have tableJSON, want kv.TableSchema, replication int) error {
	d := kv.SchemaDiff(have.Schema, want)
	if d == "" && replication > 0 && int(have.ReplicationFactor) != replication {
		d = fmt.Sprintf("replication %d, want %d", have.ReplicationFactor, replication)
	}
	if d != "" {
		return fmt.Errorf("table %s already exists (id %d) and differs from the one given: %s (thaw table describe %s shows it)", name, have.TableID, d, name)
	}
	return nil
}

func runTableDrop(ctx context.Context, stdout io.Writer, args []string) error {
	fs := tierFlagSet("thaw table drop", "DATABASE.TABLE", stdout)
	var cf clientFlags
	cf.register(fs)
	ifExists := fs.Bool("if-exists", false, "succeed if the table does not exist")
	name, err := tierTableArg(fs, args, &cf)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, cf.timeout)
	defer cancel()
	_, dropped, err := coordDoLenient(ctx, dialCoordinator(cf.server), &tierv1.DropTableRequest{Path: name.path()}, tierv1connect.CoordinatorServiceClient.DropTable,
		*ifExists, connect.CodeNotFound, func(r *tierv1.DropTableRequest) { r.IgnoreIfNotExists = true })
	if err != nil {
		return wrapTier("drop table "+name.String(), err)
	}
	text := "dropped table " + name.String()
	if !dropped {
		text = "table " + name.String() + " does not exist"
	}
	return printDone(stdout, cf, text, map[string]any{"table": name.String(), "dropped": dropped})
}

// tableJSON is a table as the CLI prints it; Schema is in the format of
// --schema files.
type tableJSON struct {
	Database          string         `json:"database"`
	Table             string         `json:"table"`
	TableID           int64          `json:"table_id"`
	Schema            kv.TableSchema `json:"schema"`
	ReplicationFactor int            `json:"replication_factor"`
	RemoteDataDir     string         `json:"remote_data_dir"`
	DataState         string         `json:"data_state,omitempty"`
	BulkLoadID        string         `json:"bulk_load_id,omitempty"`
	CreatedMs         int64          `json:"created_ms"`
	ModifiedMs        int64          `json:"modified_ms"`
	Partitions        []partJSON     `json:"partitions,omitempty"`
	Buckets           []bucketJSON   `json:"buckets,omitempty"`
}

type partJSON struct {
	Name        string `json:"name"`
	PartitionID int64  `json:"partition_id"`
	DataState   string `json:"data_state"`
	BulkLoadID  string `json:"bulk_load_id,omitempty"`
}

type bucketJSON struct {
	Bucket      int32    `json:"bucket"`
	Leader      string   `json:"leader"`
	LeaderEpoch int32    `json:"leader_epoch"`
	Address     string   `json:"address,omitempty"`
	Replicas    []string `json:"replicas"`
	Changelog   string   `json:"changelog,omitempty"`
}

func tableJSONOf(t *tierv1.TableInfo) (tableJSON, error) {
	s, err := tierpb.SchemaFromProto(t.GetSchema())
	if err != nil {
		return tableJSON{}, err
	}
	out := tableJSON{
		Database: t.GetPath().GetDatabase(), Table: t.GetPath().GetTable(), TableID: t.GetTableId(), Schema: s,
		ReplicationFactor: int(t.GetReplicationFactor()), RemoteDataDir: t.GetRemoteDataDir(),
		BulkLoadID: t.GetBulkLoadId(), CreatedMs: t.GetCreatedMs(), ModifiedMs: t.GetModifiedMs(),
	}
	if t.GetDataState() != tierv1.DataState_DATA_STATE_UNSPECIFIED {
		out.DataState = tierpb.DataStateName(t.GetDataState())
	}
	return out, nil
}

func runTableDescribe(ctx context.Context, stdout io.Writer, args []string) error {
	fs := tierFlagSet("thaw table describe", "DATABASE.TABLE", stdout)
	var cf clientFlags
	cf.register(fs)
	name, err := tierTableArg(fs, args, &cf)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, cf.timeout)
	defer cancel()
	c := dialCoordinator(cf.server)
	resp, err := coordDo(ctx, c, &tierv1.GetTableRequest{Path: name.path()}, tierv1connect.CoordinatorServiceClient.GetTable)
	if err != nil {
		return wrapTier("describe table "+name.String(), err)
	}
	info, err := tableJSONOf(resp.GetTable())
	if err != nil {
		return err
	}
	if len(info.Schema.PartitionKeys) > 0 {
		parts, err := coordDo(ctx, c, &tierv1.ListPartitionsRequest{Path: name.path()}, tierv1connect.CoordinatorServiceClient.ListPartitions)
		if err != nil {
			return wrapTier("list partitions of "+name.String(), err)
		}
		info.Partitions = partsJSON(parts.GetPartitions())
	} else {
		loc, err := coordDo(ctx, c, &tierv1.GetTargetLocationsRequest{Target: &tierv1.TargetPath{Database: name.db, Table: name.table}}, tierv1connect.CoordinatorServiceClient.GetTargetLocations)
		if err != nil {
			return wrapTier("locate "+name.String(), err)
		}
		for _, b := range loc.GetBuckets() {
			info.Buckets = append(info.Buckets, bucketJSON{Bucket: b.GetBucket(), Leader: b.GetLeaderId(), LeaderEpoch: b.GetLeaderEpoch(), Address: b.GetLeaderAddress(),
				Replicas: nonNil(b.GetReplicas()), Changelog: b.GetChangelog()})
		}
	}
	if cf.json() {
		return writeTierJSON(stdout, info)
	}
	w := tabwriter.NewWriter(stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintf(w, "table\t%s\nid\t%d\n", name, info.TableID)
	fmt.Fprintln(w, "columns")
	for _, col := range info.Schema.Columns {
		null := "NOT NULL"
		if col.Nullable {
			null = "NULL"
		}
		fmt.Fprintf(w, "  %s\t%s\t%s\n", col.Name, col.Type, null)
	}
	fmt.Fprintf(w, "primary key\t%s\n", strings.Join(info.Schema.PrimaryKey, ", "))
	fmt.Fprintf(w, "partition keys\t%s\n", orDash(strings.Join(info.Schema.PartitionKeys, ", ")))
	fmt.Fprintf(w, "bucket key\t%s\n", orDash(strings.Join(info.Schema.BucketKey, ", ")))
	fmt.Fprintf(w, "buckets\t%d (%s bucketing)\n", info.Schema.Buckets, info.Schema.Bucketing)
	fmt.Fprintf(w, "replication\t%d\nremote data dir\t%s\n", info.ReplicationFactor, info.RemoteDataDir)
	if info.DataState != "" {
		state := info.DataState
		if info.BulkLoadID != "" {
			state += " (bulk load " + info.BulkLoadID + ")"
		}
		fmt.Fprintf(w, "data state\t%s\n", state)
	}
	fmt.Fprintf(w, "created\t%s\n", time.UnixMilli(info.CreatedMs).UTC().Format(time.RFC3339))
	if len(info.Schema.PartitionKeys) > 0 {
		fmt.Fprintf(w, "partitions\t%d\n", len(info.Partitions))
		for _, p := range info.Partitions {
			fmt.Fprintf(w, "  %s\t%s\n", p.Name, p.DataState)
		}
	}
	if len(info.Buckets) > 0 {
		fmt.Fprintln(w, "bucket\tleader\tepoch\treplicas\tchangelog")
		under := 0
		for _, b := range info.Buckets {
			fmt.Fprintf(w, "  %d\t%s\t%d\t%s\t%s\n", b.Bucket, b.leaderText(), b.LeaderEpoch, strings.Join(b.Replicas, ","), orDash(b.Changelog))
			if len(b.Replicas) < info.ReplicationFactor {
				under++
			}
		}
		if under > 0 {
			fmt.Fprintf(w, "under-replicated\t%d of %d buckets have fewer replicas than %d: too few live tablet servers sharing a changelog (docs/tier.md)\n",
				under, len(info.Buckets), info.ReplicationFactor)
		}
	}
	return w.Flush()
}

// leaderText is the bucket's leader as describe prints it: "-" for none,
// "(not live)" after one whose server is not registered (its bucket waits
// for it; reads and writes fail until it is back).
func (b bucketJSON) leaderText() string {
	switch {
	case b.Leader == "":
		return "-"
	case b.Address == "":
		return b.Leader + " (not live)"
	}
	return b.Leader
}

// serverJSON is a registered tablet server as thaw servers prints it.
type serverJSON struct {
	Server    string `json:"server"`
	Address   string `json:"address"`
	Changelog string `json:"changelog"`
	StartedMs int64  `json:"started_ms"`
}

func runServers(ctx context.Context, stdout io.Writer, args []string) error {
	fs := tierFlagSet("thaw servers", "", stdout)
	var cf clientFlags
	cf.register(fs)
	pos, err := parseArgs(fs, args)
	if err != nil {
		return err
	}
	if len(pos) > 0 {
		return usageError("thaw servers takes no arguments, got %q", pos)
	}
	if err := cf.check(); err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, cf.timeout)
	defer cancel()
	resp, err := coordDo(ctx, dialCoordinator(cf.server), &tierv1.ListServersRequest{}, tierv1connect.CoordinatorServiceClient.ListServers)
	if err != nil {
		return wrapTier("list servers", err)
	}
	servers := []serverJSON{}
	for _, s := range resp.GetServers() {
		servers = append(servers, serverJSON{Server: s.GetServerId(), Address: s.GetAddress(), Changelog: s.GetChangelog(), StartedMs: s.GetStartedMs()})
	}
	if cf.json() {
		return writeTierJSON(stdout, servers)
	}
	if len(servers) == 0 {
		_, err := fmt.Fprintln(stdout, "no tablet server is registered")
		return err
	}
	w := tabwriter.NewWriter(stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(w, "server\taddress\tchangelog\tregistered")
	for _, s := range servers {
		fmt.Fprintf(w, "%s\t%s\t%s\t%s\n", s.Server, s.Address, orDash(s.Changelog), time.UnixMilli(s.StartedMs).UTC().Format(time.RFC3339))
	}
	return w.Flush()
}

func runTableList(ctx context.Context, stdout io.Writer, args []string) error {
	fs := tierFlagSet("thaw table list", "[DATABASE]", stdout)
	var cf clientFlags
	cf.register(fs)
	pos, err := parseArgs(fs, args)
	if err != nil {
		return err
	}
	if len(pos) > 1 {
		return usageError("thaw table list takes at most one DATABASE")
	}
	if err := cf.check(); err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, cf.timeout)
	defer cancel()
	c := dialCoordinator(cf.server)
	dbs := pos
	if len(dbs) == 0 {
		resp, err := coordDo(ctx, c, &tierv1.ListDatabasesRequest{}, tierv1connect.CoordinatorServiceClient.ListDatabases)
		if err != nil {
			return wrapTier("list databases", err)
		}
		dbs = resp.GetDatabases()
	}
	names := []string{}
	for _, db := range dbs {
		resp, err := coordDo(ctx, c, &tierv1.ListTablesRequest{Database: db}, tierv1connect.CoordinatorServiceClient.ListTables)
		if err != nil {
			return wrapTier("list tables of "+db, err)
		}
		for _, t := range resp.GetTables() {
			names = append(names, db+"."+t)
		}
	}
	if cf.json() {
		return writeTierJSON(stdout, names)
	}
	for _, n := range names {
		fmt.Fprintln(stdout, n)
	}
	return nil
}

// ---------------------------------------------------------------------------
// thaw partition

func partitionCommands() []command {
	return []command{
		{name: "create", summary: "create a partition of a partitioned table by name (values joined by $)", run: runPartitionCreate},
		{name: "drop", summary: "drop a partition", run: runPartitionDrop},
		{name: "list", summary: "list a partitioned table's partitions", run: runPartitionList},
	}
}

func runPartition(ctx context.Context, stdout io.Writer, args []string) error {
	return dispatch(ctx, "thaw partition", partitionCommands(), args, stdout)
}

func tableAndPartition(fs *flag.FlagSet, pos []string) (tableName, string, error) {
	if len(pos) != 2 {
		return tableName{}, "", usageError("%s takes DATABASE.TABLE PARTITION (got %d arguments)", fs.Name(), len(pos))
	}
	name, err := parseTableName(pos[0])
	if err != nil {
		return tableName{}, "", err
	}
	if err := kv.ValidatePartitionName(pos[1]); err != nil {
		return tableName{}, "", usageError("partition %q: %v", pos[1], err)
	}
	return name, pos[1], nil
}

func runPartitionCreate(ctx context.Context, stdout io.Writer, args []string) error {
	fs := tierFlagSet("thaw partition create", "DATABASE.TABLE PARTITION", stdout)
	var cf clientFlags
	cf.register(fs)
	ifNotExists := fs.Bool("if-not-exists", false, "succeed if the partition exists")
	pos, err := parseArgs(fs, args)
	if err != nil {
		return err
	}
	name, part, err := tableAndPartition(fs, pos)
	if err != nil {
		return err
	}
	if err := cf.check(); err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, cf.timeout)
	defer cancel()
	resp, created, err := coordDoLenient(ctx, dialCoordinator(cf.server),
		&tierv1.CreatePartitionRequest{Path: name.path(), Partition: &tierv1.CreatePartitionRequest_PartitionName{PartitionName: part}},
		tierv1connect.CoordinatorServiceClient.CreatePartition, *ifNotExists, connect.CodeAlreadyExists, func(r *tierv1.CreatePartitionRequest) { r.IgnoreIfExists = true })
	if err != nil {
		return wrapTier("create partition "+part+" of "+name.String(), err)
	}
	p := partsJSON([]*tierv1.PartitionInfo{resp.GetPartition()})[0]
	if cf.json() {
		return writeTierJSON(stdout, p)
	}
	did := "created partition"
	if !created {
		did = "partition already exists:"
	}
	fmt.Fprintf(stdout, "%s %s of %s (id %d)\n", did, p.Name, name, p.PartitionID)
	return nil
}

func runPartitionDrop(ctx context.Context, stdout io.Writer, args []string) error {
	fs := tierFlagSet("thaw partition drop", "DATABASE.TABLE PARTITION", stdout)
	var cf clientFlags
	cf.register(fs)
	ifExists := fs.Bool("if-exists", false, "succeed if the partition does not exist")
	pos, err := parseArgs(fs, args)
	if err != nil {
		return err
	}
	name, part, err := tableAndPartition(fs, pos)
	if err != nil {
		return err
	}
	if err := cf.check(); err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, cf.timeout)
	defer cancel()
	_, dropped, err := coordDoLenient(ctx, dialCoordinator(cf.server),
		&tierv1.DropPartitionRequest{Path: name.path(), Partition: &tierv1.DropPartitionRequest_PartitionName{PartitionName: part}},
		tierv1connect.CoordinatorServiceClient.DropPartition, *ifExists, connect.CodeNotFound, func(r *tierv1.DropPartitionRequest) { r.IgnoreIfNotExists = true })
	if err != nil {
		return wrapTier("drop partition "+part+" of "+name.String(), err)
	}
	text := "dropped partition " + part + " of " + name.String()
	if !dropped {
		text = "partition " + part + " of " + name.String() + " does not exist"
	}
	return printDone(stdout, cf, text, map[string]any{"table": name.String(), "partition": part, "dropped": dropped})
}

func runPartitionList(ctx context.Context, stdout io.Writer, args []string) error {
	fs := tierFlagSet("thaw partition list", "DATABASE.TABLE", stdout)
	var cf clientFlags
	cf.register(fs)
	name, err := tierTableArg(fs, args, &cf)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, cf.timeout)
	defer cancel()
	resp, err := coordDo(ctx, dialCoordinator(cf.server), &tierv1.ListPartitionsRequest{Path: name.path()}, tierv1connect.CoordinatorServiceClient.ListPartitions)
	if err != nil {
		return wrapTier("list partitions of "+name.String(), err)
	}
	parts := partsJSON(resp.GetPartitions())
	if cf.json() {
		return writeTierJSON(stdout, parts)
	}
	w := tabwriter.NewWriter(stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(w, "PARTITION\tID\tSTATE")
	for _, p := range parts {
		state := p.DataState
		if p.BulkLoadID != "" {
			state += " (" + p.BulkLoadID + ")"
		}
		fmt.Fprintf(w, "%s\t%d\t%s\n", p.Name, p.PartitionID, state)
	}
	return w.Flush()
}

func partsJSON(ps []*tierv1.PartitionInfo) []partJSON {
	out := make([]partJSON, 0, len(ps))
	for _, p := range ps {
		out = append(out, partJSON{Name: p.GetPartitionName(), PartitionID: p.GetPartitionId(), DataState: tierpb.DataStateName(p.GetDataState()), BulkLoadID: p.GetBulkLoadId()})
	}
	return out
}

// ---------------------------------------------------------------------------
// Schema conversion.

// ---------------------------------------------------------------------------
// JSON <-> kv.Row.
//
// A row is one JSON object whose keys are column names. Values by type:
// BOOLEAN true/false; TINYINT..BIGINT integers in range; FLOAT, DOUBLE
// numbers; DECIMAL(p,s) a number or a string ("12.30"); CHAR, STRING
// strings; BINARY, BYTES base64 strings; DATE "2024-01-31"; TIME
// "13:45:00.123"; TIMESTAMP "2024-01-31T13:45:00.123456" (no zone);
// TIMESTAMP_LTZ RFC 3339 with a zone ("2024-01-31T13:45:00Z"); DATE, TIME,
// TIMESTAMP and TIMESTAMP_LTZ also take integers (days, millis of day,
// epoch millis; a timestamp also epoch millis with 6 digits of
// nanoseconds within the millisecond after a point, as a timestamp outside
// the years 0000-9999 is printed). null or a missing key is NULL. The text must be UTF-8
// without unpaired surrogate escapes ("\ud800"), which encoding/json would
// turn into U+FFFD: a row is refused rather than stored changed.

// rowError says which row and column is wrong.
func rowErr(row int, format string, args ...any) error {
	return fmt.Errorf("row %d: %s", row, fmt.Sprintf(format, args...))
}

// decodeObject reads one JSON object strictly: no duplicate keys, no
// trailing data; values stay raw.
func decodeObject(data []byte) ([]string, map[string]json.RawMessage, error) {
	if err := strictjson.Text(data); err != nil {
		return nil, nil, err
	}
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.UseNumber()
	tok, err := dec.Token()
	if err != nil {
		return nil, nil, fmt.Errorf("not JSON: %w", err)
	}
	if d, ok := tok.(json.Delim); !ok || d != '{' {
		return nil, nil, errors.New("want a JSON object")
	}
	var keys []string
	vals := make(map[string]json.RawMessage)
	for dec.More() {
		tok, err := dec.Token()
		if err != nil {
			return nil, nil, fmt.Errorf("bad JSON: %w", err)
		}
		k := tok.(string)
		var raw json.RawMessage
		if err := dec.Decode(&raw); err != nil {
			return nil, nil, fmt.Errorf("bad JSON value of %q: %w", k, err)
		}
		if _, dup := vals[k]; dup {
			return nil, nil, fmt.Errorf("duplicate key %q", k)
		}
		keys = append(keys, k)
		vals[k] = raw
	}
	if _, err := dec.Token(); err != nil {
		return nil, nil, fmt.Errorf("bad JSON: %w", err)
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		return nil, nil, errors.New("trailing data after the JSON object")
	}
	return keys, vals, nil
}

// rowFromJSON converts one JSON object to a row of t. With keyOnly, only
// primary-key columns may (and must) appear.
func rowFromJSON(t *kv.Table, data []byte, rowNum int, keyOnly bool) (kv.Row, error) {
	keys, vals, err := decodeObject(data)
	if err != nil {
		return nil, rowErr(rowNum, "%v", err)
	}
	s := t.Schema()
	row := make(kv.Row, t.NumColumns())
	for _, k := range keys {
		i, ok := t.ColumnIndex(k)
		if !ok {
			return nil, rowErr(rowNum, "unknown column %q (columns: %s)", k, strings.Join(columnNames(t), ", "))
		}
		col := t.Column(i)
		if keyOnly && !slices.Contains(s.PrimaryKey, k) {
			return nil, rowErr(rowNum, "column %q is not part of the primary key (%s)", k, strings.Join(s.PrimaryKey, ", "))
		}
		v, err := valueFromJSON(col.Type, vals[k])
		if err != nil {
			return nil, rowErr(rowNum, "column %q (%s): %v", k, col.Type, err)
		}
		row[i] = v
	}
	for _, k := range s.PrimaryKey {
		i, _ := t.ColumnIndex(k)
		switch {
		case row[i] != nil:
		case vals[k] != nil:
			return nil, rowErr(rowNum, "primary-key column %q is null", k)
		default:
			return nil, rowErr(rowNum, "missing primary-key column %q", k)
		}
	}
	if !keyOnly {
		for i := range t.NumColumns() {
			if c := t.Column(i); row[i] == nil && !c.Nullable {
				return nil, rowErr(rowNum, "column %q is NOT NULL and has no value", c.Name)
			}
		}
	}
	return row, nil
}

// keyRowFromJSON accepts a key as an object of primary-key columns, an
// array of the primary-key values in primary-key order, or, for a
// one-column primary key, that column's value alone.
func keyRowFromJSON(t *kv.Table, data []byte, rowNum int) (kv.Row, error) {
	pk := t.Schema().PrimaryKey
	trimmed := bytes.TrimSpace(data)
	switch {
	case len(trimmed) == 0 || trimmed[0] == '{':
		return rowFromJSON(t, data, rowNum, true)
	case trimmed[0] != '[' && len(pk) > 1:
		return nil, rowErr(rowNum, "want a JSON object of the primary-key columns or an array of their %d values (%s), not %s",
			len(pk), strings.Join(pk, ", "), jsonKind(trimmed))
	}
	if err := strictjson.Text(trimmed); err != nil {
		return nil, rowErr(rowNum, "%v", err)
	}
	dec := json.NewDecoder(bytes.NewReader(trimmed))
	dec.UseNumber()
	var vals []json.RawMessage
	hint := ""
	if trimmed[0] == '[' {
		if err := dec.Decode(&vals); err != nil {
			return nil, rowErr(rowNum, "bad JSON array: %v", err)
		}
	} else {
		// A lone value is the key of a one-column primary key: 42, "abc".
		if trimmed[0] != '"' {
			hint = fmt.Sprintf(" (text, dates, times, decimals and bytes are JSON strings: %q)", trimmed)
		}
		var v json.RawMessage
		if err := dec.Decode(&v); err != nil {
			return nil, rowErr(rowNum, "bad JSON value: %v%s", err, hint)
		}
		vals = []json.RawMessage{v}
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		return nil, rowErr(rowNum, "trailing data after the key%s", hint)
	}
	if len(vals) != len(pk) {
		return nil, rowErr(rowNum, "%d key values for the primary key (%s)", len(vals), strings.Join(pk, ", "))
	}
	row := make(kv.Row, t.NumColumns())
	for j, name := range pk {
		i, _ := t.ColumnIndex(name)
		v, err := valueFromJSON(t.Column(i).Type, vals[j])
		if err != nil {
			return nil, rowErr(rowNum, "column %q (%s): %v", name, t.Column(i).Type, err)
		}
		if v == nil {
			return nil, rowErr(rowNum, "primary-key column %q is null", name)
		}
		row[i] = v
	}
	return row, nil
}

func columnNames(t *kv.Table) []string {
	names := make([]string, t.NumColumns())
	for i := range names {
		names[i] = t.Column(i).Name
	}
	return names
}

func jsonKind(raw json.RawMessage) string {
	b := bytes.TrimSpace(raw)
	switch {
	case len(b) == 0:
		return "nothing"
	case b[0] == '"':
		return "a string"
	case b[0] == '{':
		return "an object"
	case b[0] == '[':
		return "an array"
	case b[0] == 't' || b[0] == 'f':
		return "a boolean"
	default:
		return "a number"
	}
}

// valueFromJSON converts one JSON value to the Go value of typ; JSON null
// is nil.
func valueFromJSON(typ kv.Type, raw json.RawMessage) (any, error) {
	if string(bytes.TrimSpace(raw)) == "null" {
		return nil, nil
	}
	var v any
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber()
	if err := dec.Decode(&v); err != nil {
		return nil, err
	}
	want := func(what string) error { return fmt.Errorf("want %s, got %s %s", what, jsonKind(raw), raw) }
	intIn := func(lo, hi int64) (int64, error) {
		n, ok := v.(json.Number)
		if !ok {
			return 0, want("an integer")
		}
		i, err := strconv.ParseInt(n.String(), 10, 64)
		if err != nil || i < lo || i > hi {
			return 0, fmt.Errorf("%s is not an integer in [%d, %d]", n, lo, hi)
		}
		return i, nil
	}
	str := func() (string, error) {
		s, ok := v.(string)
		if !ok {
			return "", want("a string")
		}
		return s, nil
	}
	switch typ.Kind {
	case kv.KindBoolean:
		b, ok := v.(bool)
		if !ok {
			return nil, want("true or false")
		}
		return b, nil
	case kv.KindTinyInt:
		i, err := intIn(math.MinInt8, math.MaxInt8)
		return int8(i), err
	case kv.KindSmallInt:
		i, err := intIn(math.MinInt16, math.MaxInt16)
		return int16(i), err
	case kv.KindInt:
		i, err := intIn(math.MinInt32, math.MaxInt32)
		return int32(i), err
	case kv.KindBigInt:
		return intIn(math.MinInt64, math.MaxInt64)
	case kv.KindFloat, kv.KindDouble:
		var f float64
		switch x := v.(type) {
		case json.Number:
			// Parsed at the column's precision: a FLOAT rounds once, as
			// every other client's does (float32(ParseFloat(s, 64)) may
			// round twice to another float, another key).
			bits := 64
			if typ.Kind == kv.KindFloat {
				bits = 32
			}
			var err error
			if f, err = strconv.ParseFloat(x.String(), bits); err != nil {
				return nil, fmt.Errorf("%s is out of %s range", x, typ.Kind)
			}
		case string:
			var ok bool
			if f, ok = nonFinite[x]; !ok {
				return nil, want(`a number, "NaN", "Infinity" or "-Infinity"`)
			}
		default:
			return nil, want(`a number, "NaN", "Infinity" or "-Infinity"`)
		}
		if typ.Kind == kv.KindFloat {
			return float32(f), nil
		}
		return f, nil
	case kv.KindDecimal:
		var s string
		switch x := v.(type) {
		case json.Number:
			s = x.String()
		case string:
			s = x
		default:
			return nil, want("a number or a decimal string")
		}
		return kv.ParseDecimal(s, typ.Precision, typ.Scale)
	case kv.KindChar, kv.KindString:
		return str()
	case kv.KindBinary, kv.KindBytes:
		s, err := str()
		if err != nil {
			return nil, fmt.Errorf("%w (base64)", err)
		}
		b, err := base64.StdEncoding.Strict().DecodeString(s)
		if err != nil {
			return nil, fmt.Errorf("not base64: %w", err)
		}
		return b, nil
	case kv.KindDate:
		if _, ok := v.(json.Number); ok {
			i, err := intIn(math.MinInt32, math.MaxInt32)
			return kv.Date(i), err
		}
		s, err := str()
		if err != nil {
			return nil, fmt.Errorf("want a date like 2024-01-31 or days since 1970-01-01, got %s %s", jsonKind(raw), raw)
		}
		d, err := time.Parse(time.DateOnly, s)
		if err != nil {
			return nil, fmt.Errorf("%q is not a date like 2024-01-31", s)
		}
		return kv.Date(d.Unix() / 86400), nil
	case kv.KindTime:
		if _, ok := v.(json.Number); ok {
			i, err := intIn(0, 86_399_999)
			return kv.Time(i), err
		}
		s, err := str()
		if err != nil {
			return nil, fmt.Errorf("want a time like 13:45:00.123 or millis of the day, got %s %s", jsonKind(raw), raw)
		}
		d, err := time.Parse("15:04:05.999999999", s)
		if err != nil || fractionTooLong(s) || strings.Contains(s, ",") {
			return nil, fmt.Errorf("%q is not a time like 13:45:00.123", s)
		}
		if d.Nanosecond()%1e6 != 0 {
			return nil, fmt.Errorf("%q: TIME keeps milliseconds only", s)
		}
		return kv.Time(d.Hour()*3_600_000 + d.Minute()*60_000 + d.Second()*1000 + d.Nanosecond()/1e6), nil
	case kv.KindTimestamp, kv.KindTimestampLTZ:
		if n, ok := v.(json.Number); ok {
			if ms, frac, ok := strings.Cut(string(n), "."); ok {
				return epochMillisNanos(ms, frac)
			}
			i, err := intIn(math.MinInt64, math.MaxInt64)
			return kv.Timestamp{Millis: i}, err
		}
		s, err := str()
		if err != nil {
			return nil, fmt.Errorf("want a timestamp string or epoch millis, got %s %s", jsonKind(raw), raw)
		}
		var ts time.Time
		if fractionTooLong(s) {
			return nil, fmt.Errorf("%q: more than 9 fractional digits of a second", s)
		}
		if strings.Contains(s, ",") {
			// (time.Parse takes a comma before the fraction too, and cuts
			// digits past 9 after one silently.)
			return nil, fmt.Errorf("%q: write the fraction of a second after a '.'", s)
		}
		if typ.Kind == kv.KindTimestampLTZ {
			if ts, err = time.Parse(time.RFC3339Nano, s); err != nil {
				return nil, fmt.Errorf("%q is not an RFC 3339 instant like 2024-01-31T13:45:00Z", s)
			}
			// time.Parse takes offsets of 24 hours and more, which RFC
			// 3339 does not (hours 00-23).
			if _, off := ts.Zone(); off <= -24*3600 || off >= 24*3600 {
				return nil, fmt.Errorf("%q: a zone offset of 24 hours or more is not RFC 3339", s)
			}
		} else {
			if ts, err = time.Parse("2006-01-02T15:04:05.999999999", strings.Replace(s, " ", "T", 1)); err != nil {
				return nil, fmt.Errorf("%q is not a timestamp like 2024-01-31T13:45:00.123 (no zone)", s)
			}
		}
		// UnixMilli floors and Nanosecond is never negative, so this is
		// exact before 1970 too.
		return kv.Timestamp{Millis: ts.UnixMilli(), NanoOfMilli: int32(ts.Nanosecond() % 1e6)}, nil
	default:
		return nil, fmt.Errorf("unsupported type %s", typ)
	}
}

// epochMillisNanos reads the JSON number ms.frac of a timestamp as
// valueToJSON prints one outside the years 0000-9999 that has digits
// below the millisecond: epoch millis (floored, as kv.Timestamp keeps
// them) and, after the point, the 6 digits of the nanoseconds within that
// millisecond (-5.000001 is 5 ms before the epoch plus 1 ns).
func epochMillisNanos(ms, frac string) (any, error) {
	m, err := strconv.ParseInt(ms, 10, 64)
	if err != nil || len(frac) != 6 || strings.Trim(frac, "0123456789") != "" {
		return nil, fmt.Errorf("%s.%s: want epoch millis, or epoch millis and 6 digits of nanoseconds within the millisecond (1700000000000.000001)", ms, frac)
	}
	nanos, _ := strconv.Atoi(frac)
	return kv.Timestamp{Millis: m, NanoOfMilli: int32(nanos)}, nil
}

// fractionTooLong reports whether s has more than 9 digits after its
// decimal point: time.Parse drops the rest without an error.
func fractionTooLong(s string) bool {
	_, frac, ok := strings.Cut(s, ".")
	n := 0
	for n < len(frac) && frac[n] >= '0' && frac[n] <= '9' {
		n++
	}
	return ok && n > 9
}

// valueToJSON is the inverse of valueFromJSON.
func valueToJSON(typ kv.Type, v any) any {
	if v == nil {
		return nil
	}
	switch x := v.(type) {
	case kv.Decimal:
		return x.String(typ.Scale)
	case []byte:
		return base64.StdEncoding.EncodeToString(x)
	case kv.Date:
		t := time.Unix(int64(x)*86400, 0).UTC()
		if y := t.Year(); y < 0 || y > 9999 {
			return int64(x) // days: the text form has four-digit years
		}
		return t.Format(time.DateOnly)
	case kv.Time:
		return time.UnixMilli(int64(x)).UTC().Format("15:04:05.000")
	case kv.Timestamp:
		t := time.UnixMilli(x.Millis).Add(time.Duration(x.NanoOfMilli)).UTC()
		if y := t.Year(); y < 0 || y > 9999 {
			// Epoch millis: the text form has four-digit years
			// (epochMillisNanos reads the nanoseconds after the point).
			if x.NanoOfMilli == 0 {
				return x.Millis
			}
			return json.Number(fmt.Sprintf("%d.%06d", x.Millis, x.NanoOfMilli))
		}
		if typ.Kind == kv.KindTimestampLTZ {
			return t.Format(time.RFC3339Nano)
		}
		return t.Format("2006-01-02T15:04:05.999999999")
	case float32:
		if f := float64(x); math.IsNaN(f) || math.IsInf(f, 0) {
			return nonFiniteText(f)
		}
		// The shortest text that reads back as this float32: 0.1, not
		// 0.10000000149011612.
		return json.Number(strconv.FormatFloat(float64(x), 'g', -1, 32))
	case float64:
		if math.IsNaN(x) || math.IsInf(x, 0) {
			return nonFiniteText(x)
		}
		return x
	default:
		return v
	}
}

// nonFinite are the JSON strings of the FLOAT and DOUBLE values JSON
// numbers cannot hold (as JavaScript and Jackson write them).
var nonFinite = map[string]float64{"NaN": kv.NaN(), "Infinity": math.Inf(1), "-Infinity": math.Inf(-1)}

func nonFiniteText(f float64) string {
	switch {
	case math.IsNaN(f):
		return "NaN"
	case f > 0:
		return "Infinity"
	}
	return "-Infinity"
}

// rowJSON renders a row as one JSON object, columns in schema order.
func rowJSON(t *kv.Table, r kv.Row) ([]byte, error) {
	return columnsJSON(t, r, nil)
}

// keyJSON renders a row's primary key as the JSON object thaw get and
// thaw delete take, columns in primary-key order.
func keyJSON(t *kv.Table, r kv.Row) ([]byte, error) {
	pk := t.Schema().PrimaryKey
	cols := make([]int, len(pk))
	for j, name := range pk {
		cols[j], _ = t.ColumnIndex(name)
	}
	return columnsJSON(t, r, cols)
}

// columnsJSON renders some columns of a row (all when cols is nil) as one
// JSON object.
func columnsJSON(t *kv.Table, r kv.Row, cols []int) ([]byte, error) {
	n := len(cols)
	if cols == nil {
		n = t.NumColumns()
	}
	var b bytes.Buffer
	b.WriteByte('{')
	for j := range n {
		i := j
		if cols != nil {
			i = cols[j]
		}
		if j > 0 {
			b.WriteByte(',')
		}
		k, _ := json.Marshal(t.Column(i).Name)
		b.Write(k)
		b.WriteByte(':')
		v, err := json.Marshal(valueToJSON(t.Column(i).Type, r[i]))
		if err != nil {
			return nil, fmt.Errorf("column %q: %w", t.Column(i).Name, err)
		}
		b.Write(v)
	}
	b.WriteByte('}')
	return b.Bytes(), nil
}

// cellText renders a value for the table output.
func cellText(typ kv.Type, v any) string {
	if v == nil {
		return "null"
	}
	switch x := valueToJSON(typ, v).(type) {
	case string:
		return x
	case json.Number:
		return x.String()
	case float64:
		return strconv.FormatFloat(x, 'g', -1, 64)
	default:
		return fmt.Sprint(x)
	}
}

// inputRows are the JSON rows (or keys) of a command and the numbers that
// name them in errors: an argument's position, or a line's number in the
// input, so that "row 7" is line 7 of the file whatever blank lines come
// before it.
type inputRows struct {
	text [][]byte
	num  []int
}

// wrapRows is wrapTier for the error of an Upsert or Delete of these
// rows, naming the failed row by its number as the command's own errors
// do.
func (in inputRows) wrapRows(what string, err error) error {
	var re *tierclient.RowError
	if errors.As(err, &re) && re.Index >= 0 && re.Index < len(in.num) {
		return wrapTier(fmt.Sprintf("%s: row %d", what, in.num[re.Index]), re.Err)
	}
	return wrapTier(what, err)
}

// readRowArgs returns the rows given as arguments, or else one per
// non-empty line of the input file ("" or "-": stdin), a UTF-8
// byte-order mark before the first one left out.
func readRowArgs(pos []string, input string) (inputRows, error) {
	var in inputRows
	if len(pos) > 0 {
		if input != "" {
			return in, usageError("give the rows (or keys) as arguments or with --input, not both")
		}
		for i, p := range pos {
			in.text, in.num = append(in.text, []byte(p)), append(in.num, i+1)
		}
		return in, nil
	}
	r := tierStdin
	if input != "" && input != "-" {
		f, err := os.Open(input)
		if err != nil {
			return in, fmt.Errorf("read rows: %w", err)
		}
		defer f.Close()
		r = f
	}
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 0, 64<<10), 16<<20)
	for n := 1; sc.Scan(); n++ {
		line := sc.Bytes()
		if n == 1 {
			line = bytes.TrimPrefix(line, []byte("\uFEFF"))
		}
		if line = bytes.TrimSpace(line); len(line) > 0 {
			in.text, in.num = append(in.text, bytes.Clone(line)), append(in.num, n)
		}
	}
	if err := sc.Err(); err != nil {
		return in, fmt.Errorf("read rows: %w", err)
	}
	return in, nil
}

// ---------------------------------------------------------------------------
// thaw put, get, scan

// dataFlags are the flags of put, get and scan.
type dataFlags struct {
	clientFlags
	partition string
}

// register registers the flags; byDefault says what the command does
// without --partition.
func (d *dataFlags) register(fs *flag.FlagSet, byDefault string) {
	d.clientFlags.register(fs)
	fs.StringVar(&d.partition, "partition", "", "one partition of a partitioned table (default: "+byDefault+")")
}

func (d *dataFlags) target(name tableName) tierclient.Target {
	return tierclient.Target{Database: name.db, Table: name.table, Partition: d.partition}
}

// openTable connects a tier client and describes the table.
func openTable(ctx context.Context, server string, name tableName, opts ...tierclient.Opt) (*tierclient.Client, *tierclient.TableInfo, error) {
	tc, err := daemon.ClientTLSFromEnv()
	if err != nil {
		return nil, nil, usageError("%v", err)
	}
	// A tier that authorizes DDL (new partitions) or data access wants
	// THAW_TOKEN.
	base := []tierclient.Opt{tierclient.WithTLSConfig(tc), tierclient.WithConnectOptions(daemon.BearerFromEnv()...)}
	c, err := tierclient.New(ctx, server, append(base, opts...)...)
	if err != nil {
		return nil, nil, wrapTier("connect to "+server, err)
	}
	info, err := c.Table(ctx, name.db, name.table)
	if err != nil {
		c.Close()
		return nil, nil, wrapTier("table "+name.String(), err)
	}
	return c, info, nil
}

func runPut(ctx context.Context, stdout io.Writer, args []string) error {
	fs := tierFlagSet("thaw put", "DATABASE.TABLE [JSON-ROW ...]", stdout)
	var df dataFlags
	df.register(fs, "route each row by its partition-key values")
	createParts := fs.Bool("create-partitions", false, "create missing partitions of a partitioned table")
	input := fs.String("input", "", "read rows from this file, one JSON object per line (- or none: stdin)")
	pos, err := parseArgs(fs, args)
	if err != nil {
		return err
	}
	if len(pos) == 0 {
		return usageError("thaw put needs DATABASE.TABLE [JSON-ROW ...] (rows as arguments or one JSON object per line on stdin)")
	}
	name, err := parseTableName(pos[0])
	if err != nil {
		return err
	}
	if err := df.check(); err != nil {
		return err
	}
	raw, err := readRowArgs(pos[1:], *input)
	if err != nil {
		return err
	}
	if len(raw.text) == 0 {
		return usageError("thaw put: no rows")
	}
	ctx, cancel := context.WithTimeout(ctx, df.timeout)
	defer cancel()
	c, info, err := openTable(ctx, df.server, name, tierclient.WithCreatePartitions(*createParts))
	if err != nil {
		return err
	}
	defer c.Close()
	enc := info.KV.NewEncoder()
	rows := make([]kv.Row, len(raw.text))
	for i, r := range raw.text {
		row, err := rowFromJSON(info.KV, r, raw.num[i], false)
		if err != nil {
			return fmt.Errorf("put %s: %w", name, err)
		}
		if _, _, _, err := enc.Encode(kv.RowFields(row)); err != nil {
			return fmt.Errorf("put %s: row %d: %w", name, raw.num[i], err)
		}
		rows[i] = row
	}
	if *createParts && df.partition != "" && info.Partitioned() {
		// The rows name the partition by --partition, not by their
		// values, so the client's partition creation (per row) does not
		// see it: create it here, once every row is known to belong to
		// it (a refused put creates nothing).
		for i, row := range rows {
			p, err := info.KV.PartitionName(row)
			if err != nil {
				return fmt.Errorf("put %s: row %d: %w", name, raw.num[i], err)
			}
			if p != df.partition {
				return fmt.Errorf("put %s: row %d belongs to partition %q, not %q", name, raw.num[i], p, df.partition)
			}
		}
		if err := c.CreatePartition(ctx, name.db, name.table, df.partition); err != nil {
			return wrapTier("put "+df.target(name).String(), err)
		}
	}
	if err := c.Upsert(ctx, df.target(name), rows); err != nil {
		err = raw.wrapRows("put "+df.target(name).String(), err)
		if tierpb.ReasonOf(err) == tierpb.ReasonNotFound && info.Partitioned() && !*createParts {
			err = fmt.Errorf("%w\n(a partition that does not exist is created by `thaw partition create`, or by thaw put --create-partitions)", err)
		}
		return err
	}
	return printDone(stdout, df.clientFlags, fmt.Sprintf("wrote %s to %s", plural(len(rows), "row", "rows"), df.target(name)),
		map[string]any{"table": name.String(), "partition": df.partition, "rows": len(rows)})
}

// keyCall is a parsed thaw get or thaw delete: the table, its keys and
// the flags, and a connected client (close it).
type keyCall struct {
	df   dataFlags
	name tableName
	c    *tierclient.Client
	info *tierclient.TableInfo
	keys []kv.Row
	rows inputRows // the keys as given, for their numbers
}

// keyCommand parses the flags and keys of thaw get and thaw delete and
// connects. The caller runs under ctx bounded by --timeout (call cancel,
// which is never nil).
func keyCommand(ctx context.Context, stdout io.Writer, args []string, cmd string) (context.Context, context.CancelFunc, *keyCall, error) {
	k := &keyCall{}
	fs := tierFlagSet("thaw "+cmd, "DATABASE.TABLE [KEY-JSON ...]", stdout)
	k.df.register(fs, "route each key by its partition-key values")
	input := fs.String("input", "", "read keys from this file, one per line (- or none: stdin)")
	pos, err := parseArgs(fs, args)
	if err != nil {
		return ctx, func() {}, nil, err
	}
	if len(pos) == 0 {
		return ctx, func() {}, nil, usageError("thaw %s needs DATABASE.TABLE KEY-JSON ... (a key is an object of the primary-key columns, an array of their values, or the value of a one-column key)", cmd)
	}
	if k.name, err = parseTableName(pos[0]); err != nil {
		return ctx, func() {}, nil, err
	}
	if err := k.df.check(); err != nil {
		return ctx, func() {}, nil, err
	}
	raw, err := readRowArgs(pos[1:], *input)
	if err != nil {
		return ctx, func() {}, nil, err
	}
	if len(raw.text) == 0 {
		return ctx, func() {}, nil, usageError("thaw %s: no keys", cmd)
	}
	k.rows = raw
	ctx, cancel := context.WithTimeout(ctx, k.df.timeout)
	if k.c, k.info, err = openTable(ctx, k.df.server, k.name); err != nil {
		return ctx, cancel, nil, err
	}
	k.keys = make([]kv.Row, len(raw.text))
	for i, r := range raw.text {
		if k.keys[i], err = keyRowFromJSON(k.info.KV, r, raw.num[i]); err != nil {
			k.c.Close()
			return ctx, cancel, nil, fmt.Errorf("%s %s: key %w", cmd, k.name, err)
		}
	}
	return ctx, cancel, k, nil
}

func runGet(ctx context.Context, stdout io.Writer, args []string) error {
	ctx, cancel, k, err := keyCommand(ctx, stdout, args, "get")
	defer cancel()
	if err != nil {
		return err
	}
	defer k.c.Close()
	c, info, name, keys, df := k.c, k.info, k.name, k.keys, k.df
	rows, err := c.Get(ctx, df.target(name), keys)
	if err != nil {
		return k.rows.wrapRows("get "+df.target(name).String(), err)
	}
	if df.json() {
		for _, r := range rows {
			if r == nil {
				fmt.Fprintln(stdout, "null")
				continue
			}
			b, err := rowJSON(info.KV, r)
			if err != nil {
				return err
			}
			fmt.Fprintf(stdout, "%s\n", b)
		}
		return nil
	}
	found := 0
	w := newRowTable(stdout, info.KV)
	for _, r := range rows {
		if r != nil {
			found++
			if err := w.row(r); err != nil {
				return err
			}
		}
	}
	if err := w.flush(); err != nil {
		return err
	}
	note := ""
	if found < len(rows) {
		var missing []kv.Row
		for i, r := range rows {
			if r == nil {
				missing = append(missing, keys[i])
			}
		}
		absent, err := k.absentPartitions(ctx, missing)
		if err != nil {
			return wrapTier("get "+df.target(name).String(), err)
		}
		if text, _ := absentText(absent); text != "" {
			note = "; " + text
		}
	}
	_, err = fmt.Fprintf(stdout, "(%d of %s found%s)\n", found, plural(len(rows), "key", "keys"), note)
	return err
}

// absentPartitions counts, by partition, the keys whose partition does not
// exist, when keys of a partitioned table are routed by their values (no
// --partition): a key there has no row, and a mistyped partition value
// should show.
func (k *keyCall) absentPartitions(ctx context.Context, keys []kv.Row) (map[string]int, error) {
	if len(keys) == 0 || k.df.partition != "" || !k.info.Partitioned() {
		return nil, nil
	}
	names, err := k.c.Partitions(ctx, k.name.db, k.name.table)
	if err != nil {
		return nil, err
	}
	var absent map[string]int
	for _, key := range keys {
		p, err := k.info.KV.PartitionName(key)
		if err == nil && !slices.Contains(names, p) {
			if absent == nil {
				absent = map[string]int{}
			}
			absent[p]++
		}
	}
	return absent, nil
}

// absentText names the partitions of absentPartitions with their key
// counts, and returns how many keys they hold.
func absentText(absent map[string]int) (text string, keys int) {
	if len(absent) == 0 {
		return "", 0
	}
	var parts []string
	for _, p := range slices.Sorted(maps.Keys(absent)) {
		keys += absent[p]
		parts = append(parts, fmt.Sprintf("%s (%d)", p, absent[p]))
	}
	return "keys in partitions that do not exist (no row): " + strings.Join(parts, ", "), keys
}

// runDelete deletes rows by primary key (a missing key is not an error).
func runDelete(ctx context.Context, stdout io.Writer, args []string) error {
	ctx, cancel, k, err := keyCommand(ctx, stdout, args, "delete")
	defer cancel()
	if err != nil {
		return err
	}
	defer k.c.Close()
	t := k.df.target(k.name)
	// Keys of partitions that do not exist have no row to delete; Delete
	// skips them. Say which, so that a mistyped partition value shows.
	absent, err := k.absentPartitions(ctx, k.keys)
	if err != nil {
		return wrapTier("delete "+t.String(), err)
	}
	if err := k.c.Delete(ctx, t, k.keys); err != nil {
		return k.rows.wrapRows("delete "+t.String(), err)
	}
	note, skipped := absentText(absent)
	text := fmt.Sprintf("deleted %s from %s", plural(len(k.keys)-skipped, "key", "keys"), t)
	if skipped == len(k.keys) {
		text = "nothing deleted from " + t.String()
	}
	if note != "" {
		text += "; " + note
	}
	return printDone(stdout, k.df.clientFlags, text,
		map[string]any{"table": k.name.String(), "partition": k.df.partition, "keys": len(k.keys), "keys_in_absent_partitions": skipped})
}

// errScanLimit stops a scan at --limit.
var errScanLimit = errors.New("scan limit reached")

func runScan(ctx context.Context, stdout io.Writer, args []string) error {
	fs := tierFlagSet("thaw scan", "DATABASE.TABLE", stdout)
	var df dataFlags
	df.register(fs, "every partition")
	limit := fs.Int("limit", 0, "print at most this many rows (0: all)")
	fs.Lookup("timeout").Usage = "give up when nothing has arrived for this long (a scan runs as long as rows keep coming)"
	name, err := tierTableArg(fs, args, &df)
	if err != nil {
		return err
	}
	if *limit < 0 {
		return usageError("--limit must not be negative")
	}
	// A scan of a big table runs as long as rows keep coming: --timeout
	// bounds the wait for the next row, not the whole scan.
	ctx, progress, stop := progressDeadline(ctx, df.timeout)
	defer stop()
	c, info, err := openTable(ctx, df.server, name)
	if err != nil {
		return noProgress(ctx, err)
	}
	defer c.Close()
	var w *rowTable
	if !df.json() {
		w = newRowTable(stdout, info.KV)
	}
	n := 0
	err = c.Scan(ctx, df.target(name), func(r kv.Row) error {
		if *limit > 0 && n >= *limit {
			return errScanLimit
		}
		n++
		progress.Add(1)
		if w != nil {
			return w.row(r)
		}
		b, err := rowJSON(info.KV, r)
		if err != nil {
			return err
		}
		_, err = fmt.Fprintf(stdout, "%s\n", b)
		return err
	})
	if err != nil && !errors.Is(err, errScanLimit) {
		return noProgress(ctx, wrapTier("scan "+df.target(name).String(), err))
	}
	if w == nil {
		return nil
	}
	if err := w.flush(); err != nil {
		return err
	}
	if errors.Is(err, errScanLimit) {
		_, err = fmt.Fprintf(stdout, "(first %s)\n", plural(n, "row", "rows"))
		return err
	}
	_, err = fmt.Fprintf(stdout, "(%s)\n", plural(n, "row", "rows"))
	return err
}

// errNoProgress is the cause of a progressDeadline context cancelled for
// want of progress.
var errNoProgress = errors.New("nothing arrived")

// progressDeadline returns a context that is cancelled when progress has
// not grown for d (checked every d/4, so about d to 1.25 d after the last
// progress), and the function that stops the watch.
func progressDeadline(ctx context.Context, d time.Duration) (context.Context, *atomic.Int64, context.CancelFunc) {
	ctx, cancel := context.WithCancelCause(ctx)
	progress := new(atomic.Int64)
	go func() {
		tick := time.NewTicker(max(d/4, time.Millisecond))
		defer tick.Stop()
		last, since := progress.Load(), time.Now()
		for {
			select {
			case <-ctx.Done(): // stopped, or the parent ended
				return
			case now := <-tick.C:
				if p := progress.Load(); p != last {
					last, since = p, now
				} else if now.Sub(since) >= d {
					cancel(fmt.Errorf("%w for %s (--timeout)", errNoProgress, d))
					return
				}
			}
		}
	}()
	return ctx, progress, func() { cancel(nil) }
}

// noProgress returns err, or when ctx was cancelled by progressDeadline,
// an error saying so with err's text.
func noProgress(ctx context.Context, err error) error {
	if cause := context.Cause(ctx); errors.Is(cause, errNoProgress) {
		return fmt.Errorf("%w: %v", cause, err)
	}
	return err
}

// rowTable prints tier rows as an aligned table with a header of column
// names (see alignedTable).
type rowTable struct {
	t *kv.Table
	*alignedTable
}

func newRowTable(out io.Writer, t *kv.Table) *rowTable {
	return &rowTable{t: t, alignedTable: newAlignedTable(out, columnNames(t))}
}

// row adds a row; it returns the first error writing the output, so that
// a scan stops when its reader has gone.
func (r *rowTable) row(row kv.Row) error {
	cells := make([]string, len(row))
	for i, v := range row {
		cells[i] = cellText(r.t.Column(i).Type, v)
	}
	return r.line(cells)
}

// alignedTable prints lines of cells as an aligned table under a header.
// It holds at most rowTableBlock lines: their column widths (and the
// header's) set the table's, and later lines are printed as they come,
// padded to those widths (a longer cell pushes the rest of its line
// right). A scan of millions of rows thus streams in bounded memory; up to
// rowTableBlock lines, the output is exactly a tabwriter's (padding 2).
// Tabs and newlines inside cells print as \t and \n.
type alignedTable struct {
	out    io.Writer
	held   [][]string // the header and the lines until the widths are set
	widths []int      // nil until set
	buf    []byte
	err    error
}

// rowTableBlock is how many lines set the column widths.
const rowTableBlock = 1000

// cellEscaper shows tabs and newlines inside cells as \t and \n.
var cellEscaper = strings.NewReplacer("\t", `\t`, "\n", `\n`)

func newAlignedTable(out io.Writer, header []string) *alignedTable {
	return &alignedTable{out: out, held: [][]string{header}}
}

// line adds a line of cells (escaped in place); it returns the first
// error writing the output.
func (r *alignedTable) line(cells []string) error {
	for i, c := range cells {
		cells[i] = cellEscaper.Replace(c)
	}
	if r.widths != nil {
		r.write(cells)
		return r.err
	}
	r.held = append(r.held, cells)
	if len(r.held)-1 > rowTableBlock { // held[0] is the header
		r.setWidths()
	}
	return r.err
}

// setWidths fixes the column widths from the held lines and prints them.
func (r *alignedTable) setWidths() {
	r.widths = make([]int, len(r.held[0]))
	for _, cells := range r.held {
		for i, c := range cells {
			r.widths[i] = max(r.widths[i], utf8.RuneCountInString(c))
		}
	}
	for _, cells := range r.held {
		r.write(cells)
	}
	r.held = nil
}

// write prints one line: every cell but the last padded to its column's
// width plus two spaces (at least two spaces after a longer one).
func (r *alignedTable) write(cells []string) {
	if r.err != nil {
		return
	}
	r.buf = r.buf[:0]
	for i, c := range cells {
		r.buf = append(r.buf, c...)
		if i < len(cells)-1 {
			for range max(r.widths[i]-utf8.RuneCountInString(c), 0) + 2 {
				r.buf = append(r.buf, ' ')
			}
		}
	}
	r.buf = append(r.buf, '\n')
	_, r.err = r.out.Write(r.buf)
}

// flush prints what is held and reports the first write error.
func (r *alignedTable) flush() error {
	if r.widths == nil {
		r.setWidths()
	}
	return r.err
}
