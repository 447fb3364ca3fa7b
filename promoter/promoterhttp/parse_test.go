package promoterhttp

import (
	"errors"
	"net/http/httptest"
	"strings"
	"testing"
)

type badBody struct {
	name, body, want string
}

func badBodies() []badBody {
	return []badBody{
		{"empty", ``, "empty request body"},
		{"blank", " \n\t", "empty request body"},
		{"null", `null`, "not a JSON object"},
		{"string", `"shop.events"`, "cannot unmarshal string"},
		{"array", `["shop.events"]`, "cannot unmarshal array"},
		{"truncated", `{"table":"shop.events"`, "unexpected EOF"},
		{"trailing object", `{"table":"shop.events"}{}`, "trailing data"},
		{"trailing brace", `{"table":"shop.events"}}`, "trailing data"},
		{"trailing bracket", `{"table":"shop.events"}]`, "trailing data"},
		{"invalid utf-8", "{\"table\":\"shop.ev\xffents\"}", "invalid utf-8"},
		{"unpaired surrogate", `{"table":"shop.ev\ud800ents"}`, `unpaired surrogate \ud800`},
		{"unknown member", `{"table":"shop.events","force":true}`, `unknown field "force"`},
		{"member in another case", `{"Table":"shop.events"}`, `unknown member "Table"`},
		{"non-ASCII member", "{\"t\u00e1ble\":\"a.b\"}", "unknown field"},
		{"duplicate member", `{"table":"other.table","table":"shop.events"}`, `duplicate member "table"`},
		{"null member", `{"table":"shop.events","partition":null}`, `member "partition" is null`},
		{"wrong type", `{"table":5}`, "cannot unmarshal number"},
		{"nothing named", `{}`, "neither a policy nor a table"},
		{"empty values", `{"policy":"","table":""}`, "neither a policy nor a table"},
		{"table without database", `{"table":"events"}`, "want DATABASE.TABLE"},
		{"empty table part", `{"table":"shop..events"}`, "want DATABASE.TABLE"},
		{"bad partition", `{"table":"shop.events","partition":"../x"}`, `partition "../x"`},
	}
}

func TestPromoteRequestRejects(t *testing.T) {
	for _, tc := range badBodies() {
		t.Run(tc.name, func(t *testing.T) {
			req, err := parsePromoteRequest([]byte(tc.body))
			if err == nil {
				t.Fatalf("accepted %q: %+v", tc.body, req)
			}
			var inv *invalidError
			if !errors.As(err, &inv) || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("error %v (%T) does not say %q", err, err, tc.want)
			}
			// The handler answers it with 400 before it asks the promoter
			// (which it has none of here).
			rec := httptest.NewRecorder()
			hreq := httptest.NewRequest("POST", "/v1/promotions", strings.NewReader(tc.body))
			hreq.Header.Set("Content-Type", "application/json")
			NewHandler(nil, nil).ServeHTTP(rec, hreq)
			if rec.Code != 400 || !strings.Contains(rec.Body.String(), CodeInvalid) {
				t.Fatalf("handler answered %d %s", rec.Code, rec.Body)
			}
		})
	}
}

// TestPromoteRequestCompatible: what Client.Promote sends (json.Marshal of
// a promoter.Request, empty members omitted) parses to the request.
func TestPromoteRequestCompatible(t *testing.T) {
	for _, body := range []string{
		`{"table":"shop.events"}`,
		`{"policy":"events","partition":"2024-01-05"}`,
		` {"policy":"p","table":"lake.ns.events","partition":"us$2024-01-05"} ` + "\n",
	} {
		req, err := parsePromoteRequest([]byte(body))
		if err != nil {
			t.Fatalf("%s: %v", body, err)
		}
		if req.Policy == "" && req.Table == "" {
			t.Fatalf("%s: parsed to %+v", body, req)
		}
	}
	req, err := parsePromoteRequest([]byte(`{"policy":"events","table":"shop.events","partition":"2024-01-05"}`))
	if err != nil || req != promoterRequest("events", "shop.events", "2024-01-05") {
		t.Fatalf("parsed %+v, %v", req, err)
	}
}
