package tierclient_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"connectrpc.com/connect"

	tierv1 "github.com/thawdb/thaw/gen/thaw/tier/v1"
	"github.com/thawdb/thaw/gen/thaw/tier/v1/tierv1connect"
	"github.com/thawdb/thaw/kv"
	"github.com/thawdb/thaw/tier/tierclient"
	"github.com/thawdb/thaw/tier/tierpb"
)

// droppedCoord locates db.x once; afterwards the table is gone.
type droppedCoord struct {
	fakeCoord
	n atomic.Int32
}

func (f *droppedCoord) GetTargetLocations(ctx context.Context, req *connect.Request[tierv1.GetTargetLocationsRequest]) (*connect.Response[tierv1.GetTargetLocationsResponse], error) {
	if f.n.Add(1) > 1 {
		return nil, tierpb.NewError(tierpb.ReasonNotFound, "fake: table db.x does not exist", nil)
	}
	return f.fakeCoord.GetTargetLocations(ctx, req)
}

type notLeaderTablet struct {
	tierv1connect.UnimplementedTabletServiceHandler
}

func (f *notLeaderTablet) Lookup(context.Context, *connect.Request[tierv1.LookupRequest]) (*connect.Response[tierv1.LookupResponse], error) {
	return nil, tierpb.NewError(tierpb.ReasonNotLeader, "fake: not the leader", nil)
}

// TestRefreshErrorKept: a bucket request whose refresh finds the target
// dropped fails with the refresh's (permanent) NOT_FOUND, not with the
// tablet's (retriable) NOT_LEADER: call cancelled the refresh's context
// before asking whether its budget had run out, so it always had, and a
// caller following IsRetriable retried a dropped table for ever.
func TestRefreshErrorKept(t *testing.T) {
	_, th := tierv1connect.NewTabletServiceHandler(&notLeaderTablet{})
	tsrv := httptest.NewServer(th)
	defer tsrv.Close()
	co := &droppedCoord{fakeCoord: fakeCoord{tablet: strings.TrimPrefix(tsrv.URL, "http://"), failFrom: time.Now().Add(time.Hour)}}
	_, ch := tierv1connect.NewCoordinatorServiceHandler(co)
	csrv := httptest.NewServer(ch)
	defer csrv.Close()
	c, err := tierclient.New(t.Context(), strings.TrimPrefix(csrv.URL, "http://"),
		tierclient.WithHTTPClient(http.DefaultClient),
		tierclient.WithRetryPolicy(tierclient.RetryPolicy{Timeout: 2 * time.Second, MinBackoff: 10 * time.Millisecond, MaxBackoff: 20 * time.Millisecond}))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	_, err = c.Get(t.Context(), tierclient.Target{Database: "db", Table: "x"}, []kv.Row{{int64(1), nil}})
	if tierpb.ReasonOf(err) != tierpb.ReasonNotFound || tierclient.IsRetriable(err) {
		t.Errorf("a dropped target reported as %v (IsRetriable=%v), want the refresh's NOT_FOUND", tierpb.ReasonOf(err), tierclient.IsRetriable(err))
	}
}
