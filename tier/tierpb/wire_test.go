package tierpb_test

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"io"
	"maps"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"

	tierv1 "github.com/thawdb/thaw/gen/thaw/tier/v1"
	"github.com/thawdb/thaw/gen/thaw/tier/v1/tierv1connect"
	"github.com/thawdb/thaw/tier/tierpb"
)

// Table ids the tiny tablet below knows.
const (
	activeTable  = 7 // ACTIVE, holds rows k1 and k2
	loadingTable = 8 // LOADING under bulk load "bl-42"
	movedTable   = 9 // led by another server
)

// lookupTablet is a tiny in-process TabletService implementing Lookup only.
type lookupTablet struct {
	tierv1connect.UnimplementedTabletServiceHandler
	rows map[string][]byte
}

func (s *lookupTablet) Lookup(_ context.Context, req *connect.Request[tierv1.LookupRequest]) (*connect.Response[tierv1.LookupResponse], error) {
	switch req.Msg.GetTarget().GetTableId() {
	case activeTable:
	case loadingTable:
		return nil, tierpb.NewTargetLoadingError("target 8 is loading", tierv1.DataState_DATA_STATE_LOADING, "bl-42")
	case movedTable:
		return nil, tierpb.NewNotLeaderError("bucket 0 of target 9 is led elsewhere",
			tierpb.LeaderHint{ID: "ts-2", Address: "ts-2:7070", Epoch: 5})
	default:
		return nil, tierpb.NewError(tierpb.ReasonNotFound, "no such target", nil)
	}
	resp := &tierv1.LookupResponse{}
	for _, k := range req.Msg.GetKeys() {
		v, ok := s.rows[string(k)]
		resp.Results = append(resp.Results, &tierv1.LookupResult{Found: ok, Value: v})
	}
	return connect.NewResponse(resp), nil
}

// serve starts the tablet over HTTP/1.1 and HTTP/2 cleartext (h2c) and
// returns its URL and a counter of HTTP/2 requests.
func serve(t *testing.T) (string, *atomic.Int64) {
	t.Helper()
	mux := http.NewServeMux()
	mux.Handle(tierv1connect.NewTabletServiceHandler(&lookupTablet{rows: map[string][]byte{
		"k1": []byte("\x00\x00v1"),
		"k2": []byte("\x00\x00v2"),
	}}))
	var h2 atomic.Int64
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.ProtoMajor == 2 {
			h2.Add(1)
		}
		mux.ServeHTTP(w, r)
	}))
	srv.Config.Protocols = new(http.Protocols)
	srv.Config.Protocols.SetHTTP1(true)
	srv.Config.Protocols.SetUnencryptedHTTP2(true)
	srv.Start()
	t.Cleanup(srv.Close)
	return srv.URL, &h2
}

// h2cClient speaks HTTP/2 without TLS (prior knowledge), as gRPC needs.
func h2cClient(t *testing.T) *http.Client {
	protocols := new(http.Protocols)
	protocols.SetUnencryptedHTTP2(true)
	tr := &http.Transport{Protocols: protocols}
	t.Cleanup(tr.CloseIdleConnections)
	return &http.Client{Transport: tr}
}

func lookupRequest(table int64) *tierv1.LookupRequest {
	return &tierv1.LookupRequest{
		Target: &tierv1.TargetId{TableId: table},
		Keys:   [][]byte{[]byte("k1"), []byte("missing"), []byte("k2")},
	}
}

var wantLookup = &tierv1.LookupResponse{Results: []*tierv1.LookupResult{
	{Found: true, Value: []byte("\x00\x00v1")},
	{Found: false},
	{Found: true, Value: []byte("\x00\x00v2")},
}}

var wantLoadingMetadata = map[string]string{"data_state": "LOADING", "bulk_load_id": "bl-42"}

