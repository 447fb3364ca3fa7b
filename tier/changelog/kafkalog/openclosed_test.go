package kafkalog

import (
	"errors"
	"testing"

	"github.com/thawdb/thaw/tier/changelog"
)

// TestOpenAfterProviderCloseIsErrClosed: Open on a closed provider is
// changelog.ErrClosed, as every other call is (and as the local
// provider's Open is), not the Kafka client's "client closed".
func TestOpenAfterProviderCloseIsErrClosed(t *testing.T) {
	p := provider(t, brokers(t, 1))
	if err := p.Close(); err != nil {
		t.Fatal(err)
	}
	_, err := p.Open(t.Context(), changelog.BucketLogID{TableID: 44})
	t.Logf("Open after Close: %v", err)
	if !errors.Is(err, changelog.ErrClosed) {
		t.Errorf("Open after Close: %v; want changelog.ErrClosed", err)
	}
}
