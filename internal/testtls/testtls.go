// Package testtls gives tests a certificate and key as PEM files, for
// listeners that serve HTTPS: httptest's self-signed certificate, valid
// for 127.0.0.1, ::1 and example.com, which is also the CA bundle clients
// trust.
package testtls

import (
	"crypto/x509"
	"encoding/pem"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"testing"
)

// Files writes the certificate and its private key into a temporary
// directory of t and returns their paths; the certificate file is the CA
// bundle too.
func Files(t testing.TB) (cert, key string) {
	t.Helper()
	srv := httptest.NewUnstartedServer(http.NotFoundHandler())
	srv.StartTLS()
	pair := srv.TLS.Certificates[0]
	srv.Close()
	der, err := x509.MarshalPKCS8PrivateKey(pair.PrivateKey)
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	cert, key = filepath.Join(dir, "cert.pem"), filepath.Join(dir, "key.pem")
	for path, b := range map[string]*pem.Block{cert: {Type: "CERTIFICATE", Bytes: pair.Certificate[0]}, key: {Type: "PRIVATE KEY", Bytes: der}} {
		if err := os.WriteFile(path, pem.EncodeToMemory(b), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	return cert, key
}
