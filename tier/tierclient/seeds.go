package tierclient

import (
	tierv1 "github.com/thawdb/thaw/gen/thaw/tier/v1"
	"github.com/thawdb/thaw/gen/thaw/tier/v1/tierv1connect"
	"github.com/thawdb/thaw/internal/coordlist"
)

// The configured coordinators and the one coordinator requests go to
// (internal/coordlist). One pass of a request is coordlist.Route, as in
// bulkloadclient, so that both clients of a tier given the same address
// (the promoter's tier.address) behave alike; this client also retries
// whole passes under its RetryPolicy (coordCallAt).

// MaxLeaderRedirects bounds how many NOT_LEADER answers naming another
// coordinator one attempt of a coordinator request follows without
// waiting. Two coordinators that keep naming each other (each with a stale
// view of the election) end the attempt with a retriable error saying so;
// the RetryPolicy then decides whether to try again.
const MaxLeaderRedirects = coordlist.MaxRedirects

// coordinator is one coordinator's CoordinatorService.
type coordinator = coordlist.Coordinator[tierv1connect.CoordinatorServiceClient]

// callKind says where a coordinator request may be sent again within one
// attempt.
type callKind bool

const (
	// change: CreateDatabase, CreateTable, DropTable, CreatePartition and
	// any request not known to be a read. Sent to another coordinator
	// within the attempt only where it certainly did nothing: a NOT_LEADER
	// answer, or no connection made.
	change callKind = false
	// read: GetLeader, GetTable, ListPartitions, GetTargetLocations, ...
	// Also sent to the next configured coordinator after an unavailable
	// answer.
	read callKind = true
)

// kindOf returns the kind of a coordinator request message.
func kindOf(msg any) callKind {
	switch msg.(type) {
	case *tierv1.GetLeaderRequest, *tierv1.GetTableRequest, *tierv1.ListPartitionsRequest,
		*tierv1.GetTargetLocationsRequest, *tierv1.ListDatabasesRequest, *tierv1.ListTablesRequest,
		*tierv1.ListServersRequest:
		return read
	}
	return change
}
