// Package promoterhttp is the promoter's HTTP API and its Go client.
//
// # Endpoints
//
//	POST /v1/promotions          body: promoter.Request (JSON) -> 202 {"items": [Item]}
//	GET  /v1/promotions          ?policy=NAME (optional) -> 200 {"promotions": [Promotion], "unreadable": [UnreadableRecord]}
//	GET  /v1/promotions/{id}     -> 200 Promotion (the ledger record, plus live progress while it runs,
//	                                and "skipped" when a later request of it was skipped at its turn)
//	GET  /v1/policies            -> 200 {"policies": [PolicyInfo]} (name, source, target, canonical YAML)
//	GET  /v1/plan                ?policy=NAME (optional: every policy) -> 200 {"plans": [Plan]}
//
// POST /v1/promotions enqueues what the request selects and answers at
// once; the items say which targets will be promoted ("promote") and which
// not, and why ("skip"). Follow them with GET /v1/promotions/{id}; a
// requested promotion that the promoter skips when its turn comes (the
// target written meanwhile, say) writes no record: GET of its id then
// answers 409 conflict with the reason, not 404. GET /v1/plan is the dry
// run of `thaw plan`: it changes nothing.
//
// GET /v1/promotions answers the ledger records the promoter can read and,
// under "unreadable" (omitted when there is none), each record it cannot
// read — of a newer format version, or corrupt — as {"key": etcd key,
// "error": why}, whatever ?policy= says. GET /v1/promotions/{id} of such a
// record is an error (500 unreadable). Client.Promotions returns the
// readable promotions with an error listing the unreadable records
// (errors.Is promoter.ErrUnreadable; UnreadableOf lists them).
//
// # Requests
//
// Request bodies are decoded strictly: one JSON object of at most 64 KiB,
// no unknown fields, no trailing data, Content-Type application/json (a
// body without it is refused). Unknown query parameters are rejected too.
//
// The Client follows no redirect (NoRedirects): one is an *Error naming
// where it points.
//
// # Errors
//
// Every error answer is JSON {"error": message, "code": code}:
//
//	400 invalid       the request is malformed
//	401 unauthenticated  no caller's bearer token (an API guarded by the daemon's api_callers_file)
//	403 permission_denied  the caller's role does not allow the request
//	403 not_allowed   the policy does not allow on-request promotion
//	404 not_found     no such promotion, policy or route
//	405 invalid       wrong method (the Allow header lists the right ones)
//	409 conflict      the target is not empty, its schema does not match, the record changed, or
//	                  (GET /v1/promotions/{id}) the requested promotion was skipped when its turn came
//	503 unavailable   the promoter is not leading or is shutting down, or a request or cancel timed out waiting for it to resume its ledger
//	500 unreadable    a ledger record the answer needs cannot be read (the message names its key and why):
//	                  GET /v1/promotions/{id} of it, or a plan or promotion request, which reads the whole ledger
//	500 internal      anything else
//
// Client returns *Error for them; errors.Is(err, promoter.ErrNotFound)
// (and ErrNotAllowed, ErrConflict, ErrUnreadable) holds for the matching
// codes.
//
// # Credentials
//
// No response carries a credential: records, plans and policies hold none
// (package promoter keeps them out), and internal errors are logged, not
// echoed with their causes' details beyond the error text.
package promoterhttp
