package coordinator

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"time"

	"connectrpc.com/connect"

	"github.com/thawdb/thaw/bulkload"
	"github.com/thawdb/thaw/fencing"
	"github.com/thawdb/thaw/tier/access"
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
	// database itself needs "DATABASE.*" or "*".
	DDL []string
	// Read and Write are the tables whose rows the caller may read
	// (Lookup, PrefixLookup, Scan) and write (Write) on the tablet
	// servers when Config.AuthorizeData is on: patterns as Tables. Write
	// does not imply Read. A caller has at least one of Tables, DDL, Read
	// and Write.
	Read, Write []string
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
		c.Tables, c.DDL, c.Read, c.Write = slices.Clone(c.Tables), slices.Clone(c.DDL), slices.Clone(c.Read), slices.Clone(c.Write)
		if err := access.CheckName(c.Name); err != nil {
			errs = append(errs, fmt.Errorf("caller %d: %w", i, err))
		} else if names[c.Name] {
			errs = append(errs, fmt.Errorf("caller %s: named twice", c.Name))
		}
		names[c.Name] = true
		if err := access.CheckTokenSHA256(c.TokenSHA256); err != nil {
			errs = append(errs, fmt.Errorf("caller %s: %w", c.Name, err))
		} else if a.byHash[c.TokenSHA256] != nil {
			errs = append(errs, fmt.Errorf("caller %s: token sha256 also of caller %s", c.Name, a.byHash[c.TokenSHA256].Name))
		}
		if len(c.Tables) == 0 && len(c.DDL) == 0 && len(c.Read) == 0 && len(c.Write) == 0 {
			errs = append(errs, fmt.Errorf("caller %s: no tables, ddl, read or write patterns", c.Name))
		}
		for _, p := range slices.Concat(c.Tables, c.DDL, c.Read, c.Write) {
			if err := access.CheckPattern(p); err != nil {
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
	tok, ok := access.Bearer(auth)
	if !ok {
		return nil, tierpb.NewError(tierpb.ReasonUnauthenticated,
			"coordinator: this coordinator requires a caller's bearer token (an Authorization: Bearer header; thaw takes it from THAW_TOKEN)", nil)
	}
	c := a.byHash[access.TokenSHA256(tok)]
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
	if access.MatchAny(caller.Tables, t.Database, t.Table) {
		return nil
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
	if table == "" && access.MatchDatabase(caller.DDL, db) || table != "" && access.MatchAny(caller.DDL, db, table) {
		return nil
	}
	what := db + "." + table
	if table == "" {
		what = "database " + db
	}
	return tierpb.NewError(tierpb.ReasonPermissionDenied, fmt.Sprintf("coordinator: caller %s may not create or drop %s (its ddl patterns: %v)", caller.Name, what, caller.DDL), nil)
}

// publishDataAccess publishes the data-access policy of the configuration
// (Config.AuthorizeData) for the tablet servers at the start of a term,
// before the term does anything else, retrying until it is stored or the
// term ends (a term that ends first leaves the policy to the next leader).
func (c *Coordinator) publishDataAccess(ctx context.Context, t *term) {
	d := c.cfg.dataAccess()
	b := newBackoff(100*time.Millisecond, 5*time.Second)
	for {
		wrote, err := c.store.PutDataAccess(ctx, t.guard, d)
		if err == nil {
			if wrote {
				c.log.Info("coordinator published the data access policy", "enforce", d.Enforce, "callers", len(d.Callers))
			}
			return
		}
		if ctx.Err() != nil || errors.Is(err, fencing.ErrNotLeader) {
			return
		}
		c.log.Warn("coordinator could not publish the data access policy; retrying", "err", err)
		if !b.wait(ctx) {
			return
		}
	}
}
