package daemon

import (
	"bufio"
	"bytes"
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"crypto/tls"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"strings"

	"connectrpc.com/connect"

	"github.com/thawdb/thaw/gen/thaw/tier/v1/tierv1connect"
)

// InternalTokenHeader carries the tier's internal token on the requests its
// own processes make to each other (see internalProcedures).
const InternalTokenHeader = "Thaw-Internal-Token"

// MinInternalTokenLen is the shortest internal token accepted, in
// characters (`openssl rand -hex 32` makes 64).
const MinInternalTokenLen = 32

// internalProcedures are the RPCs only the tier's own processes make: the
// coordinator's orders to tablet servers (assignments, data states,
// restores, snapshots, replica status) and a tablet server's snapshot
// report to the coordinator. Anyone who could call them could install a
// snapshot into a bucket, make a fenced target visible or record a bogus
// snapshot, so with an internal token they need it; every other RPC
// (reads, writes, DDL, bulk loads) is for clients and is guarded by
// caller tokens (coordinator.callers) instead.
var internalProcedures = []string{
	tierv1connect.TabletServiceNotifyAssignmentProcedure,
	tierv1connect.TabletServiceSetDataStateProcedure,
	tierv1connect.TabletServiceRestoreSnapshotProcedure,
	tierv1connect.TabletServiceTakeSnapshotProcedure,
	tierv1connect.TabletServiceReplicaStatusProcedure,
	tierv1connect.CoordinatorServiceReportSnapshotProcedure,
}

// internalToken is the shared secret of a tier's processes: a tokenSet,
// fixed (the embedded tier's) or read from internal_token_file and read
// again when the file changes (reloader), so that a rotation needs no
// restart.
type internalToken struct {
	fixed *tokenSet
	file  *reloader[*tokenSet]
}

// tokenSet is what an internal_token_file holds: the first token is sent,
// every token is accepted (two during a rotation). Only SHA-256 sums are
// compared, in constant time; the tokens never enter a log line, metric or
// error.
type tokenSet struct {
	send string
	sums [][sha256.Size]byte
}

// readInternalToken reads the internal_token_file (see parseTokenFile) and
// watches it; log receives its reloads and the changes that do not parse.
// No file: nil (internal RPCs unguarded).
func readInternalToken(file string, log *slog.Logger) (*internalToken, error) {
	if file == "" {
		return nil, nil
	}
	r, err := newReloader([]string{file}, func() (*tokenSet, error) { return parseTokenFile(file) },
		func(*tokenSet) { log.Info("internal token file reloaded", "file", file) },
		func(err error) {
			log.Warn("the changed internal token file does not load; keeping the previous tokens", "file", file, "err", err)
		})
	if err != nil {
		return nil, err // parseTokenFile's, naming the file and line
	}
	return &internalToken{file: r}, nil
}

// parseTokenFile reads one token per line (blank lines and lines starting
// with # skipped), each at least MinInternalTokenLen visible ASCII
// characters; the first is the one this process sends.
func parseTokenFile(file string) (*tokenSet, error) {
	b, err := os.ReadFile(file)
	if err != nil {
		return nil, fmt.Errorf("internal_token_file: %w", err)
	}
	t := &tokenSet{}
	sc := bufio.NewScanner(bytes.NewReader(b))
	for n := 1; sc.Scan(); n++ {
		line := strings.TrimSpace(sc.Text())
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		if len(line) < MinInternalTokenLen || strings.IndexFunc(line, func(r rune) bool { return r <= ' ' || r > '~' }) >= 0 {
			return nil, fmt.Errorf("internal_token_file %s line %d: a token is at least %d visible ASCII characters without spaces", file, n, MinInternalTokenLen)
		}
		if t.send == "" {
			t.send = line
		}
		t.sums = append(t.sums, sha256.Sum256([]byte(line)))
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("internal_token_file %s: %w", file, err)
	}
	if t.send == "" {
		return nil, fmt.Errorf("internal_token_file %s holds no token", file)
	}
	return t, nil
}

