package promoterhttp

import (
	"encoding/json"
	"errors"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

// TestRequestValidation sends malformed requests: each is refused with a
// JSON error naming the problem, before the promoter is asked anything
// (the handler has no promoter here, so reaching it would panic).
func TestRequestValidation(t *testing.T) {
	h := NewHandler(nil, nil)
	for _, tc := range []struct {
		name, method, path, ctype, body string
		status                          int
		code, msg                       string
	}{
		{"unknown field", "POST", "/v1/promotions", "application/json", `{"table":"a.b","force":true}`, 400, CodeInvalid, `unknown field "force"`},
		{"trailing data", "POST", "/v1/promotions", "application/json", `{"table":"a.b"} {}`, 400, CodeInvalid, "trailing data"},
		{"empty body", "POST", "/v1/promotions", "application/json", ``, 400, CodeInvalid, "empty request body"},
		{"not an object", "POST", "/v1/promotions", "application/json", `["a.b"]`, 400, CodeInvalid, "cannot unmarshal array"},
		{"wrong type", "POST", "/v1/promotions", "application/json", `{"table":5}`, 400, CodeInvalid, "cannot unmarshal number"},
		{"content type", "POST", "/v1/promotions", "text/plain", `{"table":"a.b"}`, 400, CodeInvalid, "want application/json"},
		{"no content type", "POST", "/v1/promotions", "", `{"table":"a.b"}`, 400, CodeInvalid, "no content type: want Content-Type: application/json"},
		{"nothing named", "POST", "/v1/promotions", "application/json", `{}`, 400, CodeInvalid, "neither a policy nor a table"},
		{"bad table", "POST", "/v1/promotions", "application/json", `{"table":"orders"}`, 400, CodeInvalid, "want DATABASE.TABLE"},
		{"empty table part", "POST", "/v1/promotions", "application/json", `{"table":"shop."}`, 400, CodeInvalid, "want DATABASE.TABLE"},
		{"bad partition", "POST", "/v1/promotions", "application/json", `{"table":"a.b","partition":"2024/01/01"}`, 400, CodeInvalid, `partition "2024/01/01"`},
		{"too large", "POST", "/v1/promotions", "application/json", `{"table":"` + strings.Repeat("x", MaxRequestBytes) + `"}`, 400, CodeInvalid, "larger than"},
		{"query on post", "POST", "/v1/promotions?dry=1", "application/json", `{"table":"a.b"}`, 400, CodeInvalid, `unknown query parameter "dry"`},
		{"unknown query", "GET", "/v1/promotions?limit=5", "", ``, 400, CodeInvalid, `unknown query parameter "limit"`},
		{"repeated query", "GET", "/v1/plan?policy=a&policy=b", "", ``, 400, CodeInvalid, "given 2 times"},
		{"policies takes no query", "GET", "/v1/policies?x=1", "", ``, 400, CodeInvalid, "takes none"},
		{"method", "DELETE", "/v1/promotions", "", ``, 405, CodeInvalid, "method not allowed"},
		{"method on id", "POST", "/v1/promotions/p-1", "", `{}`, 405, CodeInvalid, "method not allowed"},
		{"no route", "GET", "/v1/nothing", "", ``, 404, CodeNotFound, "no route"},
		{"not an id", "GET", "/v1/promotions/p-zzz", "", ``, 400, CodeInvalid, `promotion id "p-zzz": an id is p- and 16 lowercase hex digits`},
		{"id in capitals", "GET", "/v1/promotions/p-0123456789ABCDEF", "", ``, 400, CodeInvalid, "16 lowercase hex digits"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			req := httptest.NewRequest(tc.method, tc.path, strings.NewReader(tc.body))
			if tc.ctype != "" {
				req.Header.Set("Content-Type", tc.ctype)
			}
			rec := httptest.NewRecorder()
			h.ServeHTTP(rec, req)
			if rec.Code != tc.status {
				t.Fatalf("status %d, want %d: %s", rec.Code, tc.status, rec.Body)
			}
			if ct := rec.Header().Get("Content-Type"); ct != "application/json" {
				t.Fatalf("content type %q", ct)
			}
			var er ErrorResponse
			dec := json.NewDecoder(rec.Body)
			dec.DisallowUnknownFields()
			if err := dec.Decode(&er); err != nil {
				t.Fatalf("error body: %v", err)
			}
			if er.Code != tc.code || !strings.Contains(er.Error, tc.msg) {
				t.Fatalf("got %+v, want code %s and %q", er, tc.code, tc.msg)
			}
			if tc.status == http.StatusMethodNotAllowed && rec.Header().Get("Allow") == "" {
				t.Fatal("405 without Allow")
			}
		})
	}
}

