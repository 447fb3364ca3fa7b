package tierclient

import (
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"time"

	"connectrpc.com/connect"

	"github.com/thawdb/thaw/bulkload"
)

// Protocol is the wire protocol and transport of the client's RPCs. Every
// tier server answers all of them on one port.
type Protocol uint8

const (
	// ProtocolConnectHTTP1 is the Connect protocol (binary protobuf) over
	// HTTP/1.1 with keep-alive: one pooled connection per concurrent
	// request. It is the default: on the write path the three protocols
	// measured within 2% of each other and this one was marginally ahead
	// (docs/performance.md), and it passes any HTTP/1.1 proxy.
	ProtocolConnectHTTP1 Protocol = iota
	// ProtocolConnectH2C is the Connect protocol over cleartext HTTP/2
	// (h2c): every request to a server multiplexed on one connection.
	ProtocolConnectH2C
	// ProtocolGRPC is gRPC over cleartext HTTP/2 (h2c).
	ProtocolGRPC
)

func (p Protocol) String() string {
	switch p {
	case ProtocolConnectHTTP1:
		return "connect+http1"
	case ProtocolConnectH2C:
		return "connect+h2c"
	case ProtocolGRPC:
		return "grpc+h2c"
	}
	return fmt.Sprintf("Protocol(%d)", uint8(p))
}

// ParseProtocol parses the String form of a protocol.
func ParseProtocol(s string) (Protocol, error) {
	for _, p := range []Protocol{ProtocolConnectHTTP1, ProtocolConnectH2C, ProtocolGRPC} {
		if p.String() == s {
			return p, nil
		}
	}
	return 0, fmt.Errorf("tierclient: unknown protocol %q (want connect+http1, connect+h2c or grpc+h2c)", s)
}

// RetryPolicy bounds how the client retries a request that failed with a
// retriable error (see IsRetriable): attempts, the time spent, and the
// exponential backoff (with full jitter) between attempts. For a tablet
// request, a move to a new bucket leader found through a NOT_LEADER hint or
// a location refresh is retried once without waiting. For a coordinator
// request an attempt is one pass over the coordinators: it follows up to
// MaxLeaderRedirects NOT_LEADER hints and tries each configured coordinator
// at most once, without waiting; MaxAttempts counts those passes.
type RetryPolicy struct {
	// MaxAttempts bounds the attempts of one request, the first included;
	// 0 means no bound other than Timeout.
	MaxAttempts int
	// Timeout bounds the time from a request's first attempt to the start
	// of its last one; 0 means no bound other than MaxAttempts and ctx.
	// Keep it above the request timeout (WithRequestTimeout), or an
	// attempt that times out is never retried.
	Timeout time.Duration
	// MinBackoff is the first backoff; MaxBackoff caps it.
	MinBackoff, MaxBackoff time.Duration
}

// DefaultRetryPolicy rides out a tablet server's failover (its lease TTL is
// 10 s by default) and a coordinator election, and retries an attempt that
// ran into the request timeout (DefaultRequestTimeout, 30 s): a Timeout no
// longer than the request timeout leaves no time for a second attempt after
// a first one that hung, so the request would fail where a retry at a new
// leader, or at a server past its overload, succeeds.
var DefaultRetryPolicy = RetryPolicy{
	Timeout:    2 * time.Minute,
	MinBackoff: 10 * time.Millisecond,
	MaxBackoff: time.Second,
}

// Defaults of the options.
const (
	DefaultMaxBatchRows         = 8192
	DefaultMaxBatchBytes        = 2 << 20
	DefaultMaxInFlightPerBucket = 1
	DefaultMaxInFlight          = 64
	DefaultMaxBufferedBytes     = 64 << 20
	DefaultRequestTimeout       = 30 * time.Second
	DefaultScanPageRows         = 4096
)