// newInternalToken returns a random token: the embedded tier's, whose
// processes all live in this one.
func newInternalToken() (*internalToken, error) {
	var b [32]byte
	if _, err := rand.Read(b[:]); err != nil {
		return nil, fmt.Errorf("daemon: internal token: %w", err)
	}
	s := hex.EncodeToString(b[:])
	return &internalToken{fixed: &tokenSet{send: s, sums: [][sha256.Size]byte{sha256.Sum256([]byte(s))}}}, nil
}

// loadSecrets reads what guards a role's listener and its own requests:
// the tls section (nil: plain HTTP) and the internal token file ("": none).
func loadSecrets(lt *ListenerTLS, tokenFile string, log *slog.Logger) (server *tls.Config, client *clientConfig, token *internalToken, err error) {
	if server, client, err = lt.load(log.With("component", "tls")); err != nil {
		return nil, nil, nil, err
	}
	if token, err = readInternalToken(tokenFile, log.With("component", "internal-token")); err != nil {
		return nil, nil, nil, fmt.Errorf("daemon: %w", err)
	}
	return server, client, token, nil
}

// warnUnguarded warns when a role listening beyond the loopback interface
// runs without an internal token: anyone who reaches it can make the
// internal RPCs.
func warnUnguarded(log *slog.Logger, t *internalToken, listener net.Addr) {
	if t == nil && beyondLoopback(listener) {
		log.Warn("internal RPCs are unauthenticated: set internal_token_file on every coordinator and tablet server (docs/tier.md, Internal RPCs)", "listen", listener.String())
	}
}

// beyondLoopback reports whether a is a TCP address others than this host
// may reach (not a loopback address).
func beyondLoopback(a net.Addr) bool {
	ta, ok := a.(*net.TCPAddr)
	return ok && !ta.IP.IsLoopback()
}

// current is the token set in force.
func (t *internalToken) current() *tokenSet {
	if t.file != nil {
		return t.file.get()
	}
	return t.fixed
}

// accepts reports whether presented is one of the tokens.
func (t *internalToken) accepts(presented string) bool {
	sum := sha256.Sum256([]byte(presented))
	ok := 0
	for _, s := range t.current().sums {
		ok |= subtle.ConstantTimeCompare(sum[:], s[:])
	}
	return presented != "" && ok == 1
}

// isInternal reports whether a request path is one of internalProcedures,
// under any prefix (the embedded tier serves tablet servers under
// /t/{id}/ and coordinators under /c/{id}/).
func isInternal(path string) bool {
	for _, p := range internalProcedures {
		if strings.HasSuffix(path, p) {
			return true
		}
	}
	return false
}

var errInternalToken = errors.New("this RPC is internal to the tier and needs the tier's internal token (internal_token_file), which the caller did not present")

// guard wraps h: with a token, a request for an internal procedure without
// an accepted token is refused as unauthenticated. Without a token (nil)
// it returns h.
func (t *internalToken) guard(h http.Handler) http.Handler {
	if t == nil {
		return h
	}
	ew := connect.NewErrorWriter()
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if isInternal(r.URL.Path) && !t.accepts(r.Header.Get(InternalTokenHeader)) {
			_ = ew.Write(w, r, connect.NewError(connect.CodeUnauthenticated, errInternalToken))
			return
		}
		h.ServeHTTP(w, r)
	})
}

// client returns hc sending the token with every request; hc itself
// without a token (nil).
func (t *internalToken) client(hc *http.Client) *http.Client {
	if t == nil {
		return hc
	}
	c := *hc
	c.Transport = t.transport(hc.Transport)
	return &c
}

// transport wraps rt to send the token with every request; rt itself
// without a token (nil).
func (t *internalToken) transport(rt http.RoundTripper) http.RoundTripper {
	if t == nil {
		return rt
	}
	return tokenTransport{inner: rt, token: t}
}

type tokenTransport struct {
	inner http.RoundTripper
	token *internalToken
}

func (t tokenTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	r.Header.Set(InternalTokenHeader, t.token.current().send)
	return t.inner.RoundTrip(r)
}