// TestClientErrors checks that the client turns error answers into *Error
// matching the promoter's sentinels, and refuses bad addresses.
func TestClientErrors(t *testing.T) {
	srv := httptest.NewServer(NewHandler(nil, nil))
	defer srv.Close()
	c, err := NewClient(srv.URL, nil)
	if err != nil {
		t.Fatal(err)
	}
	_, err = c.Promote(t.Context(), promoterRequest("", "nodot", ""))
	var e *Error
	if !asError(err, &e) || e.Status != 400 || e.Code != CodeInvalid {
		t.Fatalf("promote: %v", err)
	}
	for _, bad := range []string{"ftp://x", "http://", "::"} {
		if _, err := NewClient(bad, nil); err == nil {
			t.Errorf("NewClient(%q) accepted", bad)
		}
	}
	// User information is refused, and no error prints its password (the
	// client's errors quoted the address as given).
	for _, bad := range []string{"http://admin:S3CRET@127.0.0.1:7080", "ftp://admin:S3CRET@host:1", "admin:S3CRET@127.0.0.1:7080", "http://admin@127.0.0.1:7080"} {
		if _, err := NewClient(bad, nil); err == nil || strings.Contains(err.Error(), "S3CRET") {
			t.Errorf("NewClient(%q): %v", bad, err)
		}
	}
	if _, err := NewClient("127.0.0.1:7080", nil); err != nil {
		t.Fatal(err)
	}

	// Nothing listening: the error says no promoter answered, and where.
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	_ = ln.Close()
	gone, err := NewClient(addr, nil)
	if err != nil {
		t.Fatal(err)
	}
	_, err = gone.Promotions(t.Context(), "")
	if want := "promoter api: no promoter answered at http://" + addr + " (is thaw promoter running and listening there?): GET /v1/promotions: "; err == nil || !strings.HasPrefix(err.Error(), want) {
		t.Fatalf("no promoter: %v\nwant the prefix %q", err, want)
	}
	if !errors.Is(err, ErrNoAnswer) || !IsAway(err) {
		t.Fatalf("no promoter: %v is not ErrNoAnswer", err)
	}
	if IsAway(e) {
		t.Fatalf("an invalid request's answer %v counts as no promoter", e)
	}

	// A connection that breaks before the answer (the promoter stopped).
	broken := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		conn, _, err := w.(http.Hijacker).Hijack()
		if err == nil {
			_ = conn.Close()
		}
	}))
	defer broken.Close()
	bc, err := NewClient(broken.URL, nil)
	if err != nil {
		t.Fatal(err)
	}
	_, err = bc.Promotions(t.Context(), "")
	if !IsAway(err) || !strings.HasPrefix(err.Error(), "promoter api: GET /v1/promotions: ") {
		t.Fatalf("a broken connection: %v, want no answer", err)
	}
	// A standby's answer.
	standby := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		WriteError(w, http.StatusServiceUnavailable, CodeUnavailable, "this promoter is not leading")
	}))
	defer standby.Close()
	sc, err := NewClient(standby.URL, nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := sc.Promotions(t.Context(), ""); !IsAway(err) || errors.Is(err, ErrNoAnswer) {
		t.Fatalf("a standby's answer: %v", err)
	}
}
