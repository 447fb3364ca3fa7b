package promoterhttp

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"mime"
	"net/http"
	"net/url"
	"slices"
	"strings"

	"github.com/thawdb/thaw/kv"
	"github.com/thawdb/thaw/promoter"
)

// Error codes of ErrorResponse.Code.
const (
	CodeInvalid     = "invalid"
	CodeNotFound    = "not_found"
	CodeNotAllowed  = "not_allowed"
	CodeConflict    = "conflict"
	CodeUnavailable = "unavailable"
	CodeUnreadable  = "unreadable"
	CodeInternal    = "internal"
	// Answers of an API guarded by callers' tokens (the daemon's
	// api_callers_file): no or an unknown token (401), a caller whose role
	// does not allow the request (403).
	CodeUnauthenticated  = "unauthenticated"
	CodePermissionDenied = "permission_denied"
)

// MaxRequestBytes bounds a request body.
const MaxRequestBytes = 64 << 10

// Paths of the API.
const (
	PathPromotions = "/v1/promotions"
	PathPolicies   = "/v1/policies"
	PathPlan       = "/v1/plan"
)

type handler struct {
	p   *promoter.Promoter
	log *slog.Logger
	mux *http.ServeMux
}

// NewHandler returns the HTTP API of p (see the package documentation).
// logger receives internal errors (nil: discard); it never receives
// request bodies.
func NewHandler(p *promoter.Promoter, logger *slog.Logger) http.Handler {
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	h := &handler{p: p, log: logger, mux: http.NewServeMux()}
	h.route(PathPromotions, map[string]http.HandlerFunc{http.MethodPost: h.promote, http.MethodGet: h.promotions})
	h.route(PathPromotions+"/{id}", map[string]http.HandlerFunc{http.MethodGet: h.promotion, http.MethodDelete: h.cancel})
	h.route(PathPolicies, map[string]http.HandlerFunc{http.MethodGet: h.policies})
	h.route(PathPlan, map[string]http.HandlerFunc{http.MethodGet: h.plan})
	h.mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		WriteError(w, http.StatusNotFound, CodeNotFound, fmt.Sprintf("no route %s", r.URL.Path))
	})
	return h.mux
}

// route registers a path whose methods answer JSON 405 when wrong.
func (h *handler) route(pattern string, methods map[string]http.HandlerFunc) {
	allowed := make([]string, 0, len(methods))
	for m := range methods {
		allowed = append(allowed, m)
	}
	slices.Sort(allowed)
	h.mux.HandleFunc(pattern, func(w http.ResponseWriter, r *http.Request) {
		f, ok := methods[r.Method]
		if !ok && r.Method == http.MethodHead {
			f, ok = methods[http.MethodGet]
		}
		if !ok {
			w.Header().Set("Allow", strings.Join(allowed, ", "))
			WriteError(w, http.StatusMethodNotAllowed, CodeInvalid, fmt.Sprintf("%s %s: method not allowed (allowed: %s)", r.Method, r.URL.Path, strings.Join(allowed, ", ")))
			return
		}
		f(w, r)
	})
}