// TestLookupOverEveryProtocol calls one server with the generated client over
// Connect, gRPC and gRPC-Web, and with plain HTTP/JSON, and requires the same
// rows and the same error reason and metadata from each.
func TestLookupOverEveryProtocol(t *testing.T) {
	url, h2 := serve(t)
	hc := h2cClient(t)

	for _, p := range []struct {
		name string
		opts []connect.ClientOption
	}{
		{"connect", nil},
		{"connect+json", []connect.ClientOption{connect.WithProtoJSON()}},
		{"grpc", []connect.ClientOption{connect.WithGRPC()}},
		{"grpc-web", []connect.ClientOption{connect.WithGRPCWeb()}},
	} {
		t.Run(p.name, func(t *testing.T) {
			client := tierv1connect.NewTabletServiceClient(hc, url, p.opts...)
			before := h2.Load()

			resp, err := client.Lookup(t.Context(), connect.NewRequest(lookupRequest(activeTable)))
			if err != nil {
				t.Fatalf("lookup: %v", err)
			}
			if !proto.Equal(resp.Msg, wantLookup) {
				t.Errorf("lookup = %v, want %v", resp.Msg, wantLookup)
			}

			_, err = client.Lookup(t.Context(), connect.NewRequest(lookupRequest(loadingTable)))
			if got := tierpb.ReasonOf(err); got != tierpb.ReasonTargetLoading {
				t.Fatalf("ReasonOf(%v) = %q, want TARGET_LOADING", err, got)
			}
			if !tierpb.IsTargetLoading(err) || tierpb.IsStaleEpoch(err) {
				t.Errorf("IsTargetLoading/IsStaleEpoch misclassify %v", err)
			}
			if got := connect.CodeOf(err); got != connect.CodeFailedPrecondition {
				t.Errorf("code = %v, want failed_precondition", got)
			}
			if got := tierpb.MetadataOf(err); !maps.Equal(got, wantLoadingMetadata) {
				t.Errorf("metadata = %v, want %v", got, wantLoadingMetadata)
			}
			if d := tierpb.DetailOf(err); d.GetMessage() != "target 8 is loading" {
				t.Errorf("detail message = %q", d.GetMessage())
			}
			var ce *connect.Error
			if !errors.As(err, &ce) || ce.Meta().Get(tierpb.HeaderReason) != "TARGET_LOADING" {
				t.Errorf("%s header/trailer missing from %v", tierpb.HeaderReason, err)
			}

			_, err = client.Lookup(t.Context(), connect.NewRequest(lookupRequest(movedTable)))
			hint, ok := tierpb.IsNotLeader(err)
			if want := (tierpb.LeaderHint{ID: "ts-2", Address: "ts-2:7070", Epoch: 5}); !ok || hint != want {
				t.Errorf("IsNotLeader(%v) = %+v, %v; want %+v, true", err, hint, ok, want)
			}

			if got := h2.Load() - before; got != 3 {
				t.Errorf("%d of 3 requests arrived over HTTP/2", got)
			}
		})
	}

	t.Run("plain-http-json", func(t *testing.T) {
		// What curl sends: int64 as a JSON string, bytes as base64.
		post := func(t *testing.T, body string) (*http.Response, []byte) {
			req, err := http.NewRequestWithContext(t.Context(), http.MethodPost,
				url+"/thaw.tier.v1.TabletService/Lookup", strings.NewReader(body))
			if err != nil {
				t.Fatal(err)
			}
			req.Header.Set("Content-Type", "application/json")
			resp, err := http.DefaultClient.Do(req) // HTTP/1.1, like curl
			if err != nil {
				t.Fatal(err)
			}
			defer resp.Body.Close()
			b, err := io.ReadAll(resp.Body)
			if err != nil {
				t.Fatal(err)
			}
			return resp, b
		}
		const keys = `"keys":["azE=","bWlzc2luZw==","azI="]` // k1, missing, k2

		resp, body := post(t, `{"target":{"tableId":"7"},"bucket":0,`+keys+`}`)
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("status %d: %s", resp.StatusCode, body)
		}
		got := &tierv1.LookupResponse{}
		if err := protojson.Unmarshal(body, got); err != nil {
			t.Fatalf("decode %s: %v", body, err)
		}
		if !proto.Equal(got, wantLookup) {
			t.Errorf("lookup = %v, want %v", got, wantLookup)
		}

		resp, body = post(t, `{"target":{"table_id":"8"},`+keys+`}`)
		if resp.StatusCode == http.StatusOK {
			t.Fatalf("loading target answered 200: %s", body)
		}
		if got := resp.Header.Get(tierpb.HeaderReason); got != "TARGET_LOADING" {
			t.Errorf("%s = %q", tierpb.HeaderReason, got)
		}
		var wire struct {
			Code    string
			Message string
			Details []struct {
				Type  string
				Value string
				Debug json.RawMessage
			}
		}
		if err := json.Unmarshal(body, &wire); err != nil {
			t.Fatalf("decode error body %s: %v", body, err)
		}
		if wire.Code != "failed_precondition" || wire.Message != "target 8 is loading" || len(wire.Details) != 1 {
			t.Fatalf("error body = %s", body)
		}
		d := wire.Details[0]
		if d.Type != "thaw.tier.v1.ErrorDetail" {
			t.Fatalf("detail type = %q", d.Type)
		}
		raw, err := base64.RawStdEncoding.DecodeString(strings.TrimRight(d.Value, "="))
		if err != nil {
			t.Fatalf("detail value: %v", err)
		}
		var fromValue, fromDebug tierv1.ErrorDetail
		if err := proto.Unmarshal(raw, &fromValue); err != nil {
			t.Fatal(err)
		}
		if err := protojson.Unmarshal(d.Debug, &fromDebug); err != nil {
			t.Fatalf("detail debug %s: %v", d.Debug, err)
		}
		for _, ed := range []*tierv1.ErrorDetail{&fromValue, &fromDebug} {
			if ed.GetReason() != "TARGET_LOADING" || !maps.Equal(ed.GetMetadata(), wantLoadingMetadata) {
				t.Errorf("detail = %v", ed)
			}
		}
	})
}
