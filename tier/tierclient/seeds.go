package tierclient

import (
	"errors"
	"fmt"
	"net"
	"slices"
	"strings"

	tierv1 "github.com/thawdb/thaw/gen/thaw/tier/v1"
	"github.com/thawdb/thaw/gen/thaw/tier/v1/tierv1connect"
)

// The configured coordinators and the one coordinator requests go to. The
// rules are bulkloadclient's, so that both clients of a tier given the same
// address (the promoter's tier.address) behave alike; the one difference
// is in coordPass: a coordinator's own UNAVAILABLE also moves later
// requests on, since this client retries requests itself.

// MaxLeaderRedirects bounds how many NOT_LEADER answers naming another
// coordinator one attempt of a coordinator request follows without
// waiting. Two coordinators that keep naming each other (each with a stale
// view of the election) end the attempt with a retriable error saying so;
// the RetryPolicy then decides whether to try again.
const MaxLeaderRedirects = 4

// coordinator is one coordinator's CoordinatorService. Immutable.
type coordinator struct {
	url string
	svc tierv1connect.CoordinatorServiceClient
	// seed is the index in Client.seeds of url, or of the configured
	// coordinator whose answer (a NOT_LEADER hint, GetLeader) led to url.
	seed int
}

// parseSeeds returns the base URLs of a coordinator address: one address
// ("host:port" or a URL) or a comma-separated list of them. Blanks around
// an address are trimmed and repeated addresses dropped; an empty one is
// an error.
func parseSeeds(coordinatorAddress string) ([]string, error) {
	var seeds []string
	for a := range strings.SplitSeq(coordinatorAddress, ",") {
		a = strings.TrimSpace(a)
		if a == "" {
			return nil, fmt.Errorf("%w: empty coordinator address in %q", ErrInvalidArgument, coordinatorAddress)
		}
		if u := baseURL(a); !slices.Contains(seeds, u) {
			seeds = append(seeds, u)
		}
	}
	return seeds, nil
}

// coordinatorAt returns the coordinator at url, reached from configured
// coordinator seed (url's own index if it is configured).
func (c *Client) coordinatorAt(url string, seed int) *coordinator {
	if i := slices.Index(c.seeds, url); i >= 0 {
		seed = i
	}
	return &coordinator{url: url, svc: tierv1connect.NewCoordinatorServiceClient(c.hc, url, c.connOpts...), seed: seed}
}

// current returns the coordinator requests go to.
func (c *Client) current() *coordinator {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.mu.coord
}

// reached remembers co, which just answered a request that started at
// another coordinator.
func (c *Client) reached(co *coordinator) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.mu.coord = co
}

// moveTo sends later requests to url (named by an answer of a coordinator
// that came from configured coordinator seed).
func (c *Client) moveTo(url string, seed int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.mu.coord.url != url {
		c.mu.coord = c.coordinatorAt(url, seed)
	}
}

// passOver sends later requests to the configured coordinator after the
// one start (where a failed attempt began) is or came from, unless another
// request has moved the client away from start meanwhile.
func (c *Client) passOver(start *coordinator) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.mu.coord != start {
		return
	}
	next := (start.seed + 1) % len(c.seeds)
	if c.seeds[next] != start.url {
		c.mu.coord = c.coordinatorAt(c.seeds[next], next)
	}
}

// untried returns the first configured coordinator after co's that this
// attempt has not used, or nil.
func (c *Client) untried(co *coordinator, used []string) *coordinator {
	for i := 1; i <= len(c.seeds); i++ {
		k := (co.seed + i) % len(c.seeds)
		if !slices.Contains(used, c.seeds[k]) {
			return c.coordinatorAt(c.seeds[k], k)
		}
	}
	return nil
}

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

// notSent reports whether err says the request never left the client: no
// connection to the coordinator could be made.
func notSent(err error) bool {
	var op *net.OpError
	return errors.As(err, &op) && op.Op == "dial"
}
