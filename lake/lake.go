package lake

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"maps"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/apache/iceberg-go"
	"github.com/apache/iceberg-go/catalog"
	_ "github.com/apache/iceberg-go/catalog/glue" // registers the glue catalog type
	"github.com/apache/iceberg-go/catalog/hive"
	"github.com/apache/iceberg-go/catalog/rest"
	sqlcat "github.com/apache/iceberg-go/catalog/sql"
	_ "github.com/apache/iceberg-go/io/gocloud/azure" // abfs, abfss, wasb, wasbs
	_ "github.com/apache/iceberg-go/io/gocloud/gcs"   // gs
	_ "github.com/apache/iceberg-go/io/gocloud/s3"    // s3, s3a, s3n, oss
	"github.com/apache/iceberg-go/table"
	_ "github.com/uptrace/bun/driver/pgdriver" // registers "pg"
	"github.com/uptrace/bun/driver/sqliteshim"
)

// Lake is an open Iceberg catalog. It is safe for concurrent use; every
// method loads what it needs from the catalog, so it always sees the
// catalog's current state.
type Lake struct {
	cat  catalog.Catalog
	db   *sql.DB // owned; sql catalogs only
	name string
	// flat: the catalog's namespaces do not nest (Glue, Hive), and it
	// refuses to list the children of one.
	flat bool
}

// Open connects to the catalog cfg describes. A SQLite catalog file must
// already exist (Sample creates one); nothing is written by Open or by any
// other method of Lake.
func Open(ctx context.Context, cfg Config) (*Lake, error) {
	return open(ctx, cfg, false)
}

// open is Open that may create a SQLite catalog file (for Sample).
func open(ctx context.Context, cfg Config, create bool) (*Lake, error) {
	cfg = cfg.Defaults()
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	props := iceberg.Properties{}
	maps.Copy(props, cfg.Storage.storageProps())
	if cfg.Warehouse != "" {
		props["warehouse"] = cfg.Warehouse
	}
	switch cfg.Type {
	case CatalogSQL:
		return openSQL(ctx, cfg, props, create)
	case CatalogREST:
		return openREST(ctx, cfg, props)
	case CatalogHive:
		props["uri"] = cfg.URI
		maps.Copy(props, cfg.extraProps())
		cat, err := hive.NewCatalog(props)
		if err != nil {
			return nil, fmt.Errorf("lake: open hive catalog %s: %w", RedactURI(cfg.URI), err)
		}
		return &Lake{cat: cat, name: cfg.Name, flat: true}, nil
	default: // glue: only its registrar builds the AWS config from properties
		set := func(k, v string) {
			if v != "" {
				props[k] = v
			}
		}
		props["type"] = CatalogGlue
		// Present but empty, so catalog.Load takes nothing from ~/.iceberg-go.yaml.
		props["uri"], props["credential"] = "", ""
		props["warehouse"] = cfg.Warehouse
		set("glue.region", cfg.Glue.Region)
		set("glue.endpoint", cfg.Glue.Endpoint)
		set("glue.id", cfg.Glue.CatalogID)
		set("glue.access-key-id", cfg.Glue.AccessKeyID)
		set("glue.secret-access-key", cfg.Glue.SecretAccessKey.Reveal())
		set("glue.session-token", cfg.Glue.SessionToken.Reveal())
		maps.Copy(props, cfg.extraProps())
		cat, err := catalog.Load(ctx, "thaw-lake-"+cfg.Name, props)
		if err != nil {
			return nil, fmt.Errorf("lake: open glue catalog: %w", err)
		}
		return &Lake{cat: cat, name: cfg.Name, flat: true}, nil
	}
}

type sqlKind int

const (
	sqlSQLite sqlKind = iota
	sqlPostgres
)

// sqlTarget classifies a SQL catalog URI and returns the SQLite file path for
// SQLite catalogs.
func sqlTarget(uri string) (sqlKind, string, error) {
	switch {
	case strings.HasPrefix(uri, "postgres://"), strings.HasPrefix(uri, "postgresql://"):
		if _, err := url.Parse(uri); err != nil {
			// url's errors quote the whole URI, password and all.
			return 0, "", fmt.Errorf("%w: sql catalog uri %s is not a URL (check the escaping of its user name and password; a password can go in password instead)", ErrConfig, RedactURI(uri))
		}
		return sqlPostgres, "", nil
	case strings.Contains(uri, "://") && !strings.HasPrefix(uri, "file://"):
		return 0, "", fmt.Errorf("%w: sql catalog uri %q: want a SQLite file or a postgres:// URL", ErrConfig, RedactURI(uri))
	}
	path := strings.TrimPrefix(strings.TrimPrefix(uri, "file://"), "file:")
	path, _, _ = strings.Cut(path, "?")
	if path == "" || path == ":memory:" {
		return 0, "", fmt.Errorf("%w: sql catalog uri %q names no SQLite file", ErrConfig, RedactURI(uri))
	}
	return sqlSQLite, path, nil
}

