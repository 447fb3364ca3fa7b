package lake

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"net/url"
	"slices"
	"strconv"
	"strings"

	"github.com/thawdb/thaw/internal/redact"
	"github.com/thawdb/thaw/internal/strictjson"
)

// Catalog types accepted in Config.Type.
const (
	CatalogSQL  = "sql"
	CatalogREST = "rest"
	CatalogGlue = "glue"
	CatalogHive = "hive"
)

// redacted is what a Secret prints as.
const redacted = "[redacted]"

// RedactURI returns uri for an error message or a log: with any password
// in its user information replaced by "xxxxx" (url.URL.Redacted), or, if
// it does not parse, everything between "://" and the last "@" (a URI
// that does not parse may still hold a password).
func RedactURI(uri string) string { return redact.URL(uri) }

// Secret is a credential in a Config. It decodes from a plain string but never
// prints itself: String, GoString, MarshalJSON, MarshalYAML, MarshalText and
// LogValue all give "[redacted]" (or "" when empty). Reveal returns the value.
type Secret string

// Reveal returns the secret's value, for handing it to a client library.
func (s Secret) Reveal() string { return string(s) }

func (s Secret) display() string {
	if s == "" {
		return ""
	}
	return redacted
}

// String returns "[redacted]", or "" for an empty secret.
func (s Secret) String() string { return s.display() }

// GoString keeps %#v from printing the value.
func (s Secret) GoString() string { return fmt.Sprintf("lake.Secret(%q)", s.display()) }

// Format prints what String and GoString give under every verb: without
// it, a verb neither serves (%d, %t, ...) prints the value itself.
func (s Secret) Format(f fmt.State, verb rune) { formatRedacted(f, verb, s.display(), s.GoString()) }

// MarshalText writes "[redacted]" (for encoders that take text).
func (s Secret) MarshalText() ([]byte, error) { return []byte(s.display()), nil }

// formatRedacted writes str (quoted for %q) or, for %#v, gostr: what a
// redacting String and GoString give, whatever the verb.
func formatRedacted(f fmt.State, verb rune, str, gostr string) {
	switch {
	case verb == 'v' && f.Flag('#'):
		_, _ = io.WriteString(f, gostr)
	case verb == 'q':
		_, _ = io.WriteString(f, strconv.Quote(str))
	default:
		_, _ = io.WriteString(f, str)
	}
}

// MarshalJSON writes "[redacted]", so a marshalled Config is safe to show.
func (s Secret) MarshalJSON() ([]byte, error) { return json.Marshal(s.display()) }

// UnmarshalJSON reads a plain JSON string. "[redacted]" is an error: it is
// what a printed Config shows, never the secret itself.
func (s *Secret) UnmarshalJSON(b []byte) error {
	var v string
	if err := json.Unmarshal(b, &v); err != nil {
		return fmt.Errorf("lake: secret must be a JSON string: %w", err)
	}
	return s.set(v)
}

// MarshalYAML writes "[redacted]" (gopkg.in/yaml and go.yaml.in/yaml call it).
func (s Secret) MarshalYAML() (any, error) { return s.display(), nil }

// UnmarshalYAML reads a YAML string (the yaml packages call it; this form
// of the method needs no import). "[redacted]" is an error, as for JSON.
func (s *Secret) UnmarshalYAML(unmarshal func(any) error) error {
	var v string
	if err := unmarshal(&v); err != nil {
		return err
	}
	return s.set(v)
}

func (s *Secret) set(v string) error {
	if v == redacted {
		return fmt.Errorf("%w: a secret reads %q: that is how a printed config shows it, not the secret", ErrConfig, redacted)
	}
	*s = Secret(v)
	return nil
}

// LogValue keeps log/slog from printing the value.
func (s Secret) LogValue() slog.Value { return slog.StringValue(s.display()) }

