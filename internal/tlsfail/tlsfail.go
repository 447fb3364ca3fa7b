// Package tlsfail tells a TLS handshake that failed verification apart
// from the network failures a handshake can also end in. Clients use it
// so that an endpoint they will never trust as configured (a missing or
// wrong CA bundle, a man in the middle, a certificate for another host or
// an expired one) is a permanent error, reported at once, and not a
// transient one repeated until a retry budget runs out.
package tlsfail

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"strings"
)

// Untrusted reports whether err holds a failed certificate verification:
// the client does not trust the server's certificate, or the certificate
// does not name the host or is not valid now. Repeating the call cannot
// help until the configuration changes.
func Untrusted(err error) bool {
	var verify *tls.CertificateVerificationError
	var authority x509.UnknownAuthorityError
	var host x509.HostnameError
	var invalid x509.CertificateInvalidError
	return errors.As(err, &verify) || errors.As(err, &authority) || errors.As(err, &host) || errors.As(err, &invalid)
}

// PlainHTTP reports whether err says an https:// URL reached a server that
// speaks plain HTTP (net/http's "server gave HTTP response to HTTPS
// client", which has no type to match): as permanent as an untrusted
// certificate, the URL's scheme is wrong.
func PlainHTTP(err error) bool {
	return err != nil && strings.Contains(err.Error(), "server gave HTTP response to HTTPS client")
}
