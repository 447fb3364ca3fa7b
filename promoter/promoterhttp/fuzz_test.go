package promoterhttp

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"

	"github.com/thawdb/thaw/promoter"
)

// parsePromoteRequest is what the handler does with the body of POST
// /v1/promotions before it asks the promoter anything.
func parsePromoteRequest(body []byte) (promoter.Request, error) {
	var req promoter.Request
	if err := decodeBody(body, &req); err != nil {
		return promoter.Request{}, err
	}
	if err := ValidateRequest(req); err != nil {
		return promoter.Request{}, err
	}
	return req, nil
}

// FuzzPromoteRequest: parsing a body never panics; a refused body is a
// 400 (an *invalidError) that says what is wrong; an accepted request is
// valid, and its JSON (what Client.Promote sends) parses to the same
// request.
func FuzzPromoteRequest(f *testing.F) {
	for _, req := range []promoter.Request{
		{Table: "shop.events"},
		{Policy: "events"},
		{Policy: "events", Partition: "2024-01-05"},
		{Policy: "p", Table: "lake.ns.events", Partition: "us$2024-01-05"},
	} {
		b, err := json.Marshal(req)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
	}
	for _, tc := range badBodies() {
		f.Add([]byte(tc.body))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		req, err := parsePromoteRequest(body)
		if err != nil {
			var inv *invalidError
			if !errors.As(err, &inv) || strings.TrimSpace(err.Error()) == "" {
				t.Fatalf("error %v (%T) is not a 400 that names the problem", err, err)
			}
			return
		}
		if err := ValidateRequest(req); err != nil {
			t.Fatalf("accepted %q is not valid: %v", body, err)
		}
		enc, err := json.Marshal(req)
		if err != nil {
			t.Fatal(err)
		}
		req2, err := parsePromoteRequest(enc)
		if err != nil {
			t.Fatalf("parse of %q (the JSON of %q): %v", enc, body, err)
		}
		if req2 != req {
			t.Fatalf("round trip of %q changed %+v into %+v", body, req, req2)
		}
	})
}
