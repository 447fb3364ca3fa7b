// Package tierpb holds the hand-written helpers that sit next to the tier's
// generated protobuf code (github.com/thawdb/thaw/gen/thaw/tier/v1, whose
// source is proto/thaw/tier/v1): the stable error vocabulary of the tier's
// RPCs.
//
// # Errors
//
// Every error a tier service returns is a *connect.Error built by NewError (or
// one of its shorthands). It carries:
//
//   - a Reason, a stable UPPER_SNAKE_CASE string that clients branch on;
//   - the connect code the Reason maps to (Reason.Code), so generic gRPC and
//     HTTP clients still see a sensible status;
//   - a tierv1.ErrorDetail detail with the reason, the message and metadata
//     (facts a client may act on, under the Key constants), which crosses the
//     wire in the Connect, gRPC and gRPC-Web protocols alike; plain HTTP/JSON
//     callers find it in the error body's details, decoded under "debug";
//   - the reason again in the HeaderReason response header (a trailer in
//     gRPC), for callers that read no details.
//
// ReasonOf recovers the reason on either side of the wire; Is* classify the
// reasons clients most often branch on, and IsNotLeader returns the leader
// hint. Reasons are never renamed or reused: a new situation gets a new
// reason, and a client treats an unknown reason by its code.
//
// docs/api.md lists the reasons with their codes and metadata.
//
// # Concurrency
//
// Everything here is safe for concurrent use; a returned *connect.Error is
// owned by the caller.
package tierpb
