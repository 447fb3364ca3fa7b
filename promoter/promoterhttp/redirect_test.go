package promoterhttp

import (
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

// TestClientFollowsNoRedirect: a request answered with a redirect (an
// ingress moving http to https, a wrong address) is an error, whatever
// the status: the default client followed it, so a POST became a GET of
// the list, whose answer read as a Promote without items.
func TestClientFollowsNoRedirect(t *testing.T) {
	for _, code := range []int{http.StatusMovedPermanently, http.StatusFound, http.StatusSeeOther, http.StatusTemporaryRedirect, http.StatusPermanentRedirect} {
		followed := 0
		srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if r.URL.Query().Get("moved") == "" {
				http.Redirect(w, r, r.URL.Path+"?moved=1", code)
				return
			}
			followed++
			writeJSON(w, http.StatusOK, PromotionsResponse{Promotions: []Promotion{}})
		}))
		c, err := NewClient(srv.URL, nil)
		if err != nil {
			t.Fatal(err)
		}
		items, err := c.Promote(t.Context(), promoterRequest("", "db.t", ""))
		var e *Error
		if !errors.As(err, &e) || e.Status != code || !strings.Contains(err.Error(), "redirect to ") {
			t.Errorf("%d: Promote through a redirect: items %v, err %v", code, items, err)
		}
		if errors.Is(err, ErrNoAnswer) || IsAway(err) {
			t.Errorf("%d: a redirect counts as no answer: %v", code, err)
		}
		if _, err := c.Cancel(t.Context(), "p-0123456789abcdef"); err == nil {
			t.Errorf("%d: Cancel through a redirect succeeded", code)
		}
		if followed != 0 {
			t.Errorf("%d: the redirect was followed %d times", code, followed)
		}
		srv.Close()
	}
}

// TestClientRefusedRedirectIsAnAnswer: a caller's client whose
// CheckRedirect refuses a redirect got an answer, not "no promoter
// answered" (which thaw promote --wait rides through until its timeout).
func TestClientRefusedRedirectIsAnAnswer(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		http.Redirect(w, r, "http://elsewhere.invalid"+r.URL.Path, http.StatusFound)
	}))
	defer srv.Close()
	refused := errors.New("redirect refused")
	c, err := NewClient(srv.URL, &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return refused }})
	if err != nil {
		t.Fatal(err)
	}
	_, err = c.Promotion(t.Context(), "p-0123456789abcdef")
	if !errors.Is(err, refused) || IsAway(err) {
		t.Fatalf("a refused redirect: %v (away %v)", err, IsAway(err))
	}
}

// TestClientAtAnotherServer: an address where another server answers (the
// tier's port, a proxy) says so instead of "404 page not found (internal)".
func TestClientAtAnotherServer(t *testing.T) {
	srv := httptest.NewServer(http.NotFoundHandler())
	defer srv.Close()
	c, err := NewClient(srv.URL, nil)
	if err != nil {
		t.Fatal(err)
	}
	_, err = c.Policies(t.Context())
	var e *Error
	if !errors.As(err, &e) || e.Status != http.StatusNotFound || !strings.Contains(err.Error(), "without a promoter API error") || !strings.Contains(err.Error(), "is it a thaw promoter's address?") {
		t.Fatalf("policies from another server: %v", err)
	}
}
