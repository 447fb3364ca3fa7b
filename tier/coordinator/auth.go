package coordinator

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"time"

	"connectrpc.com/connect"

	"github.com/thawdb/thaw/bulkload"
	"github.com/thawdb/thaw/fencing"
	"github.com/thawdb/thaw/tier/access"
	"github.com/thawdb/thaw/tier/meta"
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

// authn authenticates callers; nil: authentication off.
type authn struct {
	callers []Caller // in configuration order
	byHash  map[string]*Caller
}

// newAuthn checks callers and returns their authenticator, nil for none.
func newAuthn(callers []Caller) (*authn, error) {
	if len(callers) == 0 {
		return nil, nil
	}
	a := &authn{callers: make([]Caller, 0, len(callers)), byHash: make(map[string]*Caller, len(callers))}
	var ids access.Identities
	var errs []error
	for i := range callers {
		c := callers[i]
		c.Tables, c.DDL, c.Read, c.Write = slices.Clone(c.Tables), slices.Clone(c.DDL), slices.Clone(c.Read), slices.Clone(c.Write)
		errs = append(errs, ids.Add(i, c.Name, c.TokenSHA256)...)
		if len(c.Tables) == 0 && len(c.DDL) == 0 && len(c.Read) == 0 && len(c.Write) == 0 {
			errs = append(errs, fmt.Errorf("caller %s: no tables, ddl, read or write patterns", c.Name))
		}
		for _, p := range slices.Concat(c.Tables, c.DDL, c.Read, c.Write) {
			if err := access.CheckPattern(p); err != nil {
				errs = append(errs, fmt.Errorf("caller %s: %w", c.Name, err))
			}
		}
		a.callers = append(a.callers, c)
		a.byHash[c.TokenSHA256] = &a.callers[len(a.callers)-1]
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

// authInterceptor authenticates BulkLoadService calls by their bearer
// token against the coordinator's current callers.
type authInterceptor struct{ c *Coordinator }

// WrapUnary authenticates a BulkLoadService call by its bearer token.
func (i authInterceptor) WrapUnary(next connect.UnaryFunc) connect.UnaryFunc {
	return func(ctx context.Context, req connect.AnyRequest) (connect.AnyResponse, error) {
		c, err := i.c.auth.Load().authenticate(req.Header().Values("Authorization"))
		if err != nil {
			return nil, i.c.refused(err)
		}
		return next(withCaller(ctx, c), req)
	}
}

func withCaller(ctx context.Context, c *Caller) context.Context {
	return context.WithValue(ctx, callerKey{}, c)
}

// WrapStreamingClient is not used: the coordinator makes no calls with it.
func (authInterceptor) WrapStreamingClient(next connect.StreamingClientFunc) connect.StreamingClientFunc {
	return next
}

// WrapStreamingHandler refuses streams: the BulkLoadService has none.
func (authInterceptor) WrapStreamingHandler(connect.StreamingHandlerFunc) connect.StreamingHandlerFunc {
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
// with authentication off, everyone may. A no is counted as a refused
// call: use it for a request about t, not to filter a listing.
func (c *Coordinator) allowed(ctx context.Context, t bulkload.Target) error {
	if err := c.mayBulkLoad(ctx, t); err != nil {
		return c.refused(err)
	}
	return nil
}

// mayBulkLoad is allowed without counting.
func (c *Coordinator) mayBulkLoad(ctx context.Context, t bulkload.Target) error {
	if c.auth.Load() == nil {
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

// refused counts a call refused for its caller and returns err.
func (c *Coordinator) refused(err error) error {
	c.m.refused.WithLabelValues(strings.ToLower(string(tierpb.ReasonOf(err)))).Inc()
	return err
}

// authorizeDDL checks, with Config.AuthorizeDDL on, that the request
// carries the bearer token of a caller whose DDL patterns cover table of
// db (table "": the database itself, which needs "db.*" or "*").
func (c *Coordinator) authorizeDDL(h http.Header, db, table string) error {
	a := c.auth.Load()
	if !c.cfg.AuthorizeDDL || a == nil {
		return nil
	}
	caller, err := a.authenticate(h.Values("Authorization"))
	if err != nil {
		return c.refused(err)
	}
	if table == "" && access.MatchDatabase(caller.DDL, db) || table != "" && access.MatchAny(caller.DDL, db, table) {
		return nil
	}
	what := db + "." + table
	if table == "" {
		what = "database " + db
	}
	return c.refused(tierpb.NewError(tierpb.ReasonPermissionDenied, fmt.Sprintf("coordinator: caller %s may not create or drop %s (its ddl patterns: %v)", caller.Name, what, caller.DDL), nil))
}

// authorizeMeta checks, with Config.AuthorizeData on, that a metadata
// read (listing databases or tables; table "") carries a caller's bearer
// token, and that a read of one table's metadata (its schema, partitions,
// bucket locations) comes from a caller that may do something with the
// table: one of its Tables, DDL, Read or Write patterns covers it. With
// write, the caller needs DDL or Write (TriggerSnapshot).
func (c *Coordinator) authorizeMeta(h http.Header, op, db, table string, write bool) error {
	a := c.auth.Load()
	if !c.cfg.AuthorizeData || a == nil {
		return nil
	}
	caller, err := a.authenticate(h.Values("Authorization"))
	if err != nil {
		return c.refused(err)
	}
	if table == "" {
		return nil
	}
	covers := access.MatchAny(caller.DDL, db, table) || access.MatchAny(caller.Write, db, table)
	if !write {
		covers = covers || access.MatchAny(caller.Tables, db, table) || access.MatchAny(caller.Read, db, table)
	}
	if covers {
		return nil
	}
	return c.refused(tierpb.NewError(tierpb.ReasonPermissionDenied, fmt.Sprintf("coordinator: %s: caller %s has no grant on %s.%s", op, caller.Name, db, table), nil))
}

// SetCallers replaces the callers (Config.Callers) without a restart: calls
// are authenticated and authorized against the new ones from now on, and a
// leading coordinator publishes the data-access policy they imply for the
// tablet servers. callers are checked as Config.Callers are; an error
// changes nothing. A coordinator configured without callers cannot be
// given some (its services were set up without authentication), nor can
// the callers be emptied.
func (c *Coordinator) SetCallers(callers []Caller) error {
	if len(callers) == 0 {
		return errors.New("coordinator: set callers: no callers (authentication cannot be turned off without a restart)")
	}
	if c.auth.Load() == nil {
		return errors.New("coordinator: set callers: this coordinator was started without callers (authentication cannot be turned on without a restart)")
	}
	a, err := newAuthn(callers)
	if err != nil {
		return fmt.Errorf("coordinator: set callers: %w", err)
	}
	if err := CheckDataCallers(c.cfg.AuthorizeData, a.callers); err != nil {
		return fmt.Errorf("coordinator: set callers: %w", err)
	}
	c.auth.Store(a)
	c.log.Info("coordinator callers replaced", "callers", len(a.callers))
	if t := c.current(); t != nil {
		go c.publishDataAccess(t.l.Context(), t)
	}
	return nil
}

// dataAccess is the data-access policy of the current callers and
// Config.AuthorizeData.
func (c *Coordinator) dataAccess() meta.DataAccess {
	d := meta.DataAccess{Version: meta.RecordVersion, Enforce: c.cfg.AuthorizeData}
	if a := c.auth.Load(); d.Enforce && a != nil {
		d.Callers = dataCallers(a.callers)
	}
	return d
}

// CheckDataCallers checks that the data-access policy of callers can be
// published: with authorizeData at least one caller with Read or Write
// patterns, and a record within meta.MaxRecordBytes (several thousand
// callers).
func CheckDataCallers(authorizeData bool, callers []Caller) error {
	if !authorizeData {
		return nil
	}
	d := meta.DataAccess{Version: meta.RecordVersion, Enforce: true, Callers: dataCallers(callers)}
	if len(d.Callers) == 0 {
		return errors.New("authorize_data needs a caller with read or write patterns")
	}
	if _, err := meta.Marshal(d); err != nil {
		return fmt.Errorf("the data access policy of these callers cannot be published: %w", err)
	}
	return nil
}

// dataCallers returns the callers with Read or Write patterns as the
// data-access policy names them.
func dataCallers(callers []Caller) []meta.DataCaller {
	var out []meta.DataCaller
	for _, c := range callers {
		if len(c.Read) > 0 || len(c.Write) > 0 {
			out = append(out, meta.DataCaller{Name: c.Name, TokenSHA256: c.TokenSHA256, Read: c.Read, Write: c.Write})
		}
	}
	return out
}

// publishDataAccess publishes the data-access policy of the current
// callers (Config.AuthorizeData) for the tablet servers: at the start of a
// term, before the term does anything else, and after SetCallers. It
// retries until the policy is stored or the term ends (a term that ends
// first leaves the policy to the next leader). Publications are
// serialized and each writes the callers current when it writes, so the
// last one stored is the newest.
func (c *Coordinator) publishDataAccess(ctx context.Context, t *term) {
	c.publishMu.Lock()
	defer c.publishMu.Unlock()
	b := newBackoff(100*time.Millisecond, 5*time.Second)
	for {
		d := c.dataAccess()
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
		if errors.Is(err, meta.ErrInvalid) || errors.Is(err, meta.ErrTooLarge) {
			// Checked with the callers (CheckDataCallers): not reached.
			c.log.Error("coordinator cannot publish the data access policy", "err", err)
			return
		}
		c.log.Warn("coordinator could not publish the data access policy; retrying", "err", err)
		if !b.wait(ctx) {
			return
		}
	}
}
