package coordinator

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strings"

	"connectrpc.com/connect"

	"github.com/thawdb/thaw/bulkload"
	"github.com/thawdb/thaw/tier/tierpb"
)

// Caller is a principal of the BulkLoadService (Config.Callers): who
// presents the bearer token whose SHA-256 is TokenSHA256 may bulk load the
// tables Tables names.
type Caller struct {
	// Name names the caller in logs and errors: 1..63 characters
	// [a-z0-9._-].
	Name string
	// TokenSHA256 is the lowercase hex SHA-256 of the caller's bearer
	// token (the coordinator never holds the token itself).
	TokenSHA256 string
	// Tables are the tables (every partition of them) the caller may bulk
	// load: "DATABASE.TABLE", "DATABASE.*" or "*".
	Tables []string
	// DDL are the tables the caller may create and drop, with their
	// partitions, when Config.AuthorizeDDL is on: patterns as Tables; a
	// database itself needs "DATABASE.*" or "*". A caller has Tables, DDL
	// or both.
	DDL []string
}

// callerKey is the context key of the authenticated *Caller.
type callerKey struct{}

// authn authenticates BulkLoadService callers; nil: authentication off.
type authn struct {
	byHash map[string]*Caller
}

// newAuthn checks callers and returns their authenticator, nil for none.
func newAuthn(callers []Caller) (*authn, error) {
	if len(callers) == 0 {
		return nil, nil
	}
	a := &authn{byHash: make(map[string]*Caller, len(callers))}
	names := map[string]bool{}
	var errs []error
	for i := range callers {
		c := callers[i]
		c.Tables, c.DDL = slices.Clone(c.Tables), slices.Clone(c.DDL)
		if c.Name == "" || len(c.Name) > 63 || strings.Trim(c.Name, "abcdefghijklmnopqrstuvwxyz0123456789._-") != "" {
			errs = append(errs, fmt.Errorf("caller %d: name %q is not 1..63 characters [a-z0-9._-]", i, c.Name))
		} else if names[c.Name] {
			errs = append(errs, fmt.Errorf("caller %s: named twice", c.Name))
		}
		names[c.Name] = true
		if len(c.TokenSHA256) != 64 || strings.Trim(c.TokenSHA256, "0123456789abcdef") != "" {
			errs = append(errs, fmt.Errorf("caller %s: token sha256 is not 64 lowercase hex digits", c.Name))
		} else if a.byHash[c.TokenSHA256] != nil {
			errs = append(errs, fmt.Errorf("caller %s: token sha256 also of caller %s", c.Name, a.byHash[c.TokenSHA256].Name))
		}
		if len(c.Tables) == 0 && len(c.DDL) == 0 {
			errs = append(errs, fmt.Errorf("caller %s: no tables and no ddl", c.Name))
		}
		for _, p := range slices.Concat(c.Tables, c.DDL) {
			if err := checkTablePattern(p); err != nil {
				errs = append(errs, fmt.Errorf("caller %s: %w", c.Name, err))
			}
		}
		a.byHash[c.TokenSHA256] = &c
	}
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	return a, nil
}

// ValidateCallers checks callers as New does (Config.Callers).
func ValidateCallers(callers []Caller) error {
	_, err := newAuthn(callers)
	return err
}

// checkTablePattern checks "*", "DATABASE.*" or "DATABASE.TABLE".
func checkTablePattern(p string) error {
	if p == "*" {
		return nil
	}
	db, table, ok := strings.Cut(p, ".")
	if !ok || db == "" || table == "" || strings.Contains(db, "*") || (table != "*" && strings.Contains(table, "*")) || strings.Contains(table, ".") {
		return fmt.Errorf("table pattern %q is not *, DATABASE.* or DATABASE.TABLE", p)
	}
	return nil
}

func matchTable(p string, t bulkload.Target) bool {
	if p == "*" {
		return true
	}
	db, table, _ := strings.Cut(p, ".")
	return db == t.Database && (table == "*" || table == t.Table)
}

// WrapUnary authenticates a BulkLoadService call by its bearer token.
func (a *authn) WrapUnary(next connect.UnaryFunc) connect.UnaryFunc {
	return func(ctx context.Context, req connect.AnyRequest) (connect.AnyResponse, error) {
		c, err := a.authenticate(req.Header().Values("Authorization"))
		if err != nil {
			return nil, err
		}
		return next(withCaller(ctx, c), req)
	}
}

func withCaller(ctx context.Context, c *Caller) context.Context {
	return context.WithValue(ctx, callerKey{}, c)
}

// WrapStreamingClient is not used: the coordinator makes no calls with it.
func (a *authn) WrapStreamingClient(next connect.StreamingClientFunc) connect.StreamingClientFunc {
	return next
}

// WrapStreamingHandler refuses streams: the BulkLoadService has none.
func (a *authn) WrapStreamingHandler(connect.StreamingHandlerFunc) connect.StreamingHandlerFunc {
	return func(context.Context, connect.StreamingHandlerConn) error {
		return tierpb.NewError(tierpb.ReasonUnauthenticated, "coordinator: bulk load: streaming calls are not served", nil)
	}
}

// authenticate finds the caller of an Authorization header. Its errors
// never quote the token.
func (a *authn) authenticate(auth []string) (*Caller, error) {
	tok, ok := "", len(auth) == 1
	if ok {
		tok, ok = strings.CutPrefix(auth[0], "Bearer ")
	}
	if !ok {
		return nil, tierpb.NewError(tierpb.ReasonUnauthenticated,
			"coordinator: this coordinator requires a caller's bearer token (an Authorization: Bearer header; thaw takes it from THAW_TOKEN)", nil)
	}
	sum := sha256.Sum256([]byte(tok))
	c := a.byHash[hex.EncodeToString(sum[:])]
	if c == nil {
		return nil, tierpb.NewError(tierpb.ReasonUnauthenticated, "coordinator: the bearer token is not a caller's", nil)
	}
	return c, nil
}

// allowed checks that the authenticated caller of ctx may bulk load t;
// with authentication off, everyone may.
func (c *Coordinator) allowed(ctx context.Context, t bulkload.Target) error {
	if c.auth == nil {
		return nil
	}
	caller, _ := ctx.Value(callerKey{}).(*Caller)
	if caller == nil {
		return tierpb.NewError(tierpb.ReasonUnauthenticated, "coordinator: bulk load: no authenticated caller", nil)
	}
	for _, p := range caller.Tables {
		if matchTable(p, t) {
			return nil
		}
	}
	return tierpb.NewError(tierpb.ReasonPermissionDenied,
		fmt.Sprintf("coordinator: bulk load: caller %s may not bulk load %s", caller.Name, t), nil)
}

// authorizeDDL checks, with Config.AuthorizeDDL on, that the request
// carries the bearer token of a caller whose DDL patterns cover table of
// db (table "": the database itself, which needs "db.*" or "*").
func (c *Coordinator) authorizeDDL(h http.Header, db, table string) error {
	if !c.cfg.AuthorizeDDL || c.auth == nil {
		return nil
	}
	caller, err := c.auth.authenticate(h.Values("Authorization"))
	if err != nil {
		return err
	}
	what := db + "." + table
	for _, p := range caller.DDL {
		if table == "" && (p == "*" || p == db+".*") || table != "" && matchTable(p, bulkload.Target{Database: db, Table: table}) {
			return nil
		}
	}
	if table == "" {
		what = "database " + db
	}
	return tierpb.NewError(tierpb.ReasonPermissionDenied, fmt.Sprintf("coordinator: caller %s may not create or drop %s (its ddl patterns: %v)", caller.Name, what, caller.DDL), nil)
}