type options struct {
	httpClient       connect.HTTPClient
	tlsConfig        *tls.Config
	protocol         Protocol
	connectOpts      []connect.ClientOption
	bearer           string
	logger           *slog.Logger
	maxBatchRows     int
	maxBatchBytes    int
	maxInFlightPerB  int
	maxInFlight      int
	maxBufferedBytes int64
	requestTimeout   time.Duration
	retry            RetryPolicy
	scanPageRows     int
	createPartitions bool
	onBatch          func(BatchInfo)
}

func defaultOptions() options {
	return options{
		protocol:         ProtocolConnectHTTP1,
		logger:           slog.New(slog.DiscardHandler),
		maxBatchRows:     DefaultMaxBatchRows,
		maxBatchBytes:    DefaultMaxBatchBytes,
		maxInFlightPerB:  DefaultMaxInFlightPerBucket,
		maxInFlight:      DefaultMaxInFlight,
		maxBufferedBytes: DefaultMaxBufferedBytes,
		requestTimeout:   DefaultRequestTimeout,
		retry:            DefaultRetryPolicy,
		scanPageRows:     DefaultScanPageRows,
	}
}

func (o *options) validate() error {
	var errs []error
	bad := func(format string, args ...any) { errs = append(errs, fmt.Errorf("tierclient: "+format, args...)) }
	if o.protocol > ProtocolGRPC {
		bad("unknown protocol %v", o.protocol)
	}
	if o.logger == nil {
		bad("nil logger")
	}
	if o.maxBatchRows < 1 {
		bad("max batch rows %d: must be at least 1", o.maxBatchRows)
	}
	if o.maxBatchBytes < 1 {
		bad("max batch bytes %d: must be at least 1", o.maxBatchBytes)
	}
	if o.maxInFlightPerB < 1 {
		bad("max in-flight per bucket %d: must be at least 1", o.maxInFlightPerB)
	}
	if o.maxInFlight < 1 {
		bad("max in-flight %d: must be at least 1", o.maxInFlight)
	}
	if o.maxBufferedBytes < int64(o.maxBatchBytes) {
		bad("max buffered bytes %d: must be at least the max batch bytes %d", o.maxBufferedBytes, o.maxBatchBytes)
	}
	if o.requestTimeout <= 0 {
		bad("request timeout %v: must be positive", o.requestTimeout)
	}
	r := o.retry
	if r.MaxAttempts < 0 || r.Timeout < 0 || r.MinBackoff <= 0 || r.MaxBackoff < r.MinBackoff {
		bad("retry policy %+v: want MaxAttempts, Timeout >= 0 and 0 < MinBackoff <= MaxBackoff", r)
	}
	if r.MaxAttempts == 0 && r.Timeout == 0 {
		bad("retry policy %+v: MaxAttempts or Timeout must bound the retries", r)
	}
	if o.scanPageRows < 1 || o.scanPageRows > math.MaxInt32 { // sent as an int32 limit
		bad("scan page rows %d: must be in 1..%d", o.scanPageRows, math.MaxInt32)
	}
	if o.bearer != "" {
		if err := bulkload.ValidateBearerToken(o.bearer); err != nil {
			errs = append(errs, fmt.Errorf("tierclient: %w", err))
		}
	}
	return errors.Join(errs...)
}

// Opt configures a Client; New validates the options together.
type Opt func(*options)

// WithHTTPClient makes the client send every request through hc instead of
// the HTTP client it builds for the protocol. hc must speak HTTP/2 for
// ProtocolGRPC.
func WithHTTPClient(hc connect.HTTPClient) Opt { return func(o *options) { o.httpClient = hc } }

// WithTLSConfig sets the TLS configuration of the HTTP client the client
// builds, for https:// servers (default: the system's roots); it has no
// effect with WithHTTPClient.
func WithTLSConfig(tc *tls.Config) Opt { return func(o *options) { o.tlsConfig = tc } }

// WithProtocol sets the wire protocol and transport (default
// ProtocolConnectHTTP1).
func WithProtocol(p Protocol) Opt { return func(o *options) { o.protocol = p } }

