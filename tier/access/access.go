package access

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"strings"

	"github.com/thawdb/thaw/kv"
)

// CheckPattern checks a table pattern: "*" (every table), "DATABASE.*"
// (every table of a database) or "DATABASE.TABLE". A pattern covers every
// partition of the tables it names.
func CheckPattern(p string) error {
	if p == "*" {
		return nil
	}
	db, table, ok := strings.Cut(p, ".")
	if !ok || db == "" || table == "" || strings.Contains(db, "*") || (table != "*" && strings.Contains(table, "*")) || strings.Contains(table, ".") {
		return fmt.Errorf("table pattern %q is not *, DATABASE.* or DATABASE.TABLE", p)
	}
	// A name no database or table can have would match nothing, silently
	// (a stray space, say).
	err := kv.CheckName("database", db)
	if table != "*" {
		err = errors.Join(err, kv.CheckName("table", table))
	}
	if err != nil {
		return fmt.Errorf("table pattern %q: %w", p, err)
	}
	return nil
}

// Match reports whether the (checked) pattern p covers table of db.
func Match(p, db, table string) bool {
	if p == "*" {
		return true
	}
	pdb, ptable, _ := strings.Cut(p, ".")
	return pdb == db && (ptable == "*" || ptable == table)
}

// MatchAny reports whether one of patterns covers table of db.
func MatchAny(patterns []string, db, table string) bool {
	for _, p := range patterns {
		if Match(p, db, table) {
			return true
		}
	}
	return false
}

// MatchDatabase reports whether one of patterns covers a database itself
// (creating or dropping it): "*" or "DATABASE.*".
func MatchDatabase(patterns []string, db string) bool {
	for _, p := range patterns {
		if p == "*" || p == db+".*" {
			return true
		}
	}
	return false
}

// CheckName checks a caller's name: 1..63 characters [a-z0-9._-].
func CheckName(name string) error {
	if name == "" || len(name) > 63 || strings.Trim(name, "abcdefghijklmnopqrstuvwxyz0123456789._-") != "" {
		return fmt.Errorf("name %q is not 1..63 characters [a-z0-9._-]", name)
	}
	return nil
}

// CheckTokenSHA256 checks a token's SHA-256 as configured: 64 lowercase
// hex digits.
func CheckTokenSHA256(h string) error {
	if len(h) != 64 || strings.Trim(h, "0123456789abcdef") != "" {
		return fmt.Errorf("token sha256 is not 64 lowercase hex digits")
	}
	return nil
}

// TokenSHA256 returns the lowercase hex SHA-256 of a bearer token: what
// a caller is known by (the tier never keeps the token itself).
func TokenSHA256(token string) string {
	sum := sha256.Sum256([]byte(token))
	return hex.EncodeToString(sum[:])
}

// Bearer returns the token of the Authorization header values of a
// request: exactly one "Bearer TOKEN" value, else ok is false.
func Bearer(authorization []string) (token string, ok bool) {
	if len(authorization) != 1 {
		return "", false
	}
	token, ok = strings.CutPrefix(authorization[0], "Bearer ")
	return token, ok && token != ""
}

// Identities checks a list of callers' names and token hashes as it is
// walked: each valid, each once. The zero value is ready.
type Identities struct {
	names  map[string]bool
	hashes map[string]string // token SHA-256 → caller name
}

// Add checks the i-th caller's name and token hash against the earlier
// ones and returns one error per problem.
func (ids *Identities) Add(i int, name, tokenSHA256 string) []error {
	if ids.names == nil {
		ids.names, ids.hashes = map[string]bool{}, map[string]string{}
	}
	var errs []error
	if err := CheckName(name); err != nil {
		errs = append(errs, fmt.Errorf("caller %d: %w", i, err))
	} else if ids.names[name] {
		errs = append(errs, fmt.Errorf("caller %s: named twice", name))
	}
	ids.names[name] = true
	if err := CheckTokenSHA256(tokenSHA256); err != nil {
		errs = append(errs, fmt.Errorf("caller %s: %w", name, err))
	} else if other, dup := ids.hashes[tokenSHA256]; dup {
		errs = append(errs, fmt.Errorf("caller %s: token sha256 also of caller %s", name, other))
	} else {
		ids.hashes[tokenSHA256] = name
	}
	return errs
}
