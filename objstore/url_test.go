package objstore

import (
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

func TestParseLocation(t *testing.T) {
	wd, err := os.Getwd()
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct{ url, base string }{
		{"file:///data/remote", "file:///data/remote"},
		{"file:///data/remote/", "file:///data/remote"},
		{"file://localhost/data//remote?no_tmp_dir=true", "file:///data/remote"},
		{"file://./rel/dir", "file://" + filepath.ToSlash(filepath.Join(wd, "rel/dir"))},
		{"mem://", "mem://"},
		{"mem://lake", "mem://lake"},
		{"mem://lake/a/b/", "mem://lake/a/b"},
		{"s3://bkt", "s3://bkt"},
		{"s3://bkt/remote?endpoint=http://127.0.0.1:9000&region=us-east-1&use_path_style=true", "s3://bkt/remote"},
	} {
		loc, err := parseLocation(tc.url)
		if err != nil {
			t.Errorf("parse %q: %v", tc.url, err)
			continue
		}
		if got := loc.base(); got != tc.base {
			t.Errorf("base of %q = %q, want %q", tc.url, got, tc.base)
		}
	}
	for _, bad := range []string{
		"gs://bkt", "bkt/path", "file://host/data", "file:///",
		"s3://", "s3:///prefix", "s3://bkt/a/../b", "mem://x/a//b",
		"s3://bkt?prefix=a/", "file:///d?key=k", "s3://user:pw@bkt", "mem://x#frag", "%zz://",
	} {
		if loc, err := parseLocation(bad); err == nil {
			t.Errorf("parse %q = %+v, want an error", bad, loc)
		}
	}
}

func TestCheckKey(t *testing.T) {
	for _, ok := range []string{"a", "kv/db/t-1/p$x-p2/0/snap-1/000001.sst", "a.attrs.x", "..a/b", "a/b...c", "sp ace", "ünï"} {
		if err := checkKey(ok); err != nil {
			t.Errorf("checkKey(%q): %v", ok, err)
		}
	}
	for _, bad := range []string{"", "/", "/a", "a/", "a//b", ".", "..", "a/./b", "a/..", "a../b", "..a/b..", "x.attrs", "a\nb", "a\x7f", `a\b`, "a?b", "a#b", "\xff"} {
		if err := checkKey(bad); !errors.Is(err, ErrInvalidKey) {
			t.Errorf("checkKey(%q) = %v, want ErrInvalidKey", bad, err)
		}
	}
}

// TestStoreURLErrorsHideCredentials: a store URL with credentials in its
// user information is refused without quoting them (the error quoted the
// whole URL, and url.Parse's error does too).
func TestStoreURLErrorsHideCredentials(t *testing.T) {
	for _, u := range []string{"s3://AKIDEXAMPLE:SECRET7f3c@bucket/prefix", "s3://AKIDEXAMPLE:SECRET7f3c@bucket/%zz"} {
		_, err := Open(t.Context(), u)
		if err == nil || strings.Contains(err.Error(), "SECRET7f3c") || !strings.Contains(err.Error(), "bucket/") {
			t.Errorf("Open(%q): %v", u, err)
		}
	}
}

func TestOpenErrors(t *testing.T) {
	ctx := t.Context()
	for _, u := range []string{
		"mem://x?nomd5=true",                     // mem takes no parameters
		"file://" + t.TempDir() + "?bogus=1",     // fileblob rejects unknown parameters
		"s3://bkt?bogus=1",                       // so does gocloud's aws config
		"file://" + t.TempDir() + "?metadata=no", // bad fileblob value
	} {
		if s, err := Open(ctx, u); err == nil {
			t.Errorf("Open(%q) = %v, want an error", u, s.Base())
		} else if !strings.HasPrefix(err.Error(), "objstore: ") {
			t.Errorf("Open(%q) error %q lacks the package prefix", u, err)
		}
	}
	file := filepath.Join(t.TempDir(), "file")
	if err := os.WriteFile(file, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := Open(ctx, "file://"+file); err == nil {
		t.Errorf("Open on a regular file succeeded")
	}
}

func TestFileStore(t *testing.T) {
	ctx := t.Context()
	root := filepath.Join(t.TempDir(), "not", "yet")
	s := openStore(t, "file://"+root)
	if _, err := os.Stat(root); err != nil {
		t.Fatalf("root directory not created: %v", err)
	}
	mustPut(t, s, "kv/a/b", []byte("data"))
	if b, err := os.ReadFile(filepath.Join(root, "kv", "a", "b")); err != nil || string(b) != "data" {
		t.Errorf("object file = %q, %v", b, err)
	}
	if _, err := os.Stat(filepath.Join(root, "kv", "a", "b.attrs")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("default file store wrote a sidecar: %v", err)
	}

	// With sidecars switched back on, they exist on disk but never show
	// up in List, and their names cannot be used as keys.
	side := openStore(t, "file://"+root+"?metadata=")
	if _, err := side.PutIfAbsent(ctx, "kv/a/c", BytesSource([]byte("c"))); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(root, "kv", "a", "c.attrs")); err != nil {
		t.Fatalf("sidecar not written: %v", err)
	}
	for _, st := range []*Store{s, side} {
		if got, want := listKeys(t, st, ""), []string{"kv/a/b", "kv/a/c"}; !slices.Equal(got, want) {
			t.Errorf("list = %q, want %q", got, want)
		}
	}
	if _, err := side.Stat(ctx, "kv/a/c.attrs"); !errors.Is(err, ErrInvalidKey) {
		t.Errorf("stat of a sidecar name: %v, want ErrInvalidKey", err)
	}
	if err := side.Delete(ctx, "kv/a/c"); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(root, "kv", "a", "c.attrs")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("delete left the sidecar: %v", err)
	}
}

