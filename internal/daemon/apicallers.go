package daemon

import (
	"errors"
	"fmt"
	"log/slog"
	"net/http"

	"github.com/thawdb/thaw/promoter/promoterhttp"
	"github.com/thawdb/thaw/tier/access"
)

// EnvPromoterToken is the environment variable holding the bearer token
// thaw status, thaw promote and thaw plan --promoter send to a promoter
// whose API authenticates its callers (api_callers_file).
const EnvPromoterToken = "THAW_PROMOTER_TOKEN"

// API caller roles: read sees promotions, policies and plans; promote
// may also request promotions.
const (
	RoleRead    = "read"
	RolePromote = "promote"
)

// APICaller is one caller of the promoter's HTTP API.
type APICaller struct {
	Name        string `yaml:"name"`
	TokenSHA256 string `yaml:"token_sha256"`
	Role        string `yaml:"role"` // read or promote
}

// apiCallers guards the promoter's API with the callers of
// api_callers_file, read again when the file changes (reloader).
type apiCallers struct {
	r *reloader[map[string]APICaller] // by token SHA-256
}

// readAPICallers reads the file; log receives its reloads and the changes
// that do not load. No file: nil (the API is open).
func readAPICallers(path string, log *slog.Logger) (*apiCallers, error) {
	if path == "" {
		return nil, nil
	}
	r, err := newReloader([]string{path}, func() (map[string]APICaller, error) { return parseAPICallers(path) },
		func(m map[string]APICaller) { log.Info("api callers file reloaded", "file", path, "callers", len(m)) },
		func(err error) {
			log.Warn("the changed api callers file does not load; keeping the previous callers", "file", path, "err", err)
		})
	if err != nil {
		return nil, err
	}
	return &apiCallers{r: r}, nil
}

// parseAPICallers decodes an api_callers_file strictly and checks it: at
// least one caller, names and token hashes each once, a known role.
func parseAPICallers(path string) (map[string]APICaller, error) {
	callers, err := readCallersDoc[APICaller]("api_callers_file", path)
	if err != nil {
		return nil, err
	}
	byHash := map[string]APICaller{}
	var ids access.Identities
	var errs []error
	for i, c := range callers {
		errs = append(errs, ids.Add(i, c.Name, c.TokenSHA256)...)
		if c.Role != RoleRead && c.Role != RolePromote {
			errs = append(errs, fmt.Errorf("caller %s: role %q is not %s or %s", c.Name, c.Role, RoleRead, RolePromote))
		}
		byHash[c.TokenSHA256] = c
	}
	if err := errors.Join(errs...); err != nil {
		return nil, fmt.Errorf("api_callers_file %s: %w", path, err)
	}
	return byHash, nil
}

// guard answers a request to the API that does not carry the token of a
// caller whose role allows it: reads (GET, HEAD) need read or promote,
// anything else promote. Nil a: every request passes.
func (a *apiCallers) guard(next http.Handler) http.Handler {
	if a == nil {
		return next
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		tok, ok := access.Bearer(r.Header.Values("Authorization"))
		if !ok {
			promoterhttp.WriteError(w, http.StatusUnauthorized, promoterhttp.CodeUnauthenticated,
				"this promoter's API requires a caller's bearer token (an Authorization: Bearer header; thaw takes it from "+EnvPromoterToken+")")
			return
		}
		c, ok := a.r.get()[access.TokenSHA256(tok)]
		if !ok {
			promoterhttp.WriteError(w, http.StatusUnauthorized, promoterhttp.CodeUnauthenticated, "the bearer token is not an API caller's")
			return
		}
		if c.Role != RolePromote && r.Method != http.MethodGet && r.Method != http.MethodHead {
			promoterhttp.WriteError(w, http.StatusForbidden, promoterhttp.CodePermissionDenied,
				fmt.Sprintf("caller %s (role %s) may not %s %s: that needs role %s", c.Name, c.Role, r.Method, r.URL.Path, RolePromote))
			return
		}
		next.ServeHTTP(w, r)
	})
}