// Config selects an Iceberg catalog and the object storage its data files live in.
// It is tagged for JSON and YAML; secrets are of type Secret and never print.
// Only the fields of the chosen Type are used (docs/lake.md lists them).
type Config struct {
	// Type is sql (the default), rest, glue or hive.
	Type string `json:"type,omitempty" yaml:"type,omitempty"`
	// Name is the catalog name. The SQL catalog stores it with every table and
	// namespace, so it must match the name the tables were created under.
	// Default "default".
	Name string `json:"name,omitempty" yaml:"name,omitempty"`
	// URI locates the catalog. sql: a SQLite file ("file:/data/catalog.db" or a
	// plain path) or a Postgres URL ("postgres://user@host/db"); rest: the base
	// URL ("https://catalog.example.com/api/catalog"); hive: the metastore
	// ("thrift://host:9083"); glue: unused.
	URI string `json:"uri,omitempty" yaml:"uri,omitempty"`
	// Warehouse is the warehouse location: a file://, s3://, gs:// or abfss://
	// URL for sql and hive, a warehouse name or location for rest.
	Warehouse string `json:"warehouse,omitempty" yaml:"warehouse,omitempty"`

	// Password, for sql on Postgres, replaces the password of URI.
	Password Secret `json:"password,omitempty" yaml:"password,omitempty"`

	// REST: an OAuth2 client credential "client_id:client_secret" (or a bare
	// secret), exchanged at OAuthServerURI (default {uri}/v1/oauth/tokens) for
	// a token with Scope (default "catalog"); or a static bearer Token.
	Credential     Secret            `json:"credential,omitempty" yaml:"credential,omitempty"`
	Token          Secret            `json:"token,omitempty" yaml:"token,omitempty"`
	OAuthServerURI string            `json:"oauth_server_uri,omitempty" yaml:"oauth_server_uri,omitempty"`
	Scope          string            `json:"scope,omitempty" yaml:"scope,omitempty"`
	Prefix         string            `json:"prefix,omitempty" yaml:"prefix,omitempty"`
	Headers        map[string]Secret `json:"headers,omitempty" yaml:"headers,omitempty"`

	// Glue: the AWS region, an endpoint override, the catalog (account) id and
	// static credentials; without credentials the default AWS chain is used.
	Glue GlueConfig `json:"glue,omitzero" yaml:"glue,omitempty"`

	// Storage configures the FileIO that reads metadata and data files.
	Storage StorageConfig `json:"storage,omitzero" yaml:"storage,omitempty"`

	// Properties are extra iceberg-go catalog properties, passed through as
	// they are; they override what the fields above set. Values print redacted.
	Properties map[string]Secret `json:"properties,omitempty" yaml:"properties,omitempty"`
}

// GlueConfig holds the AWS Glue catalog settings.
type GlueConfig struct {
	Region          string `json:"region,omitempty" yaml:"region,omitempty"`
	Endpoint        string `json:"endpoint,omitempty" yaml:"endpoint,omitempty"`
	CatalogID       string `json:"catalog_id,omitempty" yaml:"catalog_id,omitempty"`
	AccessKeyID     string `json:"access_key_id,omitempty" yaml:"access_key_id,omitempty"`
	SecretAccessKey Secret `json:"secret_access_key,omitempty" yaml:"secret_access_key,omitempty"`
	SessionToken    Secret `json:"session_token,omitempty" yaml:"session_token,omitempty"`
}

// StorageConfig configures object storage for metadata and data files. The
// file:// and mem:// schemes need nothing; s3://, gs:// and abfs[s]:// go
// through iceberg-go's gocloud FileIO.
type StorageConfig struct {
	S3    S3Config    `json:"s3,omitzero" yaml:"s3,omitempty"`
	GCS   GCSConfig   `json:"gcs,omitzero" yaml:"gcs,omitempty"`
	Azure AzureConfig `json:"azure,omitzero" yaml:"azure,omitempty"`
}

// S3Config configures s3:// (and s3a, s3n, oss) locations.
type S3Config struct {
	// Endpoint overrides the AWS endpoint (MinIO, gofakes3, other S3 stores).
	// A custom endpoint uses path-style addressing unless VirtualHosted is set.
	Endpoint      string `json:"endpoint,omitempty" yaml:"endpoint,omitempty"`
	Region        string `json:"region,omitempty" yaml:"region,omitempty"`
	VirtualHosted bool   `json:"virtual_hosted,omitempty" yaml:"virtual_hosted,omitempty"`
	// PathStyle forces path-style addressing also without a custom endpoint.
	PathStyle       bool   `json:"path_style,omitempty" yaml:"path_style,omitempty"`
	AccessKeyID     string `json:"access_key_id,omitempty" yaml:"access_key_id,omitempty"`
	SecretAccessKey Secret `json:"secret_access_key,omitempty" yaml:"secret_access_key,omitempty"`
	SessionToken    Secret `json:"session_token,omitempty" yaml:"session_token,omitempty"`
}

