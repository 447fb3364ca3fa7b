package meta_test

import (
	"errors"
	"strings"
	"testing"

	"github.com/thawdb/thaw/fencing"
	"github.com/thawdb/thaw/tier/access"
	"github.com/thawdb/thaw/tier/meta"
)

// TestDataAccessRecord: the data-access policy's format, its validation,
// strict decoding, and PutDataAccess writing only a change, fenced.
func TestDataAccessRecord(t *testing.T) {
	h1, h2 := access.TokenSHA256("token-one-0123456789"), access.TokenSHA256("token-two-0123456789")
	good := meta.DataAccess{Version: 1, Enforce: true, Callers: []meta.DataCaller{
		{Name: "app", TokenSHA256: h1, Read: []string{"shop.*"}, Write: []string{"shop.items"}},
		{Name: "bi", TokenSHA256: h2, Read: []string{"*"}},
	}}
	b, err := meta.Marshal(good)
	want := `{"version":1,"enforce":true,"callers":[{"name":"app","token_sha256":"` + h1 + `","read":["shop.*"],"write":["shop.items"]},` +
		`{"name":"bi","token_sha256":"` + h2 + `","read":["*"]}]}`
	if err != nil || string(b) != want {
		t.Fatalf("got  %s, %v\nwant %s", b, err, want)
	}
	if b, err := meta.Marshal(meta.DataAccess{Version: 1}); err != nil || string(b) != `{"version":1,"enforce":false}` {
		t.Fatalf("nothing enforced: %s, %v", b, err)
	}
	for name, d := range map[string]meta.DataAccess{
		"enforced without callers": {Version: 1, Enforce: true},
		"bad name":                 {Version: 1, Callers: []meta.DataCaller{{Name: "App", TokenSHA256: h1, Read: []string{"*"}}}},
		"named twice":              {Version: 1, Callers: []meta.DataCaller{{Name: "a", TokenSHA256: h1, Read: []string{"*"}}, {Name: "a", TokenSHA256: h2, Read: []string{"*"}}}},
		"same token":               {Version: 1, Callers: []meta.DataCaller{{Name: "a", TokenSHA256: h1, Read: []string{"*"}}, {Name: "b", TokenSHA256: h1, Read: []string{"*"}}}},
		"token not a hash":         {Version: 1, Callers: []meta.DataCaller{{Name: "a", TokenSHA256: "token-one-0123456789", Read: []string{"*"}}}},
		"upper-case hash":          {Version: 1, Callers: []meta.DataCaller{{Name: "a", TokenSHA256: strings.ToUpper(h1), Read: []string{"*"}}}},
		"no patterns":              {Version: 1, Callers: []meta.DataCaller{{Name: "a", TokenSHA256: h1}}},
		"bad read pattern":         {Version: 1, Callers: []meta.DataCaller{{Name: "a", TokenSHA256: h1, Read: []string{"shop"}}}},
		"bad write pattern":        {Version: 1, Callers: []meta.DataCaller{{Name: "a", TokenSHA256: h1, Write: []string{"*.items"}}}},
		"version 2":                {Version: 2},
	} {
		if _, err := meta.Marshal(d); !errors.Is(err, meta.ErrInvalid) {
			t.Errorf("%s: %v; want ErrInvalid", name, err)
		}
	}
	if got, err := meta.Unmarshal[meta.DataAccess]([]byte(want)); err != nil || len(got.Callers) != 2 || got.Callers[0].Write[0] != "shop.items" {
		t.Fatalf("decode: %+v, %v", got, err)
	}
	for name, doc := range map[string]string{
		"unknown field":    `{"version":1,"enforce":false,"admin":true}`,
		"caller field":     `{"version":1,"enforce":true,"callers":[{"name":"a","token_sha256":"` + h1 + `","read":["*"],"token":"x"}]}`,
		"enforce a string": `{"version":1,"enforce":"yes"}`,
		"enforced, none":   `{"version":1,"enforce":true,"callers":[]}`,
		"duplicate key":    `{"version":1,"enforce":false,"enforce":true}`,
	} {
		if _, err := meta.Unmarshal[meta.DataAccess]([]byte(doc)); !errors.Is(err, meta.ErrCorrupt) {
			t.Errorf("%s: %v; want ErrCorrupt", name, err)
		}
	}

	e := newEnv(t)
	ctx := t.Context()
	if _, err := e.s.GetDataAccess(ctx); !errors.Is(err, meta.ErrNotFound) {
		t.Fatalf("before any publication: %v, want ErrNotFound", err)
	}
	for i, tc := range []struct {
		d     meta.DataAccess
		wrote bool
	}{{good, true}, {good, false}, {meta.DataAccess{}, true}, {meta.DataAccess{Version: 1}, false}, {good, true}} {
		wrote, err := e.s.PutDataAccess(ctx, e.g, tc.d)
		if err != nil || wrote != tc.wrote {
			t.Fatalf("put %d: wrote %v, %v; want %v", i, wrote, err, tc.wrote)
		}
	}
	got, err := e.s.GetDataAccess(ctx)
	if err != nil || !got.Value.Enforce || len(got.Value.Callers) != 2 {
		t.Fatalf("read back: %+v, %v", got, err)
	}
	if _, err := e.s.PutDataAccess(ctx, e.g, meta.DataAccess{Enforce: true}); !errors.Is(err, meta.ErrInvalid) {
		t.Fatalf("an invalid policy: %v, want ErrInvalid", err)
	}
	if err := e.lead.Resign(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := e.s.PutDataAccess(ctx, e.g, meta.DataAccess{}); !errors.Is(err, fencing.ErrNotLeader) {
		t.Fatalf("a deposed coordinator: %v, want fencing.ErrNotLeader", err)
	}
	if after, err := e.s.GetDataAccess(ctx); err != nil || after.Rev != got.Rev {
		t.Fatalf("after the refused writes: %+v, %v; want revision %d", after, err, got.Rev)
	}
}