// checkSQLiteFile checks that a SQLite catalog file exists and can be
// opened for reading.
func checkSQLiteFile(path string) error {
	f, err := os.Open(path)
	switch {
	case errors.Is(err, os.ErrNotExist):
		return fmt.Errorf("%w: sql catalog file %s does not exist", ErrNotFound, path)
	case err != nil:
		return fmt.Errorf("lake: sql catalog file %s: %w", path, err)
	}
	defer f.Close()
	if st, err := f.Stat(); err != nil || !st.Mode().IsRegular() {
		return fmt.Errorf("%w: sql catalog file %s is not a regular file", ErrConfig, path)
	}
	return nil
}

// CheckFiles checks, without opening the catalog, the files the config
// names on this machine: a SQLite catalog's file and storage.gcs.key_path
// (each must exist and be readable). It is what a config check can tell
// about a catalog; whether the catalog answers and holds the tables is for
// Open.
func (c Config) CheckFiles() error {
	var errs []error
	if c.Defaults().Type == CatalogSQL {
		if kind, path, err := sqlTarget(c.URI); err != nil {
			errs = append(errs, err)
		} else if kind == sqlSQLite {
			errs = append(errs, checkSQLiteFile(path))
		}
	}
	if p := c.Storage.GCS.KeyPath; p != "" {
		if f, err := os.Open(p); err != nil {
			errs = append(errs, fmt.Errorf("lake: storage.gcs.key_path: %w", err))
		} else {
			_ = f.Close()
		}
	}
	return errors.Join(errs...)
}

func openSQL(ctx context.Context, cfg Config, props iceberg.Properties, create bool) (*Lake, error) {
	kind, path, err := sqlTarget(cfg.URI)
	if err != nil {
		return nil, err
	}
	var driver, dsn string
	var dialect sqlcat.SupportedDialect
	switch kind {
	case sqlPostgres:
		driver, dialect, dsn = "pg", sqlcat.Postgres, cfg.URI
		if cfg.Password != "" {
			u, _ := url.Parse(cfg.URI)
			u.User = url.UserPassword(u.User.Username(), cfg.Password.Reveal())
			dsn = u.String()
		}
	default:
		abs, err := filepath.Abs(path)
		if err != nil {
			return nil, fmt.Errorf("lake: sql catalog path %s: %w", path, err)
		}
		if !create {
			if err := checkSQLiteFile(abs); err != nil {
				return nil, err
			}
		}
		driver, dialect = sqliteshim.ShimName, sqlcat.SQLite
		dsn = "file:" + abs + "?_pragma=busy_timeout(10000)"
	}
	db, err := sql.Open(driver, dsn)
	if err != nil {
		return nil, fmt.Errorf("lake: open sql catalog database: %w", err)
	}
	props["uri"] = "" // the catalog is handed db; keep the DSN (and any password) out of its properties
	props["init_catalog_tables"] = fmt.Sprint(create)
	maps.Copy(props, cfg.extraProps())
	cat, err := sqlcat.NewCatalog(cfg.Name, db, dialect, props)
	if err != nil {
		_ = db.Close()
		return nil, fmt.Errorf("lake: open sql catalog: %w", err)
	}
	// NewCatalog pings nothing when the tables exist; make a bad DSN fail here.
	if err := db.PingContext(ctx); err != nil {
		_ = cat.Close()
		_ = db.Close()
		return nil, fmt.Errorf("lake: connect to sql catalog database: %w", err)
	}
	return &Lake{cat: cat, db: db, name: cfg.Name}, nil
}

func openREST(ctx context.Context, cfg Config, props iceberg.Properties) (*Lake, error) {
	opts := []rest.Option{}
	if cfg.Warehouse != "" {
		opts = append(opts, rest.WithWarehouseLocation(cfg.Warehouse))
	}
	delete(props, "warehouse")
	if cfg.Credential != "" {
		opts = append(opts, rest.WithCredential(cfg.Credential.Reveal()))
	}
	if cfg.Token != "" {
		opts = append(opts, rest.WithOAuthToken(cfg.Token.Reveal()))
	}
	if cfg.OAuthServerURI != "" {
		u, _ := url.Parse(cfg.OAuthServerURI)
		opts = append(opts, rest.WithAuthURI(u))
	}
	if cfg.Scope != "" {
		opts = append(opts, rest.WithScope(cfg.Scope))
	}
	if cfg.Prefix != "" {
		opts = append(opts, rest.WithPrefix(cfg.Prefix))
	}
	if len(cfg.Headers) > 0 {
		h := make(map[string]string, len(cfg.Headers))
		for k, v := range cfg.Headers {
			h[k] = v.Reveal()
		}
		opts = append(opts, rest.WithHeaders(h))
	}
	maps.Copy(props, cfg.extraProps())
	if len(props) > 0 {
		opts = append(opts, rest.WithAdditionalProps(props))
	}
	cat, err := rest.NewCatalog(ctx, cfg.Name, cfg.URI, opts...)
	if err != nil {
		return nil, fmt.Errorf("lake: open rest catalog %s: %w", RedactURI(cfg.URI), err)
	}
	return &Lake{cat: cat, name: cfg.Name}, nil
}

