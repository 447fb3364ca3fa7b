package fencing

import (
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
)

// DrainKeepAlive consumes a lease's keep-alive answers until kch is closed.
// If no answer arrives within ttl of since (take the time just before the
// lease was granted) or of the previous answer, it calls onSilent once, and
// goes on draining: onSilent should stop the keep-alive (cancel its
// context), which closes kch.
//
// clientv3 gives up on a keep-alive nobody answers only after its dial
// timeout plus a second (6 s with a 5 s dial timeout) before the first
// answer, and a TTL plus up to a second after one, whatever the TTL: on a
// connection gone silent etcd has expired the lease, and another holder may
// have taken what it held, well before clientv3's channel closes.
func DrainKeepAlive(kch <-chan *clientv3.LeaseKeepAliveResponse, ttl time.Duration, since time.Time, onSilent func()) {
	deadline := time.NewTimer(ttl - time.Since(since))
	defer deadline.Stop()
	for {
		select {
		case _, ok := <-kch:
			if !ok {
				return
			}
			deadline.Reset(ttl)
		case <-deadline.C:
			onSilent()
			for range kch {
			}
			return
		}
	}
}
