package lake

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

type badDoc struct {
	name, doc, want string
}

func badConfigJSON() []badDoc {
	return []badDoc{
		{"empty", ``, "unexpected end of JSON input"},
		{"null", `null`, "not a JSON object"},
		{"array", `[{"uri":"/c.db"}]`, "not a JSON object"},
		{"truncated", `{"uri":"/c.db"`, "unexpected end of JSON input"},
		{"trailing object", `{"uri":"/c.db"}{}`, "trailing data"},
		{"trailing brace", `{"uri":"/c.db"}}`, "trailing data"},
		{"trailing bracket", `{"uri":"/c.db"}]`, "trailing data"},
		{"invalid utf-8", "{\"uri\":\"/c\xff.db\"}", "invalid utf-8"},
		{"unknown member", `{"uri":"/c.db","passwd":"x"}`, `unknown field "passwd"`},
		{"member in another case", `{"URI":"/c.db"}`, `unknown member "URI"`},
		{"nested member in another case", `{"uri":"/c.db","storage":{"S3":{}}}`, `unknown member "S3"`},
		{"nested unknown member", `{"uri":"/c.db","storage":{"s3":{"bucket":"b"}}}`, `unknown field "bucket"`},
		{"duplicate member", `{"uri":"/a.db","uri":"/b.db"}`, `duplicate member "uri"`},
		{"duplicate header", `{"type":"rest","uri":"http://c","headers":{"X-A":"1","X-A":"2"}}`, `duplicate member "X-A"`},
		{"null member", `{"uri":"/c.db","glue":null}`, `member "glue" is null`},
		{"null secret", `{"uri":"/c.db","password":null}`, `member "password" is null`},
		{"null header", `{"type":"rest","uri":"http://c","headers":{"X-A":null}}`, `member "X-A" is null`},
		{"wrong type", `{"uri":5}`, "Config.uri"},
		{"secret not a string", `{"uri":"/c.db","token":{"value":"x"}}`, "secret must be a JSON string"},
		{"redacted secret", `{"type":"rest","uri":"http://c","token":"[redacted]"}`, "printed config"},
		{"redacted property", `{"uri":"/c.db","properties":{"k":"[redacted]"}}`, "printed config"},
	}
}

func TestDecodeConfigJSONRejects(t *testing.T) {
	for _, tc := range badConfigJSON() {
		t.Run(tc.name, func(t *testing.T) {
			c, err := DecodeConfigJSON([]byte(tc.doc))
			if err == nil {
				t.Fatalf("accepted %s: %v", tc.doc, c)
			}
			if !errors.Is(err, ErrConfig) || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("error %q: want ErrConfig saying %q", err, tc.want)
			}
		})
	}
}

// TestDecodeConfigJSONCompatible: config files as documented decode (map
// keys as written, secrets revealed as given) and validate.
func TestDecodeConfigJSONCompatible(t *testing.T) {
	for _, doc := range seedConfigJSON {
		c, err := DecodeConfigJSON([]byte(doc))
		if err != nil {
			t.Fatalf("%s: %v", doc, err)
		}
		if err := c.Validate(); err != nil {
			t.Fatalf("%s: %v", doc, err)
		}
	}
	c, err := DecodeConfigJSON([]byte(seedConfigJSON[2]))
	if err != nil {
		t.Fatal(err)
	}
	if c.Type != CatalogREST || c.Credential.Reveal() != "id:secret" || c.Headers["X-Tenant"].Reveal() != "acme" ||
		c.Headers["x-iceberg-access-delegation"].Reveal() != "vended-credentials" {
		t.Fatalf("decoded %#v", c)
	}
	if s := c.String(); strings.Contains(s, "id:secret") || strings.Contains(s, "acme") {
		t.Fatalf("String shows a secret: %s", s)
	}
}

// TestConfigCheckFiles: the local files a config names, checked without
// opening the catalog.
func TestConfigCheckFiles(t *testing.T) {
	dir := t.TempDir()
	db := filepath.Join(dir, "catalog.db")
	if err := os.WriteFile(db, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name string
		cfg  Config
		want string // "" passes
	}{
		{"sqlite file", Config{URI: db}, ""},
		{"sqlite file: URI", Config{URI: "file:" + db + "?mode=ro"}, ""},
		{"postgres", Config{URI: "postgres://u@127.0.0.1:1/db"}, ""},
		{"rest", Config{Type: CatalogREST, URI: "http://127.0.0.1:1"}, ""},
		{"missing sqlite file", Config{URI: filepath.Join(dir, "nope.db")}, "sql catalog file " + filepath.Join(dir, "nope.db") + " does not exist"},
		{"directory", Config{URI: dir}, "is not a regular file"},
		{"no file named", Config{URI: ":memory:"}, "names no SQLite file"},
		{"gcs key file", Config{URI: db, Storage: StorageConfig{GCS: GCSConfig{KeyPath: db}}}, ""},
		{"missing gcs key file", Config{URI: db, Storage: StorageConfig{GCS: GCSConfig{KeyPath: filepath.Join(dir, "key.json")}}}, "storage.gcs.key_path: open " + filepath.Join(dir, "key.json")},
	} {
		err := tc.cfg.CheckFiles()
		if (tc.want == "") != (err == nil) || (err != nil && !strings.Contains(err.Error(), tc.want)) {
			t.Errorf("%s: %v, want %q", tc.name, err, tc.want)
		}
	}
}

// TestConfigErrorsHidePasswords: a catalog URI's password never appears in
// a configuration error, whether or not the URI parses. It did when
// url.Parse failed (its error quotes the URI).
func TestConfigErrorsHidePasswords(t *testing.T) {
	const pw = "S3cr%t-pw"
	for _, c := range []Config{
		{Type: CatalogSQL, URI: "postgres://thaw:" + pw + "@db:5432/lake"},
		{Type: CatalogSQL, URI: "mysql://thaw:" + pw + "@db/lake"},
		{Type: CatalogREST, URI: "ftp://thaw:" + pw + "@catalog"},
		{Type: CatalogREST, URI: "http://thaw:" + pw + "@cat alog:80:80"},
		{Type: CatalogHive, URI: "http://thaw:" + pw + "@metastore"},
	} {
		err := c.Validate()
		if err == nil || !errors.Is(err, ErrConfig) {
			t.Fatalf("%s: %v", c.URI, err)
		}
		if strings.Contains(err.Error(), "S3cr") {
			t.Errorf("the error quotes the password: %v", err)
		}
	}
	for uri, want := range map[string]string{
		"postgres://thaw:pw@db:5432/lake":  "postgres://thaw:xxxxx@db:5432/lake",
		"postgres://thaw:p%t@db:5432/lake": "postgres://xxxxx@db:5432/lake",
		"/data/catalog.db":                 "/data/catalog.db",
		"file:%zz":                         "file:%zz",
	} {
		if got := RedactURI(uri); got != want {
			t.Errorf("RedactURI(%q) = %q, want %q", uri, got, want)
		}
	}
	// A password given as a query parameter (libpq's form) is hidden in
	// the configuration's printed forms too.
	c := Config{Type: CatalogSQL, URI: "postgres://thaw@db:5432/lake?sslmode=disable&password=" + pw}
	for what, out := range map[string]string{"String": c.String(), "%v": fmt.Sprintf("%v", c), "RedactURI": RedactURI(c.URI)} {
		if strings.Contains(out, "S3cr") {
			t.Errorf("%s of a config with ?password= quotes the password: %s", what, out)
		}
	}
}