// WithConnectOptions adds connect client options to every service client,
// after the client's own (it disables response compression, which costs
// more CPU than it saves on a data center network).
func WithConnectOptions(opts ...connect.ClientOption) Opt {
	return func(o *options) { o.connectOpts = append(o.connectOpts, opts...) }
}

// WithBearerToken makes every call carry "Authorization: Bearer token": a
// caller's token (16..1024 printable ASCII characters without spaces) for
// a tier that authorizes DDL or reads and writes (coordinator.callers with
// authorize_ddl or authorize_data; docs/tier.md, "Data access"). The
// client never logs it.
func WithBearerToken(token string) Opt { return func(o *options) { o.bearer = token } }

// WithLogger sets the logger (default: discard). Retries log at debug,
// requests given up at warn.
func WithLogger(l *slog.Logger) Opt { return func(o *options) { o.logger = l } }

// WithMaxBatchRows bounds the rows (mutations, keys) of one request
// (default 8192). Keep it within the tablet servers' request limit
// (10,000 rows by default); a request the server rejects as too large is
// split and retried.
func WithMaxBatchRows(n int) Opt { return func(o *options) { o.maxBatchRows = n } }

// WithMaxBatchBytes bounds the key and value bytes of one write request
// (default 2 MiB; the servers accept 4 MiB by default).
func WithMaxBatchBytes(n int) Opt { return func(o *options) { o.maxBatchBytes = n } }

// WithMaxInFlightPerBucket bounds the write requests in flight to one
// bucket (default 1). With 1, a bucket applies batches in the order rows
// were written, so the last write of a key wins. With more, two batches of
// a bucket may apply in either order: use it only when no key is written
// twice (an insert-only load).
func WithMaxInFlightPerBucket(n int) Opt { return func(o *options) { o.maxInFlightPerB = n } }

// WithMaxInFlight bounds the requests the client has in flight at once,
// over all buckets, writers and calls (default 64).
func WithMaxInFlight(n int) Opt { return func(o *options) { o.maxInFlight = n } }

// WithMaxBufferedBytes bounds the key and value bytes a Writer holds,
// buffered or in flight, before Write blocks (default 64 MiB).
func WithMaxBufferedBytes(n int64) Opt { return func(o *options) { o.maxBufferedBytes = n } }

// WithRequestTimeout bounds one attempt of one request (default 30 s).
func WithRequestTimeout(d time.Duration) Opt { return func(o *options) { o.requestTimeout = d } }

// WithRetryPolicy sets how requests are retried (default
// DefaultRetryPolicy).
func WithRetryPolicy(p RetryPolicy) Opt { return func(o *options) { o.retry = p } }

// WithScanPageRows sets the rows Scan asks for per page (default 4096).
func WithScanPageRows(n int) Opt { return func(o *options) { o.scanPageRows = n } }

// WithCreatePartitions makes writes to a partitioned table create a
// partition that does not exist yet (default: such a write fails with
// NOT_FOUND, as Fluss does without dynamic partition creation).
func WithCreatePartitions(on bool) Opt { return func(o *options) { o.createPartitions = on } }

// BatchInfo describes one write request once it is acknowledged or given
// up.
type BatchInfo struct {
	Target   Target // with the partition resolved
	Bucket   int
	Rows     int
	Bytes    int           // key and value bytes
	Attempts int           // 1 when the first attempt succeeded
	Latency  time.Duration // from the first attempt to the outcome
	Err      error         // nil when acknowledged
}

// WithOnBatch calls fn for every write request once it is acknowledged or
// given up, from the goroutine that sent it (which hands the bucket's next
// requests to another first): fn must be quick and safe for concurrent
// use, and may Write. A Flush or Close returns only after fn has returned
// for every request it waited for (fn must not call Flush or Close
// itself).
func WithOnBatch(fn func(BatchInfo)) Opt { return func(o *options) { o.onBatch = fn } }