func TestMemNamedBuckets(t *testing.T) {
	ctx := t.Context()
	name := memName(t)
	a := openStore(t, "mem://"+name+"/a")
	a2 := openStore(t, "mem://"+name+"/a")
	whole := openStore(t, "mem://"+name)
	mustPut(t, a, "k", []byte("v"))
	if got := mustGet(t, a2, "k"); string(got) != "v" {
		t.Errorf("second handle of the same url reads %q", got)
	}
	if got := listKeys(t, whole, ""); !slices.Equal(got, []string{"a/k"}) {
		t.Errorf("unprefixed view lists %q, want [a/k]", got)
	}
	if got, want := whole.URI("a/k"), a.URI("k"); got != want {
		t.Errorf("URIs of one object differ: %q and %q", got, want)
	}
	if err := a2.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := a.Stat(ctx, "k"); err != nil {
		t.Errorf("closing one handle closed the shared bucket: %v", err)
	}
	anon1, anon2 := openStore(t, "mem://"), openStore(t, "mem://")
	mustPut(t, anon1, "k", []byte("v"))
	if _, err := anon2.Stat(ctx, "k"); !errors.Is(err, ErrNotFound) {
		t.Errorf("anonymous mem buckets are shared: %v", err)
	}
}

func TestS3Prefix(t *testing.T) {
	endpoint := newS3(t)
	pre := openStore(t, s3URL(t, endpoint, "bkt", "lake/remote"))
	whole := openStore(t, s3URL(t, endpoint, "bkt", ""))
	if pre.Base() != "s3://bkt/lake/remote" || whole.Base() != "s3://bkt" {
		t.Fatalf("bases %q and %q", pre.Base(), whole.Base())
	}
	if _, err := pre.PutIfAbsent(t.Context(), "kv/x", BytesSource([]byte("x"))); err != nil {
		t.Fatal(err)
	}
	if got := listKeys(t, whole, ""); !slices.Equal(got, []string{"lake/remote/kv/x"}) {
		t.Errorf("bucket holds %q, want [lake/remote/kv/x]", got)
	}
	if got := listKeys(t, pre, "kv/"); !slices.Equal(got, []string{"kv/x"}) {
		t.Errorf("prefixed list = %q, want [kv/x]", got)
	}
	if _, err := openStore(t, s3URL(t, endpoint, "nobucket", "")).Stat(t.Context(), "k"); !errors.Is(err, ErrBucketNotFound) {
		t.Errorf("stat in a missing bucket: %v, want ErrBucketNotFound", err)
	}
}
