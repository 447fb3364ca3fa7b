// Package redact hides credentials in URLs before they reach an error
// message or a log.
package redact

import (
	"net/url"
	"strings"
)

// URL returns raw with any password in its user information replaced by
// "xxxxx" (url.URL.Redacted; raw as it is when it has none), or, if it does
// not parse, everything between
// "://" and the last "@" (a URL that does not parse may still hold a
// password).
func URL(raw string) string {
	if u, err := url.Parse(raw); err == nil {
		if _, has := u.User.Password(); !has {
			return raw // as written: Redacted would re-encode it
		}
		return u.Redacted()
	}
	scheme, rest, ok := strings.Cut(raw, "://")
	if i := strings.LastIndex(rest, "@"); ok && i >= 0 {
		return scheme + "://xxxxx" + rest[i:]
	}
	return raw
}