// WriteError writes an error answer: JSON {"error": msg, "code": code}.
func WriteError(w http.ResponseWriter, status int, code, msg string) {
	writeJSON(w, status, ErrorResponse{Error: msg, Code: code})
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetIndent("", "  ")
	if err := enc.Encode(v); err != nil {
		http.Error(w, `{"error":"encode response","code":"internal"}`, http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("X-Content-Type-Options", "nosniff")
	w.WriteHeader(status)
	_, _ = w.Write(buf.Bytes())
}

// fail answers err with the status and code its kind maps to.
func (h *handler) fail(w http.ResponseWriter, r *http.Request, err error) {
	status, code := statusOf(err)
	if status == http.StatusInternalServerError {
		h.log.Error("promoter api request failed", "method", r.Method, "path", r.URL.Path, "err", err)
	} else {
		h.log.Debug("promoter api request refused", "method", r.Method, "path", r.URL.Path, "code", code, "err", err)
	}
	WriteError(w, status, code, err.Error())
}

// invalidError is a malformed request.
type invalidError struct{ msg string }

func (e *invalidError) Error() string { return e.msg }

func invalidf(format string, args ...any) error {
	return &invalidError{msg: fmt.Sprintf(format, args...)}
}

func statusOf(err error) (int, string) {
	var inv *invalidError
	switch {
	case errors.As(err, &inv):
		return http.StatusBadRequest, CodeInvalid
	case errors.Is(err, promoter.ErrNotFound), errors.Is(err, promoter.ErrUnknownPolicy):
		return http.StatusNotFound, CodeNotFound
	case errors.Is(err, promoter.ErrNotAllowed):
		return http.StatusForbidden, CodeNotAllowed
	case errors.Is(err, promoter.ErrTargetNotEmpty), errors.Is(err, promoter.ErrSchema), errors.Is(err, promoter.ErrSkipped),
		errors.Is(err, promoter.ErrExists), errors.Is(err, promoter.ErrConflict), errors.Is(err, promoter.ErrNotQueued):
		return http.StatusConflict, CodeConflict
	case errors.Is(err, promoter.ErrClosed), errors.Is(err, promoter.ErrResuming), errors.Is(err, context.Canceled), errors.Is(err, context.DeadlineExceeded):
		return http.StatusServiceUnavailable, CodeUnavailable
	case errors.Is(err, promoter.ErrUnreadable):
		// The promoter's own state, not the request, is at fault: a 5xx,
		// with a code of its own.
		return http.StatusInternalServerError, CodeUnreadable
	}
	return http.StatusInternalServerError, CodeInternal
}

// query returns the request's query parameters, refusing unknown or
// repeated ones.
func query(r *http.Request, known ...string) (url.Values, error) {
	q, err := url.ParseQuery(r.URL.RawQuery)
	if err != nil {
		return nil, invalidf("query: %v", err)
	}
	for k, vs := range q {
		if !slices.Contains(known, k) {
			if len(known) == 0 {
				return nil, invalidf("unknown query parameter %q (this endpoint takes none)", k)
			}
			return nil, invalidf("unknown query parameter %q (known: %s)", k, strings.Join(known, ", "))
		}
		if len(vs) > 1 {
			return nil, invalidf("query parameter %q given %d times", k, len(vs))
		}
	}
	return q, nil
}

// decodeRequest reads one strict JSON object into v.
func decodeRequest(w http.ResponseWriter, r *http.Request, v any) error {
	// A body must say it is JSON: a request without Content-Type is one
	// a web page can send cross-origin without a CORS preflight (a fetch
	// of an untyped Blob), so accepting it would let any page the
	// operator opens trigger promotions on an API without callers.
	ct := r.Header.Get("Content-Type")
	if ct == "" {
		return invalidf("no content type: want Content-Type: application/json")
	}
	if mt, _, err := mime.ParseMediaType(ct); err != nil || mt != "application/json" {
		return invalidf("content type %q: want application/json", ct)
	}
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, MaxRequestBytes))
	if err != nil {
		var tooBig *http.MaxBytesError
		if errors.As(err, &tooBig) {
			return invalidf("request body is larger than %d bytes", MaxRequestBytes)
		}
		return invalidf("read request body: %v", err)
	}
	return decodeBody(body, v)
}

// ValidateRequest checks an on-demand request's form (the promoter checks
// what it names).
func ValidateRequest(req promoter.Request) error {
	if req.Policy == "" && req.Table == "" {
		return invalidf("request names neither a policy nor a table")
	}
	if req.Table != "" {
		parts := strings.Split(req.Table, ".")
		if len(parts) < 2 || slices.Contains(parts, "") {
			return invalidf("table %q: want DATABASE.TABLE (or the lake table NAMESPACE.TABLE)", req.Table)
		}
	}
	if req.Partition != "" {
		if err := kv.ValidatePartitionName(req.Partition); err != nil {
			return invalidf("partition %q: %v", req.Partition, err)
		}
	}
	return nil
}

func (h *handler) promote(w http.ResponseWriter, r *http.Request) {
	if _, err := query(r); err != nil {
		h.fail(w, r, err)
		return
	}
	var req promoter.Request
	if err := decodeRequest(w, r, &req); err != nil {
		h.fail(w, r, err)
		return
	}
	if err := ValidateRequest(req); err != nil {
		h.fail(w, r, err)
		return
	}
	items, err := h.p.Request(r.Context(), req)
	if err != nil {
		h.fail(w, r, err)
		return
	}
	writeJSON(w, http.StatusAccepted, PromoteResponse{Items: itemsOf(items)})
}

// promotionID is the {id} of a request's path, checked; the request takes
// no query.
func promotionID(r *http.Request) (string, error) {
	if _, err := query(r); err != nil {
		return "", err
	}
	id := r.PathValue("id")
	if !promoter.IsPromotionID(id) {
		return "", invalidf("promotion id %q: an id is p- and 16 lowercase hex digits, as thaw status lists them", id)
	}
	return id, nil
}