// GCSConfig configures gs:// locations.
type GCSConfig struct {
	Endpoint string `json:"endpoint,omitempty" yaml:"endpoint,omitempty"`
	KeyPath  string `json:"key_path,omitempty" yaml:"key_path,omitempty"`
	JSONKey  Secret `json:"json_key,omitempty" yaml:"json_key,omitempty"`
	NoAuth   bool   `json:"no_auth,omitempty" yaml:"no_auth,omitempty"`
}

// AzureConfig configures abfs://, abfss://, wasb:// and wasbs:// locations.
type AzureConfig struct {
	AccountName string `json:"account_name,omitempty" yaml:"account_name,omitempty"`
	AccountKey  Secret `json:"account_key,omitempty" yaml:"account_key,omitempty"`
	// SASToken is used for the account's blob and dfs hosts.
	SASToken Secret `json:"sas_token,omitempty" yaml:"sas_token,omitempty"`
	Endpoint string `json:"endpoint,omitempty" yaml:"endpoint,omitempty"`
	Protocol string `json:"protocol,omitempty" yaml:"protocol,omitempty"`
}

// DecodeConfigJSON decodes a Config from its JSON form (a lake config
// file) strictly: invalid UTF-8, an unknown, repeated or null member
// (struct member names match exactly; header and property names are kept
// as they are), a value of the wrong type, a secret that reads
// "[redacted]" and trailing data are errors wrapping ErrConfig that name
// the member. It does not Validate, so that a caller can apply overrides
// (flags, the environment) first.
func DecodeConfigJSON(b []byte) (Config, error) {
	if err := scanConfigJSON(b); err != nil {
		return Config{}, fmt.Errorf("%w: %v", ErrConfig, err)
	}
	var c Config
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&c); err != nil {
		if errors.Is(err, ErrConfig) {
			return Config{}, err
		}
		return Config{}, fmt.Errorf("%w: %v", ErrConfig, err)
	}
	return c, nil
}

// configMaps are the members of a Config whose values are JSON objects
// with keys of the user's choosing (map[string]Secret).
var configMaps = []string{"headers", "properties"}

// scanConfigJSON checks what encoding/json does not of a Config's JSON
// (strictjson.Check): one object and nothing after it, no key repeated
// within an object, no null member, and struct member names spelled
// [a-z0-9_], so they match exactly (header and property names are the
// user's).
func scanConfigJSON(b []byte) error {
	top, err := strictjson.Check(b, strictjson.Options{FreeKeys: configMaps, NoNull: true})
	if err == nil && top == nil {
		err = errors.New("not a JSON object")
	}
	return err
}

// Defaults returns c with the default type and name filled in.
func (c Config) Defaults() Config {
	if c.Type == "" {
		c.Type = CatalogSQL
	}
	if c.Name == "" {
		c.Name = "default"
	}
	return c
}

// Validate checks the fields the chosen catalog type needs. It does not
// contact anything.
func (c Config) Validate() error {
	c = c.Defaults()
	switch c.Type {
	case CatalogSQL:
		if c.URI == "" {
			return fmt.Errorf("%w: sql catalog needs uri (a SQLite file or a postgres:// URL)", ErrConfig)
		}
		if _, _, err := sqlTarget(c.URI); err != nil {
			return err
		}
	case CatalogREST:
		u, err := url.Parse(c.URI)
		if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			return fmt.Errorf("%w: rest catalog needs an http(s) uri, got %q", ErrConfig, RedactURI(c.URI))
		}
		if c.Credential != "" && c.Token != "" {
			return fmt.Errorf("%w: rest catalog takes credential or token, not both", ErrConfig)
		}
		if c.OAuthServerURI != "" {
			if u, err := url.Parse(c.OAuthServerURI); err != nil || u.Scheme == "" || u.Host == "" {
				return fmt.Errorf("%w: oauth_server_uri %q is not an absolute URL", ErrConfig, RedactURI(c.OAuthServerURI))
			}
		}
	case CatalogGlue:
	case CatalogHive:
		if !strings.HasPrefix(c.URI, "thrift://") {
			return fmt.Errorf("%w: hive catalog needs a thrift:// uri, got %q", ErrConfig, RedactURI(c.URI))
		}
	default:
		return fmt.Errorf("%w: unknown catalog type %q (want sql, rest, glue or hive)", ErrConfig, c.Type)
	}
	if c.Glue.SecretAccessKey != "" && c.Glue.AccessKeyID == "" {
		return fmt.Errorf("%w: glue.secret_access_key without glue.access_key_id", ErrConfig)
	}
	if (c.Storage.S3.AccessKeyID == "") != (c.Storage.S3.SecretAccessKey == "") {
		return fmt.Errorf("%w: storage.s3 needs both access_key_id and secret_access_key, or neither", ErrConfig)
	}
	if c.Storage.S3.VirtualHosted && c.Storage.S3.PathStyle {
		return fmt.Errorf("%w: storage.s3 cannot be both virtual_hosted and path_style", ErrConfig)
	}
	return nil
}