// Close releases the catalog's connections.
func (l *Lake) Close() error {
	var errs []error
	if c, ok := l.cat.(catalog.Closer); ok {
		if err := c.Close(); err != nil {
			errs = append(errs, fmt.Errorf("lake: close catalog: %w", err))
		}
	}
	if l.db != nil {
		if err := l.db.Close(); err != nil {
			errs = append(errs, fmt.Errorf("lake: close catalog database: %w", err))
		}
	}
	return errors.Join(errs...)
}

// parseIdent splits "ns.table" (or "ns1.ns2.table") into an Iceberg identifier.
func parseIdent(s string) (table.Identifier, error) {
	parts := strings.Split(s, ".")
	if len(parts) < 2 || slices.Contains(parts, "") {
		return nil, fmt.Errorf("%w: table %q: want namespace.table", ErrNotFound, s)
	}
	return parts, nil
}

func parseNamespace(s string) (table.Identifier, error) {
	parts := strings.Split(s, ".")
	if slices.Contains(parts, "") {
		return nil, fmt.Errorf("%w: namespace %q is malformed", ErrNotFound, s)
	}
	return parts, nil
}

// Namespaces lists every namespace, nested ones included, dot-joined and sorted.
func (l *Lake) Namespaces(ctx context.Context) ([]string, error) {
	seen := map[string]bool{}
	var walk func(parent table.Identifier, depth int) error
	walk = func(parent table.Identifier, depth int) error {
		if depth > 16 || l.flat && len(parent) > 0 {
			return nil // a Glue or Hive database has no namespaces under it
		}
		nss, err := l.cat.ListNamespaces(ctx, parent)
		if err != nil {
			if len(parent) > 0 && errors.Is(err, catalog.ErrNoSuchNamespace) {
				return nil
			}
			return fmt.Errorf("lake: list namespaces: %w", err)
		}
		for _, ns := range nss {
			name := strings.Join(ns, ".")
			if seen[name] || len(ns) <= len(parent) {
				continue
			}
			seen[name] = true
			if err := walk(ns, depth+1); err != nil {
				return err
			}
		}
		return nil
	}
	if err := walk(nil, 0); err != nil {
		return nil, err
	}
	return slices.Sorted(maps.Keys(seen)), nil
}

// Tables lists the tables of namespace ("" for every namespace) as sorted
// "namespace.table" names.
func (l *Lake) Tables(ctx context.Context, namespace string) ([]string, error) {
	var nss []string
	if namespace == "" {
		var err error
		if nss, err = l.Namespaces(ctx); err != nil {
			return nil, err
		}
	} else {
		nss = []string{namespace}
	}
	var out []string
	for _, ns := range nss {
		ident, err := parseNamespace(ns)
		if err != nil {
			return nil, err
		}
		for t, err := range l.cat.ListTables(ctx, ident) {
			if err != nil {
				if errors.Is(err, catalog.ErrNoSuchNamespace) {
					return nil, fmt.Errorf("%w: namespace %q: %v", ErrNotFound, ns, err)
				}
				return nil, fmt.Errorf("lake: list tables of %s: %w", ns, err)
			}
			out = append(out, strings.Join(t, "."))
		}
	}
	slices.Sort(out)
	return slices.Compact(out), nil
}

// loadTable loads "ns.table".
func (l *Lake) loadTable(ctx context.Context, name string) (*table.Table, error) {
	ident, err := parseIdent(name)
	if err != nil {
		return nil, err
	}
	tbl, err := l.cat.LoadTable(ctx, ident)
	if err != nil {
		if errors.Is(err, catalog.ErrNoSuchTable) || errors.Is(err, catalog.ErrNoSuchNamespace) {
			return nil, fmt.Errorf("%w: table %s: %v", ErrNotFound, name, err)
		}
		return nil, fmt.Errorf("lake: load table %s: %w", name, err)
	}
	return tbl, nil
}

// resolveSnapshot returns the snapshot id (nil: current) of tbl, or nil when
// the table has no snapshot and none was asked for.
func resolveSnapshot(name string, tbl *table.Table, id *int64) (*table.Snapshot, error) {
	if id == nil {
		return tbl.CurrentSnapshot(), nil
	}
	s := tbl.SnapshotByID(*id)
	if s == nil {
		return nil, fmt.Errorf("%w: table %s has no snapshot %d", ErrNotFound, name, *id)
	}
	return s, nil
}
