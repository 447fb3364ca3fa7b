package promoterhttp

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/thawdb/thaw/internal/redact"
	"github.com/thawdb/thaw/promoter"
)

// Error is an error answer of the API.
type Error struct {
	Status  int    // HTTP status
	Code    string // CodeInvalid, CodeNotFound, ...
	Message string
}

func (e *Error) Error() string {
	return fmt.Sprintf("promoter api: %s (%s, HTTP %d)", e.Message, e.Code, e.Status)
}

// Is lets errors.Is match the promoter's sentinels by code: not_found
// matches promoter.ErrNotFound, not_allowed promoter.ErrNotAllowed,
// conflict promoter.ErrConflict and unreadable promoter.ErrUnreadable.
func (e *Error) Is(target error) bool {
	switch e.Code {
	case CodeUnreadable:
		return target == promoter.ErrUnreadable
	case CodeNotFound:
		return target == promoter.ErrNotFound
	case CodeNotAllowed:
		return target == promoter.ErrNotAllowed
	case CodeConflict:
		return target == promoter.ErrConflict
	}
	return false
}

// DefaultAddress is where the CLI finds the promoter by default: the
// promoter daemon's default listener.
const DefaultAddress = "127.0.0.1:7080"

// Client calls a promoter's HTTP API. It is safe for concurrent use.
type Client struct {
	base string
	hc   *http.Client
}

// NewClient returns a client of the promoter at address ("host:port" or
// an http(s) URL). hc nil uses a client with a 1 minute timeout per call
// that follows no redirect (NoRedirects).
func NewClient(address string, hc *http.Client) (*Client, error) {
	base := address
	if !strings.Contains(base, "://") {
		base = "http://" + base
	}
	u, err := url.Parse(base)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" || u.Hostname() == "" {
		return nil, fmt.Errorf("promoter api: address %q: want HOST:PORT or an http(s) URL", redact.URL(address))
	}
	if u.User != nil {
		// The client's errors name the address: a password in it would be
		// printed, and the API takes a bearer token, not user information.
		return nil, fmt.Errorf("promoter api: address %q: user information is not supported (give a token in THAW_PROMOTER_TOKEN)", redact.URL(address))
	}
	base = strings.TrimRight(base, "/")
	if hc == nil {
		hc = &http.Client{Timeout: time.Minute, CheckRedirect: NoRedirects}
	}
	return &Client{base: base, hc: hc}, nil
}

// NoRedirects is an http.Client CheckRedirect that follows no redirect, so
// that the client reports it as an error (*Error). The promoter's API never
// answers with one; following one that something in between sent would
// turn a POST or DELETE into a GET whose answer reads as success, and send
// the request's credentials to the host it names.
func NoRedirects(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }

// Promote asks for an on-demand promotion (POST /v1/promotions).
func (c *Client) Promote(ctx context.Context, req promoter.Request) ([]Item, error) {
	var out PromoteResponse
	if err := c.do(ctx, http.MethodPost, PathPromotions, nil, req, &out); err != nil {
		return nil, err
	}
	return out.Items, nil
}

// Promotions lists the ledger, newest first; policy "" lists every policy's.
// Like promoter.Promoter.Promotions, when the promoter reports records it
// cannot read (the answer's "unreadable"), Promotions returns the readable
// ones together with an error that joins one *promoter.UnreadableRecordError
// per such record, its Err the reason the promoter gave: errors.Is(err,
// promoter.ErrUnreadable) holds, and UnreadableOf (or
// promoter.UnreadableRecords) lists them. Any other error returns no
// promotions.
func (c *Client) Promotions(ctx context.Context, policy string) ([]Promotion, error) {
	out, err := c.Status(ctx, policy)
	return out.Promotions, err
}

// Status returns the whole answer of GET /v1/promotions: the records, the
// requested promotions waiting in the queue, and the records the promoter
// cannot read (also reported as the error, like Promotions).
func (c *Client) Status(ctx context.Context, policy string) (PromotionsResponse, error) {
	var q url.Values
	if policy != "" {
		q = url.Values{"policy": {policy}}
	}
	var out PromotionsResponse
	if err := c.do(ctx, http.MethodGet, PathPromotions, q, nil, &out); err != nil {
		return PromotionsResponse{}, err
	}
	return out, unreadableError(out.Unreadable)
}

// Cancel withdraws a requested promotion that waits in the queue (DELETE
// /v1/promotions/{id}); one that runs, has run or was never requested is
// a conflict.
func (c *Client) Cancel(ctx context.Context, id string) (QueuedPromotion, error) {
	var out CancelResponse
	if err := c.do(ctx, http.MethodDelete, PathPromotions+"/"+url.PathEscape(id), nil, nil, &out); err != nil {
		return QueuedPromotion{}, err
	}
	return out.Cancelled, nil
}

// Promotion returns one promotion with its live progress. A record the
// promoter cannot read is an *Error with code unreadable (errors.Is
// promoter.ErrUnreadable) whose message names its key and why.
func (c *Client) Promotion(ctx context.Context, id string) (Promotion, error) {
	var out Promotion
	err := c.do(ctx, http.MethodGet, PathPromotions+"/"+url.PathEscape(id), nil, nil, &out)
	return out, err
}