// MarshalJSON writes the config with every secret redacted, the passwords
// in its URIs too (RedactURI): a marshalled Config is safe to show.
func (c Config) MarshalJSON() ([]byte, error) {
	type plain Config // without this method
	c.URI, c.OAuthServerURI = RedactURI(c.URI), RedactURI(c.OAuthServerURI)
	return json.Marshal(plain(c))
}

// GoString is String, for %#v.
func (c Config) GoString() string { return "lake.Config" + c.String() }

// Format prints String (GoString for %#v) under every verb: without it, a
// verb String does not serve (%d, %t, ...) prints every field, the URIs'
// passwords included.
func (c Config) Format(f fmt.State, verb rune) { formatRedacted(f, verb, c.String(), c.GoString()) }

// LogValue keeps log/slog from printing a secret.
func (c Config) LogValue() slog.Value { return slog.StringValue(c.String()) }

// String describes the config with every secret redacted.
func (c Config) String() string {
	b, err := json.Marshal(c)
	if err != nil {
		return "lake.Config(unprintable)"
	}
	return string(b)
}

// storageProps returns the iceberg-go FileIO properties of the storage config.
func (s StorageConfig) storageProps() map[string]string {
	p := map[string]string{}
	set := func(k, v string) {
		if v != "" {
			p[k] = v
		}
	}
	set("s3.endpoint", s.S3.Endpoint)
	set("s3.region", s.S3.Region)
	set("s3.access-key-id", s.S3.AccessKeyID)
	set("s3.secret-access-key", s.S3.SecretAccessKey.Reveal())
	set("s3.session-token", s.S3.SessionToken.Reveal())
	switch {
	case s.S3.VirtualHosted:
		p["s3.force-virtual-addressing"] = "true"
	case s.S3.PathStyle:
		p["s3.force-virtual-addressing"] = "false"
	}
	set("gcs.endpoint", s.GCS.Endpoint)
	set("gcs.keypath", s.GCS.KeyPath)
	set("gcs.jsonkey", s.GCS.JSONKey.Reveal())
	if s.GCS.NoAuth {
		p["gcs.no-auth"] = "true"
	}
	if s.Azure.AccountKey != "" {
		// Only with the key: iceberg-go takes shared-key authentication
		// whenever the account name is set, and a SAS token alone failed
		// ("shared-key requires both ...").
		set("adls.auth.shared-key.account.name", s.Azure.AccountName)
		set("adls.auth.shared-key.account.key", s.Azure.AccountKey.Reveal())
	}
	set("adls.endpoint", s.Azure.Endpoint)
	set("adls.protocol", s.Azure.Protocol)
	if s.Azure.SASToken != "" && s.Azure.AccountName != "" {
		for _, host := range []string{".blob.core.windows.net", ".dfs.core.windows.net"} {
			p["adls.sas-token."+s.Azure.AccountName+host] = s.Azure.SASToken.Reveal()
		}
	}
	return p
}

// extraProps returns Properties revealed, sorted keys for determinism.
func (c Config) extraProps() map[string]string {
	p := make(map[string]string, len(c.Properties))
	for _, k := range slices.Sorted(maps.Keys(c.Properties)) {
		p[k] = c.Properties[k].Reveal()
	}
	return p
}
