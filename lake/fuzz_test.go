package lake

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"testing"
)

// seedConfigJSON are lake config files as users write them for
// `thaw lake --config`: one per catalog type, with the storage sections.
var seedConfigJSON = []string{
	`{"uri":"/data/lake/catalog.db","warehouse":"file:///data/lake/warehouse"}`,
	`{"type":"sql","name":"prod","uri":"postgres://thaw@db:5432/iceberg?sslmode=require","password":"pw","warehouse":"s3://bucket/wh",` +
		`"storage":{"s3":{"endpoint":"http://minio:9000","region":"us-east-1","path_style":true,"access_key_id":"AK","secret_access_key":"SK"}}}`,
	`{"type":"rest","uri":"https://catalog.example/api/catalog","warehouse":"main","credential":"id:secret","scope":"catalog",` +
		`"oauth_server_uri":"https://auth.example/token","prefix":"p","headers":{"X-Tenant":"acme","x-iceberg-access-delegation":"vended-credentials"}}`,
	`{"type":"rest","uri":"http://127.0.0.1:8181","token":"t0k3n","properties":{"rest.sigv4-enabled":"false"}}`,
	`{"type":"glue","warehouse":"s3://b/w","glue":{"region":"eu-west-1","catalog_id":"123456789012","access_key_id":"AK","secret_access_key":"SK"}}`,
	`{"type":"hive","uri":"thrift://metastore:9083","warehouse":"gs://b/w","storage":{"gcs":{"key_path":"/k.json","no_auth":false}}}`,
	`{"uri":"file:/c.db","storage":{"azure":{"account_name":"acct","sas_token":"sv=x","protocol":"abfss"}}}`,
	"{\n  \"uri\": \"/c.db\"\n}\n",
}

// FuzzDecodeConfigJSON: decoding a lake config file never panics, and
// neither does validating what decoded; an error wraps ErrConfig and
// names the problem; a decoded config's JSON (what String prints)
// decodes again to a config that prints the same and validates the same
// way — unless it holds secrets, whose "[redacted]" is refused.
func FuzzDecodeConfigJSON(f *testing.F) {
	for _, s := range seedConfigJSON {
		f.Add([]byte(s))
	}
	for _, tc := range badConfigJSON() {
		f.Add([]byte(tc.doc))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		c, err := DecodeConfigJSON(b)
		if err != nil {
			if !errors.Is(err, ErrConfig) || strings.TrimSpace(strings.TrimPrefix(err.Error(), ErrConfig.Error()+":")) == "" {
				t.Fatalf("error %q: want ErrConfig naming the problem", err)
			}
			return
		}
		verr := c.Validate()
		out, err := json.Marshal(c)
		if err != nil {
			t.Fatalf("marshal of decoded %q: %v", b, err)
		}
		if s := c.String(); s != string(out) {
			t.Fatalf("String %s is not the JSON of the config %s", s, out)
		}
		c2, err := DecodeConfigJSON(out)
		if c.holdsSecret() {
			if err == nil || !strings.Contains(err.Error(), "printed config") {
				t.Fatalf("a printed config with secrets decoded again: %v\n%s", err, out)
			}
			return
		}
		if err != nil {
			t.Fatalf("decode of the JSON %s of decoded %q: %v", out, b, err)
		}
		if out2 := mustJSON(t, c2); !bytes.Equal(out, out2) {
			t.Fatalf("round trip of %q changed %s into %s", b, out, out2)
		}
		if verr2 := c2.Validate(); fmt.Sprint(verr) != fmt.Sprint(verr2) {
			t.Fatalf("round trip of %q changed validation from %v to %v", b, verr, verr2)
		}
	})
}

func mustJSON(t *testing.T, c Config) []byte {
	t.Helper()
	b, err := json.Marshal(c)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// holdsSecret reports whether any secret of c is set.
func (c Config) holdsSecret() bool {
	for _, s := range []Secret{
		c.Password, c.Credential, c.Token, c.Glue.SecretAccessKey, c.Glue.SessionToken,
		c.Storage.S3.SecretAccessKey, c.Storage.S3.SessionToken, c.Storage.GCS.JSONKey,
		c.Storage.Azure.AccountKey, c.Storage.Azure.SASToken,
	} {
		if s != "" {
			return true
		}
	}
	for _, m := range []map[string]Secret{c.Headers, c.Properties} {
		for _, s := range m {
			if s != "" {
				return true
			}
		}
	}
	return false
}
