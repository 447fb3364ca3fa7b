package uploadcap

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"
)

const txn = "0b3c8a9e-5f1d-4c2b-9a7e-1d2c3b4a5f60"

var now = time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)

func signer(t *testing.T, fill byte) *Signer {
	t.Helper()
	s, err := NewSigner(bytes.Repeat([]byte{fill}, KeySize))
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func TestMintVerify(t *testing.T) {
	s := signer(t, 1)
	c := Capability{TxnID: txn, Expires: now.Add(15 * time.Minute)}
	tok, err := s.Mint(c, now)
	if err != nil {
		t.Fatal(err)
	}
	got, err := s.Verify(tok, now.Add(15*time.Minute-time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(got, c) {
		t.Fatalf("verified %+v, minted %+v", got, c)
	}
	if !got.AllowsManifest() || !got.AllowsBucket(0) || !got.AllowsBucket(4095) {
		t.Fatalf("a capability of every bucket: %+v", got)
	}
	if _, err := s.Verify(tok, now.Add(15*time.Minute)); !errors.Is(err, ErrExpired) {
		t.Fatalf("at the expiry: %v, want ErrExpired", err)
	}
	// The same key (another Signer of it) verifies it; another key does not.
	if _, err := signer(t, 1).Verify(tok, now); err != nil {
		t.Fatalf("same key: %v", err)
	}
	if _, err := signer(t, 2).Verify(tok, now); !errors.Is(err, ErrUnknownKey) {
		t.Fatalf("other key: %v, want ErrUnknownKey", err)
	}
	// Milliseconds are kept, finer precision is not minted.
	if _, err := s.Mint(Capability{TxnID: txn, Expires: now.Add(time.Minute + time.Microsecond)}, now); err != nil {
		t.Fatal(err)
	}
}

func TestMintRejects(t *testing.T) {
	s := signer(t, 1)
	for name, c := range map[string]Capability{
		"bad txn":   {TxnID: "not-a-uuid", Expires: now.Add(time.Minute)},
		"upper txn": {TxnID: strings.ToUpper(txn), Expires: now.Add(time.Minute)},
		"past":      {TxnID: txn, Expires: now.Add(-time.Millisecond)},
		"now":       {TxnID: txn, Expires: now},
		// The token keeps whole milliseconds: this one would be expired
		// at the instant it was minted.
		"same millisecond": {TxnID: txn, Expires: now.Add(900 * time.Microsecond)},
		"beyond ttl":       {TxnID: txn, Expires: now.Add(MaxTTL + time.Millisecond)},
		"zero expires":     {TxnID: txn},
	} {
		if tok, err := s.Mint(c, now); err == nil {
			t.Errorf("%s: minted %d bytes", name, len(tok.Reveal()))
		}
	}
	if _, err := NewSigner(make([]byte, KeySize-1)); err == nil {
		t.Error("NewSigner took a short key")
	}
}

// forge signs an arbitrary payload with s's key, to reach the payload
// checks behind the signature.
func forge(s *Signer, payload string) Token {
	signed := prefix + base64.RawURLEncoding.EncodeToString([]byte(payload))
	return Token(signed + "." + base64.RawURLEncoding.EncodeToString(s.mac(signed)))
}

func TestVerifyRejects(t *testing.T) {
	s := signer(t, 1)
	good, err := s.Mint(Capability{TxnID: txn, Expires: now.Add(time.Hour)}, now)
	if err != nil {
		t.Fatal(err)
	}
	g := good.Reveal()
	dot := strings.LastIndexByte(g, '.')
	flip := func(str string, i int) string {
		b := []byte(str)
		if b[i] == 'A' {
			b[i] = 'B'
		} else {
			b[i] = 'A'
		}
		return string(b)
	}
	kid := s.KeyID()
	for _, tc := range []struct {
		name string
		tok  Token
		want error
	}{
		{"empty", "", ErrMalformed},
		{"other prefix", Token("thawcap2." + g[len(prefix):]), ErrMalformed},
		{"no signature", Token(g[:dot]), ErrMalformed},
		{"short signature", Token(g[:len(g)-2]), ErrMalformed},
		{"padded signature", Token(g + "="), ErrMalformed},
		{"signature flipped", Token(flip(g, len(g)-5)), ErrSignature},
		{"payload flipped", Token(flip(g, len(prefix)+3)), ErrSignature},
		{"payload not base64", Token(prefix + "!!!" + g[dot:]), ErrMalformed},
		{"too long", Token(strings.Repeat("a", MaxTokenLen+1)), ErrMalformed},
		{"version 2", forge(s, fmt.Sprintf(`{"v":2,"kid":%q,"txn":%q,"exp":1,"buckets":"*"}`, kid, txn)), ErrMalformed},
		{"version 1.0", forge(s, fmt.Sprintf(`{"v":1.0,"kid":%q,"txn":%q,"exp":9999999999999,"buckets":"*"}`, kid, txn)), ErrMalformed},
		{"unknown member", forge(s, fmt.Sprintf(`{"v":1,"kid":%q,"txn":%q,"exp":9999999999999,"put":"*","buckets":"*"}`, kid, txn)), ErrMalformed},
		{"missing txn", forge(s, fmt.Sprintf(`{"v":1,"kid":%q,"exp":9999999999999,"buckets":"*"}`, kid)), ErrMalformed},
		{"repeated txn", forge(s, fmt.Sprintf(`{"v":1,"kid":%q,"txn":%q,"txn":%q,"exp":9999999999999,"buckets":"*"}`, kid, txn, txn)), ErrMalformed},
		{"null exp", forge(s, fmt.Sprintf(`{"v":1,"kid":%q,"txn":%q,"exp":null,"buckets":"*"}`, kid, txn)), ErrMalformed},
		{"bad txn", forge(s, fmt.Sprintf(`{"v":1,"kid":%q,"txn":"x","exp":9999999999999,"buckets":"*"}`, kid)), ErrMalformed},
		{"other kid", forge(s, fmt.Sprintf(`{"v":1,"kid":"0123456789abcdef","txn":%q,"exp":9999999999999,"buckets":"*"}`, txn)), ErrMalformed},
		{"zero exp", forge(s, fmt.Sprintf(`{"v":1,"kid":%q,"txn":%q,"exp":0,"buckets":"*"}`, kid, txn)), ErrMalformed},
		{"array", forge(s, `[1]`), ErrMalformed},
		{"missing buckets", forge(s, fmt.Sprintf(`{"v":1,"kid":%q,"txn":%q,"exp":9999999999999}`, kid, txn)), ErrMalformed},
		{"trailing", forge(s, fmt.Sprintf(`{"v":1,"kid":%q,"txn":%q,"exp":9999999999999,"buckets":"*"} {}`, kid, txn)), ErrMalformed},
		{"expired", forge(s, fmt.Sprintf(`{"v":1,"kid":%q,"txn":%q,"exp":%d,"buckets":"*"}`, kid, txn, now.UnixMilli())), ErrExpired},
	} {
		_, err := s.Verify(tc.tok, now)
		if !errors.Is(err, tc.want) {
			t.Errorf("%s: %v, want %v", tc.name, err, tc.want)
			continue
		}
		if len(g) > 20 && strings.Contains(err.Error(), g[len(g)-20:]) {
			t.Errorf("%s: the error quotes the token: %v", tc.name, err)
		}
	}
}

func TestTokenRedacted(t *testing.T) {
	tok, err := signer(t, 1).Mint(Capability{TxnID: txn, Expires: now.Add(time.Hour)}, now)
	if err != nil {
		t.Fatal(err)
	}
	secret := tok.Reveal()[len(prefix):]
	var logs bytes.Buffer
	slog.New(slog.NewJSONHandler(&logs, nil)).Info("minted", "token", tok, "struct", struct{ T Token }{tok})
	outs := []string{fmt.Sprint(tok), fmt.Sprintf("%v %+v %#v %s %q %x", tok, tok, tok, tok, tok, tok),
		fmt.Sprintf("%+v %#v", struct{ T Token }{tok}, struct{ T Token }{tok}), logs.String()}
	for _, o := range outs {
		if strings.Contains(o, secret) || !strings.Contains(o, redacted) {
			t.Errorf("printed %q", o)
		}
	}
	if b, err := json.Marshal(struct{ T Token }{tok}); err == nil {
		t.Errorf("json.Marshal of a token: %s", b)
	}
}

// TestSignedURLRedacted: a signed upload URL prints as "[REDACTED]" in
// every fmt verb and in slog, alone and inside a Signed answer, and only
// the wire form (the answer's JSON) carries it.
func TestSignedURLRedacted(t *testing.T) {
	const secret = "X-Amz-Signature=0123456789abcdef"
	u := SignedURL("https://s3.example/lake/k?" + secret)
	ans := Signed{URL: u, Header: map[string]string{"If-None-Match": "*"}, ExpiresMs: 1}
	var logs bytes.Buffer
	slog.New(slog.NewJSONHandler(&logs, nil)).Info("signed", "url", u, "answer", ans)
	outs := []string{fmt.Sprint(u), fmt.Sprintf("%v %+v %#v %s %q %x", u, u, u, u, u, u),
		fmt.Sprintf("%v %+v %#v", ans, ans, ans), logs.String()}
	for _, o := range outs {
		if strings.Contains(o, secret) || !strings.Contains(o, redacted) {
			t.Errorf("printed %q", o)
		}
	}
	b, err := json.Marshal(ans)
	if err != nil || !strings.Contains(string(b), secret) {
		t.Fatalf("the answer's JSON: %s %v", b, err)
	}
	var back Signed
	if err := json.Unmarshal(b, &back); err != nil || back.URL.Reveal() != u.Reveal() {
		t.Fatalf("round trip: %v %v", back.URL.Reveal(), err)
	}
}

func FuzzVerify(f *testing.F) {
	s, err := NewSigner(bytes.Repeat([]byte{1}, KeySize))
	if err != nil {
		f.Fatal(err)
	}
	good, err := s.Mint(Capability{TxnID: txn, Expires: now.Add(time.Hour)}, now)
	if err != nil {
		f.Fatal(err)
	}
	f.Add(good.Reveal())
	f.Add(forge(s, `{"v":1}`).Reveal())
	f.Fuzz(func(t *testing.T, tok string) {
		c, err := s.Verify(Token(tok), now)
		if err != nil {
			return
		}
		// Whatever verifies was minted under this key: minting its
		// capability again gives back the same token.
		again, err := s.Mint(c, now)
		if err != nil {
			t.Fatalf("verified %+v but cannot mint it: %v", c, err)
		}
		if again.Reveal() != tok {
			t.Fatalf("verified a token the signer would not mint: %q", tok)
		}
	})
}

func TestBucketScope(t *testing.T) {
	s := signer(t, 1)
	for _, tc := range []struct {
		buckets []int
		text    string
	}{
		{[]int{0}, "0"},
		{[]int{0, 1, 2, 3}, "0-3"},
		{[]int{0, 1, 2, 3, 7}, "0-3,7"},
		{[]int{1, 3, 5, 6}, "1,3,5-6"},
		{[]int{MaxBucket}, "65535"},
	} {
		c := Capability{TxnID: txn, Expires: now.Add(time.Minute), Buckets: tc.buckets}
		if got := formatBuckets(tc.buckets); got != tc.text {
			t.Errorf("format %v: %q, want %q", tc.buckets, got, tc.text)
		}
		tok, err := s.Mint(c, now)
		if err != nil {
			t.Fatal(err)
		}
		got, err := s.Verify(tok, now)
		if err != nil || !reflect.DeepEqual(got, c) {
			t.Fatalf("%v: verified %+v %v", tc.buckets, got, err)
		}
		if got.AllowsManifest() {
			t.Errorf("%v: a capability of some buckets allows the manifest", tc.buckets)
		}
		for b := range 8 {
			if got.AllowsBucket(b) != slices.Contains(tc.buckets, b) {
				t.Errorf("%v: AllowsBucket(%d) = %v", tc.buckets, b, got.AllowsBucket(b))
			}
		}
	}
	for _, bad := range [][]int{{}, {1, 1}, {2, 1}, {-1}, {MaxBucket + 1}} {
		if _, err := s.Mint(Capability{TxnID: txn, Expires: now.Add(time.Minute), Buckets: bad}, now); err == nil {
			t.Errorf("minted buckets %v", bad)
		}
	}
	kid := s.KeyID()
	for _, bad := range []string{"", "0-0", "3,1", "1,2", "01", "1-", "-1", "a", "0-3,2", "0-3,4", "65536", "1,,2", " 1", "*,1"} {
		tok := forge(s, fmt.Sprintf(`{"v":1,"kid":%q,"txn":%q,"exp":9999999999999,"buckets":%q}`, kid, txn, bad))
		if _, err := s.Verify(tok, now); !errors.Is(err, ErrMalformed) {
			t.Errorf("buckets %q: %v", bad, err)
		}
	}
	// Every other bucket of 4096 fits.
	var even []int
	for b := 0; b < 4096; b += 2 {
		even = append(even, b)
	}
	tok, err := s.Mint(Capability{TxnID: txn, Expires: now.Add(time.Minute), Buckets: even}, now)
	if err != nil {
		t.Fatal(err)
	}
	if got, err := s.Verify(tok, now); err != nil || len(got.Buckets) != 2048 {
		t.Fatalf("2048 buckets: %d %v", len(got.Buckets), err)
	}
}
