// Package redact hides credentials in URLs before they reach an error
// message or a log.
package redact

import (
	"net/url"
	"slices"
	"strings"
)

// URL returns raw with its credentials replaced by "xxxxx": any password
// in its user information, and the values of query (and fragment)
// parameters that name a credential (password, token, secret, signature,
// credential, ...: a libpq "?password=", a presigned URL's
// X-Amz-Signature, an OAuth redirect's "#access_token=") or that hold a
// URL with a password. The rest stays as written.
//
// The query goes first: a URL with a password in a query value would
// otherwise be taken for raw's own user information (which is cut at the
// last "@", for passwords that hold an unescaped '?').
func URL(raw string) string { return userinfo(query(raw)) }

// secretParams are substrings of the (lower-cased) query parameter names
// whose values are redacted; wholeSecretParams only as whole names.
var (
	secretParams      = []string{"password", "passwd", "passphrase", "pwd", "secret", "token", "signature", "credential", "apikey", "api_key", "api-key", "access_key", "accesskey", "access-key"}
	wholeSecretParams = []string{"sig", "pass", "key", "auth"}
)

// query redacts the values of raw's query parameters that are secrets,
// and of its fragment's when the fragment is parameters too (an OAuth
// redirect's "#access_token=...").
func query(raw string) string {
	base, frag, hasFrag := strings.Cut(raw, "#")
	if q := strings.IndexByte(base, '?'); q >= 0 {
		base = base[:q+1] + params(base[q+1:])
	}
	if !hasFrag {
		return base
	}
	return base + "#" + params(frag)
}

// params returns the "&"-separated parameters ps with the values of those
// that are secrets replaced by "xxxxx" (ps as it is when none is).
func params(ps string) string {
	parts := strings.Split(ps, "&")
	changed := false
	for i, p := range parts {
		k, v, ok := strings.Cut(p, "=")
		if !ok || v == "" {
			continue
		}
		name, err := url.QueryUnescape(k)
		if err != nil {
			name = k
		}
		val, err := url.QueryUnescape(v)
		if err != nil {
			val = v
		}
		// A value that is a URL is redacted whole if it carries a secret
		// (a password, or a credential in its own query).
		if secretParam(strings.ToLower(name)) || userinfo(val) != val || (strings.Contains(val, "://") && query(val) != val) {
			parts[i], changed = k+"=xxxxx", true
		}
	}
	if !changed {
		return ps
	}
	return strings.Join(parts, "&")
}

func secretParam(name string) bool {
	if slices.Contains(wholeSecretParams, name) {
		return true
	}
	for _, s := range secretParams {
		if strings.Contains(name, s) {
			return true
		}
	}
	return false
}

// userinfo returns raw with any password in its user information replaced by
// "xxxxx" (url.URL.Redacted; raw as it is when it has none). When raw
// does not parse, or parses without user information while an "@" follows
// a ":" after the scheme (a password holding an unescaped '?', '#' or '/'
// ends the host early: "postgres://u:12?SECRET@db" parses as host "u:12"),
// or with a password but more than one "@" (one in the password), everything
// between "://" and the last "@" is replaced, or, without "://",
// everything before the last "@".
func userinfo(raw string) string {
	if u, err := url.Parse(raw); err == nil {
		_, has := u.User.Password()
		switch {
		case (has || u.User != nil && mayHide(raw)) && strings.Count(raw, "@") > 1:
			// "u:p@q/SECRET@db": a password holding an '@' and then a '/'
			// parses as password "p", host "q"; "me@corp.com:12/SECRET@db"
			// as user "me", host "corp.com:12": cut at the last '@'.
		case has:
			return u.Redacted()
		case u.User != nil || !mayHide(raw):
			return raw // as written: Redacted would re-encode it
		}
	}
	if scheme, rest, ok := strings.Cut(raw, "://"); ok {
		if i := strings.LastIndex(rest, "@"); i >= 0 {
			return scheme + "://xxxxx" + rest[i:]
		}
		return raw
	}
	if mayHide(raw) {
		return "xxxxx" + raw[strings.LastIndex(raw, "@"):]
	}
	return raw
}

// mayHide reports whether raw holds an "@" after a ":" (after its "://",
// when it has one): the form of user information with a password.
func mayHide(raw string) bool {
	if _, rest, ok := strings.Cut(raw, "://"); ok {
		raw = rest
	}
	i := strings.LastIndex(raw, "@")
	return i >= 0 && strings.Contains(raw[:i], ":")
}