// cancel withdraws a requested promotion that waits in the queue.
func (h *handler) cancel(w http.ResponseWriter, r *http.Request) {
	id, err := promotionID(r)
	if err != nil {
		h.fail(w, r, err)
		return
	}
	q, err := h.p.Cancel(r.Context(), id)
	if err != nil {
		h.fail(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, CancelResponse{Cancelled: queuedPromotion(q)})
}

func (h *handler) promotion(w http.ResponseWriter, r *http.Request) {
	id, err := promotionID(r)
	if err != nil {
		h.fail(w, r, err)
		return
	}
	rec, err := h.p.Promotion(r.Context(), id)
	if errors.Is(err, promoter.ErrNotFound) {
		// Requested, and skipped when its turn came: no record will come.
		if s, ok := h.p.Skipped(id); ok {
			err = fmt.Errorf("%w: %s", promoter.ErrSkipped, s.Text(id))
		} else if q, ok := h.p.Queued(id); ok {
			// Requested, and waiting for its turn: the record is written
			// when it starts.
			err = fmt.Errorf("%w: promotion %s has no record yet: it is queued as %s, %s", promoter.ErrNotFound, id, q.Key, q.Where())
		}
	}
	if err != nil {
		h.fail(w, r, err)
		return
	}
	// Only this id's place in the queue, not the whole queue's.
	queued := map[string]QueuedPromotion{}
	if q, ok := h.p.Queued(id); ok {
		queued[id] = queuedPromotion(q)
	}
	writeJSON(w, http.StatusOK, h.withProgress(rec, queued))
}

// withProgress is rec with its live progress, its skip note, and where it
// waits when it is queued again (queued: the queued requests by id, as
// h.queued indexes them).
func (h *handler) withProgress(rec promoter.Record, queued map[string]QueuedPromotion) Promotion {
	out := Promotion{Record: rec}
	if pr, ok := h.p.Progress(rec.ID); ok {
		out.Progress = ProgressOf(pr)
	}
	if s, ok := h.p.Skipped(rec.ID); ok {
		out.Skipped = &s
	}
	if q, ok := queued[rec.ID]; ok {
		out.Queued = &q
	}
	return out
}

// queued lists the requested promotions waiting in the queue, of policy
// ("" = all), and indexes them by id.
func (h *handler) queued(policy string) ([]QueuedPromotion, map[string]QueuedPromotion) {
	var list []QueuedPromotion
	byID := map[string]QueuedPromotion{}
	for _, q := range h.p.QueuedRequests() {
		if policy != "" && q.Policy != policy {
			continue
		}
		qp := queuedPromotion(q)
		list, byID[q.ID] = append(list, qp), qp
	}
	return list, byID
}

func queuedPromotion(q promoter.QueuedRequest) QueuedPromotion {
	return QueuedPromotion{ID: q.ID, Policy: q.Policy, Database: q.Database, Table: q.Table,
		Partition: q.Partition, Ahead: q.Ahead, Where: q.Where()}
}

func (h *handler) promotions(w http.ResponseWriter, r *http.Request) {
	q, err := query(r, "policy")
	if err != nil {
		h.fail(w, r, err)
		return
	}
	policy := q.Get("policy")
	if policy != "" && !h.hasPolicy(policy) {
		h.fail(w, r, fmt.Errorf("%w: %q", promoter.ErrUnknownPolicy, policy))
		return
	}
	// Records that cannot be read are listed beside the others (the
	// promoter logs them); any other error fails the request.
	recs, err := h.p.Promotions(r.Context())
	unreadable := UnreadableOf(err)
	if err != nil && (!errors.Is(err, promoter.ErrUnreadable) || len(unreadable) == 0) {
		h.fail(w, r, err)
		return
	}
	out := PromotionsResponse{Promotions: make([]Promotion, 0, len(recs)), Unreadable: unreadable}
	var byID map[string]QueuedPromotion
	out.Queued, byID = h.queued(policy)
	for _, rec := range recs {
		if policy == "" || rec.Policy == policy {
			out.Promotions = append(out.Promotions, h.withProgress(rec, byID))
		}
	}
	writeJSON(w, http.StatusOK, out)
}

func (h *handler) hasPolicy(name string) bool {
	for _, p := range h.p.Policies() {
		if p.Name() == name {
			return true
		}
	}
	return false
}

func (h *handler) policies(w http.ResponseWriter, r *http.Request) {
	if _, err := query(r); err != nil {
		h.fail(w, r, err)
		return
	}
	out := PoliciesResponse{Policies: []PolicyInfo{}}
	for _, p := range h.p.Policies() {
		out.Policies = append(out.Policies, PolicyInfoOf(p))
	}
	writeJSON(w, http.StatusOK, out)
}

func (h *handler) plan(w http.ResponseWriter, r *http.Request) {
	q, err := query(r, "policy")
	if err != nil {
		h.fail(w, r, err)
		return
	}
	names := []string{q.Get("policy")}
	if names[0] == "" {
		names = names[:0]
		for _, p := range h.p.Policies() {
			names = append(names, p.Name())
		}
	}
	out := PlansResponse{Plans: make([]Plan, 0, len(names))}
	for _, name := range names {
		pl, err := h.p.Plan(r.Context(), name)
		switch {
		case err == nil:
			out.Plans = append(out.Plans, PlanOf(pl))
		case q.Get("policy") != "" || r.Context().Err() != nil || errors.Is(err, promoter.ErrUnreadable):
			// One policy asked for, or no policy can be planned now.
			h.fail(w, r, err)
			return
		default:
			// One policy's lake or target failing hides no other's plan.
			h.log.Warn("promoter api: a policy could not be planned", "policy", name, "err", err)
			out.Errors = append(out.Errors, PlanError{Policy: name, Error: err.Error()})
		}
	}
	writeJSON(w, http.StatusOK, out)
}