// Policies lists the loaded policies.
func (c *Client) Policies(ctx context.Context) ([]PolicyInfo, error) {
	var out PoliciesResponse
	if err := c.do(ctx, http.MethodGet, PathPolicies, nil, nil, &out); err != nil {
		return nil, err
	}
	return out.Policies, nil
}

// Plan returns the dry-run plan of policy ("" for every policy). Of every
// policy, those that could not be planned come back as a PlanErrors error
// with the others' plans.
func (c *Client) Plan(ctx context.Context, policy string) ([]Plan, error) {
	var q url.Values
	if policy != "" {
		q = url.Values{"policy": {policy}}
	}
	var out PlansResponse
	if err := c.do(ctx, http.MethodGet, PathPlan, q, nil, &out); err != nil {
		return nil, err
	}
	if len(out.Errors) > 0 {
		return out.Plans, out.Errors
	}
	return out.Plans, nil
}

func (c *Client) do(ctx context.Context, method, path string, q url.Values, in, out any) error {
	u := c.base + path
	if len(q) > 0 {
		u += "?" + q.Encode()
	}
	var body io.Reader
	if in != nil {
		b, err := json.Marshal(in)
		if err != nil {
			return fmt.Errorf("promoter api: encode request: %w", err)
		}
		body = bytes.NewReader(b)
	}
	req, err := http.NewRequestWithContext(ctx, method, u, body)
	if err != nil {
		return fmt.Errorf("promoter api: %w", err)
	}
	if in != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	req.Header.Set("Accept", "application/json")
	resp, err := c.hc.Do(req)
	var oe *net.OpError
	if errors.As(err, &oe) && oe.Op == "dial" {
		return fmt.Errorf("promoter api: %w at %s (is thaw promoter running and listening there?): %s %s: %w", ErrNoAnswer, c.base, method, path, err)
	}
	if err != nil && resp != nil {
		// hc's own CheckRedirect refused a redirect: a server answered.
		resp.Body.Close()
		return fmt.Errorf("promoter api: %s %s: %w", method, path, err)
	}
	if err != nil {
		err = fmt.Errorf("promoter api: %s %s: %w", method, path, err)
		if ctx.Err() == nil {
			// The connection broke before an answer (the promoter stopped).
			err = &noAnswerError{err}
		}
		return err
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(io.LimitReader(resp.Body, 64<<20))
	if err != nil {
		return fmt.Errorf("promoter api: %s %s: read answer: %w", method, path, err)
	}
	if resp.StatusCode >= 300 && resp.StatusCode < 400 {
		return &Error{Status: resp.StatusCode, Code: CodeInternal, Message: fmt.Sprintf(
			"%s %s was answered with a redirect to %s: not followed (the promoter API never redirects: is the address right?)",
			method, path, redactedLocation(resp))}
	}
	if resp.StatusCode >= 300 {
		var er ErrorResponse
		if json.Unmarshal(data, &er) != nil || er.Code == "" {
			// Not the promoter's error: another server (a tier, a proxy)
			// answers at this address.
			body := strings.TrimSpace(string(data))
			if len(body) > 200 {
				body = body[:200] + "..."
			}
			er = ErrorResponse{Code: CodeInternal, Error: fmt.Sprintf(
				"%s %s: %s answered %s without a promoter API error (%q): is it a thaw promoter's address?",
				method, path, c.base, resp.Status, body)}
		}
		return &Error{Status: resp.StatusCode, Code: er.Code, Message: er.Error}
	}
	if err := json.Unmarshal(data, out); err != nil {
		return fmt.Errorf("promoter api: %s %s: decode answer: %w", method, path, err)
	}
	return nil
}

// redactedLocation is a redirect's target, without a password.
func redactedLocation(resp *http.Response) string {
	u, err := resp.Location()
	if err != nil {
		return "nowhere"
	}
	return u.Redacted()
}

var _ error = (*Error)(nil)

// IsUnavailable reports whether err says the promoter does not serve yet
// (not leading, not resumed, shutting down).
func IsUnavailable(err error) bool {
	var e *Error
	return errors.As(err, &e) && e.Code == CodeUnavailable
}

// ErrNoAnswer: no promoter answered the call: nothing listens at the
// client's address, or the connection broke before the answer.
var ErrNoAnswer = errors.New("no promoter answered")

// noAnswerError is a call whose connection broke before the answer; it
// matches ErrNoAnswer and keeps the transport's message.
type noAnswerError struct{ err error }

func (e *noAnswerError) Error() string   { return e.err.Error() }
func (e *noAnswerError) Unwrap() []error { return []error{ErrNoAnswer, e.err} }

// IsAway reports whether err says that no promoter serves at the address
// now, for a while perhaps (restarting, failing over): nobody answered
// (ErrNoAnswer) or the promoter does not serve yet (IsUnavailable). A
// caller that waits for promotions keeps waiting through it.
func IsAway(err error) bool {
	return errors.Is(err, ErrNoAnswer) || IsUnavailable(err)
}
